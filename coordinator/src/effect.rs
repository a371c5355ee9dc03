//! What the engine asks its shell to do: effects as values.

use txn_log::{CoordinatorEpoch, LogEntry, LogError, LogPartition, TxnMarkerRequest};

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
    /// Write transaction markers to every partition of the decision, then report how it ended
    /// with `handle_markers_done`. A newer `WriteMarkers` for the same id replaces an older
    /// one. The decision is the marker writer's own type: the shell hands it on unchanged.
    WriteMarkers(TxnMarkerRequest),
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
