//! Which participant partitions exist: the check Kafka's broker makes before it hands an
//! AddPartitionsToTxn to the coordinator (`KafkaApis.handleAddPartitionsToTxnRequest`), so
//! that no transaction, and no marker, ever names a partition that does not exist.

use async_trait::async_trait;
use txn_log::TopicPartition;

/// The partition metadata could not be consulted (brokers unreachable): the transaction's
/// partitions get COORDINATOR_NOT_AVAILABLE, which clients retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("partition metadata unavailable: {0}")]
pub struct CatalogUnavailable(pub String);

/// Answers which of a transaction's partitions do not exist. The daemon asks the brokers'
/// Metadata; a broker that embeds the coordinator answers from its own metadata.
#[async_trait]
pub trait PartitionCatalog: Send + Sync {
    /// The partitions of `wanted` that do not exist (unknown topic, or a partition index
    /// beyond the topic's count). They get UNKNOWN_TOPIC_OR_PARTITION and the rest of their
    /// transaction OPERATION_NOT_ATTEMPTED.
    async fn unknown_partitions(
        &self,
        wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, CatalogUnavailable>;
}

/// A catalog in which every partition exists: for tests, and for a deployment whose brokers
/// the coordinator cannot ask (the daemon without `--bootstrap-servers`).
#[derive(Debug, Clone, Copy, Default)]
pub struct EveryPartitionExists;

#[async_trait]
impl PartitionCatalog for EveryPartitionExists {
    async fn unknown_partitions(
        &self,
        _wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, CatalogUnavailable> {
        Ok(Vec::new())
    }
}
