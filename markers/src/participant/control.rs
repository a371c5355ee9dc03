//! Control batches: the COMMIT/ABORT markers in Kafka's exact on-disk format.
//!
//! A transaction marker is a RecordBatch v2 with the *transactional* (bit 4) and *control*
//! (bit 5) attribute bits, the producer id and epoch, base sequence `-1`, and one record:
//!
//! | part  | bytes | content |
//! |-------|-------|---------|
//! | key   | 4 | `int16` version 0, `int16` type (ABORT 0, COMMIT 1) — `ControlRecordType` |
//! | value | 6 | `int16` version 0, `int32` coordinator epoch — `EndTransactionMarker` |
//!
//! Encoding and decoding go through `kafka_protocol::records`, so the CRC and varint layout
//! are the library's (the same code path clients built on it use).

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};

use super::data_batch::{DataBatch, RecordTimestamps};
use super::error::{BatchParseError, EncodeError};

/// Control record key version written (`ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION`).
pub const CONTROL_KEY_VERSION: i16 = 0;
/// End-transaction marker value version written (`EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION`).
pub const END_TXN_MARKER_VERSION: i16 = 0;
/// Control record type of an ABORT marker.
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record type of a COMMIT marker.
pub const CONTROL_TYPE_COMMIT: i16 = 1;

/// The key bytes of a marker's control record: version 0, then the type.
pub fn control_key_bytes(result: TxnResult) -> [u8; 4] {
    let t = match result {
        TxnResult::Abort => CONTROL_TYPE_ABORT,
        TxnResult::Commit => CONTROL_TYPE_COMMIT,
    };
    let [v0, v1] = CONTROL_KEY_VERSION.to_be_bytes();
    let [t0, t1] = t.to_be_bytes();
    [v0, v1, t0, t1]
}

/// The value bytes of a marker's control record: version 0, then the coordinator epoch.
pub fn end_txn_value_bytes(coordinator_epoch: CoordinatorEpoch) -> [u8; 6] {
    let [v0, v1] = END_TXN_MARKER_VERSION.to_be_bytes();
    let [e0, e1, e2, e3] = coordinator_epoch.0.to_be_bytes();
    [v0, v1, e0, e1, e2, e3]
}

/// The record of a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRecord {
    /// A COMMIT or ABORT transaction marker.
    EndTxn {
        /// Commit or abort.
        result: TxnResult,
        /// Epoch of the coordinator that wrote it.
        coordinator_epoch: CoordinatorEpoch,
    },
    /// Another control record type (KRaft's LEADER_CHANGE 2, SNAPSHOT_HEADER 3, ...): not a
    /// transaction marker; replay skips it.
    Other {
        /// The control record type.
        control_type: i16,
    },
}

/// A transaction marker batch, ready to encode.
///
/// ```
/// use markers::participant::{ControlBatch, ControlRecord};
/// use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};
/// let batch = ControlBatch {
///     producer_id: ProducerId(42), producer_epoch: ProducerEpoch(3),
///     coordinator_epoch: CoordinatorEpoch(7), result: TxnResult::Abort,
///     base_offset: 100, partition_leader_epoch: 5, timestamp_ms: 1_700_000_000_000,
/// };
/// let bytes = batch.encode().unwrap();
/// assert_eq!(ControlBatch::decode(&bytes).unwrap(), batch);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlBatch {
    /// Producer whose transaction ends.
    pub producer_id: ProducerId,
    /// The marker's producer epoch.
    pub producer_epoch: ProducerEpoch,
    /// Epoch of the coordinator that decided.
    pub coordinator_epoch: CoordinatorEpoch,
    /// Commit or abort.
    pub result: TxnResult,
    /// Offset the batch is written at.
    pub base_offset: i64,
    /// Partition leader epoch to stamp (`-1` if unknown; Kafka stamps the leader's epoch).
    pub partition_leader_epoch: i32,
    /// Batch and record timestamp (ms); Kafka uses the broker's clock at append.
    pub timestamp_ms: i64,
}

