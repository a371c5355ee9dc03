//! SCRAM credentials: what a server stores per user and mechanism, how they are made, and the
//! checks of AlterUserScramCredentials
//! ([KIP-554](https://cwiki.apache.org/confluence/display/KAFKA/KIP-554%3A+Add+Broker-side+SCRAM+Config+API)),
//! as Kafka's
//! [`ScramControlManager`](https://github.com/apache/kafka/blob/trunk/metadata/src/main/java/org/apache/kafka/controller/ScramControlManager.java)
//! runs them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::super::crypto;
use super::super::mechanism::ScramMechanism;

/// Kafka's UNACCEPTABLE_CREDENTIAL error code.
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
/// Kafka's RESOURCE_NOT_FOUND error code.
pub const RESOURCE_NOT_FOUND: i16 = 91;
/// Kafka's DUPLICATE_RESOURCE error code.
pub const DUPLICATE_RESOURCE: i16 = 92;
/// Kafka's UNKNOWN_SERVER_ERROR error code.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;

/// The version of [`ScramCredential`]'s serialized form. Deserializing another version fails.
pub const SCRAM_CREDENTIAL_VERSION: u16 = 1;

/// The length of the salts this crate makes, in bytes.
pub(super) const SALT_LEN: usize = 32;

/// What a server keeps of a user's password for one SCRAM mechanism (Kafka's
/// `ScramCredential`, RFC 5802's section 3): the salt and iteration count the client needs to
/// salt its password, `StoredKey := H(HMAC(SaltedPassword, "Client Key"))` to check the
/// client's proof and `ServerKey := HMAC(SaltedPassword, "Server Key")` to sign the answer.
/// Neither key lets one log in as the user.
///
/// Serialized (serde) with a `version` field ([`SCRAM_CREDENTIAL_VERSION`]) for the daemon's
/// storage. [`Debug`](fmt::Debug) hides the keys. `==` is not constant time: not for
/// authentication.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "StoredCredential", try_from = "StoredCredential")]
pub struct ScramCredential {
    /// The salt.
    pub salt: Vec<u8>,
    /// `StoredKey`, the mechanism's hash length.
    pub stored_key: Vec<u8>,
    /// `ServerKey`, the mechanism's hash length.
    pub server_key: Vec<u8>,
    /// The iteration count of `SaltedPassword`.
    pub iterations: u32,
}

#[derive(Serialize, Deserialize)]
struct StoredCredential {
    version: u16,
    salt: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
    iterations: u32,
}

impl From<ScramCredential> for StoredCredential {
    fn from(c: ScramCredential) -> Self {
        Self {
            version: SCRAM_CREDENTIAL_VERSION,
            salt: c.salt,
            stored_key: c.stored_key,
            server_key: c.server_key,
            iterations: c.iterations,
        }
    }
}

impl TryFrom<StoredCredential> for ScramCredential {
    type Error = String;

    fn try_from(s: StoredCredential) -> Result<Self, String> {
        if s.version != SCRAM_CREDENTIAL_VERSION {
            return Err(format!(
                "SCRAM credential version {} is not supported (this build reads version {SCRAM_CREDENTIAL_VERSION})",
                s.version
            ));
        }
        Ok(Self {
            salt: s.salt,
            stored_key: s.stored_key,
            server_key: s.server_key,
            iterations: s.iterations,
        })
    }
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("salt_len", &self.salt.len())
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// A credential for `password` with a fresh random salt of 32 bytes.
    /// `iterations` must be within Kafka's bounds (4096 to 16384).
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<Self, ScramApiError> {
        check_iterations(mechanism, i64::from(iterations))?;
        let mut salt = vec![0u8; SALT_LEN];
        crypto::random_bytes(&mut salt)
            .map_err(|_| ScramApiError::new(UNKNOWN_SERVER_ERROR, "Could not create credential"))?;
        Self::from_password_and_salt(mechanism, password, &salt, iterations)
    }

    /// A credential for `password` with the given salt (Kafka's `ScramFormatter.generateCredential`
    /// with a chosen salt).
    pub fn from_password_and_salt(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramApiError> {
        check_iterations(mechanism, i64::from(iterations))?;
        let salted = mechanism.salted_password(password, salt, iterations);
        Ok(Self::derive(mechanism, salt, &salted, iterations))
    }

    /// A credential from what AlterUserScramCredentials carries: the client salted the password
    /// itself, and the server derives the keys from `salted_password` as Kafka's controller does
    /// (`ScramControlManager.finishUpsertion`: `storedKey(clientKey(saltedPassword))` and
    /// `serverKey(saltedPassword)`).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramApiError> {
        check_iterations(mechanism, i64::from(iterations))?;
        Ok(Self::derive(mechanism, salt, salted_password, iterations))
    }

