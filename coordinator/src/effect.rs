//! What the engine asks its shell to do: effects as values.

use std::collections::BTreeSet;

use txn_log::{
    CoordinatorEpoch, LogEntry, LogError, LogPartition, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult,
};

use crate::Response;

/// Identifies one request, chosen by the shell; echoed in [`Effect::Respond`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Identifies one log append, chosen by the engine; reported back through
/// `handle_append_done` / `handle_append_failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IoId(pub u64);

/// Milliseconds since the Unix epoch (wall clock, injected by the shell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(pub i64);

/// Why an engine stopped owning its partition.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum UnloadReason {
    /// The shell asked (`handle_unload`, emigration).
    Requested,
    /// The log refused an append: a newer coordinator owns the partition, or the log is
    /// poisoned/closed.
    LogFailed(LogError),
    /// The stored coordinator epoch at load was newer than ours.
    StaleLoad {
        /// The stored epoch.
        stored: CoordinatorEpoch,
    },
    /// A participant answered TRANSACTION_COORDINATOR_FENCED to our markers.
    MarkersFenced,
}

/// One thing to do, in order. The shell executes effects in the order polled.
#[derive(Debug, Clone)]
#[must_use = "effects must be executed by the shell"]
#[non_exhaustive]
pub enum Effect {
    /// Append `entries` atomically to `partition` as `coordinator_epoch`, then report
    /// `handle_append_done(io)` or `handle_append_failed(io, err)`.
    AppendLog {
        /// The append's id.
        io: IoId,
        /// The log partition.
        partition: LogPartition,
        /// The epoch to append with (the log fences stale epochs).
        coordinator_epoch: CoordinatorEpoch,
        /// The batch.
        entries: Vec<LogEntry>,
    },
    /// Send `response` to request `to`. Emitted only once every record it depends on is durable.
    Respond {
        /// The request.
        to: RequestId,
        /// The answer.
        response: Response,
    },
    /// Write transaction markers to every partition, then report `handle_markers_done`.
    /// A newer `WriteMarkers` for the same id replaces an older one.
    WriteMarkers {
        /// The log partition of the transaction (so the shell can drop its markers on unload).
        partition: LogPartition,
        /// The transactional id.
        transactional_id: TransactionalId,
        /// Producer id of the marker.
        producer_id: ProducerId,
        /// Producer epoch of the marker (under TV2 already the bumped epoch).
        producer_epoch: ProducerEpoch,
        /// Our coordinator epoch, stamped on the markers.
        coordinator_epoch: CoordinatorEpoch,
        /// Commit or abort.
        result: TxnResult,
        /// The participants.
        partitions: BTreeSet<TopicPartition>,
        /// Transaction version of the transaction (WriteTxnMarkers v2 field).
        transaction_version: u8,
    },
    /// Reserve a producer-id block (`TxnLog::allocate_block(block_size)`) and add it to the
    /// shared [`crate::ProducerIdAllocator`].
    NeedProducerIds {
        /// Block size to reserve.
        block_size: u32,
    },
    /// The engine no longer owns `partition`: drop its marker work; every later request gets
    /// NOT_COORDINATOR until the next load.
    Unloaded {
        /// The partition.
        partition: LogPartition,
        /// The coordinator epoch we held (if loaded).
        coordinator_epoch: Option<CoordinatorEpoch>,
        /// Why.
        reason: UnloadReason,
    },
}

/// How the markers of one [`Effect::WriteMarkers`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MarkerOutcome {
    /// Every participant acknowledged (or was dropped as deleted / unsupported format).
    Written,
    /// A participant answered TRANSACTION_COORDINATOR_FENCED: a newer coordinator exists.
    CoordinatorFenced,
}

/// The report for [`Effect::WriteMarkers`]; the fields echo the effect's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkersDone {
    /// The transactional id.
    pub transactional_id: TransactionalId,
    /// Producer id of the markers.
    pub producer_id: ProducerId,
    /// Producer epoch of the markers.
    pub producer_epoch: ProducerEpoch,
    /// Coordinator epoch of the markers.
    pub coordinator_epoch: CoordinatorEpoch,
    /// Outcome.
    pub outcome: MarkerOutcome,
}
