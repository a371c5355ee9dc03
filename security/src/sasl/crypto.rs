//! The primitives, all from RustCrypto (`sha2`, `hmac`, `pbkdf2`, `subtle`) and `getrandom`:
//! nothing here is hand-rolled beyond choosing the hash for a mechanism.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256, Sha512};
use subtle::ConstantTimeEq as _;

use super::mechanism::ScramMechanism;

/// `HMAC(key, parts[0] || parts[1] || ...)` with the mechanism's hash.
pub(super) fn hmac(mechanism: ScramMechanism, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length (longer ones are hashed): `new_from_slice` cannot fail.
    match mechanism {
        ScramMechanism::Sha256 => {
            let mut mac =
                <Hmac<Sha256>>::new_from_slice(key).expect("HMAC takes keys of any length");
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        ScramMechanism::Sha512 => {
            let mut mac =
                <Hmac<Sha512>>::new_from_slice(key).expect("HMAC takes keys of any length");
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
    }
}

/// `H(data)` with the mechanism's hash.
pub(super) fn hash(mechanism: ScramMechanism, data: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// RFC 5802's `Hi(str, salt, i)`: PBKDF2 with the mechanism's HMAC, one hash-sized block.
pub(super) fn hi(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut out = vec![0u8; mechanism.digest_len()];
    match mechanism {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
        }
    }
    out
}

/// `a XOR b`, `None` when the lengths differ.
pub(super) fn xor(a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    (a.len() == b.len()).then(|| a.iter().zip(b).map(|(x, y)| x ^ y).collect())
}

/// Equality of two secrets in time that does not depend on where they differ (the lengths are
/// not secret here: both are hash outputs).
pub(super) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Equality of two passwords of any lengths, in time that depends on neither their contents nor
/// their lengths beyond hashing them: compares their SHA-256 digests in constant time.
pub(super) fn passwords_eq(a: &[u8], b: &[u8]) -> bool {
    Sha256::digest(a).ct_eq(&Sha256::digest(b)).into()
}

/// The operating system's random source failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the system's random source failed: {0}")]
pub struct RandomError(String);

/// Fills `buf` from the operating system's random source.
pub(super) fn random_bytes(buf: &mut [u8]) -> Result<(), RandomError> {
    getrandom::fill(buf).map_err(|e| RandomError(e.to_string()))
}

/// Where SCRAM nonces come from: [`RandomNonce`] in service, a fixed one in tests (RFC 7677's
/// test vector needs the RFC's nonces).
pub trait NonceSource: Send {
    /// A fresh nonce: one or more printable ASCII characters other than `,` (RFC 5802's
    /// `printable`); a server or client refuses anything else.
    fn nonce(&mut self) -> Result<String, RandomError>;
}

/// Nonces of 18 bytes from the operating system's random source (144 bits, more than Kafka's
/// 130), base64 encoded without padding: 24 characters.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomNonce;

impl NonceSource for RandomNonce {
    fn nonce(&mut self) -> Result<String, RandomError> {
        let mut bytes = [0u8; 18];
        random_bytes(&mut bytes)?;
        Ok(STANDARD_NO_PAD.encode(bytes))
    }
}

/// Always the same nonce. Only for tests and test vectors: a fixed nonce makes SCRAM replayable.
#[derive(Debug, Clone)]
pub struct FixedNonce(pub String);

impl NonceSource for FixedNonce {
    fn nonce(&mut self) -> Result<String, RandomError> {
        Ok(self.0.clone())
    }
}

/// Whether `nonce` is RFC 5802's `printable`: `%x21-2B / %x2D-7E`, at least one.
pub(super) fn is_printable(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_random_nonces_are_printable_and_differ() {
        let a = RandomNonce.nonce().unwrap();
        let b = RandomNonce.nonce().unwrap();
        assert_eq!(a.len(), 24);
        assert!(is_printable(&a) && is_printable(&b));
        assert_ne!(a, b);
        assert!(!is_printable(""));
        assert!(!is_printable("a,b"));
        assert!(!is_printable("a b"));
    }

    #[test]
    fn sasl_passwords_eq() {
        assert!(passwords_eq(b"secret", b"secret"));
        assert!(!passwords_eq(b"secret", b"secreT"));
        assert!(!passwords_eq(b"secret", b"secret2"));
        assert!(!passwords_eq(b"", b"x"));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert_eq!(xor(&[1, 2], &[3, 3]), Some(vec![2, 1]));
        assert_eq!(xor(&[1], &[1, 2]), None);
    }

    #[test]
    fn sasl_hi_is_pbkdf2() {
        // RFC 7914 section 11's PBKDF2-HMAC-SHA-256 vector (first 32 bytes).
        let out = hi(ScramMechanism::Sha256, b"passwd", b"salt", 1);
        assert_eq!(
            out[..16],
            [
                0x55, 0xac, 0x04, 0x6e, 0x56, 0xe3, 0x08, 0x9f, 0xec, 0x16, 0x91, 0xc2, 0x25, 0x44,
                0xb6, 0x05
            ]
        );
        assert_eq!(hi(ScramMechanism::Sha512, b"p", b"s", 2).len(), 64);
    }
}
