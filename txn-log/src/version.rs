//! [`TxnVersion`]: the transaction version, one type from the coordinator's configuration to
//! the participant's marker rule.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A transaction version (Kafka's `transaction.version` feature, KIP-890): the one type for
/// the coordinator's configured version (`coordinator::Config::transaction_version`), the
/// version a client used for a transaction (`TxnRecord::client_txn_version`), the version of a
/// marker decision (`TxnMarkerRequest::txn_version`) and of a marker a participant applies
/// (`markers::participant::Marker`, WriteTxnMarkers v2 `TransactionVersion`, 0 when v0/v1). It
/// selects the producer epoch rule.
///
/// Persisted as one byte (the record's format is unchanged: the `i8` is that byte's bits).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(from = "u8", into = "u8")]
pub struct TxnVersion(pub i8);

impl TxnVersion {
    /// TV0: the original protocol.
    pub const V0: Self = Self(0);
    /// TV1: flexible transaction log records; same marker rule as TV0.
    pub const V1: Self = Self(1);
    /// TV2 (KIP-890): the epoch is bumped at every transaction end; markers carry the bumped
    /// epoch.
    pub const V2: Self = Self(2);
    /// The highest version this implementation knows.
    pub const MAX: Self = Self::V2;

    /// Whether this version bumps the producer epoch at every transaction end, so that markers
    /// must carry an epoch strictly greater than the data's.
    pub fn bumps_epoch_per_txn(self) -> bool {
        self.0 >= 2
    }

    /// Whether this is a version this implementation knows (0, 1 or 2).
    pub fn is_known(self) -> bool {
        (Self::V0..=Self::MAX).contains(&self)
    }

    /// The version as Kafka's feature level (`ApiVersions`' `transaction.version`).
    pub fn level(self) -> i16 {
        i16::from(self.0)
    }
}

impl From<u8> for TxnVersion {
    /// The persisted byte.
    fn from(byte: u8) -> Self {
        Self(byte.cast_signed())
    }
}

impl From<TxnVersion> for u8 {
    /// The persisted byte.
    fn from(v: TxnVersion) -> Self {
        v.0.cast_unsigned()
    }
}

impl fmt::Display for TxnVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TV{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_persisted_byte_round_trips_and_only_tv2_bumps() {
        for b in 0..=u8::MAX {
            assert_eq!(u8::from(TxnVersion::from(b)), b);
        }
        assert_eq!(TxnVersion::from(2u8), TxnVersion::V2);
        assert!(!TxnVersion::V1.bumps_epoch_per_txn());
        assert!(TxnVersion::V2.bumps_epoch_per_txn());
        assert!(TxnVersion::V0.is_known() && TxnVersion::V2.is_known());
        assert!(!TxnVersion(3).is_known() && !TxnVersion(-1).is_known());
        assert_eq!(TxnVersion::V2.to_string(), "TV2");
        assert_eq!(TxnVersion::V1.level(), 1);
    }
}
