//! Identifier newtypes at Kafka's wire widths.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A client-chosen transactional id (`transactional.id`): a validated, non-empty string.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TransactionalId(String);

/// Why a string is not a valid [`TransactionalId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTransactionalId {
    /// Kafka rejects the empty string (INVALID_REQUEST); a null id is not transactional at all.
    #[error("transactional id must not be empty")]
    Empty,
}

impl TransactionalId {
    /// Validates and wraps `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidTransactionalId> {
        let id = id.into();
        if id.is_empty() {
            return Err(InvalidTransactionalId::Empty);
        }
        Ok(Self(id))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Java's `String.hashCode()` of this id (UTF-16 code units, wrapping `i32` arithmetic).
    pub fn java_hash(&self) -> i32 {
        java_string_hash(&self.0)
    }
}

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's partition for a key: `Utils.abs(hash) % partitions`, where `abs(i32::MIN)` is 0.
pub fn kafka_partition_for(hash: i32, partitions: u32) -> u32 {
    assert!(partitions > 0, "partition count must be positive");
    let abs = if hash == i32::MIN {
        0
    } else {
        hash.unsigned_abs()
    };
    abs % partitions
}

impl TryFrom<String> for TransactionalId {
    type Error = InvalidTransactionalId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<TransactionalId> for String {
    fn from(value: TransactionalId) -> Self {
        value.0
    }
}

impl fmt::Debug for TransactionalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for TransactionalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id_newtype!(
    /// A producer id (`int64` on the wire). `-1` means "none".
    ProducerId(i64)
);
id_newtype!(
    /// A producer epoch (`int16` on the wire). `-1` means "none".
    ProducerEpoch(i16)
);
id_newtype!(
    /// The epoch of the coordinator that owns a log partition; bumped on every ownership change.
    CoordinatorEpoch(i32)
);
id_newtype!(
    /// A partition of the transaction log (Kafka's `__transaction_state-N`).
    LogPartition(u32)
);

impl ProducerId {
    /// "No producer id" (`-1`), as Kafka's `RecordBatch.NO_PRODUCER_ID`.
    pub const NONE: Self = Self(-1);

    /// Whether this is a real producer id.
    pub fn is_some(self) -> bool {
        self.0 >= 0
    }
}

impl ProducerEpoch {
    /// "No producer epoch" (`-1`), as Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
    pub const NONE: Self = Self(-1);
    /// Highest epoch Kafka hands out before it must rotate to a new producer id
    /// (`Short.MAX_VALUE - 1`; one is kept back for the TV2 end-of-transaction bump).
    pub const MAX: Self = Self(i16::MAX - 1);

    /// Whether this is a real epoch.
    pub fn is_some(self) -> bool {
        self.0 >= 0
    }
}

/// A data partition that takes part in a transaction.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from the reference (`abs(javaStringHash(id)) % 50`).
    #[test]
    fn log_partition_vectors_match_kafka() {
        let cases = [
            ("one", 32),
            ("two", 26),
            ("a", 47),
            ("b", 48),
            ("known", 27),
            ("txnId1", 48),
            ("transactional-producer", 8),
            ("polygenelubricants", 0),
        ];
        for (id, want) in cases {
            assert_eq!(kafka_partition_for(java_string_hash(id), 50), want, "{id}");
        }
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn empty_transactional_id_is_rejected() {
        assert_eq!(TransactionalId::new(""), Err(InvalidTransactionalId::Empty));
        assert_eq!(
            TransactionalId::new("x").map(|t| t.to_string()),
            Ok("x".into())
        );
    }
}
