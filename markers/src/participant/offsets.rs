//! Transactional offset commits on a `__consumer_offsets` partition: staged per producer by
//! TxnOffsetCommit, made visible by that producer's COMMIT marker, discarded by ABORT.

use std::collections::HashMap;
use std::hash::Hash;

use txn_log::{ProducerId, TxnResult};

/// An offset commit record and where it sits in the offsets partition's log. When two
/// commits for the same key meet, the one appended later (higher `record_offset`) wins, as
/// Kafka's `GroupMetadata` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRecord<V> {
    /// The committed value (offset, leader epoch, metadata, ...; the broker's type).
    pub value: V,
    /// Log offset of the record in the offsets partition.
    pub record_offset: i64,
}

/// Staged transactional offset commits of one `__consumer_offsets` partition.
///
/// `K` is the broker's key, typically `(group, topic, partition)`; `V` its committed value.
///
/// ```
/// use std::collections::HashMap;
/// use markers::participant::{PendingTxnOffsets, merge_committed};
/// use txn_log::{ProducerId, TxnResult};
///
/// let mut pending = PendingTxnOffsets::new();
/// pending.stage(ProducerId(9), ("g", "t", 0), 42_i64, 100);
/// assert!(pending.has_pending_for_key(&("g", "t", 0)));
/// let mut committed = HashMap::new();
/// // ... the COMMIT marker for producer 9 reached this partition:
/// merge_committed(&mut committed, pending.complete(ProducerId(9), TxnResult::Commit));
/// assert_eq!(committed[&("g", "t", 0)].value, 42);
/// ```
#[derive(Debug, Clone)]
pub struct PendingTxnOffsets<K, V> {
    by_producer: HashMap<ProducerId, HashMap<K, OffsetCommitRecord<V>>>,
}

impl<K, V> Default for PendingTxnOffsets<K, V> {
    fn default() -> Self {
        Self {
            by_producer: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash, V> PendingTxnOffsets<K, V> {
    /// No staged commits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stages a TxnOffsetCommit of `producer_id`, written at `record_offset` (a later commit of
    /// the same key by the same producer replaces the earlier one).
    pub fn stage(&mut self, producer_id: ProducerId, key: K, value: V, record_offset: i64) {
        self.by_producer.entry(producer_id).or_default().insert(
            key,
            OffsetCommitRecord {
                value,
                record_offset,
            },
        );
    }

    /// The producer's marker reached this partition: on COMMIT returns its staged commits to
    /// materialise (see [`merge_committed`]); on ABORT discards them and returns nothing.
    pub fn complete(
        &mut self,
        producer_id: ProducerId,
        result: TxnResult,
    ) -> Vec<(K, OffsetCommitRecord<V>)> {
        let staged = self.by_producer.remove(&producer_id).unwrap_or_default();
        match result {
            TxnResult::Commit => staged.into_iter().collect(),
            TxnResult::Abort => Vec::new(),
        }
    }

    /// Whether `producer_id` has staged commits.
    pub fn has_pending(&self, producer_id: ProducerId) -> bool {
        self.by_producer.contains_key(&producer_id)
    }

    /// Whether any producer has a staged commit for `key` (OffsetFetch with `require_stable`
    /// then answers UNSTABLE_OFFSET_COMMIT).
    pub fn has_pending_for_key(&self, key: &K) -> bool {
        self.by_producer.values().any(|m| m.contains_key(key))
    }

    /// The staged commits of `producer_id`.
    pub fn staged(
        &self,
        producer_id: ProducerId,
    ) -> impl Iterator<Item = (&K, &OffsetCommitRecord<V>)> {
        self.by_producer
            .get(&producer_id)
            .into_iter()
            .flat_map(|m| m.iter())
    }

    /// Number of producers with staged commits.
    pub fn producer_count(&self) -> usize {
        self.by_producer.len()
    }
}

/// Materialises committed records into `committed`, keeping for each key the record appended
/// last (a plain OffsetCommit written after the transactional one is not overwritten by it).
pub fn merge_committed<K: Eq + Hash, V>(
    committed: &mut HashMap<K, OffsetCommitRecord<V>>,
    records: impl IntoIterator<Item = (K, OffsetCommitRecord<V>)>,
) {
    for (key, record) in records {
        match committed.get(&key) {
            Some(existing) if existing.record_offset > record.record_offset => {}
            _ => {
                committed.insert(key, record);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_makes_staged_offsets_visible_and_abort_discards_them() {
        let mut p = PendingTxnOffsets::new();
        p.stage(ProducerId(1), "a", 10, 5);
        p.stage(ProducerId(1), "a", 11, 6);
        p.stage(ProducerId(2), "a", 99, 7);
        p.stage(ProducerId(2), "b", 98, 8);
        assert!(p.has_pending_for_key(&"b"));
        assert_eq!(p.staged(ProducerId(1)).count(), 1);
        let mut committed = HashMap::new();
        merge_committed(&mut committed, p.complete(ProducerId(2), TxnResult::Abort));
        assert!(committed.is_empty());
        assert!(!p.has_pending_for_key(&"b"));
        merge_committed(&mut committed, p.complete(ProducerId(1), TxnResult::Commit));
        assert_eq!(committed[&"a"].value, 11);
        assert_eq!(p.producer_count(), 0);
        assert!(p.complete(ProducerId(1), TxnResult::Commit).is_empty());
    }

    #[test]
    fn a_later_plain_commit_wins_over_an_earlier_transactional_one() {
        let mut committed = HashMap::new();
        merge_committed(
            &mut committed,
            [(
                "k",
                OffsetCommitRecord {
                    value: 2,
                    record_offset: 20,
                },
            )],
        );
        let mut p = PendingTxnOffsets::new();
        p.stage(ProducerId(1), "k", 1, 10);
        merge_committed(&mut committed, p.complete(ProducerId(1), TxnResult::Commit));
        assert_eq!(committed[&"k"].value, 2);
    }
}
