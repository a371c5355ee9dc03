//! ACL bindings and SCRAM credentials, stored beside the transaction records.
//!
//! A coordinator that authorizes requests keeps Kafka's ACLs and its users' SCRAM credentials
//! in the same store as its transaction log, so every daemon sharing a log in etcd sees the
//! same ones. [`SecurityStore`] is the seam: read everything ([`SecurityStore::load_security`]),
//! apply a list of changes ([`SecurityStore::apply_security`]). [`crate::MemTxnLog`],
//! `SledTxnLog` (its own sled tree, `security`) and `EtcdTxnLog` (keys under
//! `{prefix}/security/`) implement it.
//!
//! # Keys and values
//!
//! ```text
//! security/acl/   ++ hex(bincode(binding))             -> envelope kind b'A', version 1
//! security/scram/ ++ mechanism name ++ '/' ++ user     -> envelope kind b'S', version 1
//! ```
//!
//! The values are the envelopes of [`crate::codec`] (kind, version, length, payload, CRC32C
//! over key and envelope): the payload is bincode of the security crate's serde forms, which
//! carry their own version (`AclBinding`'s record, `ScramCredential`'s `StoredCredential`).
//! An ACL's key is derived from the binding itself, so putting a binding twice stores it once
//! and deleting it needs only the binding. Any value that fails its checks is
//! [`LogError::Corrupt`]: a load fails, nothing is skipped (an ACL silently dropped could be a
//! DENY).

use async_trait::async_trait;
use security::acl::AclBinding;
use security::sasl::{ScramCredential, ScramMechanism};

use crate::LogError;
use crate::codec;

/// Common prefix of every security key.
pub const SECURITY_KEY_PREFIX: &[u8] = b"security/";
/// Prefix of ACL binding keys.
pub const ACL_KEY_PREFIX: &[u8] = b"security/acl/";
/// Prefix of SCRAM credential keys.
pub const SCRAM_KEY_PREFIX: &[u8] = b"security/scram/";
/// Envelope kind of an ACL binding.
pub const KIND_ACL: u8 = b'A';
/// Envelope kind of a SCRAM credential.
pub const KIND_SCRAM: u8 = b'S';
/// Payload version of [`KIND_ACL`]: bincode of `AclBinding`'s serde record.
pub const ACL_VERSION: u8 = 1;
/// Payload version of [`KIND_SCRAM`]: bincode of `ScramCredential`'s serde record.
pub const SCRAM_VERSION: u8 = 1;

/// One user's credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredScram {
    /// The user name (the `User:` principal's name).
    pub user: String,
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// The credential.
    pub credential: ScramCredential,
}

/// Everything stored: every ACL binding and every credential, in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecuritySnapshot {
    /// The ACL bindings.
    pub acls: Vec<AclBinding>,
    /// The SCRAM credentials.
    pub credentials: Vec<StoredScram>,
}

/// One change of [`SecurityStore::apply_security`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityChange {
    /// Store a binding (nothing changes if it is there).
    PutAcl(AclBinding),
    /// Remove a binding (nothing changes if it is not there).
    DeleteAcl(AclBinding),
    /// Set a user's credential for a mechanism.
    PutScram(StoredScram),
    /// Remove a user's credential for a mechanism.
    DeleteScram {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
}

/// Where ACLs and SCRAM credentials are kept, beside the transaction log.
///
/// `apply_security` is atomic for [`crate::MemTxnLog`] and `SledTxnLog` (one sled batch,
/// flushed and fsync'd before it returns), and for `EtcdTxnLog` within one etcd transaction
/// (up to `EtcdConfig::max_txn_ops` changes; a longer list is applied in several, in order).
/// A failed call may have applied a prefix of its transactions (etcd unavailable: unknown).
#[async_trait]
pub trait SecurityStore: Send + Sync {
    /// Every stored binding and credential; [`LogError::Corrupt`] for the first value that
    /// fails its checks.
    async fn load_security(&self) -> Result<SecuritySnapshot, LogError>;

