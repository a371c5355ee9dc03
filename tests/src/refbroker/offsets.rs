//! Committed consumer offsets, stored as records of the `__consumer_offsets` partition that
//! leads the group (so they survive restarts and transactional ones follow the markers).
//!
//! Record layout follows Kafka's `OffsetCommitKey` v1 and `OffsetCommitValue` v3:
//!
//! ```text
//! key   = int16 1, string group, string topic, int32 partition
//! value = int16 3, int64 offset, int32 leader_epoch, string metadata, int64 commit_timestamp
//! ```
//!
//! (`string` = int16 length + UTF-8 bytes.) Non-transactional commits take effect when their
//! batch is appended; transactional ones (TxnOffsetCommit) are staged per producer and take
//! effect with that producer's COMMIT marker, or vanish with its ABORT — and, as in Kafka's
//! `GroupMetadata.completePendingTxnOffsetCommit`, a staged offset only replaces a committed
//! one that was written earlier in the log. The staging and that merge rule are the
//! participant library's ([`PendingTxnOffsets`], [`merge_committed`]); this module only owns
//! the record format.

use std::collections::HashMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::records::RecordBatchDecoder;
use markers::participant::{
    DataBatch, OffsetCommitRecord, PendingTxnOffsets, RecordTimestamps, merge_committed,
};
use txn_log::{ProducerEpoch, ProducerId, TxnResult};

/// `(group, topic, partition)`.
pub(crate) type OffsetKey = (String, String, i32);

/// A committed (or staged) offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetValue {
    pub(crate) offset: i64,
    pub(crate) leader_epoch: i32,
    pub(crate) metadata: Option<String>,
    pub(crate) commit_timestamp_ms: i64,
}

fn put_str(b: &mut BytesMut, s: &str) {
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    b.put_i16(len);
    b.put_slice(&s.as_bytes()[..usize::try_from(len).unwrap_or(0)]);
}

fn get_str(b: &mut Bytes) -> Option<Option<String>> {
    if b.remaining() < 2 {
        return None;
    }
    let len = b.get_i16();
    if len < 0 {
        return Some(None);
    }
    let len = usize::try_from(len).ok()?;
    if b.remaining() < len {
        return None;
    }
    let s = b.split_to(len);
    Some(Some(String::from_utf8(s.to_vec()).ok()?))
}

fn encode_key(k: &OffsetKey) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(1);
    put_str(&mut b, &k.0);
    put_str(&mut b, &k.1);
    b.put_i32(k.2);
    b.freeze()
}

fn encode_value(v: &OffsetValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(3);
    b.put_i64(v.offset);
    b.put_i32(v.leader_epoch);
    match &v.metadata {
        Some(m) => put_str(&mut b, m),
        None => b.put_i16(-1),
    }
    b.put_i64(v.commit_timestamp_ms);
    b.freeze()
}

fn decode(key: &Bytes, value: &Bytes) -> Option<(OffsetKey, OffsetValue)> {
    let mut k = key.clone();
    if k.remaining() < 2 || k.get_i16() != 1 {
        return None;
    }
    let group = get_str(&mut k)??;
    let topic = get_str(&mut k)??;
    if k.remaining() < 4 {
        return None;
    }
    let partition = k.get_i32();
    let mut v = value.clone();
    if v.remaining() < 14 || v.get_i16() != 3 {
        return None;
    }
    let offset = v.get_i64();
    let leader_epoch = v.get_i32();
    let metadata = get_str(&mut v)?;
    if v.remaining() < 8 {
        return None;
    }
    let commit_timestamp_ms = v.get_i64();
    Some((
        (group, topic, partition),
        OffsetValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
        },
    ))
}

/// Encodes offset commits as one record batch. With a producer `(id, epoch, base_sequence)` the
/// batch is transactional (TxnOffsetCommit) and goes through the produce checks like any
/// producer's batch (Kafka skips the sequence check for its coordinator's own appends; here
/// the broker continues the producer's sequence on this partition instead).
pub(crate) fn encode_batch(
    entries: &[(OffsetKey, OffsetValue)],
    producer: Option<(ProducerId, ProducerEpoch, i32)>,
    now_ms: i64,
) -> anyhow::Result<Bytes> {
    let (producer_id, producer_epoch, base_sequence) =
        producer.unwrap_or((ProducerId::NONE, ProducerEpoch::NONE, -1));
    let batch = DataBatch {
        producer_id,
        producer_epoch,
        base_sequence,
        transactional: producer.is_some(),
        partition_leader_epoch: 0,
        timestamps: RecordTimestamps::Same(now_ms),
        ..DataBatch::default()
    };
    Ok(batch.encode(
        entries
            .iter()
            .map(|(k, v)| (Some(encode_key(k)), Some(encode_value(v)))),
    )?)
}

/// The offsets held by one `__consumer_offsets` partition.
#[derive(Debug, Default)]
pub(crate) struct OffsetStore {
    committed: HashMap<OffsetKey, OffsetCommitRecord<OffsetValue>>,
    pending: PendingTxnOffsets<OffsetKey, OffsetValue>,
}

