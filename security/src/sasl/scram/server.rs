//! The server side of SCRAM, after Kafka's
//! [`ScramSaslServer`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/scram/internals/ScramSaslServer.java).
//!
//! Client-first (gs2 header `n` only: Kafka supports no channel binding) gets server-first with
//! the client's nonce extended by the server's; client-final's proof is checked against the
//! stored key in constant time and answered with server-final's verifier `v=`. Kafka never
//! answers with server-final's `e=`: a failure is a SaslAuthenticate error (see [`SaslError`]),
//! and so it is here.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::super::crypto::{self, NonceSource, RandomError, RandomNonce};
use super::super::error::{FailureReason, SaslError};
use super::super::mechanism::{Mechanism, ScramMechanism};
use super::super::plain::AUTHZID_MISMATCH;
use super::super::{DEFAULT_MAX_TOKEN_LEN, SaslServer, Step};
use super::credential::{SALT_LEN, ScramCredential};
use super::messages::{self, encode_base64};

/// The credential store failed (not: the user has no credential).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialLookupError(pub String);

/// Where a SCRAM server finds users' credentials; the daemon implements it over its storage.
///
/// It is called inside [`SaslServer::step`], so it should answer from memory (Kafka's brokers
/// keep a credential cache fed by the metadata log).
pub trait CredentialStore: Send + Sync {
    /// `user`'s credential for `mechanism`, `None` if it has none.
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, CredentialLookupError>;
}

impl CredentialStore for HashMap<(String, ScramMechanism), ScramCredential> {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, CredentialLookupError> {
        Ok(self.get(&(user.to_owned(), mechanism)).cloned())
    }
}

/// The secret from which a server makes the fake salt of a user that does not exist, so that
/// the same unknown user always gets the same salt, as a real one does. Daemons that serve the
/// same users should share it. [`Debug`](fmt::Debug) hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct DummySaltKey([u8; 32]);

impl DummySaltKey {
    /// A fresh key from the operating system's random source.
    pub fn random() -> Result<Self, RandomError> {
        let mut key = [0u8; 32];
        crypto::random_bytes(&mut key)?;
        Ok(Self(key))
    }

    /// A key kept elsewhere.
    pub const fn from_bytes(key: [u8; 32]) -> Self {
        Self(key)
    }

    /// `HMAC-SHA-256(key, mechanism NUL user)`: a salt as long as those this crate makes.
    fn salt(&self, mechanism: ScramMechanism, user: &str) -> Vec<u8> {
        let mut salt = crypto::hmac(
            ScramMechanism::Sha256,
            &self.0,
            &[mechanism.name().as_bytes(), b"\0", user.as_bytes()],
        );
        salt.truncate(SALT_LEN);
        salt
    }
}

impl fmt::Debug for DummySaltKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DummySaltKey(..)")
    }
}

/// What a server does for a user without a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownUserPolicy {
    /// Go on with a fake salt and iteration count, and fail at client-final exactly as for a
    /// wrong password: the client cannot tell whether the user exists (RFC 5802, section 5.1).
    DummyExchange {
        /// Makes the fake salts.
        key: DummySaltKey,
        /// The iteration count to announce (make it the one real credentials use).
        iterations: u32,
    },
    /// Fail at client-first, as Kafka's `ScramSaslServer` does ("Authentication failed: Invalid
    /// user credentials" in the log). The client gets the same error code and message as for a
    /// wrong password, but one step earlier, which tells that the user does not exist.
    FailAtClientFirst,
}

impl UnknownUserPolicy {
    /// [`DummyExchange`](Self::DummyExchange) with a fresh random key and 4096 iterations.
    pub fn dummy_exchange() -> Result<Self, RandomError> {
        Ok(Self::DummyExchange {
            key: DummySaltKey::random()?,
            iterations: ScramMechanism::MIN_ITERATIONS,
        })
    }
}

/// A SCRAM server's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramServerOptions {
    /// What to do for a user without a credential.
    pub unknown_user: UnknownUserPolicy,
    /// The largest client token taken, in bytes.
    pub max_token_len: usize,
}

