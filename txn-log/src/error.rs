//! Typed errors of the transaction log.
//!
//! `Display` texts may change; match on the variants.

use std::sync::Arc;

use crate::{CoordinatorEpoch, LogPartition};

/// An error from a [`crate::TxnLog`] operation.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The caller's coordinator epoch is older than the stored one: a newer coordinator owns
    /// the partition. The caller must stop acting as coordinator for it.
    #[error(
        "log partition {partition} is owned by coordinator epoch {current}; request was fenced"
    )]
    Fenced {
        /// The partition.
        partition: LogPartition,
        /// The stored (newer) coordinator epoch.
        current: CoordinatorEpoch,
    },
    /// An append used an epoch that was never claimed (newer than the stored one, or none stored).
    #[error("log partition {partition} was not claimed with coordinator epoch {epoch}")]
    NotClaimed {
        /// The partition.
        partition: LogPartition,
        /// The epoch the caller used.
        epoch: CoordinatorEpoch,
    },
    /// A stored record failed its checksum, has an unknown version or does not decode.
    #[error("corrupt record in log partition {partition:?}, key {key:?}: {reason}")]
    Corrupt {
        /// Partition holding the record (`None` for non-partition records such as pid blocks).
        partition: Option<LogPartition>,
        /// The key of the record, printable.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A storage operation failed.
    #[error("transaction log I/O error: {0}")]
    Io(Arc<std::io::Error>),
    /// A previous durability failure poisoned the log: nothing more is accepted, because
    /// what is on disk can no longer be trusted to match what was acknowledged.
    #[error("transaction log is poisoned after an earlier failure: {reason}")]
    Poisoned {
        /// The first failure.
        reason: String,
    },
    /// The log was closed.
    #[error("transaction log is closed")]
    Closed,
    /// The store did not answer (unreachable, no quorum, timed out): a write may or may not
    /// have been applied. Retriable; the owner of the partition must load it again before it
    /// trusts its own state.
    #[error("transaction log unavailable: {reason}")]
    Unavailable {
        /// What failed, naming the store's endpoints.
        reason: String,
    },
    /// The caller passed an argument the log cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<std::io::Error> for LogError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(Arc::new(e))
    }
}

impl LogError {
    /// Whether this error means another coordinator took the partition over.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }
}
