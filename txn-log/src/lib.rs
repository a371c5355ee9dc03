//! The durable transaction log of the Kafka transaction coordinator, and the domain types the
//! whole workspace shares.
//!
//! This crate owns:
//! - the identifiers ([`TransactionalId`], [`ProducerId`], [`ProducerEpoch`],
//!   [`CoordinatorEpoch`], [`LogPartition`], [`TopicPartition`]), Kafka's [`TxnState`],
//!   [`TxnVersion`] and [`ErrorCode`] (the one error-code type of the workspace);
//! - the persisted record ([`TxnRecord`]) and its versioned, checksummed encoding;
//! - the [`TxnLog`] trait, the seam a broker implements with its own replicated log, with its
//!   correctness obligations;
//! - implementations of the trait (in memory with a crash model; sled, the embedded default).
//!
//! # Modules and features
//!
//! - [`mem`]: [`MemTxnLog`] (`MemTxnLog::new()`), live/durable split, `crash()`, fault
//!   injection, and the runtime-free [`mem::block_on`] / [`mem::poll_once`]. Always built;
//!   loom-ready under `--cfg txn_loom`.
//! - `sled_log` (feature `sled`, default): `SledTxnLog::open(SledConfig::new(dir))` or
//!   `SledTxnLog::open_path(dir)`; group commit, fsync before acknowledging, poisoning.
//!   Not usable under loom.
//! - `etcd_log` (feature `etcd`): `EtcdTxnLog::connect(EtcdConfig::new(endpoints))`; the log in
//!   etcd for several coordinators: fenced appends (each lands atomically; one writer merges
//!   the appends of many partitions into one etcd transaction), `claim_next` by
//!   compare-and-swap, snapshot loads, producer-id blocks unique across coordinators.
//! - [`security`]: ACL bindings and SCRAM credentials beside the records ([`SecurityStore`],
//!   implemented by every log here).
//! - [`codec`]: the on-disk keys and envelope (docs/txn-log-format.md); the only bincode user.
//! - `suite` (feature `testing`): the conformance suite for any `TxnLog`; no stability promise.
//!   `SledTxnLog::fail_next_sync` (fsync fault injection) is also behind `testing`.
//! - [`rng`]: the seeded generator the test side and the fuzz mutator draw from (so that a
//!   printed seed replays a run); no stability promise.
//! - [`sync`]: the loom facade.
//!
//! The binary `txn-log-crash-writer` is a test helper of `tests/sled.rs`, not a user tool.
#![forbid(unsafe_code)]

pub mod codec;
mod decision;
mod error;
mod error_code;
#[cfg(feature = "etcd")]
pub mod etcd_log;
mod ids;
mod log;
pub mod mem;
mod node_scoped;
mod record;
pub mod rng;
pub mod security;
#[cfg(feature = "sled")]
pub mod sled_log;
mod state;
#[cfg(feature = "testing")]
pub mod suite;
pub mod sync;
mod version;

pub use decision::{MarkerCompletion, MarkerOutcome, RefusedMarker, TxnMarkerRequest};
pub use error::LogError;
pub use error_code::ErrorCode;
#[cfg(feature = "etcd")]
pub use etcd_log::{EtcdConfig, EtcdTxnLog};
pub use ids::{
    CoordinatorEpoch, InvalidTransactionalId, LogPartition, ProducerEpoch, ProducerId,
    TopicPartition, TransactionalId, java_string_hash, kafka_partition_for,
};
pub use log::{Appending, TxnLog, append_failed};
pub use mem::MemTxnLog;
pub use node_scoped::NodeScopedLog;
pub use record::{LoadedPartition, LogEntry, LogOp, ProducerIdBlock, TxnRecord};
pub use security::{SecurityChange, SecuritySnapshot, SecurityStore, StoredScram};
#[cfg(feature = "sled")]
pub use sled_log::{GroupCommitStats, SledConfig, SledTxnLog, SyncMode};
pub use state::{TxnResult, TxnState};
pub use version::TxnVersion;
