//! The Kafka transaction coordinator.
//!
//! Without default features this crate is the pure engine: Kafka's transaction state machine as
//! a synchronous, deterministic core (requests, log outcomes and time in; effects out). Features:
//!
//! - `embed`: what a broker embedding the coordinator needs: the tokio [`shell`] (with the
//!   marker writer of the `markers` crate) and the Kafka message conversions of
//!   `server::protocol`. It re-exports [`kafka_protocol`] (the workspace's copy with bounded
//!   decoders), [`async_trait`](macro@async_trait) (for implementing [`shell::PartitionCatalog`]) and
//!   [`prometheus_client`] (the types of [`shell::Metrics`]), so a broker needs none of them as
//!   its own dependency.
//! - `daemon` (default, implies `embed`): the Kafka wire server, settings, command line, logging
//!   and metrics endpoint of the `txn-coordinator` binary, and the sled log.
//! - `etcd` (default, implies `daemon`): the daemon's etcd log backend (needs `protoc`).
//! - `testing`: [`testing::EngineHarness`], the simulated driver of one engine that tests,
//!   examples, fuzz harnesses and benchmarks use (no dependency added; no stability promise).
//!
//! A broker depends on `coordinator = { ..., default-features = false, features = ["embed"] }`;
//! see `docs/broker-integration.md`.
//!
//! # Driving an [`Engine`]
//!
//! One engine per owned transaction-log partition, owned by one task (no locks):
//!
//! 1. `Engine::new(partition, config, allocator)` (loading: requests get
//!    COORDINATOR_LOAD_IN_PROGRESS), claim the partition in the `TxnLog` at coordinator epoch
//!    `c`, `load` it, then [`Engine::handle_load`]`(now, c, loaded)`.
//! 2. Feed inputs: [`Engine::handle_request`], [`Engine::handle_append_done`] /
//!    [`Engine::handle_append_failed`] for every [`Effect::AppendLog`],
//!    [`Engine::handle_markers_done`] for every [`Effect::WriteMarkers`], and
//!    [`Engine::handle_timeout`] when the deadline of [`Engine::poll_timeout`] passes
//!    (re-read the clock when the timer fires).
//! 3. After every input, execute [`Engine::poll_effect`] until `None`, in order. Responses
//!    come out only when the records they depend on are durable.
//! 4. [`Effect::NeedProducerIds`]: `TxnLog::allocate_block(block_size)` then
//!    [`ProducerIdAllocator::add_block`] (or `refill_failed`).
//! 5. [`Effect::Unloaded`]: drop marker work of the partition; the engine answers
//!    NOT_COORDINATOR until reloaded ([`Engine::handle_begin_load`] + `handle_load`).
//!
//! Requests that need no partition (null-id InitProducerId, empty ids, invalid timeouts) can
//! be answered by [`handle_unrouted`] without an engine. Route the others with
//! [`Config::partition_for`]; no engine for the partition means NOT_COORDINATOR.
//!
//! Across partitions: a v4+ AddPartitionsToTxn batch and DescribeTransactions are split by
//! partition and the per-engine answers concatenated; ListTransactions asks every engine
//! ([`Engine::list_transactions`] or the request) and merges with [`merge_list_responses`]
//! (any engine still loading makes the whole answer COORDINATOR_LOAD_IN_PROGRESS).
//!
//! Markers: report each [`Effect::WriteMarkers`] once with [`Engine::handle_markers_done`],
//! as a [`MarkerCompletion`] (`MarkerCompletion::of` the decision) with
//! [`MarkerOutcome::Completed`] when every participant acknowledged (or was dropped as deleted)
//! or [`MarkerOutcome::Refused`] (held decided, [`Engine::refused`]); `Cancelled` and
//! `Superseded` change nothing. Stale
//! reports are ignored; a report that arrives while
//! the Complete* append is in flight is ignored; a failed Complete* append is retried by the
//! engine itself. The state machine is described in `docs/state-machine.md`.
//!
//! ```
//! use coordinator::*;
//! use txn_log::*;
//!
//! let alloc = ProducerIdAllocator::with_block(ProducerIdBlock { first: ProducerId(0), len: 1000 }).unwrap();
//! let config = Config { transaction_state_log_num_partitions: 1, ..Config::default() };
//! let mut engine = Engine::new(LogPartition(0), config, alloc);
//! engine.handle_load(Millis(0), CoordinatorEpoch(1), LoadedPartition::default());
//! engine.handle_request(Millis(1), RequestId(7), Request::InitProducerId(InitProducerIdRequest {
//!     version: 4,
//!     transactional_id: Some("app".into()),
//!     transaction_timeout_ms: 60_000,
//!     producer_id: ProducerId::NONE,
//!     producer_epoch: ProducerEpoch::NONE,
//!     enable_2pc: false,
//!     keep_prepared_txn: false,
//! }));
//! let Some(Effect::AppendLog { io, .. }) = engine.poll_effect() else { panic!() };
//! assert!(engine.poll_effect().is_none(), "no reply before the record is durable");
//! engine.handle_append_done(io);
//! let Some(Effect::Respond { to, response: Response::InitProducerId(r) }) = engine.poll_effect() else { panic!() };
//! assert_eq!((to, r.error, r.producer_epoch), (RequestId(7), ErrorCode::NONE, ProducerEpoch(0)));
//! ```
#![forbid(unsafe_code)]

