//! The participant: the producer state a broker keeps for each partition it leads, so that it
//! can take part in Kafka transactions (KIP-98) and idempotent produce.
//!
//! Pure and synchronous: no I/O, no clock, no locks. One [`PartitionState`] per partition,
//! owned by whoever holds the partition's lock. The broker stays in charge of its log: the
//! state is asked *before* an append (`check_*`, which changes nothing but counters) and told
//! *after* it (`complete_*`, with the offsets the batch got). Hold the partition lock from the
//! check to the completion.
//!
//! # Call sequences
//!
//! **Produce** (one batch per partition):
//! 1. [`BatchHeader::parse`] the partition's record bytes (CORRUPT_MESSAGE on error).
//! 2. [`PartitionState::check_batch`]: `Err(e)` → answer `e.code()`;
//!    [`ProduceDecision::Duplicate`] → answer NONE with its `base_offset`, append nothing;
//!    [`ProduceDecision::Append`] → assign `base_offset = log end`, rewrite the batch's base
//!    offset, append, then [`PartitionState::complete_append`].
//! 3. After the append is replicated: [`PartitionState::advance_high_watermark`].
//!
//! **WriteTxnMarkers**, for each (marker, partition):
//! 1. [`PartitionState::check_marker`] with a [`Marker`]: `Err(e)` → that partition's error `e.code()`.
//! 2. Encode [`PendingMarker::control_batch`]`(log_end, leader_epoch, now_ms)` with
//!    [`ControlBatch::encode`], append it, then [`PartitionState::complete_marker`].
//! 3. On `__consumer_offsets`: feed [`PendingTxnOffsets::complete`] with the marker's producer
//!    and result, and [`merge_committed`] what it returns.
//!
//! **Fetch, read_committed**: serve data from `fetch_offset` up to at most
//! [`PartitionState::last_stable_offset`]; put [`PartitionState::read_committed`]`(fetch_offset,
//! end_of_served_data).aborted` into `aborted_transactions` as `(producer_id, first_offset)` and
//! the LSO into `last_stable_offset`. read_uncommitted: up to the high watermark, no aborted list.
//!
//! **ListOffsets** with `isolation_level = read_committed` and timestamp `-1` (latest):
//! [`PartitionState::last_stable_offset`].
//!
//! **TxnOffsetCommit** (on the `__consumer_offsets` leader): append the offset records as a
//! transactional batch through the produce path above, then [`PendingTxnOffsets::stage`]
//! each `(key, value, record_offset)`.
//!
//! **Restart**: [`PartitionState::replay_log`] (or [`PartitionState::replay`] over
//! [`LogBatch::read_all`]) from the log start, then `advance_high_watermark`. A snapshot is a
//! clone of the state; resume it with [`PartitionState::replay_batch`] from its
//! [`PartitionState::next_offset`]. Followers apply the leader's batches with `replay_batch`.
//!
//! # Example
//!
//! ```
//! use markers::participant::*;
//! use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};
//!
//! let mut p = PartitionState::new(ParticipantConfig::default(), 0);
//! let pid = ProducerId(1000);
//! let batch = BatchHeader::transactional(pid, ProducerEpoch(0), 0, 3);
//! let ProduceDecision::Append(pending) = p.check_batch(&batch).unwrap() else { unreachable!() };
//! p.complete_append(pending, p.next_offset()).unwrap(); // offsets 0..=2
//! p.advance_high_watermark(p.next_offset());
//! assert_eq!(p.last_stable_offset(), 0); // the open transaction holds readers back
//!
//! // a retry of the same batch is acknowledged with its original offset
//! assert_eq!(
//!     p.check_batch(&batch).unwrap(),
//!     ProduceDecision::Duplicate(DuplicateBatch { base_offset: 0, last_offset: 2, max_timestamp_ms: -1 }),
//! );
//!
//! let marker = Marker {
//!     producer_id: pid, producer_epoch: ProducerEpoch(0), coordinator_epoch: CoordinatorEpoch(1),
//!     result: TxnResult::Abort, txn_version: TxnVersion::V0,
//! };
//! let pending = p.check_marker(&marker).unwrap();
//! let at = p.next_offset();
//! let _bytes = pending.control_batch(at, 0, 1_700_000_000_000).encode().unwrap(); // append these
//! let applied = p.complete_marker(pending, at, 1_700_000_000_000).unwrap();
//! assert_eq!(applied.completed.map(|t| t.first_offset), Some(0));
//! p.advance_high_watermark(p.next_offset());
//! assert_eq!(p.last_stable_offset(), 4);
//! let read = p.read_committed(0, 4);
//! assert_eq!(read.aborted, vec![AbortedTxn { producer_id: pid, first_offset: 0, last_offset: 3 }]);
//! ```
//!
//! # Differences from Kafka
//!
//! See `docs/markers.md`, section "Participant (broker side)".

mod batch;
mod control;
mod data_batch;
mod error;
mod metrics;
mod offsets;
mod producer;
mod state;
mod txn_index;
mod verification;

#[cfg(test)]
mod tests;

// Public interface:
pub use batch::{BATCH_HEADER_LEN, BatchHeader, LogBatch, LogBatches};
pub use control::{
    CONTROL_KEY_VERSION, CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, ControlBatch, ControlRecord,
    END_TXN_MARKER_VERSION, control_key_bytes, encode_control_batch, end_txn_value_bytes,
    parse_control_key_value,
};
pub use data_batch::{DataBatch, RecordTimestamps};
pub use error::{
    AppendError, BatchParseError, EncodeError, MarkerError, ProduceError, ReplayError,
};
pub use metrics::ParticipantMetrics;
pub use offsets::{OffsetCommitRecord, PendingTxnOffsets, merge_committed};
pub use producer::{
    ActiveProducer, BATCHES_RETAINED, BatchMetadata, ProducerEntry, in_sequence, increment_sequence,
};
pub use state::{
    AppendedBatch, DuplicateBatch, Marker, MarkerApplied, ParticipantConfig, PartitionState,
    PendingAppend, PendingMarker, ProduceDecision, ReadCommitted, TxnVersion,
    UnknownProducerPolicy,
};
pub use txn_index::{AbortedTxn, CompletedTxn};
pub use verification::VerificationGuard;
