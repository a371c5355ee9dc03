//! Kafka error codes as data (`Errors.java`), and the append-error translation of
//! `TransactionStateManager.appendTransactionToLog`.
//!
//! Error codes travel inside [`crate::Response`]s; they are never Rust `Err`s. `Display` texts
//! may change; match on the code.

use std::fmt;

use txn_log::LogError;

/// A Kafka wire error code (`int16`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorCode(pub i16);

macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident = $code:expr;)*) => {
        impl ErrorCode {
            $($(#[$doc])* pub const $name: Self = Self($code);)*

            /// Kafka's name of the code (`Errors.name()`), or `None` if this table does not know it.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($code => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// 0: no error.
    NONE = 0;
    /// -1: unexpected server error.
    UNKNOWN_SERVER_ERROR = -1;
    /// 2: corrupt message.
    CORRUPT_MESSAGE = 2;
    /// 3: unknown topic or partition.
    UNKNOWN_TOPIC_OR_PARTITION = 3;
    /// 6: not leader or follower.
    NOT_LEADER_OR_FOLLOWER = 6;
    /// 7: request timed out.
    REQUEST_TIMED_OUT = 7;
    /// 10: message too large.
    MESSAGE_TOO_LARGE = 10;
    /// 13: network exception.
    NETWORK_EXCEPTION = 13;
    /// 14: the coordinator is loading (or a producer-id block is being fetched).
    COORDINATOR_LOAD_IN_PROGRESS = 14;
    /// 15: the coordinator is not available.
    COORDINATOR_NOT_AVAILABLE = 15;
    /// 16: this is not the coordinator for the key.
    NOT_COORDINATOR = 16;
    /// 18: record list too large.
    RECORD_LIST_TOO_LARGE = 18;
    /// 19: not enough replicas.
    NOT_ENOUGH_REPLICAS = 19;
    /// 20: not enough replicas after append.
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20;
    /// 21: invalid required acks.
    INVALID_REQUIRED_ACKS = 21;
    /// 29: topic authorization failed.
    TOPIC_AUTHORIZATION_FAILED = 29;
    /// 30: group authorization failed.
    GROUP_AUTHORIZATION_FAILED = 30;
    /// 31: cluster authorization failed.
    CLUSTER_AUTHORIZATION_FAILED = 31;
    /// 35: unsupported version.
    UNSUPPORTED_VERSION = 35;
    /// 42: invalid request.
    INVALID_REQUEST = 42;
    /// 43: unsupported for message format.
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43;
    /// 47: invalid producer epoch.
    INVALID_PRODUCER_EPOCH = 47;
    /// 48: invalid transaction state.
    INVALID_TXN_STATE = 48;
    /// 49: invalid producer id mapping.
    INVALID_PRODUCER_ID_MAPPING = 49;
    /// 50: invalid transaction timeout.
    INVALID_TRANSACTION_TIMEOUT = 50;
    /// 51: concurrent transactions (retry later).
    CONCURRENT_TRANSACTIONS = 51;
    /// 52: transaction coordinator fenced.
    TRANSACTION_COORDINATOR_FENCED = 52;
    /// 53: transactional id authorization failed.
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53;
    /// 55: operation not attempted.
    OPERATION_NOT_ATTEMPTED = 55;
    /// 56: storage error.
    KAFKA_STORAGE_ERROR = 56;
    /// 59: unknown producer id.
    UNKNOWN_PRODUCER_ID = 59;
    /// 90: producer fenced (KIP-588).
    PRODUCER_FENCED = 90;
    /// 105: transactional id not found.
    TRANSACTIONAL_ID_NOT_FOUND = 105;
    /// 120: transaction abortable (KIP-890).
    TRANSACTION_ABORTABLE = 120;
}

impl ErrorCode {
    /// Whether this is [`ErrorCode::NONE`].
    pub fn is_none(self) -> bool {
        self == Self::NONE
    }

    /// Kafka's append-error translation (`TransactionStateManager.appendTransactionToLog`) for a log
    /// that reports Kafka codes.
    pub fn translate_append_error(self) -> Self {
        match self {
            Self::UNKNOWN_TOPIC_OR_PARTITION
            | Self::NOT_ENOUGH_REPLICAS
            | Self::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | Self::REQUEST_TIMED_OUT => Self::COORDINATOR_NOT_AVAILABLE,
            Self::NOT_LEADER_OR_FOLLOWER | Self::KAFKA_STORAGE_ERROR => Self::NOT_COORDINATOR,
            Self::MESSAGE_TOO_LARGE | Self::RECORD_LIST_TOO_LARGE => Self::UNKNOWN_SERVER_ERROR,
            other => other,
        }
    }

    /// The code a client gets when an append failed with `err`.
    ///
    /// `Fenced`/`NotClaimed` (another coordinator owns the partition) and `Poisoned`/`Closed`
    /// (the log accepts nothing more: Kafka's KAFKA_STORAGE_ERROR) give NOT_COORDINATOR, and so
    /// does `Unavailable` (a replicated store without quorum: the outcome is unknown, so the
    /// partition is given up and loaded again); an
    /// I/O error is Kafka's "could not replicate" class (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS)
    /// and gives COORDINATOR_NOT_AVAILABLE; `Corrupt`/`InvalidArgument` are Kafka's
    /// MESSAGE_TOO_LARGE class and give UNKNOWN_SERVER_ERROR.
    pub fn for_append_error(err: &LogError) -> Self {
        match err {
            LogError::Fenced { .. } | LogError::NotClaimed { .. } => Self::NOT_COORDINATOR,
            LogError::Poisoned { .. } | LogError::Closed => {
                Self::KAFKA_STORAGE_ERROR.translate_append_error()
            }
            LogError::Io(_) => Self::REQUEST_TIMED_OUT.translate_append_error(),
            LogError::Unavailable { .. } => Self::NOT_COORDINATOR,
            _ => Self::MESSAGE_TOO_LARGE.translate_append_error(),
        }
    }

    /// Whether an append failing with `err` means this engine no longer owns the partition.
    pub fn append_error_loses_partition(err: &LogError) -> bool {
        matches!(
            err,
            LogError::Fenced { .. }
                | LogError::NotClaimed { .. }
                | LogError::Poisoned { .. }
                | LogError::Closed
                | LogError::Unavailable { .. }
        )
    }

    /// First InitProducerId version whose clients know PRODUCER_FENCED.
    pub const INIT_PRODUCER_ID_FENCED_SINCE: i16 = 4;
    /// First AddPartitionsToTxn, AddOffsetsToTxn and EndTxn version whose clients know
    /// PRODUCER_FENCED.
    pub const TXN_REQUEST_FENCED_SINCE: i16 = 2;

    /// Kafka's mapping for old request versions that predate PRODUCER_FENCED: below
    /// `first_version_with_fenced`, PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH.
    pub fn for_version(self, version: i16, first_version_with_fenced: i16) -> Self {
        if self == Self::PRODUCER_FENCED && version < first_version_with_fenced {
            Self::INVALID_PRODUCER_EPOCH
        } else {
            self
        }
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "ErrorCode({})", self.0),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_error_translation_matches_kafka_table() {
        let cases = [
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ),
            (
                ErrorCode::NOT_ENOUGH_REPLICAS,
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ),
            (
                ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ),
            (
                ErrorCode::REQUEST_TIMED_OUT,
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ),
            (
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                ErrorCode::NOT_COORDINATOR,
            ),
            (ErrorCode::KAFKA_STORAGE_ERROR, ErrorCode::NOT_COORDINATOR),
            (
                ErrorCode::MESSAGE_TOO_LARGE,
                ErrorCode::UNKNOWN_SERVER_ERROR,
            ),
            (
                ErrorCode::RECORD_LIST_TOO_LARGE,
                ErrorCode::UNKNOWN_SERVER_ERROR,
            ),
            (ErrorCode::INVALID_TXN_STATE, ErrorCode::INVALID_TXN_STATE),
        ];
        for (from, to) in cases {
            assert_eq!(from.translate_append_error(), to, "{from}");
        }
    }

    #[test]
    fn old_versions_map_producer_fenced() {
        assert_eq!(
            ErrorCode::PRODUCER_FENCED.for_version(3, 4),
            ErrorCode::INVALID_PRODUCER_EPOCH
        );
        assert_eq!(
            ErrorCode::PRODUCER_FENCED.for_version(4, 4),
            ErrorCode::PRODUCER_FENCED
        );
        assert_eq!(ErrorCode::NONE.for_version(0, 4), ErrorCode::NONE);
        assert_eq!(ErrorCode(90).name(), Some("PRODUCER_FENCED"));
    }
}