mod config;
mod effect;
mod engine;
mod pid;
mod request;
mod sync;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

// Public interface:
pub use config::{
    CONSUMER_OFFSETS_TOPIC, Config, ConfigError, STANDALONE_PRODUCER_ID_START,
    consumer_offsets_partition_for, partition_for,
};
pub use effect::{Effect, IoId, Millis, RequestId, UnloadReason};
pub use engine::{Engine, EngineMetrics, handle_unrouted, is_epoch_exhausted};
pub use pid::{InvalidBlock, ProducerIdAllocator};
pub use request::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    AddPartitionsTxn, AddPartitionsTxnResult, DescribeTransactionsRequest, DescribedTxn,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, ListedTxn, Request, Response,
    TransactionalIdPattern, merge_list_responses, unknown_state_filters,
};
/// Kafka's error codes: the workspace's one error-code type, [`txn_log::ErrorCode`]
/// (re-exported; the participant's and the marker path's errors return the same type).
pub use txn_log::ErrorCode;
/// The marker decision and its end, shared with the marker writer (`txn_log`'s types).
pub use txn_log::{MarkerCompletion, MarkerOutcome, TxnMarkerRequest};

#[cfg(feature = "daemon")]
pub mod server;
/// The daemon's Kafka protocol surface and Kafka's authorization checks of the transaction APIs
/// (`authz`, over any `security::acl::Authorizer`), without the daemon (feature `daemon` adds the
/// rest of the module: the wire server, its settings and admin commands).
#[cfg(all(feature = "embed", not(feature = "daemon")))]
pub mod server {
    pub mod authz;
    pub mod protocol;
    pub mod rate_limit;
    pub mod session;
}
#[cfg(feature = "embed")]
pub mod shell;

/// The Kafka protocol library the crate speaks (crates.io's kafka-protocol 0.18.0 with bounded
/// decoders, vendored as the package `txn-kafka-protocol`). Also `markers::kafka_protocol`.
#[cfg(feature = "embed")]
pub use kafka_protocol;

/// The attribute macro of the async traits a broker implements ([`shell::PartitionCatalog`], and
/// `txn_log::TxnLog`, `markers::writer::{LeaderResolver, MarkerTransport, LocalMarkerHandler}`).
#[cfg(feature = "embed")]
pub use async_trait::async_trait;

/// Principals, Kafka's ACL types and the [`security::acl::Authorizer`] trait that
/// [`server::authz::Authz`] checks requests with: a broker implements it to bring its own
/// authorization, or uses Kafka's [`security::acl::StandardAuthorizer`].
#[cfg(feature = "embed")]
pub use security;

/// The metric types of [`shell::Metrics`]: register them with
/// [`shell::Metrics::register`] in a `prometheus_client::registry::Registry`.
#[cfg(feature = "embed")]
pub use prometheus_client;