impl ControlBatch {
    /// Encodes the batch as Kafka's `MemoryRecords.withEndTransactionMarker` does.
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let header = DataBatch {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: -1,
            transactional: true,
            base_offset: self.base_offset,
            partition_leader_epoch: self.partition_leader_epoch,
            timestamps: RecordTimestamps::Same(self.timestamp_ms),
        };
        let key = Bytes::copy_from_slice(&control_key_bytes(self.result));
        let value = Bytes::copy_from_slice(&end_txn_value_bytes(self.coordinator_epoch));
        header.encode_with_control_bit(true, [(Some(key), Some(value))])
    }

    /// Decodes the first batch of `bytes` as a transaction marker batch.
    pub fn decode(bytes: &Bytes) -> Result<Self, BatchParseError> {
        let (header, len) = super::BatchHeader::parse(bytes)?;
        if !header.is_control {
            return Err(BatchParseError::MalformedControlRecord {
                reason: "not a control batch",
            });
        }
        match parse_control_record(&bytes.slice(..len))? {
            ControlRecord::EndTxn {
                result,
                coordinator_epoch,
            } => Ok(Self {
                producer_id: header.producer_id,
                producer_epoch: header.producer_epoch,
                coordinator_epoch,
                result,
                base_offset: header.base_offset,
                partition_leader_epoch: header.partition_leader_epoch,
                timestamp_ms: header.max_timestamp_ms,
            }),
            ControlRecord::Other { .. } => Err(BatchParseError::MalformedControlRecord {
                reason: "control record is not a transaction marker",
            }),
        }
    }
}

/// Encodes a transaction marker batch; shorthand for [`ControlBatch::encode`].
pub fn encode_control_batch(batch: &ControlBatch) -> Result<Bytes, EncodeError> {
    batch.encode()
}

/// Decodes the record of one control batch (`batch` holds exactly that batch).
pub(crate) fn parse_control_record(batch: &Bytes) -> Result<ControlRecord, BatchParseError> {
    let mut buf = batch.clone();
    let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| BatchParseError::Corrupt {
        reason: e.to_string(),
    })?;
    let [record] = set.records.as_slice() else {
        return Err(BatchParseError::MalformedControlRecord {
            reason: "a control batch must hold exactly one record",
        });
    };
    parse_control_key_value(record.key.as_deref(), record.value.as_deref())
}

/// Interprets a control record's key and value (Kafka reads the first 4 key bytes whatever the
/// key version, and the first 6 value bytes of an end-transaction marker).
pub fn parse_control_key_value(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<ControlRecord, BatchParseError> {
    let Some(&[k0, k1, k2, k3, ..]) = key else {
        return Err(BatchParseError::MalformedControlRecord {
            reason: "control record key shorter than 4 bytes",
        });
    };
    if i16::from_be_bytes([k0, k1]) < 0 {
        return Err(BatchParseError::MalformedControlRecord {
            reason: "negative control record key version",
        });
    }
    let result = match i16::from_be_bytes([k2, k3]) {
        CONTROL_TYPE_ABORT => TxnResult::Abort,
        CONTROL_TYPE_COMMIT => TxnResult::Commit,
        other => {
            return Ok(ControlRecord::Other {
                control_type: other,
            });
        }
    };
    let Some(&[v0, v1, e0, e1, e2, e3, ..]) = value else {
        return Err(BatchParseError::MalformedControlRecord {
            reason: "end transaction marker value shorter than 6 bytes",
        });
    };
    if i16::from_be_bytes([v0, v1]) < 0 {
        return Err(BatchParseError::MalformedControlRecord {
            reason: "negative end transaction marker version",
        });
    }
    Ok(ControlRecord::EndTxn {
        result,
        coordinator_epoch: CoordinatorEpoch(i32::from_be_bytes([e0, e1, e2, e3])),
    })
}