    fn derive(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: u32,
    ) -> Self {
        let client_key = crypto::hmac(mechanism, salted_password, &[b"Client Key"]);
        Self {
            salt: salt.to_vec(),
            stored_key: crypto::hash(mechanism, &client_key),
            server_key: crypto::hmac(mechanism, salted_password, &[b"Server Key"]),
            iterations,
        }
    }

    /// Whether the keys have `mechanism`'s length (a credential of the other mechanism does not).
    pub fn fits(&self, mechanism: ScramMechanism) -> bool {
        self.stored_key.len() == mechanism.digest_len()
            && self.server_key.len() == mechanism.digest_len()
    }
}

/// A refused credential alteration: Kafka's error code and message (an `ApiError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (error code {code})")]
pub struct ScramApiError {
    /// The Kafka error code: [`UNACCEPTABLE_CREDENTIAL`], `UNSUPPORTED_SASL_MECHANISM` (33),
    /// [`RESOURCE_NOT_FOUND`], [`DUPLICATE_RESOURCE`] or [`UNKNOWN_SERVER_ERROR`].
    pub code: i16,
    /// Kafka's message.
    pub message: &'static str,
}

impl ScramApiError {
    const fn new(code: i16, message: &'static str) -> Self {
        Self { code, message }
    }
}

fn check_iterations(mechanism: ScramMechanism, iterations: i64) -> Result<(), ScramApiError> {
    if iterations < i64::from(mechanism.min_iterations()) {
        Err(ScramApiError::new(
            UNACCEPTABLE_CREDENTIAL,
            "Too few iterations",
        ))
    } else if iterations > i64::from(mechanism.max_iterations()) {
        Err(ScramApiError::new(
            UNACCEPTABLE_CREDENTIAL,
            "Too many iterations",
        ))
    } else {
        Ok(())
    }
}

/// Kafka's `validateScramUsernameAndMechanism`.
fn check_user_and_mechanism(user: &str, mechanism: i8) -> Result<ScramMechanism, ScramApiError> {
    if user.is_empty() {
        return Err(ScramApiError::new(
            UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty",
        ));
    }
    ScramMechanism::from_type_code(mechanism).ok_or(ScramApiError::new(
        super::super::error::UNSUPPORTED_SASL_MECHANISM,
        "Unknown SCRAM mechanism",
    ))
}

/// Checks one upsertion of AlterUserScramCredentials as Kafka's `validateUpsertion` does: a
/// non-empty user (93), a known mechanism code (33), 4096 to 16384 iterations (93).
pub fn validate_upsertion(
    user: &str,
    mechanism: i8,
    iterations: i32,
) -> Result<ScramMechanism, ScramApiError> {
    let mechanism = check_user_and_mechanism(user, mechanism)?;
    check_iterations(mechanism, i64::from(iterations))?;
    Ok(mechanism)
}

/// Checks one deletion of AlterUserScramCredentials as Kafka's `validateDeletion` does: a
/// non-empty user (93), a known mechanism code (33), an existing credential (91); `exists` says
/// whether the user has a credential for the mechanism.
pub fn validate_deletion(
    user: &str,
    mechanism: i8,
    exists: impl FnOnce(ScramMechanism) -> bool,
) -> Result<ScramMechanism, ScramApiError> {
    let mechanism = check_user_and_mechanism(user, mechanism)?;
    if !exists(mechanism) {
        return Err(ScramApiError::new(
            RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ));
    }
    Ok(mechanism)
}

/// A deletion in AlterUserScramCredentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramDeletion<'a> {
    /// The user.
    pub user: &'a str,
    /// The mechanism's wire code.
    pub mechanism: i8,
}

/// An upsertion in AlterUserScramCredentials. [`Debug`](fmt::Debug) hides the salted password.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ScramUpsertion<'a> {
    /// The user.
    pub user: &'a str,
    /// The mechanism's wire code.
    pub mechanism: i8,
    /// The iteration count.
    pub iterations: i32,
    /// The salt.
    pub salt: &'a [u8],
    /// `Hi(password, salt, iterations)`.
    pub salted_password: &'a [u8],
}

impl fmt::Debug for ScramUpsertion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// What to apply for one user of an AlterUserScramCredentials request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alteration {
    /// Remove the user's credential for the mechanism.
    Delete(ScramMechanism),
    /// Set the user's credential for the mechanism.
    Upsert(ScramMechanism, ScramCredential),
}

/// One user's result in an AlterUserScramCredentials response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterationResult {
    /// The user.
    pub user: String,
    /// What to apply, or the error to answer.
    pub outcome: Result<Alteration, ScramApiError>,
}

