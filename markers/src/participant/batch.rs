//! The batch header the producer state needs, and reading it from Kafka's RecordBatch v2 bytes.
//!
//! A v2 batch starts with a fixed 61-byte header (`DefaultRecordBatch`):
//!
//! ```text
//! 0  baseOffset int64        8  batchLength int32      12 partitionLeaderEpoch int32
//! 16 magic int8 (2)          17 crc uint32 (crc32c of bytes 21..)
//! 21 attributes int16        23 lastOffsetDelta int32  27 baseTimestamp int64
//! 35 maxTimestamp int64      43 producerId int64       51 producerEpoch int16
//! 53 baseSequence int32      57 recordCount int32      61 records...
//! ```
//!
//! The checksum and the standard fields are verified by `kafka_protocol`'s
//! `RecordBatchDecoder::decode_batch_info`; the two fields it does not report
//! (`lastOffsetDelta`, `maxTimestamp`) are read from their fixed positions.

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use txn_log::{ProducerEpoch, ProducerId};

use super::control::{ControlRecord, parse_control_record};
use super::error::BatchParseError;
use super::producer::increment_sequence;

/// Size of the fixed v2 batch header.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before the `batchLength` field's payload (`baseOffset` + `batchLength`).
const LOG_OVERHEAD: usize = 12;

/// The header fields of one record batch that producer state depends on.
///
/// The same type describes a batch a client sends (`check_batch`; `base_offset` is then the
/// client's value, usually 0, and is ignored) and a batch read back from the log (`replay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record (as stored; the broker assigns it on append).
    pub base_offset: i64,
    /// `lastOffset - baseOffset`; `record_count - 1` for a batch that was never compacted.
    pub last_offset_delta: i32,
    /// Producer id, or [`ProducerId::NONE`] for a plain (non-idempotent) producer.
    pub producer_id: ProducerId,
    /// Producer epoch, or [`ProducerEpoch::NONE`].
    pub producer_epoch: ProducerEpoch,
    /// Sequence of the first record (`-1` without a producer id).
    pub base_sequence: i32,
    /// Number of records in the batch.
    pub record_count: i32,
    /// The transactional attribute bit.
    pub is_transactional: bool,
    /// The control attribute bit.
    pub is_control: bool,
    /// Largest record timestamp (ms); the producer's "last seen" time for expiry.
    pub max_timestamp_ms: i64,
    /// The partition leader epoch stamped on append.
    pub partition_leader_epoch: i32,
}

impl BatchHeader {
    /// A batch from an idempotent (non-transactional) producer with `record_count` records.
    ///
    /// ```
    /// use markers::participant::BatchHeader;
    /// use txn_log::{ProducerEpoch, ProducerId};
    /// let b = BatchHeader::idempotent(ProducerId(7), ProducerEpoch(0), 10, 5);
    /// assert_eq!(b.last_sequence(), 14);
    /// ```
    pub fn idempotent(
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        base_sequence: i32,
        record_count: i32,
    ) -> Self {
        Self {
            base_offset: 0,
            last_offset_delta: record_count.saturating_sub(1),
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
            is_transactional: false,
            is_control: false,
            max_timestamp_ms: -1,
            partition_leader_epoch: -1,
        }
    }

    /// A batch from a transactional producer with `record_count` records.
    pub fn transactional(
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        base_sequence: i32,
        record_count: i32,
    ) -> Self {
        Self {
            is_transactional: true,
            ..Self::idempotent(producer_id, producer_epoch, base_sequence, record_count)
        }
    }

    /// A batch from a plain producer (no producer id, no sequence).
    pub fn plain(record_count: i32) -> Self {
        Self::idempotent(ProducerId::NONE, ProducerEpoch::NONE, -1, record_count)
    }

    /// Returns the header with `max_timestamp_ms` set.
    pub fn with_max_timestamp_ms(mut self, max_timestamp_ms: i64) -> Self {
        self.max_timestamp_ms = max_timestamp_ms;
        self
    }