impl ScramServerOptions {
    /// These settings, with tokens up to [`DEFAULT_MAX_TOKEN_LEN`] bytes.
    pub const fn new(unknown_user: UnknownUserPolicy) -> Self {
        Self {
            unknown_user,
            max_token_len: DEFAULT_MAX_TOKEN_LEN,
        }
    }

    /// A [`UnknownUserPolicy::DummyExchange`] with a fresh key, and the default token bound.
    pub fn with_dummy_exchange() -> Result<Self, RandomError> {
        Ok(Self::new(UnknownUserPolicy::dummy_exchange()?))
    }
}

/// The server side of one SCRAM exchange.
pub struct ScramServer {
    mechanism: ScramMechanism,
    store: Arc<dyn CredentialStore>,
    options: ScramServerOptions,
    nonces: Box<dyn NonceSource>,
    state: State,
}

enum State {
    ClientFirst,
    ClientFinal(Box<Exchange>),
    Complete,
    Failed,
}

/// What client-final is checked against.
struct Exchange {
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    username: String,
    /// `None`: the user has no credential (a dummy exchange).
    credential: Option<ScramCredential>,
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::ClientFirst => "RECEIVE_CLIENT_FIRST_MESSAGE",
            State::ClientFinal(_) => "RECEIVE_CLIENT_FINAL_MESSAGE",
            State::Complete => "COMPLETE",
            State::Failed => "FAILED",
        };
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("options", &self.options)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// An exchange for `mechanism` against `store`, with random nonces.
    pub fn new(
        mechanism: ScramMechanism,
        store: Arc<dyn CredentialStore>,
        options: ScramServerOptions,
    ) -> Self {
        Self {
            mechanism,
            store,
            options,
            nonces: Box::new(RandomNonce),
            state: State::ClientFirst,
        }
    }

    /// The same with another nonce source (tests: RFC 7677's nonces).
    pub fn with_nonce_source(mut self, nonces: Box<dyn NonceSource>) -> Self {
        self.nonces = nonces;
        self
    }

    fn fail(&self, reason: FailureReason) -> SaslError {
        SaslError::failed(self.mechanism.mechanism(), reason)
    }

    fn client_first(&mut self, token: &[u8]) -> Result<(Vec<u8>, Exchange), SaslError> {
        let mech = self.mechanism;
        let text = std::str::from_utf8(token).map_err(|_| {
            self.fail(FailureReason::Malformed(
                "SCRAM client first message: not UTF-8",
            ))
        })?;
        let first = messages::parse_client_first(text).map_err(|r| self.fail(r))?;
        if first.token_auth {
            return Err(self.fail(FailureReason::DelegationTokenUnsupported));
        }
        let authzid_mismatch = first.authzid.as_ref().is_some_and(|a| *a != first.username);
        let rejected = SaslError::Rejected {
            mechanism: mech.mechanism(),
            message: AUTHZID_MISMATCH,
        };
        let server_nonce = self
            .nonces
            .nonce()
            .map_err(|e| self.fail(FailureReason::Internal(e.to_string())))?;
        if !crypto::is_printable(&server_nonce) {
            return Err(self.fail(FailureReason::Internal(
                "the nonce source gave an invalid nonce".into(),
            )));
        }
        let found = self
            .store
            .scram_credential(&first.username, mech)
            .map_err(|e| self.fail(FailureReason::CredentialUnavailable(e.0)))?;
        let (salt, iterations, credential) = match (found, &self.options.unknown_user) {
            (Some(c), _) => {
                // Kafka: unknown user, then authorization id, then iterations.
                if authzid_mismatch {
                    return Err(rejected);
                }
                if !c.fits(mech) {
                    return Err(self.fail(FailureReason::InvalidCredential));
                }
                if c.iterations < mech.min_iterations() {
                    return Err(self.fail(FailureReason::IterationsBelowMinimum {
                        iterations: c.iterations,
                        minimum: mech.min_iterations(),
                    }));
                }
                (c.salt.clone(), c.iterations, Some(c))
            }
            (None, UnknownUserPolicy::FailAtClientFirst) => {
                return Err(self.fail(FailureReason::UnknownUser));
            }
            (None, UnknownUserPolicy::DummyExchange { key, iterations }) => {
                // The authorization id's answer must not depend on the user existing.
                if authzid_mismatch {
                    return Err(rejected);
                }
                (key.salt(mech, &first.username), *iterations, None)
            }
        };
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!("r={nonce},s={},i={iterations}", encode_base64(&salt));
        let exchange = Exchange {
            gs2_header: first.gs2_header.to_owned(),
            client_first_bare: first.bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
            username: first.username,
            credential,
        };
        Ok((server_first.into_bytes(), exchange))
    }

    fn client_final(&self, exchange: &Exchange, token: &[u8]) -> Result<Step, SaslError> {
        let mech = self.mechanism;
        let text = std::str::from_utf8(token).map_err(|_| {
            self.fail(FailureReason::Malformed(
                "SCRAM client final message: not UTF-8",
            ))
        })?;
        let last = messages::parse_client_final(text).map_err(|r| self.fail(r))?;
        if last.channel_binding != exchange.gs2_header.as_bytes() {
            return Err(self.fail(FailureReason::ChannelBindingMismatch));
        }
        if last.nonce != exchange.nonce {
            return Err(self.fail(FailureReason::NonceMismatch));
        }
        if last.proof.len() != mech.digest_len() {
            return Err(self.fail(FailureReason::Malformed(
                "SCRAM client final message: proof of the wrong length",
            )));
        }
        let auth_message = [
            exchange.client_first_bare.as_bytes(),
            b",",
            exchange.server_first.as_bytes(),
            b",",
            last.without_proof.as_bytes(),
        ];
        // For an unknown user, the same work against a key no proof matches.
        let dummy = vec![0u8; mech.digest_len()];
        let stored_key = exchange
            .credential
            .as_ref()
            .map_or(&dummy, |c| &c.stored_key);
        let client_signature = crypto::hmac(mech, stored_key, &auth_message);
        let client_key = crypto::xor(&last.proof, &client_signature).ok_or_else(|| {
            self.fail(FailureReason::Malformed(
                "SCRAM client final message: proof of the wrong length",
            ))
        })?;
        let proof_ok = crypto::ct_eq(&crypto::hash(mech, &client_key), stored_key);
        let Some(credential) = &exchange.credential else {
            return Err(self.fail(FailureReason::UnknownUser));
        };
        if !proof_ok {
            return Err(self.fail(FailureReason::InvalidProof));
        }
        let server_signature = crypto::hmac(mech, &credential.server_key, &auth_message);
        Ok(Step::Done {
            principal_name: exchange.username.clone(),
            final_bytes: format!("v={}", encode_base64(&server_signature)).into_bytes(),
        })
    }
}

