//! Data batches as a producer writes them: a RecordBatch v2 of key/value records, encoded
//! through `kafka_protocol::records` (as [`ControlBatch`](super::ControlBatch) is, with the
//! control bit). The refbroker's offset commits, the test clients, the benchmark producer and
//! the fuzz seeds build their batches here.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use txn_log::{ProducerEpoch, ProducerId};

use super::error::EncodeError;

/// The timestamps of a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordTimestamps {
    /// Every record carries this time (ms), as a producer stamping a batch at send.
    Same(i64),
    /// Record `i` carries this time (ms) plus `i`.
    Ascending(i64),
}

/// The batch-level fields of a data batch; the defaults are a plain (non-idempotent)
/// producer's batch at offset 0: no producer id, epoch or sequence, leader epoch `-1`, every
/// record stamped 0.
///
/// ```
/// use bytes::Bytes;
/// use markers::participant::{BatchHeader, DataBatch, RecordTimestamps};
/// use txn_log::{ProducerEpoch, ProducerId};
/// let bytes = DataBatch {
///     producer_id: ProducerId(7),
///     producer_epoch: ProducerEpoch(1),
///     base_sequence: 10,
///     transactional: true,
///     timestamps: RecordTimestamps::Ascending(1_700_000_000_000),
///     ..DataBatch::default()
/// }
/// .encode([(None, Some(Bytes::from_static(b"a"))), (None, Some(Bytes::from_static(b"b")))])
/// .unwrap();
/// let (header, _) = BatchHeader::parse(&bytes).unwrap();
/// assert_eq!((header.record_count, header.last_sequence()), (2, 11));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataBatch {
    /// Producer id (`-1`: none).
    pub producer_id: ProducerId,
    /// Producer epoch (`-1`: none).
    pub producer_epoch: ProducerEpoch,
    /// Sequence of the first record (`-1`: none).
    pub base_sequence: i32,
    /// The transactional attribute bit.
    pub transactional: bool,
    /// Offset of the first record (a broker rewrites it at append).
    pub base_offset: i64,
    /// Partition leader epoch to stamp (`-1`: unknown, as producers send it).
    pub partition_leader_epoch: i32,
    /// The records' timestamps (create time).
    pub timestamps: RecordTimestamps,
}

impl Default for DataBatch {
    fn default() -> Self {
        Self {
            producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch::NONE,
            base_sequence: -1,
            transactional: false,
            base_offset: 0,
            partition_leader_epoch: -1,
            timestamps: RecordTimestamps::Same(0),
        }
    }
}

impl DataBatch {
    /// Encodes `records` (key, value) as one batch with these fields.
    pub fn encode(
        &self,
        records: impl IntoIterator<Item = (Option<Bytes>, Option<Bytes>)>,
    ) -> Result<Bytes, EncodeError> {
        self.encode_with_control_bit(false, records)
    }

    /// [`DataBatch::encode`] with the control attribute bit set as `control` says (a
    /// transaction marker sets it).
    pub(super) fn encode_with_control_bit(
        &self,
        control: bool,
        records: impl IntoIterator<Item = (Option<Bytes>, Option<Bytes>)>,
    ) -> Result<Bytes, EncodeError> {
        let records: Vec<Record> = (0i32..)
            .zip(records)
            .map(|(i, (key, value))| Record {
                transactional: self.transactional,
                control,
                delete_horizon: false,
                partition_leader_epoch: self.partition_leader_epoch,
                producer_id: self.producer_id.0,
                producer_epoch: self.producer_epoch.0,
                timestamp_type: TimestampType::Creation,
                offset: self.base_offset + i64::from(i),
                // The encoder starts a new batch wherever `offset - sequence` changes (in i32
                // arithmetic): a plain batch (base sequence -1) numbers its records -1, 0,
                // 1, ... to stay one batch; only the base sequence reaches the wire.
                sequence: self.base_sequence.wrapping_add(i),
                timestamp: match self.timestamps {
                    RecordTimestamps::Same(t) => t,
                    RecordTimestamps::Ascending(t) => t + i64::from(i),
                },
                key,
                value,
                headers: IndexMap::new(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).map_err(|e| {
            EncodeError::Encoder {
                reason: e.to_string(),
            }
        })?;
        Ok(buf.freeze())
    }
}