    /// Returns the header with `base_offset` set.
    pub fn at_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    /// Sequence of the last record: `base_sequence + last_offset_delta`, wrapping past
    /// `i32::MAX` to 0 as Kafka's `DefaultRecordBatch.incrementSequence`.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta.max(0))
    }

    /// Offset of the last record as stored (`base_offset + last_offset_delta`).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// Whether the batch carries a producer id (idempotent or transactional producer).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id.is_some()
    }

    /// Reads the header of the first batch in `bytes` (checksum verified) and returns it with
    /// the batch's total length in bytes.
    pub fn parse(bytes: &Bytes) -> Result<(Self, usize), BatchParseError> {
        let len = batch_len(bytes)?;
        let mut one = bytes.slice(..len);
        let info = RecordBatchDecoder::decode_batch_info(&mut one).map_err(|e| {
            BatchParseError::Corrupt {
                reason: e.to_string(),
            }
        })?;
        let Some(info) = info.into_iter().next() else {
            return Err(BatchParseError::Corrupt {
                reason: "no batch decoded".into(),
            });
        };
        let last_offset_delta = read_i32(bytes, 23);
        let max_timestamp_ms = read_i64(bytes, 35);
        Ok((
            Self {
                base_offset: info.min_offset,
                last_offset_delta,
                producer_id: ProducerId(info.producer_id),
                producer_epoch: ProducerEpoch(info.producer_epoch),
                base_sequence: info.base_sequence,
                record_count: info.record_count,
                is_transactional: info.transactional,
                is_control: info.control,
                max_timestamp_ms,
                partition_leader_epoch: info.partition_leader_epoch,
            },
            len,
        ))
    }
}

/// Total length of the first batch in `bytes`, with the magic byte checked.
fn batch_len(bytes: &[u8]) -> Result<usize, BatchParseError> {
    if bytes.len() < BATCH_HEADER_LEN {
        return Err(BatchParseError::Truncated {
            needed: BATCH_HEADER_LEN,
            available: bytes.len(),
        });
    }
    let magic = i8::from_be_bytes([bytes[16]]);
    if magic != 2 {
        return Err(BatchParseError::UnsupportedMagic { magic });
    }
    let announced = read_i32(bytes, 8);
    let Ok(announced) = usize::try_from(announced) else {
        return Err(BatchParseError::Corrupt {
            reason: format!("negative batch length {announced}"),
        });
    };
    let len = LOG_OVERHEAD.saturating_add(announced);
    if len < BATCH_HEADER_LEN {
        return Err(BatchParseError::Corrupt {
            reason: format!("batch length {announced} shorter than the header"),
        });
    }
    if bytes.len() < len {
        return Err(BatchParseError::Truncated {
            needed: len,
            available: bytes.len(),
        });
    }
    Ok(len)
}

fn read_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn read_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// One batch of a partition's log, as [`PartitionState::replay`](super::PartitionState::replay) consumes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogBatch {
    /// A data batch.
    Data(BatchHeader),
    /// A control batch and its (single) control record.
    Control {
        /// The batch header (`is_control` is set).
        header: BatchHeader,
        /// The control record.
        record: ControlRecord,
    },
}

impl LogBatch {
    /// The batch header.
    pub fn header(&self) -> &BatchHeader {
        match self {
            Self::Data(h) | Self::Control { header: h, .. } => h,
        }
    }

    /// Reads every batch in `log` (concatenated v2 batches, as stored in a segment or returned
    /// by Fetch), decoding the record of control batches. Stops at the first error.
    ///
    /// ```
    /// use markers::participant::{ControlBatch, LogBatch, ControlRecord};
    /// use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};
    /// let bytes = ControlBatch {
    ///     producer_id: ProducerId(1), producer_epoch: ProducerEpoch(0),
    ///     coordinator_epoch: CoordinatorEpoch(3), result: TxnResult::Commit,
    ///     base_offset: 10, partition_leader_epoch: 0, timestamp_ms: 0,
    /// }.encode().unwrap();
    /// let batches: Vec<_> = LogBatch::read_all(bytes).collect::<Result<_, _>>().unwrap();
    /// assert!(matches!(batches[0], LogBatch::Control { record: ControlRecord::EndTxn { .. }, .. }));
    /// ```
    pub fn read_all(log: Bytes) -> LogBatches {
        LogBatches {
            rest: log,
            failed: false,
        }
    }

    /// Reads the first batch of `bytes`; returns it and its length in bytes.
    pub fn read_one(bytes: &Bytes) -> Result<(Self, usize), BatchParseError> {
        let (header, len) = BatchHeader::parse(bytes)?;
        if !header.is_control {
            return Ok((Self::Data(header), len));
        }
        let record = parse_control_record(&bytes.slice(..len))?;
        Ok((Self::Control { header, record }, len))
    }
}

/// Iterator over the batches of a log buffer; see [`LogBatch::read_all`].
#[derive(Debug, Clone)]
pub struct LogBatches {
    rest: Bytes,
    failed: bool,
}

impl Iterator for LogBatches {
    type Item = Result<LogBatch, BatchParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match LogBatch::read_one(&self.rest) {
            Ok((batch, len)) => {
                let _ = self.rest.split_to(len);
                Some(Ok(batch))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