impl OffsetStore {
    /// Applies a data batch appended at `base_offset` (live or replayed).
    pub(crate) fn apply_batch(&mut self, batch: &Bytes, base_offset: i64) {
        let mut buf = batch.clone();
        let Ok(set) = RecordBatchDecoder::decode(&mut buf) else {
            tracing::warn!(base_offset, "undecodable batch in an offsets partition");
            return;
        };
        for (i, r) in set.records.iter().enumerate() {
            let (Some(k), Some(v)) = (&r.key, &r.value) else {
                continue;
            };
            let Some((key, value)) = decode(k, v) else {
                continue;
            };
            let record_offset = base_offset + i64::try_from(i).unwrap_or(0);
            if r.transactional {
                self.pending
                    .stage(ProducerId(r.producer_id), key, value, record_offset);
            } else {
                merge_committed(
                    &mut self.committed,
                    [(
                        key,
                        OffsetCommitRecord {
                            value,
                            record_offset,
                        },
                    )],
                );
            }
        }
    }

    /// Applies `producer`'s transaction marker.
    pub(crate) fn complete(&mut self, producer: ProducerId, result: TxnResult) {
        merge_committed(&mut self.committed, self.pending.complete(producer, result));
    }

    /// The committed offset of `key`.
    pub(crate) fn get(&self, key: &OffsetKey) -> Option<&OffsetValue> {
        self.committed.get(key).map(|r| &r.value)
    }

    /// Whether some transaction has staged an offset for `key` (OffsetFetch's
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT then).
    pub(crate) fn has_pending(&self, key: &OffsetKey) -> bool {
        self.pending.has_pending_for_key(key)
    }

    /// Every committed offset of `group`, sorted.
    pub(crate) fn group_offsets(&self, group: &str) -> Vec<(String, i32, OffsetValue)> {
        let mut out: Vec<_> = self
            .committed
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .map(|((_, t, p), r)| (t.clone(), *p, r.value.clone()))
            .collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(offset: i64) -> OffsetValue {
        OffsetValue {
            offset,
            leader_epoch: -1,
            metadata: Some("m".into()),
            commit_timestamp_ms: 5,
        }
    }

    fn key(p: i32) -> OffsetKey {
        ("g".into(), "t".into(), p)
    }

    #[test]
    fn staged_offsets_appear_only_with_the_commit_marker() {
        let mut s = OffsetStore::default();
        let plain = encode_batch(&[(key(0), val(3))], None, 1).unwrap();
        s.apply_batch(&plain, 0);
        assert_eq!(s.get(&key(0)).map(|v| v.offset), Some(3));
        let txn = encode_batch(
            &[(key(0), val(10)), (key(1), val(20))],
            Some((ProducerId(7), ProducerEpoch(0), 0)),
            1,
        )
        .unwrap();
        s.apply_batch(&txn, 1);
        assert_eq!(s.get(&key(0)).map(|v| v.offset), Some(3));
        assert!(s.has_pending(&key(1)));
        s.complete(ProducerId(7), TxnResult::Commit);
        assert_eq!(s.get(&key(0)).map(|v| v.offset), Some(10));
        assert_eq!(s.get(&key(1)).map(|v| v.offset), Some(20));
        assert_eq!(
            s.get(&key(1)).and_then(|v| v.metadata.clone()),
            Some("m".into())
        );

        s.apply_batch(&txn, 3);
        s.complete(ProducerId(7), TxnResult::Abort);
        assert!(!s.has_pending(&key(1)));
        assert_eq!(s.group_offsets("g").len(), 2);
    }

    #[test]
    fn a_later_plain_commit_wins_over_an_earlier_staged_one() {
        let mut s = OffsetStore::default();
        let txn = encode_batch(
            &[(key(0), val(10))],
            Some((ProducerId(1), ProducerEpoch(0), 0)),
            1,
        )
        .unwrap();
        s.apply_batch(&txn, 0);
        s.apply_batch(&encode_batch(&[(key(0), val(99))], None, 1).unwrap(), 1);
        s.complete(ProducerId(1), TxnResult::Commit);
        assert_eq!(s.get(&key(0)).map(|v| v.offset), Some(99));
    }

    #[test]
    fn several_offsets_encode_as_one_batch() {
        for producer in [None, Some((ProducerId(3), ProducerEpoch(1), 7))] {
            let b = encode_batch(
                &[(key(0), val(1)), (key(1), val(2)), (key(2), val(3))],
                producer,
                1,
            )
            .unwrap();
            let (h, len) = markers::participant::BatchHeader::parse(&b).unwrap();
            assert_eq!((len, h.record_count), (b.len(), 3));
            assert_eq!(h.base_sequence, producer.map_or(-1, |p| p.2));
        }
    }

    #[test]
    fn garbage_records_are_skipped_not_fatal() {
        assert!(decode(&Bytes::from_static(&[0, 1, 0x7f]), &Bytes::new()).is_none());
        assert!(decode(&Bytes::new(), &Bytes::new()).is_none());
    }
}
