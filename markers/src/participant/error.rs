//! Typed errors of the participant. Each rejection a client or coordinator can cause maps to
//! the Kafka error code a real broker would send (`code()`); `Display` texts may change.

use kafka_protocol::ResponseError;
use txn_log::{CoordinatorEpoch, ErrorCode, ProducerEpoch, ProducerId};

use super::TxnVersion;

/// Why a produce batch was rejected by [`PartitionState::check_batch`](super::PartitionState::check_batch).
///
/// Put [`ProduceError::code`] in the partition's `ProduceResponse` error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    /// The batch header is malformed for its kind (for example a transactional batch without a
    /// producer id, a negative sequence from an idempotent producer, or a control batch sent by
    /// a client). `INVALID_RECORD` (87).
    #[error("invalid record batch: {reason}")]
    InvalidRecord {
        /// What is wrong.
        reason: &'static str,
    },
    /// The batch's producer epoch is older than the partition's current epoch for the producer:
    /// a zombie. `INVALID_PRODUCER_EPOCH` (47), as Kafka ≥ 2.7 answers on the produce path for
    /// both idempotent and transactional producers (`PRODUCER_FENCED` (90) is the coordinator's code).
    #[error(
        "producer {producer_id} epoch {batch_epoch} is older than the current epoch {current_epoch}"
    )]
    InvalidProducerEpoch {
        /// The producer.
        producer_id: ProducerId,
        /// Epoch in the batch.
        batch_epoch: ProducerEpoch,
        /// Epoch the partition knows.
        current_epoch: ProducerEpoch,
    },
    /// The batch's first sequence is not the successor of the last one appended (a gap, or a
    /// retry that fell out of the 5-batch window), or a new epoch does not start at 0.
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER` (45).
    #[error(
        "producer {producer_id} epoch {epoch}: sequence {base_sequence} out of order (expected {expected})"
    )]
    OutOfOrderSequence {
        /// The producer.
        producer_id: ProducerId,
        /// Epoch in the batch.
        epoch: ProducerEpoch,
        /// First sequence of the batch.
        base_sequence: i32,
        /// The sequence the partition expected.
        expected: i32,
    },
    /// A non-transactional batch arrived while the producer has a transaction open on this
    /// partition. `INVALID_TXN_STATE` (48).
    #[error(
        "producer {producer_id} sent a non-transactional batch inside its open transaction (first offset {txn_first_offset})"
    )]
    InvalidTxnState {
        /// The producer.
        producer_id: ProducerId,
        /// First offset of the open transaction.
        txn_first_offset: i64,
    },
    /// Only with [`UnknownProducerPolicy::RequireSequenceZero`](super::UnknownProducerPolicy):
    /// the partition has no state for the producer and the batch does not start at sequence 0.
    /// `UNKNOWN_PRODUCER_ID` (59), as Kafka < 2.5 answered; KIP-360 clients bump their epoch.
    #[error("no state for producer {producer_id}; first sequence {base_sequence} is not 0")]
    UnknownProducerId {
        /// The producer.
        producer_id: ProducerId,
        /// First sequence of the batch.
        base_sequence: i32,
    },
    /// KIP-890 part 1, with transaction verification on: a transactional batch would open
    /// its producer's transaction on this partition without a current verification guard
    /// (never verified, or the guard went stale: a marker or another transactional append of
    /// the producer cleared it, or a newer epoch's verification replaced it).
    /// `INVALID_TXN_STATE` (48), Kafka's "Record was not part of an ongoing transaction".
    #[error(
        "producer {producer_id} epoch {producer_epoch}: transactional batch not verified to be in an ongoing transaction{}",
        if *stale { " (stale verification guard)" } else { "" }
    )]
    NotVerified {
        /// The producer.
        producer_id: ProducerId,
        /// Epoch of the batch.
        producer_epoch: ProducerEpoch,
        /// Whether a guard was given but is not the current one.
        stale: bool,
    },
}

impl ProduceError {
    /// The Kafka error code for the partition's response (`.code()` of it is the `int16`).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidRecord { .. } => ErrorCode::INVALID_RECORD,
            Self::InvalidProducerEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH,
            Self::OutOfOrderSequence { .. } => ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
            Self::InvalidTxnState { .. } | Self::NotVerified { .. } => ErrorCode::INVALID_TXN_STATE,
            Self::UnknownProducerId { .. } => ErrorCode::UNKNOWN_PRODUCER_ID,
        }
    }

    /// The same code as kafka-protocol's error type, for a broker built on kafka-protocol.
    pub fn response_error(&self) -> ResponseError {
        response_error(self.code())
    }
}

/// kafka-protocol's error for a non-zero code.
fn response_error(code: ErrorCode) -> ResponseError {
    ResponseError::try_from_code(code.code()).unwrap_or(ResponseError::UnknownServerError)
}

impl From<&ProduceError> for ErrorCode {
    fn from(e: &ProduceError) -> Self {
        e.code()
    }
}

/// Why a transaction marker was rejected by [`PartitionState::check_marker`](super::PartitionState::check_marker).
///
/// Put [`MarkerError::code`] in the partition's `WriteTxnMarkersResponse` error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MarkerError {
    /// The marker's producer id or epoch is not a real one (`-1`). `INVALID_REQUEST` (42).
    #[error("invalid marker: {reason}")]
    InvalidMarker {
        /// What is wrong.
        reason: &'static str,
    },
    /// The marker's producer epoch fails the epoch rule: under TV0/TV1 it is older than the
    /// current epoch; under TV2 it is not newer than the current epoch while a transaction is
    /// open (or older with none open). `INVALID_PRODUCER_EPOCH` (47).
    #[error(
        "marker for producer {producer_id} with epoch {marker_epoch} ({txn_version}) rejected: current epoch {current_epoch}, transaction open: {txn_open}"
    )]
    InvalidProducerEpoch {
        /// The producer.
        producer_id: ProducerId,
        /// Epoch in the marker.
        marker_epoch: ProducerEpoch,
        /// Epoch the partition knows.
        current_epoch: ProducerEpoch,
        /// Whether the producer has a transaction open on this partition.
        txn_open: bool,
        /// The marker's transaction version.
        txn_version: TxnVersion,
    },
    /// The marker comes from an older coordinator than the last marker for this producer (a
    /// zombie coordinator). `TRANSACTION_COORDINATOR_FENCED` (52).
    #[error(
        "marker for producer {producer_id} from coordinator epoch {marker_coordinator_epoch} is older than {current_coordinator_epoch}"
    )]
    CoordinatorFenced {
        /// The producer.
        producer_id: ProducerId,
        /// Coordinator epoch in the marker.
        marker_coordinator_epoch: CoordinatorEpoch,
        /// Coordinator epoch of the last marker applied for the producer.
        current_coordinator_epoch: CoordinatorEpoch,
    },
}

impl MarkerError {
    /// The Kafka error code for the partition's `WriteTxnMarkers` result.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidMarker { .. } => ErrorCode::INVALID_REQUEST,
            Self::InvalidProducerEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH,
            Self::CoordinatorFenced { .. } => ErrorCode::TRANSACTION_COORDINATOR_FENCED,
        }
    }

    /// The same code as kafka-protocol's error type, for a broker built on kafka-protocol.
    pub fn response_error(&self) -> ResponseError {
        response_error(self.code())
    }
}

impl From<&MarkerError> for ErrorCode {
    fn from(e: &MarkerError) -> Self {
        e.code()
    }
}

/// A broker-side contract violation when recording an append (`complete_*`) or replaying a
/// batch: the state was left unchanged. These are bugs or corrupt logs, not client errors; a
/// broker that sees one after it already appended should rebuild the state by replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The batch's offsets lie below the end of the log the state has already seen.
    #[error(
        "batch at offset {base_offset} is behind the log end {next_offset} known to the producer state"
    )]
    OffsetBehindLog {
        /// Base offset given.
        base_offset: i64,
        /// The next offset the state expected (at least).
        next_offset: i64,
    },
    /// The batch's offsets do not form a valid range (negative offset or overflow).
    #[error("invalid offset range: base {base_offset}, last offset delta {last_offset_delta}")]
    InvalidOffsets {
        /// Base offset given.
        base_offset: i64,
        /// Last offset delta of the batch.
        last_offset_delta: i32,
    },
    /// The decision was taken against a different state (another batch or marker of the same
    /// producer was recorded in between): the batch is no longer acceptable. Hold the
    /// partition's lock from `check_*` to `complete_*`.
    #[error("stale produce decision: {0}")]
    StaleBatch(ProduceError),
    /// As [`AppendError::StaleBatch`], for a marker.
    #[error("stale marker decision: {0}")]
    StaleMarker(MarkerError),
    /// As [`AppendError::StaleBatch`], where the batch became a duplicate.
    #[error("stale produce decision: the batch is now a duplicate at offset {base_offset}")]
    StaleDuplicate {
        /// Offset of the earlier copy.
        base_offset: i64,
    },
    /// The batch header itself is invalid (replay of a corrupt log).
    #[error("invalid batch in log: {0}")]
    InvalidBatch(ProduceError),
}

impl AppendError {
    /// The Kafka error to answer with if a response is still owed (`UNKNOWN_SERVER_ERROR`, -1:
    /// these are broker bugs).
    pub fn response_error(&self) -> ResponseError {
        ResponseError::UnknownServerError
    }
}

/// Why bytes could not be read as a v2 record batch or a control batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchParseError {
    /// Fewer bytes than a batch header or than the batch length announces.
    #[error("truncated record batch: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// Not a v2 record batch (magic byte).
    #[error("unsupported record batch magic {magic}")]
    UnsupportedMagic {
        /// The magic byte found.
        magic: i8,
    },
    /// The batch failed its checksum or does not decode.
    #[error("corrupt record batch: {reason}")]
    Corrupt {
        /// What the decoder reported.
        reason: String,
    },
    /// A control batch whose records are not a single well-formed control record.
    #[error("malformed control record: {reason}")]
    MalformedControlRecord {
        /// What is wrong.
        reason: &'static str,
    },
}

impl BatchParseError {
    /// The Kafka error for a produce request carrying such bytes (`CORRUPT_MESSAGE`, 2).
    pub fn response_error(&self) -> ResponseError {
        ResponseError::CorruptMessage
    }
}

/// Why a record batch (control or data) could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The encoder failed (it reports why).
    #[error("could not encode record batch: {reason}")]
    Encoder {
        /// The encoder's message.
        reason: String,
    },
}

/// Why [`PartitionState::replay_log`](super::PartitionState::replay_log) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The log bytes do not parse.
    #[error(transparent)]
    Parse(#[from] BatchParseError),
    /// A batch is inconsistent with the ones before it.
    #[error(transparent)]
    Append(#[from] AppendError),
}