/// Validates a whole AlterUserScramCredentials request as Kafka's
/// `ScramControlManager.alterCredentials` does, and derives the credentials to store.
///
/// A user named twice in the request (in deletions, upsertions or both) gets DUPLICATE_RESOURCE
/// (92) "A user credential cannot be altered twice in the same request" and nothing is applied
/// for it; a user's first error is kept. `exists` says whether a user has a credential for a
/// mechanism (for deletions). Results come in Kafka's order: valid deletions, valid upsertions,
/// then errors, each in the request's order (Kafka's own order within a group is its hash
/// maps').
pub fn validate_alterations(
    deletions: &[ScramDeletion<'_>],
    upsertions: &[ScramUpsertion<'_>],
    exists: impl Fn(&str, ScramMechanism) -> bool,
) -> Vec<AlterationResult> {
    const DUPLICATE: ScramApiError = ScramApiError::new(
        DUPLICATE_RESOURCE,
        "A user credential cannot be altered twice in the same request",
    );
    // Per user, in first-appearance order: Ok(valid deletion or upsertion) or Err.
    let mut deletes: Vec<(&str, ScramMechanism)> = Vec::new();
    let mut upserts: Vec<(&str, ScramMechanism, &ScramUpsertion<'_>)> = Vec::new();
    let mut errors: Vec<(&str, ScramApiError)> = Vec::new();
    let has_error =
        |errors: &[(&str, ScramApiError)], user: &str| errors.iter().any(|(u, _)| *u == user);

    for d in deletions {
        if has_error(&errors, d.user) {
            continue;
        }
        if let Some(at) = deletes.iter().position(|(u, _)| *u == d.user) {
            deletes.remove(at);
            errors.push((d.user, DUPLICATE));
            continue;
        }
        match validate_deletion(d.user, d.mechanism, |m| exists(d.user, m)) {
            Ok(m) => deletes.push((d.user, m)),
            Err(e) => errors.push((d.user, e)),
        }
    }
    for u in upsertions {
        if has_error(&errors, u.user) {
            continue;
        }
        let deleted = deletes.iter().position(|(d, _)| *d == u.user);
        let upserted = upserts.iter().position(|(d, _, _)| *d == u.user);
        if deleted.is_some() || upserted.is_some() {
            if let Some(at) = deleted {
                deletes.remove(at);
            }
            if let Some(at) = upserted {
                upserts.remove(at);
            }
            errors.push((u.user, DUPLICATE));
            continue;
        }
        match validate_upsertion(u.user, u.mechanism, u.iterations) {
            Ok(m) => upserts.push((u.user, m, u)),
            Err(e) => errors.push((u.user, e)),
        }
    }

    let mut out = Vec::with_capacity(deletes.len() + upserts.len() + errors.len());
    for (user, m) in deletes {
        out.push(AlterationResult {
            user: user.to_owned(),
            outcome: Ok(Alteration::Delete(m)),
        });
    }
    for (user, m, u) in upserts {
        // The iterations were checked: this cannot fail, but an error is answered if it did.
        let iterations = u32::try_from(u.iterations).unwrap_or(0);
        let outcome =
            ScramCredential::from_salted_password(m, u.salt, u.salted_password, iterations)
                .map(|c| Alteration::Upsert(m, c));
        out.push(AlterationResult {
            user: user.to_owned(),
            outcome,
        });
    }
    for (user, e) in errors {
        out.push(AlterationResult {
            user: user.to_owned(),
            outcome: Err(e),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA256: i8 = 1;
    const SHA512: i8 = 2;

    #[test]
    fn sasl_credential_from_salted_password_equals_from_password() {
        for m in ScramMechanism::ALL {
            let salt = b"some salt bytes";
            let from_password =
                ScramCredential::from_password_and_salt(m, "pencil", salt, 4096).unwrap();
            let salted = m.salted_password("pencil", salt, 4096);
            let from_salted =
                ScramCredential::from_salted_password(m, salt, &salted, 4096).unwrap();
            assert_eq!(from_password, from_salted);
            assert!(from_password.fits(m));
            assert_eq!(from_password.stored_key.len(), m.digest_len());
        }
        let c = ScramCredential::from_password(ScramMechanism::Sha512, "pw", 4096).unwrap();
        let d = ScramCredential::from_password(ScramMechanism::Sha512, "pw", 4096).unwrap();
        assert_eq!(c.salt.len(), SALT_LEN);
        assert_ne!(c.salt, d.salt);
        assert!(!c.fits(ScramMechanism::Sha256));
    }

    #[test]
    fn sasl_credential_iteration_bounds() {
        for m in ScramMechanism::ALL {
            for ok in [4096, 8192, 16384] {
                assert!(ScramCredential::from_salted_password(m, b"s", b"p", ok).is_ok());
            }
            let few = ScramCredential::from_password_and_salt(m, "p", b"s", 4095).unwrap_err();
            assert_eq!(
                few,
                ScramApiError {
                    code: 93,
                    message: "Too few iterations"
                }
            );
            let many = ScramCredential::from_salted_password(m, b"s", b"p", 16385).unwrap_err();
            assert_eq!(
                many,
                ScramApiError {
                    code: 93,
                    message: "Too many iterations"
                }
            );
            assert_eq!(
                ScramCredential::from_password(m, "p", 1).unwrap_err().code,
                93
            );
        }
        assert_eq!(
            validate_upsertion("alice", SHA256, 4096),
            Ok(ScramMechanism::Sha256)
        );
        assert_eq!(
            validate_upsertion("alice", SHA512, 16384),
            Ok(ScramMechanism::Sha512)
        );
        assert_eq!(
            validate_upsertion("alice", SHA256, -1).unwrap_err().message,
            "Too few iterations"
        );
        assert_eq!(
            validate_upsertion("alice", SHA256, i32::MAX)
                .unwrap_err()
                .message,
            "Too many iterations"
        );
        assert_eq!(
            validate_upsertion("", SHA256, 4096).unwrap_err(),
            ScramApiError {
                code: 93,
                message: "Username must not be empty"
            }
        );
        for code in [0, 3, -1] {
            assert_eq!(
                validate_upsertion("alice", code, 4096).unwrap_err(),
                ScramApiError {
                    code: 33,
                    message: "Unknown SCRAM mechanism"
                }
            );
        }
        assert_eq!(
            validate_deletion("alice", SHA256, |_| true),
            Ok(ScramMechanism::Sha256)
        );
        assert_eq!(
            validate_deletion("alice", SHA256, |_| false).unwrap_err(),
            ScramApiError {
                code: 91,
                message: "Attempt to delete a user credential that does not exist"
            }
        );
        assert_eq!(
            validate_deletion("alice", 9, |_| true).unwrap_err().code,
            33
        );
    }

    #[test]
    fn sasl_credential_alterations() {
        let salted = ScramMechanism::Sha256.salted_password("pw", b"salt", 4096);
        let up = |user, mechanism, iterations| ScramUpsertion {
            user,
            mechanism,
            iterations,
            salt: b"salt",
            salted_password: &salted,
        };
        let deletions = [
            ScramDeletion {
                user: "dora",
                mechanism: SHA256,
            },
            ScramDeletion {
                user: "twice",
                mechanism: SHA256,
            },
            ScramDeletion {
                user: "twice",
                mechanism: SHA512,
            },
            ScramDeletion {
                user: "both",
                mechanism: SHA256,
            },
            ScramDeletion {
                user: "ghost",
                mechanism: SHA256,
            },
        ];
        let upsertions = [
            up("ursula", SHA256, 4096),
            up("both", SHA256, 4096),
            up("ghost", SHA256, 4096),
            up("again", SHA256, 4096),
            up("again", SHA512, 4096),
            up("weak", SHA256, 100),
            up("", SHA256, 4096),
            up("odd", 7, 4096),
        ];
        let results = validate_alterations(&deletions, &upsertions, |user, _| user != "ghost");
        let summary: Vec<(&str, Result<&str, i16>)> = results
            .iter()
            .map(|r| {
                let outcome = match &r.outcome {
                    Ok(Alteration::Delete(_)) => Ok("delete"),
                    Ok(Alteration::Upsert(..)) => Ok("upsert"),
                    Err(e) => Err(e.code),
                };
                (r.user.as_str(), outcome)
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("dora", Ok("delete")),
                ("ursula", Ok("upsert")),
                ("twice", Err(92)),
                ("ghost", Err(91)),
                ("both", Err(92)),
                ("again", Err(92)),
                ("weak", Err(93)),
                ("", Err(93)),
                ("odd", Err(33)),
            ]
        );
        let Ok(Alteration::Upsert(m, c)) = &results[1].outcome else {
            panic!()
        };
        assert_eq!(*m, ScramMechanism::Sha256);
        assert_eq!(
            c,
            &ScramCredential::from_password_and_salt(*m, "pw", b"salt", 4096).unwrap()
        );
    }

    #[test]
    fn sasl_credential_serde_is_versioned() {
        let c =
            ScramCredential::from_password_and_salt(ScramMechanism::Sha256, "pw", b"salt", 4096)
                .unwrap();
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["iterations"], 4096);
        let back: ScramCredential = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, c);
        let mut future = json;
        future["version"] = 2.into();
        let err = serde_json::from_value::<ScramCredential>(future).unwrap_err();
        assert!(
            err.to_string().contains("version 2 is not supported"),
            "{err}"
        );
        let debug = format!("{c:?}");
        assert!(
            debug.contains("iterations") && !debug.contains("stored_key"),
            "{debug}"
        );
    }
}
