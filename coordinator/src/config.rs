//! Coordinator configuration: one public field per Kafka property (units in the name),
//! `Default` = Kafka's defaults (`TransactionLog` and `TransactionStateManagerConfig`), and the
//! partition functions.

use txn_log::{
    LoadedPartition, LogError, LogPartition, TopicPartition, TransactionalId, TxnVersion,
    java_string_hash, kafka_partition_for,
};

/// Name of Kafka's group-offsets topic, the partition AddOffsetsToTxn adds.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The standalone daemon's default `producer.id.start`: 10^15. A Kafka cluster's controller
/// hands out producer ids from 0 in blocks of 1000, and would need 10^12 blocks to get here; the
/// value stays below 2^53, so clients that keep ids as JavaScript numbers still read them
/// exactly.
pub const STANDALONE_PRODUCER_ID_START: i64 = 1_000_000_000_000_000;

/// Coordinator settings. Build with `Config { field: .., ..Config::default() }` and call
/// [`Config::validate`] before handing it to an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `transaction.max.timeout.ms` (default 900000): upper bound of a client's
    /// `transaction.timeout.ms`; larger values get INVALID_TRANSACTION_TIMEOUT.
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms` (default 604800000 = 7 d): idle time after which an
    /// Empty/CompleteCommit/CompleteAbort transactional id is tombstoned.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (default 10000): reaper period.
    pub abort_timed_out_transaction_cleanup_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (default 3600000): expiry period.
    pub remove_expired_transaction_cleanup_interval_ms: i64,
    /// `transaction.state.log.num.partitions` (default 50).
    pub transaction_state_log_num_partitions: u32,
    /// Cluster feature `transaction.version` (0, 1 or 2; default 2). TV2 semantics for EndTxn
    /// need both this ≥ 2 and EndTxn v5+.
    pub transaction_version: TxnVersion,
    /// `offsets.topic.num.partitions` (default 50), for the AddOffsetsToTxn partition.
    pub offsets_topic_num_partitions: u32,
    /// Producer-id block size (Kafka's `PRODUCER_ID_BLOCK_SIZE`, 1000).
    pub producer_id_block_size: u32,
    /// `producer.id.start` (not a Kafka setting; default 0, where Kafka's controller starts):
    /// the lowest producer id this coordinator hands out. A coordinator in front of brokers
    /// that allocate their own producer ids (Apache Kafka's idempotent producers) must keep
    /// its ids out of theirs: two producers with one id fence each other on a partition, and
    /// the transaction's markers are refused. The `txn-coordinator` daemon defaults to
    /// [`STANDALONE_PRODUCER_ID_START`].
    pub producer_id_start: i64,
    /// Maximum number of transactional ids the reaper or the expiry task examines per
    /// `handle_timeout` call; a longer scan continues at the next call (default 1000).
    pub cleanup_scan_max: usize,
    /// Maximum number of tombstones per expiry append (default 500).
    pub expiry_batch_max: usize,
    /// Delay before a failed Complete* append is retried (default 50 ms, Kafka's marker backoff).
    pub complete_retry_backoff_ms: i64,
    /// `txn.park.max.ms` (default 1000; not a Kafka setting): how long an InitProducerId,
    /// AddPartitionsToTxn (one transaction) or AddOffsetsToTxn that meets its id's previous
    /// transaction completing (PrepareCommit/PrepareAbort) waits for the CompleteCommit /
    /// CompleteAbort to be durable before it is answered CONCURRENT_TRANSACTIONS, and how long
    /// any request that arrives while its log partition loads waits for the load before it is
    /// answered COORDINATOR_LOAD_IN_PROGRESS. Kafka answers at once and the client retries
    /// after its back-off (100-500 ms); 0 restores that.
    pub park_max_ms: i64,
    /// `transaction.two.phase.commit.enable` (default false): whether InitProducerId may ask
    /// for two-phase commit (KIP-939 `Enable2Pc`, `KeepPreparedTxn`). Off, such a request is
    /// answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers it.
    pub transaction_two_phase_commit_enable: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            transaction_state_log_num_partitions: 50,
            transaction_version: TxnVersion::V2,
            offsets_topic_num_partitions: 50,
            producer_id_block_size: 1000,
            producer_id_start: 0,
            cleanup_scan_max: 1000,
            expiry_batch_max: 500,
            complete_retry_backoff_ms: 50,
            park_max_ms: 1000,
            transaction_two_phase_commit_enable: false,
        }
    }
}

/// Why a [`Config`] is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value that must be strictly positive is not.
    #[error("{key} must be positive, got {value}")]
    NotPositive {
        /// The Kafka key (or field name) of the setting.
        key: &'static str,
        /// The value given.
        value: i64,
    },
    /// A value that must not be negative is.
    #[error("{key} must not be negative, got {value}")]
    Negative {
        /// The key (or field name) of the setting.
        key: &'static str,
        /// The value given.
        value: i64,
    },
    /// `transaction.version` is not 0, 1 or 2.
    #[error("transaction.version must be 0, 1 or 2, got {}", .0.0)]
    UnknownTransactionVersion(TxnVersion),
}

impl Config {
    /// Checks every setting; returns the config unchanged if all are valid.
    pub fn validate(self) -> Result<Self, ConfigError> {
        let positive: [(&'static str, i64); 10] = [
            (
                "transaction.max.timeout.ms",
                i64::from(self.transaction_max_timeout_ms),
            ),
            (
                "transactional.id.expiration.ms",
                self.transactional_id_expiration_ms,
            ),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                self.abort_timed_out_transaction_cleanup_interval_ms,
            ),
            (
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                self.remove_expired_transaction_cleanup_interval_ms,
            ),
            (
                "transaction.state.log.num.partitions",
                i64::from(self.transaction_state_log_num_partitions),
            ),
            (
                "offsets.topic.num.partitions",
                i64::from(self.offsets_topic_num_partitions),
            ),
            (
                "producer_id_block_size",
                i64::from(self.producer_id_block_size),
            ),
            (
                "cleanup_scan_max",
                i64::try_from(self.cleanup_scan_max).unwrap_or(i64::MAX),
            ),
            (
                "expiry_batch_max",
                i64::try_from(self.expiry_batch_max).unwrap_or(i64::MAX),
            ),
            ("complete_retry_backoff_ms", self.complete_retry_backoff_ms),
        ];
        for (key, value) in positive {
            if value <= 0 {
                return Err(ConfigError::NotPositive { key, value });
            }
        }
        if self.producer_id_start < 0 {
            return Err(ConfigError::Negative {
                key: "producer.id.start",
                value: self.producer_id_start,
            });
        }
        if self.park_max_ms < 0 {
            return Err(ConfigError::Negative {
                key: "txn.park.max.ms",
                value: self.park_max_ms,
            });
        }
        if !self.transaction_version.is_known() {
            return Err(ConfigError::UnknownTransactionVersion(
                self.transaction_version,
            ));
        }
        Ok(self)
    }

    /// The log partition owning `id` under this config.
    pub fn partition_for(&self, id: &TransactionalId) -> LogPartition {
        partition_for(id, self.transaction_state_log_num_partitions)
    }

    /// Refuses a load of `partition` holding a transactional id that this config routes to
    /// another log partition (the log was written with another
    /// `transaction.state.log.num.partitions`, or a key is corrupt): serving it would answer
    /// for ids that clients look up elsewhere. [`Engine::handle_load`](crate::Engine::handle_load)
    /// requires this to hold.
    pub fn check_loaded(
        &self,
        partition: LogPartition,
        loaded: &LoadedPartition,
    ) -> Result<(), LogError> {
        match loaded
            .records
            .iter()
            .find(|(id, _)| self.partition_for(id) != partition)
        {
            None => Ok(()),
            Some((id, _)) => Err(LogError::Corrupt {
                partition: Some(partition),
                key: id.as_str().to_owned(),
                reason: format!(
                    "the transactional id belongs to log partition {} of {}, not {}: was \
                     transaction.state.log.num.partitions changed?",
                    self.partition_for(id).0,
                    self.transaction_state_log_num_partitions,
                    partition.0
                ),
            }),
        }
    }

    /// The `__consumer_offsets` partition of `group_id` under this config.
    pub fn offsets_partition_for(&self, group_id: &str) -> TopicPartition {
        consumer_offsets_partition_for(group_id, self.offsets_topic_num_partitions)
    }
}

/// Kafka's `partitionFor`: `abs(javaStringHash(id)) % num_partitions`, with `MIN_VALUE -> 0`.
pub fn partition_for(id: &TransactionalId, num_partitions: u32) -> LogPartition {
    LogPartition(kafka_partition_for(id.java_hash(), num_partitions))
}

/// The partition AddOffsetsToTxn adds for `group_id`:
/// `__consumer_offsets-<abs(javaStringHash(group)) % num_partitions>`.
pub fn consumer_offsets_partition_for(group_id: &str, num_partitions: u32) -> TopicPartition {
    let p = kafka_partition_for(java_string_hash(group_id), num_partitions);
    // `p < num_partitions <= u32::MAX`, and Kafka partition counts fit an i32.
    let p = i32::try_from(p).unwrap_or(i32::MAX);
    TopicPartition::new(CONSUMER_OFFSETS_TOPIC, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_valid() {
        let c = Config::default().validate().expect("defaults are valid");
        assert_eq!(c.transaction_max_timeout_ms, 900_000);
        assert_eq!(c.transactional_id_expiration_ms, 604_800_000);
        assert_eq!(c.abort_timed_out_transaction_cleanup_interval_ms, 10_000);
        assert_eq!(c.remove_expired_transaction_cleanup_interval_ms, 3_600_000);
        assert_eq!(c.transaction_state_log_num_partitions, 50);
        assert_eq!(c.transaction_version, TxnVersion::V2);
        assert_eq!(c.offsets_topic_num_partitions, 50);
        assert_eq!(c.producer_id_block_size, 1000);
    }

    #[test]
    fn validate_rejects_bad_values() {
        let c = Config {
            transaction_state_log_num_partitions: 0,
            ..Config::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::NotPositive { .. })));
        let c = Config {
            transaction_version: TxnVersion(3),
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e, ConfigError::UnknownTransactionVersion(TxnVersion(3)));
        assert_eq!(
            e.to_string(),
            "transaction.version must be 0, 1 or 2, got 3"
        );
        let c = Config {
            transaction_version: TxnVersion(-1),
            ..Config::default()
        };
        assert!(c.validate().is_err(), "a negative version is unknown too");
        let c = Config {
            park_max_ms: -1,
            ..Config::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::Negative { .. })));
    }

    /// Kafka's hash vectors are `txn_log::ids`'s tests; this checks the config routes with
    /// its own `transaction.state.log.num.partitions` (50 by default).
    #[test]
    fn partition_vectors() {
        let known = TransactionalId::new("known").expect("valid");
        assert_eq!(Config::default().partition_for(&known), LogPartition(27));
        let c = Config {
            transaction_state_log_num_partitions: 7,
            ..Config::default()
        };
        for id in ["one", "two", "a", "b", "known", "polygenelubricants"] {
            let id = TransactionalId::new(id).expect("valid");
            assert_eq!(c.partition_for(&id), partition_for(&id, 7), "{id}");
            assert!(c.partition_for(&id).0 < 7, "{id}");
        }
    }

    /// AddOffsetsToTxn: the group maps to `__consumer_offsets-<abs(hash(g)) % 50>`.
    #[test]
    fn s41_add_offsets_partition_mapping() {
        let c = Config::default();
        // "g".hashCode() = 103; 103 % 50 = 3.
        assert_eq!(
            c.offsets_partition_for("g"),
            TopicPartition::new("__consumer_offsets", 3)
        );
        assert_eq!(
            c.offsets_partition_for("polygenelubricants"),
            TopicPartition::new("__consumer_offsets", 0)
        );
    }
}