    /// Applies `changes`, in order; durable when it returns `Ok`.
    async fn apply_security(&self, changes: &[SecurityChange]) -> Result<(), LogError>;
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn corrupt(key: &[u8], reason: impl Into<String>) -> LogError {
    LogError::Corrupt {
        partition: None,
        key: codec::printable_key(key),
        reason: reason.into(),
    }
}

/// The key of `binding`.
pub fn acl_key(binding: &AclBinding) -> Result<Vec<u8>, LogError> {
    let mut k = ACL_KEY_PREFIX.to_vec();
    k.extend_from_slice(hex(&codec::encode_payload(binding)?).as_bytes());
    Ok(k)
}

/// The key of `user`'s credential for `mechanism`.
pub fn scram_key(user: &str, mechanism: ScramMechanism) -> Vec<u8> {
    let mut k = SCRAM_KEY_PREFIX.to_vec();
    k.extend_from_slice(mechanism.name().as_bytes());
    k.push(b'/');
    k.extend_from_slice(user.as_bytes());
    k
}

/// Encodes `binding` as the value stored under its key: `(key, value)`.
pub fn encode_acl(binding: &AclBinding) -> Result<(Vec<u8>, Vec<u8>), LogError> {
    let key = acl_key(binding)?;
    let value = codec::seal_value(
        KIND_ACL,
        ACL_VERSION,
        &key,
        &codec::encode_payload(binding)?,
    )?;
    Ok((key, value))
}

/// Encodes a credential as the value stored under its key: `(key, value)`.
pub fn encode_scram(s: &StoredScram) -> Result<(Vec<u8>, Vec<u8>), LogError> {
    let key = scram_key(&s.user, s.mechanism);
    let value = codec::seal_value(
        KIND_SCRAM,
        SCRAM_VERSION,
        &key,
        &codec::encode_payload(&s.credential)?,
    )?;
    Ok((key, value))
}

/// The key a change writes, and its new value (`None`: delete).
pub fn encode_change(change: &SecurityChange) -> Result<(Vec<u8>, Option<Vec<u8>>), LogError> {
    Ok(match change {
        SecurityChange::PutAcl(b) => {
            let (k, v) = encode_acl(b)?;
            (k, Some(v))
        }
        SecurityChange::DeleteAcl(b) => (acl_key(b)?, None),
        SecurityChange::PutScram(s) => {
            let (k, v) = encode_scram(s)?;
            (k, Some(v))
        }
        SecurityChange::DeleteScram { user, mechanism } => (scram_key(user, *mechanism), None),
    })
}

/// Verifies and decodes the binding stored under `key`.
pub fn decode_acl(key: &[u8], value: &[u8]) -> Result<AclBinding, LogError> {
    let (version, payload) =
        codec::open_value(KIND_ACL, key, value).map_err(|r| corrupt(key, r))?;
    if version != ACL_VERSION {
        return Err(corrupt(
            key,
            format!("unknown ACL binding version {version}"),
        ));
    }
    let binding: AclBinding = codec::decode_payload(payload).map_err(|r| corrupt(key, r))?;
    if acl_key(&binding)? != key {
        return Err(corrupt(key, "the binding does not match its key"));
    }
    Ok(binding)
}

/// Verifies and decodes the credential stored under `key`.
pub fn decode_scram(key: &[u8], value: &[u8]) -> Result<StoredScram, LogError> {
    let rest = key
        .strip_prefix(SCRAM_KEY_PREFIX)
        .ok_or_else(|| corrupt(key, "not a SCRAM credential key"))?;
    let rest = std::str::from_utf8(rest).map_err(|_| corrupt(key, "key is not UTF-8"))?;
    let (mechanism, user) = rest
        .split_once('/')
        .ok_or_else(|| corrupt(key, "no mechanism in the key"))?;
    let mechanism: ScramMechanism = mechanism
        .parse()
        .map_err(|_| corrupt(key, format!("unknown mechanism {mechanism}")))?;
    let (version, payload) =
        codec::open_value(KIND_SCRAM, key, value).map_err(|r| corrupt(key, r))?;
    if version != SCRAM_VERSION {
        return Err(corrupt(
            key,
            format!("unknown SCRAM credential version {version}"),
        ));
    }
    let credential: ScramCredential =
        codec::decode_payload(payload).map_err(|r| corrupt(key, r))?;
    if !credential.fits(mechanism) {
        return Err(corrupt(key, "key lengths do not fit the mechanism"));
    }
    Ok(StoredScram {
        user: user.to_owned(),
        mechanism,
        credential,
    })
}

/// Decodes every stored `(key, value)` under [`SECURITY_KEY_PREFIX`]; an unknown key or a
/// value that fails its checks is [`LogError::Corrupt`].
pub fn decode_snapshot<K, V, I>(entries: I) -> Result<SecuritySnapshot, LogError>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
    I: IntoIterator<Item = Result<(K, V), LogError>>,
{
    let mut out = SecuritySnapshot::default();
    for kv in entries {
        let (k, v) = kv?;
        let (k, v) = (k.as_ref(), v.as_ref());
        if k.starts_with(ACL_KEY_PREFIX) {
            out.acls.push(decode_acl(k, v)?);
        } else if k.starts_with(SCRAM_KEY_PREFIX) {
            out.credentials.push(decode_scram(k, v)?);
        } else {
            return Err(corrupt(k, "unknown security key"));
        }
    }
    Ok(out)
}

#[cfg(all(test, not(txn_loom)))]
mod tests {
    use super::*;
    use security::acl::{
        AccessControlEntry, AclOperation, AclPermissionType, ResourcePattern, ResourceType,
    };

