//! The `TxnLog` trait: the storage seam of the coordinator.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;

use crate::{
    CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogPartition, ProducerId,
    ProducerIdBlock,
};

/// Durable storage for transaction metadata, partitioned like Kafka's `__transaction_state`.
///
/// A broker with its own replicated log implements this trait; `MemTxnLog` and
/// (feature `sled`) `SledTxnLog` are the implementations shipped here. The conformance suite in
/// `txn_log::suite` (feature `testing`) is the acceptance bar for an implementation.
///
/// # To ensure correctness
///
/// An implementation must guarantee all of the following; the coordinator relies on each.
///
/// 1. **Durable before resolved.** `append`, `claim` and `allocate_block` resolve `Ok` only once
///    their effect survives a process crash and power loss (fsync or equivalent replication).
///    An `Err` means the effect may or may not be durable; callers treat the partition as lost.
/// 2. **Epoch fence.** Each partition stores the highest coordinator epoch claimed for it.
///    `claim` with a lower epoch fails `Fenced { current }`; equal or higher succeeds and stores
///    it. `append` with an epoch lower than the stored one fails `Fenced { current }` and writes
///    nothing; with an epoch that was never claimed it fails `NotClaimed`. The check and the
///    write are atomic with respect to concurrent `claim`s: once a `claim(c+1)` has resolved, no
///    append with epoch `c` lands.
/// 3. **Atomic batches.** An `append` batch is applied entirely or not at all, also across a
///    crash.
/// 4. **Ordered per partition.** Appends to one partition are applied in the order of their
///    `append` calls (the call, not the first poll of its future, fixes the order); a later
///    entry for an id replaces an earlier one.
/// 5. **Faithful load.** `load` returns, for every id whose last entry is an upsert, exactly that
///    record, plus the stored coordinator epoch. A record that fails verification is reported as
///    `Corrupt` naming the partition and key; it is never skipped silently.
/// 6. **Unique producer ids.** `allocate_block` never returns overlapping blocks, across restarts
///    and crashes: the block is durable before it is returned. A block starts at the stored
///    counter or at `floor`, whichever is higher, and the counter moves past it: a floor changed
///    between calls (lowered, raised) never hands out an id twice.
/// 7. **Fail-stop.** After a durability failure the implementation refuses further writes
///    (`Poisoned`) rather than retrying an fsync whose outcome is unknown.
#[async_trait]
pub trait TxnLog: Send + Sync + 'static {
    /// Records that `epoch` owns `partition`, fencing every lower epoch. Durable on `Ok`.
    /// Claiming the stored epoch again succeeds (an owner repeating its own claim), so two
    /// callers that pick the same epoch both hold it: use [`TxnLog::claim_next`] when the
    /// callers do not get their epochs from one authority.
    async fn claim(&self, partition: LogPartition, epoch: CoordinatorEpoch)
    -> Result<(), LogError>;

    /// Claims the epoch after the stored one (0 when `partition` was never claimed) in one
    /// atomic step, fencing every lower epoch, and returns it. No two calls return the same
    /// epoch for a partition, however they interleave: the caller owns it alone. Durable on
    /// `Ok`.
    async fn claim_next(&self, partition: LogPartition) -> Result<CoordinatorEpoch, LogError>;

    /// Starts appending `batch` to `partition` as coordinator `epoch` and returns the
    /// [`Appending`] that resolves when it is durable (`Ok`) or failed. The call queues the
    /// append: it proceeds whether or not the future is polled, and its place among the
    /// partition's appends is the place of this call (guarantee 4), so a caller may start
    /// several appends and await them in any order. It must not block.
    fn append(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Appending;

    /// Reads the live state of `partition`.
    async fn load(&self, partition: LogPartition) -> Result<LoadedPartition, LogError>;

    /// Reserves `len` fresh producer ids, none below `floor` (the deployment's
    /// `producer.id.start`). Durable on `Ok`.
    async fn allocate_block(
        &self,
        len: u32,
        floor: ProducerId,
    ) -> Result<ProducerIdBlock, LogError>;
}

/// An append started by [`TxnLog::append`]: resolves once it is durable, or with the error
/// that stopped it.
pub type Appending = Pin<Box<dyn Future<Output = Result<(), LogError>> + Send + 'static>>;

/// An [`Appending`] that has already failed with `err`.
pub fn append_failed(err: LogError) -> Appending {
    Box::pin(std::future::ready(Err(err)))
}

/// The epoch [`TxnLog::claim_next`] claims after `stored`: 0 for a partition never claimed.
pub(crate) fn next_epoch(
    partition: LogPartition,
    stored: Option<CoordinatorEpoch>,
) -> Result<CoordinatorEpoch, LogError> {
    match stored {
        None => Ok(CoordinatorEpoch(0)),
        Some(e) => e.0.checked_add(1).map(CoordinatorEpoch).ok_or_else(|| {
            LogError::InvalidArgument(format!(
                "log partition {partition}: the coordinator epoch is exhausted"
            ))
        }),
    }
}
