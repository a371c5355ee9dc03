//! What one partition remembers about one producer (Kafka's `ProducerStateEntry`), and
//! Kafka's sequence arithmetic.

use std::collections::VecDeque;

use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId};

/// Batches remembered per producer for duplicate detection (`ProducerStateEntry.NUM_BATCHES_TO_RETAIN`;
/// a client has at most 5 requests in flight).
pub const BATCHES_RETAINED: usize = 5;

/// `seq + increment`, wrapping from `i32::MAX` to 0 (`DefaultRecordBatch.incrementSequence`).
pub fn increment_sequence(seq: i32, increment: i32) -> i32 {
    if seq > i32::MAX - increment {
        increment - (i32::MAX - seq) - 1
    } else {
        seq + increment
    }
}

/// Whether `next` directly follows `last` (`ProducerAppendInfo.inSequence`): `last + 1`, or 0
/// after `i32::MAX`. `last == -1` means "nothing yet", so only 0 follows.
pub fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// The sequence expected after `last` (for error messages).
pub(crate) fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX { 0 } else { last + 1 }
}

/// One retained batch: its sequence range and where it landed in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// First sequence.
    pub first_sequence: i32,
    /// Last sequence.
    pub last_sequence: i32,
    /// Offset of the first record (the offset a duplicate is acknowledged with).
    pub first_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Largest record timestamp (ms).
    pub max_timestamp_ms: i64,
}

/// The state of one producer on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub(crate) producer_epoch: ProducerEpoch,
    pub(crate) coordinator_epoch: CoordinatorEpoch,
    pub(crate) batches: VecDeque<BatchMetadata>,
    pub(crate) current_txn_first_offset: Option<i64>,
    pub(crate) last_timestamp_ms: i64,
}

impl ProducerEntry {
    pub(crate) fn new() -> Self {
        Self {
            producer_epoch: ProducerEpoch::NONE,
            coordinator_epoch: CoordinatorEpoch(-1),
            batches: VecDeque::with_capacity(BATCHES_RETAINED),
            current_txn_first_offset: None,
            last_timestamp_ms: -1,
        }
    }

    /// Current producer epoch ([`ProducerEpoch::NONE`] if only a marker without epoch was seen).
    pub fn producer_epoch(&self) -> ProducerEpoch {
        self.producer_epoch
    }

    /// Coordinator epoch of the last marker applied (`-1` if none).
    pub fn coordinator_epoch(&self) -> CoordinatorEpoch {
        self.coordinator_epoch
    }

    /// First offset of the transaction open on this partition, if any.
    pub fn current_txn_first_offset(&self) -> Option<i64> {
        self.current_txn_first_offset
    }

    /// The retained batches of the current epoch, oldest first (at most [`BATCHES_RETAINED`]).
    pub fn batches(&self) -> impl ExactSizeIterator<Item = &BatchMetadata> {
        self.batches.iter()
    }

    /// Last sequence appended in the current epoch (`-1` if none).
    pub fn last_sequence(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_sequence)
    }

    /// Timestamp of this producer's last batch (its max timestamp) or marker here (ms; `-1` if
    /// none), as Kafka's `ProducerStateEntry.lastTimestamp`: it may go back when a client's
    /// clock does.
    pub fn last_timestamp_ms(&self) -> i64 {
        self.last_timestamp_ms
    }

    /// The retained batch with exactly this sequence range (`ProducerStateEntry.batchWithSequenceRange`).
    pub(crate) fn find_duplicate(&self, first: i32, last: i32) -> Option<&BatchMetadata> {
        self.batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
    }

    /// Moves to `epoch`, forgetting the batches of the old one (`maybeUpdateProducerEpoch`).
    pub(crate) fn update_epoch(&mut self, epoch: ProducerEpoch) {
        if self.producer_epoch != epoch {
            self.producer_epoch = epoch;
            self.batches.clear();
        }
    }

    pub(crate) fn push_batch(&mut self, batch: BatchMetadata) {
        if self.batches.len() == BATCHES_RETAINED {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
    }
}

/// What DescribeProducers (KIP-664) reports for one producer on one partition, in Kafka's
/// encoding: `-1` where Kafka writes `-1` for "none". See
/// [`PartitionState::active_producers`](super::PartitionState::active_producers).
///
/// Kafka's broker builds the same row from its `ProducerStateEntry` in
/// `UnifiedLog.activeProducers`:
/// <https://github.com/apache/kafka/blob/4.1/storage/src/main/java/org/apache/kafka/storage/internals/log/ProducerStateManager.java>.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    /// The producer id.
    pub producer_id: ProducerId,
    /// Its current epoch on this partition (`-1` if only a marker without epoch was seen).
    pub producer_epoch: ProducerEpoch,
    /// Last sequence appended in the current epoch (`-1` if none is retained).
    pub last_sequence: i32,
    /// Timestamp of its last batch or marker here (ms; `-1` if none).
    pub last_timestamp_ms: i64,
    /// Coordinator epoch of the last marker applied for it (`-1` if none yet).
    pub coordinator_epoch: CoordinatorEpoch,
    /// First offset of its transaction open on this partition (`-1` if none): the start
    /// offset `kafka-transactions.sh abort --start-offset` takes.
    pub current_txn_start_offset: i64,
}

impl ActiveProducer {
    pub(crate) fn of(producer_id: ProducerId, e: &ProducerEntry) -> Self {
        Self {
            producer_id,
            producer_epoch: e.producer_epoch,
            last_sequence: e.last_sequence(),
            last_timestamp_ms: e.last_timestamp_ms,
            coordinator_epoch: e.coordinator_epoch,
            current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_wraps_at_i32_max_like_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(i32::MAX, 0), i32::MAX);
        assert!(in_sequence(-1, 0));
        assert!(in_sequence(i32::MAX, 0));
        assert!(in_sequence(41, 42));
        assert!(!in_sequence(41, 43));
        assert!(!in_sequence(-1, 5));
        assert_eq!(next_sequence(i32::MAX), 0);
    }

    #[test]
    fn only_the_last_five_batches_are_retained() {
        let mut e = ProducerEntry::new();
        for i in 0..7 {
            e.push_batch(BatchMetadata {
                first_sequence: i,
                last_sequence: i,
                first_offset: i64::from(i),
                last_offset: i64::from(i),
                max_timestamp_ms: 0,
            });
        }
        assert_eq!(e.batches().len(), BATCHES_RETAINED);
        assert!(e.find_duplicate(1, 1).is_none());
        assert_eq!(e.find_duplicate(2, 2).map(|b| b.first_offset), Some(2));
        e.update_epoch(ProducerEpoch(1));
        assert_eq!(e.batches().len(), 0);
        assert_eq!(e.last_sequence(), -1);
    }
}