impl SaslServer for ScramServer {
    fn mechanism(&self) -> Mechanism {
        self.mechanism.mechanism()
    }

    fn step(&mut self, token: &[u8]) -> Result<Step, SaslError> {
        let mechanism = self.mechanism.mechanism();
        let state = match std::mem::replace(&mut self.state, State::Failed) {
            State::Complete => {
                self.state = State::Complete;
                return Err(SaslError::IllegalState {
                    mechanism,
                    state: "COMPLETE",
                });
            }
            State::Failed => {
                return Err(SaslError::IllegalState {
                    mechanism,
                    state: "FAILED",
                });
            }
            active => active,
        };
        // From here on a failure leaves the state FAILED.
        if token.len() > self.options.max_token_len {
            return Err(SaslError::TokenTooLarge {
                mechanism,
                len: token.len(),
                max: self.options.max_token_len,
            });
        }
        match state {
            State::ClientFirst => {
                let (server_first, exchange) = self.client_first(token)?;
                self.state = State::ClientFinal(Box::new(exchange));
                Ok(Step::Continue(server_first))
            }
            State::ClientFinal(exchange) => {
                let step = self.client_final(&exchange, token)?;
                self.state = State::Complete;
                Ok(step)
            }
            State::Complete | State::Failed => Err(SaslError::IllegalState {
                mechanism,
                state: "FAILED",
            }),
        }
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete)
    }
}
