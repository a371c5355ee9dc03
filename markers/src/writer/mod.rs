//! The coordinator-side marker writer: delivers one COMMIT/ABORT decision to every participant
//! partition until each has it (or is gone), then reports exactly one [`MarkerCompletion`].
//!
//! Two layers:
//! - [`MarkerPlanner`] (always compiled, no tokio): groups pending partitions by leader broker,
//!   builds one `WriteTxnMarkers` request per broker carrying the markers of many transactions,
//!   keeps one request in flight per broker, applies Kafka's response table (`TransactionMarkerRequestCompletionHandler`)
//!   and decides retries with backoff. Time is passed in as [`Millis`]; it is deterministic.
//! - `MarkerWriter` (feature `net`): a tokio task that owns a planner and performs its effects
//!   through a `LeaderResolver` and a `MarkerTransport`.
//!
//! Contract with the engine: every submitted [`TxnMarkerRequest`] yields exactly one
//! [`MarkerCompletion`]. On [`MarkerOutcome::Completed`] the engine appends `CompleteCommit` /
//! `CompleteAbort` (and retries that append itself on a retriable log error); on
//! [`MarkerOutcome::CoordinatorFenced`] it unloads the log partition; on
//! [`MarkerOutcome::Cancelled`] / [`MarkerOutcome::Superseded`] it does nothing (a newer owner
//! or a newer decision takes over).

mod planner;
#[cfg(test)]
mod tests;

#[cfg(feature = "net")]
mod driver;
#[cfg(feature = "net")]
mod resolver;
#[cfg(feature = "net")]
mod transport;

pub use planner::{
    DecisionId, Effect, Lookup, MarkerPlanner, Millis, PlannerConfig, PlannerStats, RequestId,
    SubmitError, build_response, codes,
};

#[cfg(feature = "net")]
pub use driver::{
    BrokerStats, MarkerWriter, TrySubmitError, WriterClosed, WriterConfig, WriterStats,
};
#[cfg(feature = "net")]
pub use resolver::{
    LeaderResolver, METADATA_VERSION, MetadataLeaderResolver, ResolveError, StaticLeaderResolver,
};
#[cfg(feature = "net")]
pub use transport::{
    InProcessTransport, KafkaWireTransport, LocalMarkerHandler, MarkerTransport, RoutingTransport,
    TransportError, WRITE_TXN_MARKERS_VERSION, WireTransportConfig,
};

use txn_log::{
    CoordinatorEpoch, LogPartition, ProducerEpoch, ProducerId, TopicPartition, TransactionalId,
    TxnResult,
};

/// One decision to deliver: the markers of one transaction (Kafka's `TxnMarkerEntry` plus the
/// transactional id and the log partition that owns it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkerRequest {
    /// The transaction.
    pub transactional_id: TransactionalId,
    /// Producer id written into every marker.
    pub producer_id: ProducerId,
    /// Producer epoch written into every marker (under TV2 the already bumped epoch).
    pub producer_epoch: ProducerEpoch,
    /// Epoch of the coordinator that made the decision; participants reject lower ones.
    pub coordinator_epoch: CoordinatorEpoch,
    /// The transaction-log partition owning the transaction (the unit of cancellation).
    pub log_partition: LogPartition,
    /// COMMIT or ABORT.
    pub result: TxnResult,
    /// Participant partitions (duplicates are ignored; empty completes at once).
    pub partitions: Vec<TopicPartition>,
    /// Client transaction version (0, 1, 2). `WriteTxnMarkers` v1 cannot carry it; it is
    /// handed to in-process participants alongside the request.
    pub txn_version: u8,
}

/// How one decision ended. Exactly one per submitted [`TxnMarkerRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerOutcome {
    /// Every partition acknowledged the marker, was deleted (leader lookup said the topic is
    /// gone) or does not support markers (`UNSUPPORTED_FOR_MESSAGE_FORMAT`). The engine appends
    /// `Complete*` now, retrying that append on retriable log errors.
    Completed,
    /// A participant answered `INVALID_PRODUCER_EPOCH` or `TRANSACTION_COORDINATOR_FENCED`: a
    /// newer coordinator owns this transaction. Stop and unload the log partition; no
    /// `Complete*` append.
    CoordinatorFenced,
    /// The log partition was unloaded (`cancel_log_partition`); pending work was dropped and
    /// in-flight acknowledgements are ignored.
    Cancelled,
    /// A newer decision replaced this one before it finished: a later submit for the same
    /// transactional id, or a submit for the same log partition at a higher coordinator epoch
    /// (then also any submit at a lower epoch than one already seen). Nothing to do; the newer
    /// decision gets its own completion.
    Superseded,
}

/// The end of one decision, reported exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerCompletion {
    /// The transaction.
    pub transactional_id: TransactionalId,
    /// Producer id of the decision.
    pub producer_id: ProducerId,
    /// Producer epoch of the decision.
    pub producer_epoch: ProducerEpoch,
    /// Coordinator epoch of the decision (compare before appending `Complete*`).
    pub coordinator_epoch: CoordinatorEpoch,
    /// Owning log partition.
    pub log_partition: LogPartition,
    /// COMMIT or ABORT.
    pub result: TxnResult,
    /// How it ended.
    pub outcome: MarkerOutcome,
    /// Partitions dropped without a marker because their topic is gone.
    pub dropped_partitions: Vec<TopicPartition>,
}

impl MarkerCompletion {
    /// The completion of `request` with `outcome` (no partition dropped).
    pub fn of(request: &TxnMarkerRequest, outcome: MarkerOutcome) -> Self {
        Self {
            transactional_id: request.transactional_id.clone(),
            producer_id: request.producer_id,
            producer_epoch: request.producer_epoch,
            coordinator_epoch: request.coordinator_epoch,
            log_partition: request.log_partition,
            result: request.result,
            outcome,
            dropped_partitions: Vec::new(),
        }
    }
}

/// Where a broker can be reached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerEndpoint {
    /// Kafka broker id.
    pub node_id: i32,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl BrokerEndpoint {
    /// Builds an endpoint.
    pub fn new(node_id: i32, host: impl Into<String>, port: u16) -> Self {
        Self {
            node_id,
            host: host.into(),
            port,
        }
    }
}

/// The answer to "who leads this partition?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderLookup {
    /// The leader and its endpoint.
    Leader(BrokerEndpoint),
    /// No leader (or its endpoint) right now; retry after backoff (Kafka's `Node.noNode`).
    Unknown,
    /// The topic or partition no longer exists; the partition is dropped from the decision
    /// (Kafka: "likely deleted already and hence can be skipped").
    TopicGone,
}
