//! The coordinator-side marker writer: delivers one COMMIT/ABORT decision to every participant
//! partition until each has it (or is gone), then reports exactly one [`MarkerCompletion`].
//!
//! Two layers:
//! - [`MarkerPlanner`] (always compiled, no tokio): groups pending partitions by leader broker,
//!   builds one `WriteTxnMarkers` request per broker carrying the markers of many transactions,
//!   keeps one request in flight per broker, applies Kafka's response table (`TransactionMarkerRequestCompletionHandler`)
//!   and decides retries with backoff. Time is passed in as [`Millis`]; it is deterministic.
//! - `MarkerWriter` (feature `net`): one tokio task that owns a planner and performs its effects
//!   through a `LeaderResolver` and a `MarkerTransport`, polling their futures itself (no task
//!   per request), and answers each decision on the `MarkerReply` it was submitted with
//!   (or on its completions channel).
//!
//! Contract with the engine: every submitted [`TxnMarkerRequest`] yields exactly one
//! [`MarkerCompletion`]. On [`MarkerOutcome::Completed`] the engine appends `CompleteCommit` /
//! `CompleteAbort` (and retries that append itself on a retriable log error); on
//! [`MarkerOutcome::Refused`] (a participant refused a marker for good: every other partition
//! has its marker) it keeps the transaction decided and reports it; on
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
    MarkerReply, MarkerWriter, TrySubmitError, WriterClosed, WriterConfig, WriterStats,
};
#[cfg(feature = "net")]
pub use resolver::{
    LeaderResolver, METADATA_VERSION, MetadataLeaderResolver, ResolveError, StaticLeaderResolver,
};
#[cfg(feature = "net")]
pub use transport::{
    InProcessTransport, KafkaWireTransport, LocalMarkerHandler, MarkerTransport, RoutingTransport,
    TransportError, WRITE_TXN_MARKERS_MAX_VERSION, WRITE_TXN_MARKERS_MIN_VERSION,
    WireTransportConfig, write_txn_markers_version,
};

pub use txn_log::{MarkerCompletion, MarkerOutcome, RefusedMarker, TxnMarkerRequest};

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