    fn binding(name: &str) -> AclBinding {
        AclBinding::new(
            ResourcePattern::prefixed(ResourceType::TransactionalId, name),
            AccessControlEntry::new(
                "User:alice",
                "*",
                AclOperation::Write,
                AclPermissionType::Allow,
            ),
        )
    }

    fn cred() -> StoredScram {
        let m = ScramMechanism::Sha256;
        StoredScram {
            user: "a/lice".into(),
            mechanism: m,
            credential: ScramCredential::from_password_and_salt(m, "pw", b"salt", 4096).unwrap(),
        }
    }

    #[test]
    fn acls_and_credentials_round_trip() {
        let (k, v) = encode_acl(&binding("orders")).unwrap();
        assert!(k.starts_with(ACL_KEY_PREFIX));
        let (k2, v2) = encode_scram(&cred()).unwrap();
        assert_eq!(k2, b"security/scram/SCRAM-SHA-256/a/lice");
        let snap = decode_snapshot([Ok::<_, LogError>((k, v)), Ok((k2, v2))]).unwrap();
        assert_eq!(snap.acls, vec![binding("orders")]);
        assert_eq!(snap.credentials, vec![cred()]);
    }

    #[test]
    fn every_bit_flip_is_corruption() {
        let (k, v) = encode_acl(&binding("orders")).unwrap();
        for i in 0..v.len() * 8 {
            let mut bad = v.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(matches!(
                decode_acl(&k, &bad),
                Err(LogError::Corrupt { .. })
            ));
        }
        let (k, v) = encode_scram(&cred()).unwrap();
        for i in 0..v.len() * 8 {
            let mut bad = v.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(matches!(
                decode_scram(&k, &bad),
                Err(LogError::Corrupt { .. })
            ));
        }
    }

    #[test]
    fn a_value_under_another_key_is_corruption() {
        let (_, v) = encode_acl(&binding("orders")).unwrap();
        let (k2, _) = encode_acl(&binding("payments")).unwrap();
        assert!(matches!(decode_acl(&k2, &v), Err(LogError::Corrupt { .. })));
        let (_, v) = encode_scram(&cred()).unwrap();
        let other = scram_key("bob", ScramMechanism::Sha256);
        assert!(matches!(
            decode_scram(&other, &v),
            Err(LogError::Corrupt { .. })
        ));
        let unknown = decode_snapshot([Ok::<_, LogError>((b"security/x".to_vec(), v))]);
        assert!(matches!(unknown, Err(LogError::Corrupt { .. })));
    }
}
