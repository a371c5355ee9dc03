//! The durable transaction log of the Kafka transaction coordinator, and the domain types the
//! whole workspace shares.
//!
//! This crate owns:
//! - the identifiers ([`TransactionalId`], [`ProducerId`], [`ProducerEpoch`],
//!   [`CoordinatorEpoch`], [`LogPartition`], [`TopicPartition`]) and Kafka's [`TxnState`];
//! - the persisted record ([`TxnRecord`]) and its versioned, checksummed encoding;
//! - the [`TxnLog`] trait, the seam a broker implements with its own replicated log, with its
//!   correctness obligations;
//! - implementations of the trait (in memory with a crash model; sled, the embedded default).
#![forbid(unsafe_code)]

pub mod codec;
mod error;
mod ids;
mod log;
pub mod mem;
mod record;
#[cfg(feature = "sled")]
pub mod sled_log;
mod state;
#[cfg(feature = "testing")]
pub mod suite;
pub mod sync;

pub use error::LogError;
pub use ids::{
    CoordinatorEpoch, InvalidTransactionalId, LogPartition, ProducerEpoch, ProducerId,
    TopicPartition, TransactionalId, java_string_hash, kafka_partition_for,
};
pub use log::TxnLog;
pub use mem::MemTxnLog;
pub use record::{LoadedPartition, LogEntry, LogOp, ProducerIdBlock, TxnRecord};
#[cfg(feature = "sled")]
pub use sled_log::{GroupCommitStats, SledConfig, SledTxnLog, SyncMode};
pub use state::{TxnResult, TxnState};
