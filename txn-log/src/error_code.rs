//! Kafka error codes as data (`Errors.java`): the one error-code type of the workspace.
//!
//! The coordinator answers with it, the participant's typed errors
//! (`markers::participant::ProduceError::code`, `MarkerError::code`), the in-process marker
//! path (`markers::apply::ApplyError::code`), the marker writer's error handling and
//! transaction verification's verdicts (`markers::verify::Verdict::produce_code`) return it.
//! On the wire it is the `int16`: [`ErrorCode::code`], `i16::from`, and `ErrorCode::from(i16)`
//! (every `int16` converts, known or not). Error codes travel inside responses; they are never
//! Rust `Err`s. `Display` texts may change; match on the code.

use std::fmt;

use crate::LogError;

/// A Kafka wire error code (`int16`), with Kafka's names as associated constants.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ErrorCode(pub i16);

macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident = $code:expr, retriable: $retriable:expr;)*) => {
        impl ErrorCode {
            $($(#[$doc])* pub const $name: Self = Self($code);)*

            /// Every code this table names, in table order.
            pub const KNOWN: &'static [ErrorCode] = &[$(Self::$name,)*];

            /// Kafka's name of the code (`Errors.name()`), or `None` if this table does not know it.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($code => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// Whether Kafka's exception for the code is a `RetriableException` (the client
            /// retries the request as it is). `false` for [`ErrorCode::NONE`] and for codes
            /// this table does not know.
            pub fn is_retriable(self) -> bool {
                match self.0 {
                    $($code => $retriable,)*
                    _ => false,
                }
            }
        }
    };
}

error_codes! {
    /// 0: no error.
    NONE = 0, retriable: false;
    /// -1: unexpected server error.
    UNKNOWN_SERVER_ERROR = -1, retriable: false;
    /// 2: corrupt message.
    CORRUPT_MESSAGE = 2, retriable: true;
    /// 3: unknown topic or partition.
    UNKNOWN_TOPIC_OR_PARTITION = 3, retriable: true;
    /// 5: leader not available (a partition between leaders, or a topic being created).
    LEADER_NOT_AVAILABLE = 5, retriable: true;
    /// 6: not leader or follower.
    NOT_LEADER_OR_FOLLOWER = 6, retriable: true;
    /// 7: request timed out.
    REQUEST_TIMED_OUT = 7, retriable: true;
    /// 10: message too large.
    MESSAGE_TOO_LARGE = 10, retriable: false;
    /// 13: network exception.
    NETWORK_EXCEPTION = 13, retriable: true;
    /// 14: the coordinator is loading (or a producer-id block is being fetched).
    COORDINATOR_LOAD_IN_PROGRESS = 14, retriable: true;
    /// 15: the coordinator is not available.
    COORDINATOR_NOT_AVAILABLE = 15, retriable: true;
    /// 16: this is not the coordinator for the key.
    NOT_COORDINATOR = 16, retriable: true;
    /// 18: record list too large.
    RECORD_LIST_TOO_LARGE = 18, retriable: false;
    /// 19: not enough replicas.
    NOT_ENOUGH_REPLICAS = 19, retriable: true;
    /// 20: not enough replicas after append.
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20, retriable: true;
    /// 21: invalid required acks.
    INVALID_REQUIRED_ACKS = 21, retriable: false;
    /// 29: topic authorization failed.
    TOPIC_AUTHORIZATION_FAILED = 29, retriable: false;
    /// 30: group authorization failed.
    GROUP_AUTHORIZATION_FAILED = 30, retriable: false;
    /// 31: cluster authorization failed.
    CLUSTER_AUTHORIZATION_FAILED = 31, retriable: false;
    /// 35: unsupported version.
    UNSUPPORTED_VERSION = 35, retriable: false;
    /// 36: topic already exists (CreateTopics).
    TOPIC_ALREADY_EXISTS = 36, retriable: false;
    /// 42: invalid request.
    INVALID_REQUEST = 42, retriable: false;
    /// 43: unsupported for message format.
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43, retriable: false;
    /// 45: out-of-order sequence number (the participant's sequence check).
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45, retriable: false;
    /// 46: duplicate sequence number.
    DUPLICATE_SEQUENCE_NUMBER = 46, retriable: false;
    /// 47: invalid producer epoch.
    INVALID_PRODUCER_EPOCH = 47, retriable: false;
    /// 48: invalid transaction state.
    INVALID_TXN_STATE = 48, retriable: false;
    /// 49: invalid producer id mapping.
    INVALID_PRODUCER_ID_MAPPING = 49, retriable: false;
    /// 50: invalid transaction timeout.
    INVALID_TRANSACTION_TIMEOUT = 50, retriable: false;
    /// 51: concurrent transactions (the client retries it by its own rule, not as a
    /// `RetriableException`).
    CONCURRENT_TRANSACTIONS = 51, retriable: false;
    /// 52: transaction coordinator fenced.
    TRANSACTION_COORDINATOR_FENCED = 52, retriable: false;
    /// 53: transactional id authorization failed.
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53, retriable: false;
    /// 55: operation not attempted.
    OPERATION_NOT_ATTEMPTED = 55, retriable: false;
    /// 56: storage error.
    KAFKA_STORAGE_ERROR = 56, retriable: true;
    /// 59: unknown producer id.
    UNKNOWN_PRODUCER_ID = 59, retriable: false;
    /// 87: invalid record (the batch failed the broker's validation).
    INVALID_RECORD = 87, retriable: false;
    /// 88: unstable offset commit (OffsetFetch with `RequireStable` while a transactional
    /// offset commit of the group is pending, KIP-447).
    UNSTABLE_OFFSET_COMMIT = 88, retriable: true;
    /// 90: producer fenced (KIP-588).
    PRODUCER_FENCED = 90, retriable: false;
    /// 105: transactional id not found.
    TRANSACTIONAL_ID_NOT_FOUND = 105, retriable: false;
    /// 120: transaction abortable (KIP-890).
    TRANSACTION_ABORTABLE = 120, retriable: false;
    /// 128: invalid regular expression (ListTransactions v2 `TransactionalIdPattern`).
    INVALID_REGULAR_EXPRESSION = 128, retriable: false;
}

impl ErrorCode {
    /// The `int16` Kafka puts on the wire.
    pub const fn code(self) -> i16 {
        self.0
    }

    /// Whether Kafka's transactional producer sends the request again after its back-off: a
    /// [`ErrorCode::is_retriable`] code, or CONCURRENT_TRANSACTIONS, which its
    /// `TransactionManager` retries by its own rule. The workspace's test and benchmark
    /// clients retry exactly these.
    pub fn is_retried_by_producer(self) -> bool {
        self.is_retriable() || self == Self::CONCURRENT_TRANSACTIONS
    }

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

impl From<i16> for ErrorCode {
    fn from(code: i16) -> Self {
        Self(code)
    }
}

impl From<ErrorCode> for i16 {
    fn from(code: ErrorCode) -> Self {
        code.0
    }
}

impl PartialEq<i16> for ErrorCode {
    fn eq(&self, other: &i16) -> bool {
        self.0 == *other
    }
}

impl PartialEq<ErrorCode> for i16 {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == other.0
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

    #[test]
    fn wire_conversion_keeps_every_int16() {
        for raw in [i16::MIN, -2, -1, 0, 1, 45, 87, 120, 999, i16::MAX] {
            let code = ErrorCode::from(raw);
            assert_eq!(code.code(), raw);
            assert_eq!(i16::from(code), raw);
            assert_eq!(code, raw);
        }
        assert_eq!(ErrorCode::default(), ErrorCode::NONE);
        assert_eq!(format!("{}", ErrorCode(48)), "INVALID_TXN_STATE(48)");
        assert_eq!(format!("{:?}", ErrorCode(999)), "ErrorCode(999)");
        assert!(!ErrorCode(999).is_retriable() && ErrorCode(999).name().is_none());
    }

    #[test]
    fn table_names_each_code_once() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::KNOWN {
            assert!(seen.insert(code.0), "{code} twice");
            assert!(code.name().is_some());
        }
        assert!(ErrorCode::NOT_ENOUGH_REPLICAS.is_retriable());
        assert!(!ErrorCode::INVALID_TXN_STATE.is_retriable());
    }
}
