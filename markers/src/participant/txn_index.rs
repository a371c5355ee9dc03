//! Where transactions sit in the log: the open ones (they hold the last stable offset back),
//! the completed ones whose marker is not yet below the high watermark (so do they), and the
//! aborted-transaction index read_committed fetches need (Kafka's `.txnindex`).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use txn_log::{ProducerId, TxnResult};

/// An aborted transaction on this partition: its producer and its offsets, the marker included.
///
/// A Fetch response's `aborted_transactions` entry is `(producer_id, first_offset)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: ProducerId,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
}

/// A transaction closed by a marker (returned by `complete_marker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    /// The producer.
    pub producer_id: ProducerId,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// Offset of the marker.
    pub marker_offset: i64,
    /// Commit or abort.
    pub result: TxnResult,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TxnIndex {
    /// Open transactions by first offset.
    open: BTreeMap<i64, ProducerId>,
    /// Completed transactions whose marker is at or above the high watermark, in marker order.
    unreplicated: VecDeque<CompletedTxn>,
    /// Aborted transactions in marker-offset order.
    aborted: Vec<AbortedTxn>,
    /// Largest `last_offset - first_offset` ever indexed: an entry with `first_offset < end`
    /// has `last_offset < end + max_aborted_span`, which bounds the scan of a query.
    max_aborted_span: i64,
    high_watermark: i64,
}

impl TxnIndex {
    pub(crate) fn open(&mut self, first_offset: i64, producer_id: ProducerId) {
        self.open.insert(first_offset, producer_id);
    }

    pub(crate) fn complete(&mut self, txn: CompletedTxn) {
        self.open.remove(&txn.first_offset);
        if txn.result == TxnResult::Abort {
            self.max_aborted_span = self
                .max_aborted_span
                .max(txn.marker_offset - txn.first_offset);
            self.aborted.push(AbortedTxn {
                producer_id: txn.producer_id,
                first_offset: txn.first_offset,
                last_offset: txn.marker_offset,
            });
        }
        if txn.marker_offset >= self.high_watermark {
            self.unreplicated.push_back(txn);
        }
    }

    pub(crate) fn set_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw;
        while self
            .unreplicated
            .front()
            .is_some_and(|t| t.marker_offset < hw)
        {
            self.unreplicated.pop_front();
        }
    }

    pub(crate) fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub(crate) fn first_unstable_offset(&self) -> Option<i64> {
        let open = self.open.keys().next().copied();
        let unrep = self.unreplicated.iter().map(|t| t.first_offset).min();
        match (open, unrep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn last_stable_offset(&self) -> i64 {
        self.first_unstable_offset()
            .map_or(self.high_watermark, |f| f.min(self.high_watermark))
    }

    pub(crate) fn open_count(&self) -> usize {
        self.open.len()
    }

    pub(crate) fn open_txns(&self) -> impl Iterator<Item = (i64, ProducerId)> + '_ {
        self.open.iter().map(|(&o, &p)| (o, p))
    }

    /// Aborted transactions overlapping the fetched offsets `range` (`lastOffset >= start &&
    /// firstOffset < end`, as `TransactionIndex.collectAbortedTxns`), ordered by marker offset.
    pub(crate) fn aborted_overlapping(&self, range: Range<i64>) -> Vec<AbortedTxn> {
        if range.start >= range.end {
            return Vec::new();
        }
        let from = self
            .aborted
            .partition_point(|t| t.last_offset < range.start);
        let stop = range.end.saturating_add(self.max_aborted_span);
        self.aborted[from..]
            .iter()
            .take_while(|t| t.last_offset <= stop)
            .filter(|t| t.first_offset < range.end)
            .copied()
            .collect()
    }

    pub(crate) fn aborted_len(&self) -> usize {
        self.aborted.len()
    }

    /// Drops aborted transactions wholly below `log_start_offset` (retention).
    pub(crate) fn truncate_before(&mut self, log_start_offset: i64) {
        let cut = self
            .aborted
            .partition_point(|t| t.last_offset < log_start_offset);
        self.aborted.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(pid: i64, first: i64, marker: i64, result: TxnResult) -> CompletedTxn {
        CompletedTxn {
            producer_id: ProducerId(pid),
            first_offset: first,
            marker_offset: marker,
            result,
        }
    }

    #[test]
    fn aborted_ranges_overlap_like_kafkas_txn_index() {
        let mut ix = TxnIndex::default();
        ix.set_high_watermark(1000);
        for (pid, first, marker) in [(1, 0, 5), (2, 3, 9), (3, 20, 30)] {
            ix.open(first, ProducerId(pid));
            ix.complete(done(pid, first, marker, TxnResult::Abort));
        }
        let pids = |ix: &TxnIndex, r: Range<i64>| -> Vec<i64> {
            ix.aborted_overlapping(r)
                .iter()
                .map(|t| t.producer_id.0)
                .collect()
        };
        assert_eq!(pids(&ix, 0..1), vec![1]);
        assert_eq!(pids(&ix, 5..6), vec![1, 2]);
        assert_eq!(pids(&ix, 6..20), vec![2]);
        assert_eq!(pids(&ix, 6..21), vec![2, 3]);
        assert_eq!(pids(&ix, 10..20), Vec::<i64>::new());
        assert_eq!(pids(&ix, 31..100), Vec::<i64>::new());
        assert_eq!(pids(&ix, 7..7), Vec::<i64>::new());
        ix.truncate_before(6);
        assert_eq!(pids(&ix, 0..100), vec![2, 3]);
    }

    #[test]
    fn a_long_aborted_transaction_is_found_behind_many_short_ones() {
        let mut ix = TxnIndex::default();
        ix.set_high_watermark(10_000);
        ix.open(0, ProducerId(1));
        for i in 0..50 {
            let first = 10 + i * 10;
            ix.open(first, ProducerId(100 + i));
            ix.complete(done(100 + i, first, first + 2, TxnResult::Abort));
        }
        ix.complete(done(1, 0, 5_000, TxnResult::Abort));
        let got = ix.aborted_overlapping(0..5);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].producer_id, ProducerId(1));
        assert_eq!(ix.aborted_overlapping(4_000..4_001).len(), 1);
        assert_eq!(ix.aborted_overlapping(10..21).len(), 3);
    }

    #[test]
    fn lso_waits_for_open_and_unreplicated_transactions() {
        let mut ix = TxnIndex::default();
        ix.set_high_watermark(10);
        assert_eq!(ix.last_stable_offset(), 10);
        ix.open(4, ProducerId(1));
        ix.open(7, ProducerId(2));
        assert_eq!(ix.last_stable_offset(), 4);
        ix.complete(done(1, 4, 12, TxnResult::Commit));
        // marker at 12 is above the high watermark: still unstable
        assert_eq!(ix.last_stable_offset(), 4);
        ix.set_high_watermark(13);
        assert_eq!(ix.last_stable_offset(), 7);
        ix.complete(done(2, 7, 13, TxnResult::Abort));
        assert_eq!(ix.last_stable_offset(), 7);
        ix.set_high_watermark(14);
        assert_eq!(ix.last_stable_offset(), 14);
    }
}
