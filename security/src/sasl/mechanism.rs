//! Mechanism names, as `sasl.enabled.mechanisms` and SaslHandshake spell them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::crypto;
use super::error::UnsupportedMechanism;

/// A SASL mechanism this crate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mechanism {
    /// `PLAIN` ([RFC 4616](https://www.rfc-editor.org/rfc/rfc4616)).
    #[serde(rename = "PLAIN")]
    Plain,
    /// `SCRAM-SHA-256` ([RFC 7677](https://www.rfc-editor.org/rfc/rfc7677)).
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl Mechanism {
    /// Every mechanism, in the order Kafka's documentation lists them.
    pub const ALL: [Self; 3] = [Self::Plain, Self::ScramSha256, Self::ScramSha512];

    /// The mechanism's name, as in `sasl.enabled.mechanisms` and SaslHandshake.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The SCRAM variant, if this is a SCRAM mechanism.
    pub const fn scram(self) -> Option<ScramMechanism> {
        match self {
            Self::Plain => None,
            Self::ScramSha256 => Some(ScramMechanism::Sha256),
            Self::ScramSha512 => Some(ScramMechanism::Sha512),
        }
    }

    /// Parses a `sasl.enabled.mechanisms` value: names separated by commas, with optional
    /// whitespace around each (Kafka's list syntax). Duplicates are dropped (Kafka keeps a set),
    /// an empty entry or an unknown name is an error.
    pub fn parse_list(value: &str) -> Result<Vec<Self>, UnsupportedMechanism> {
        let mut out = Vec::new();
        if value.trim().is_empty() {
            return Ok(out);
        }
        for name in value.split(',') {
            let mechanism: Self = name.trim().parse()?;
            if !out.contains(&mechanism) {
                out.push(mechanism);
            }
        }
        Ok(out)
    }
}

impl FromStr for Mechanism {
    type Err = UnsupportedMechanism;

    /// Case sensitive, as Kafka's broker matches the handshake's mechanism.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| UnsupportedMechanism::new(name))
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A SCRAM mechanism: its hash, and Kafka's bounds on its iteration count
/// ([`ScramMechanism`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/scram/internals/ScramMechanism.java)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256: SHA-256 and HMAC-SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    /// SCRAM-SHA-512: SHA-512 and HMAC-SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramMechanism {
    /// Both SCRAM mechanisms.
    pub const ALL: [Self; 2] = [Self::Sha256, Self::Sha512];

    /// Kafka's smallest iteration count for both mechanisms.
    pub const MIN_ITERATIONS: u32 = 4096;

    /// Kafka's largest iteration count for both mechanisms (what AlterUserScramCredentials
    /// accepts).
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The mechanism's name.
    pub const fn name(self) -> &'static str {
        self.mechanism().name()
    }

    /// The same mechanism as a [`Mechanism`].
    pub const fn mechanism(self) -> Mechanism {
        match self {
            Self::Sha256 => Mechanism::ScramSha256,
            Self::Sha512 => Mechanism::ScramSha512,
        }
    }

    /// The mechanism's code in DescribeUserScramCredentials and AlterUserScramCredentials
    /// (1 and 2; Kafka's `UNKNOWN` is 0).
    pub const fn type_code(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    /// The mechanism with this wire code, if any.
    pub const fn from_type_code(code: i8) -> Option<Self> {
        match code {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The smallest iteration count Kafka accepts (4096).
    pub const fn min_iterations(self) -> u32 {
        Self::MIN_ITERATIONS
    }

    /// The largest iteration count Kafka accepts (16384).
    pub const fn max_iterations(self) -> u32 {
        Self::MAX_ITERATIONS
    }

    /// The length of the hash, and so of stored keys, server keys, proofs and signatures.
    pub const fn digest_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }

    /// RFC 5802's `SaltedPassword := Hi(Normalize(password), salt, i)`: PBKDF2 with this
    /// mechanism's HMAC. As in Kafka, the password is taken as its UTF-8 bytes (no SASLprep).
    /// This is what a client sends in AlterUserScramCredentials.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        crypto::hi(self, password.as_bytes(), salt, iterations)
    }
}

impl FromStr for ScramMechanism {
    type Err = UnsupportedMechanism;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        name.parse::<Mechanism>()?
            .scram()
            .ok_or_else(|| UnsupportedMechanism::new(name))
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_mechanism_names_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        assert!("plain".parse::<Mechanism>().is_err());
        assert!("GSSAPI".parse::<Mechanism>().is_err());
        assert!("OAUTHBEARER".parse::<Mechanism>().is_err());
        assert_eq!(
            "SCRAM-SHA-512".parse::<ScramMechanism>(),
            Ok(ScramMechanism::Sha512)
        );
        assert!("PLAIN".parse::<ScramMechanism>().is_err());
        for s in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_type_code(s.type_code()), Some(s));
            assert_eq!(s.mechanism().scram(), Some(s));
        }
        assert_eq!(ScramMechanism::from_type_code(0), None);
        assert_eq!(ScramMechanism::from_type_code(3), None);
    }

    #[test]
    fn sasl_mechanism_list() {
        assert_eq!(
            Mechanism::parse_list(" SCRAM-SHA-512 ,PLAIN, SCRAM-SHA-512"),
            Ok(vec![Mechanism::ScramSha512, Mechanism::Plain])
        );
        assert_eq!(Mechanism::parse_list("  "), Ok(vec![]));
        let err = Mechanism::parse_list("PLAIN,,SCRAM-SHA-256").unwrap_err();
        assert_eq!(err.to_string(), "Unsupported SASL mechanism ");
        let err = Mechanism::parse_list("PLAIN,GSSAPI").unwrap_err();
        assert_eq!(err.error_code(), 33);
        assert_eq!(err.to_string(), "Unsupported SASL mechanism GSSAPI");
    }

    #[test]
    fn sasl_mechanism_serde_uses_names() {
        let json = serde_json::to_string(&Mechanism::ScramSha256).unwrap();
        assert_eq!(json, "\"SCRAM-SHA-256\"");
        let back: ScramMechanism = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ScramMechanism::Sha256);
    }
}
