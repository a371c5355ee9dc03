//! The client side of SCRAM, after Kafka's
//! [`ScramSaslClient`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/scram/internals/ScramSaslClient.java):
//! gs2 header `n,,`, no extensions.

use std::fmt;

use super::super::DEFAULT_MAX_TOKEN_LEN;
use super::super::client::{SaslClient, SaslClientError};
use super::super::crypto::{self, NonceSource, RandomNonce};
use super::super::error::FailureReason;
use super::super::mechanism::{Mechanism, ScramMechanism};
use super::messages::{self, ServerFinal, encode_base64, encode_saslname};

/// A SCRAM client's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramClientOptions {
    /// The largest iteration count the client computes (a server asking for more is refused,
    /// so that a rogue server cannot make the client spin). Kafka's credentials have at most
    /// 16384.
    pub max_iterations: u32,
    /// The largest server token taken, in bytes.
    pub max_token_len: usize,
}

impl Default for ScramClientOptions {
    /// At most 65536 iterations and [`DEFAULT_MAX_TOKEN_LEN`] bytes.
    fn default() -> Self {
        Self {
            max_iterations: 65536,
            max_token_len: DEFAULT_MAX_TOKEN_LEN,
        }
    }
}

/// The client side of one SCRAM exchange: [`client_first`](Self::client_first),
/// [`client_final`](Self::client_final) with the server's first message, and
/// [`verify_server_final`](Self::verify_server_final) with its last, which authenticates the
/// server. [`Debug`](fmt::Debug) hides the password.
pub struct ScramClient {
    mechanism: ScramMechanism,
    username: String,
    password: String,
    nonces: Box<dyn NonceSource>,
    options: ScramClientOptions,
    state: State,
}

enum State {
    Initial,
    SentFirst {
        client_nonce: String,
        client_first_bare: String,
    },
    SentFinal {
        server_signature: Vec<u8>,
    },
    Complete,
    Failed,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn malformed(reason: FailureReason) -> SaslClientError {
    match reason {
        FailureReason::Malformed(what) => SaslClientError::Malformed(what),
        FailureReason::MandatoryExtension => {
            SaslClientError::Malformed("mandatory extension (m=) is not supported")
        }
        _ => SaslClientError::Malformed("SCRAM server message"),
    }
}

impl ScramClient {
    /// A client for `username` with `password` (its UTF-8 bytes, as Kafka's clients take it),
    /// with random nonces and default options.
    pub fn new(
        mechanism: ScramMechanism,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Self {
            mechanism,
            username: username.into(),
            password: password.into(),
            nonces: Box::new(RandomNonce),
            options: ScramClientOptions::default(),
            state: State::Initial,
        }
    }

    /// The same with another nonce source (tests).
    pub fn with_nonce_source(mut self, nonces: Box<dyn NonceSource>) -> Self {
        self.nonces = nonces;
        self
    }

    /// The same with other options.
    pub fn with_options(mut self, options: ScramClientOptions) -> Self {
        self.options = options;
        self
    }

    /// The first message: `n,,n=<user>,r=<client nonce>`.
    pub fn client_first(&mut self) -> Result<Vec<u8>, SaslClientError> {
        if !matches!(self.state, State::Initial) {
            return Err(SaslClientError::IllegalState);
        }
        self.state = State::Failed;
        if self.username.is_empty() || self.username.contains('\0') {
            return Err(SaslClientError::InvalidInput(
                "SCRAM user name must be non-empty, without NUL",
            ));
        }
        let client_nonce = self.nonces.nonce()?;
        if !crypto::is_printable(&client_nonce) {
            return Err(SaslClientError::InvalidInput(
                "the nonce source gave an invalid nonce",
            ));
        }
        let client_first_bare = format!("n={},r={client_nonce}", encode_saslname(&self.username));
        let message = format!("n,,{client_first_bare}").into_bytes();
        self.state = State::SentFirst {
            client_nonce,
            client_first_bare,
        };
        Ok(message)
    }

    /// The final message, answering the server's first: the proof that the client knows the
    /// password.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, SaslClientError> {
        let State::SentFirst {
            client_nonce,
            client_first_bare,
        } = std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(SaslClientError::IllegalState);
        };
        let mech = self.mechanism;
        if server_first.len() > self.options.max_token_len {
            return Err(SaslClientError::Malformed(
                "SCRAM server first message too large",
            ));
        }
        let text = std::str::from_utf8(server_first)
            .map_err(|_| SaslClientError::Malformed("SCRAM server first message: not UTF-8"))?;
        let first = messages::parse_server_first(text).map_err(malformed)?;
        if !first.nonce.starts_with(&client_nonce) || first.nonce.len() == client_nonce.len() {
            return Err(SaslClientError::NonceMismatch);
        }
        if first.iterations < mech.min_iterations() {
            return Err(SaslClientError::TooFewIterations {
                iterations: first.iterations,
                minimum: mech.min_iterations(),
                mechanism: mech,
            });
        }
        if first.iterations > self.options.max_iterations {
            return Err(SaslClientError::TooManyIterations {
                iterations: first.iterations,
                maximum: self.options.max_iterations,
                mechanism: mech,
            });
        }
        let salted_password = mech.salted_password(&self.password, &first.salt, first.iterations);
        let without_proof = format!("c=biws,r={}", first.nonce);
        let auth_message = [
            client_first_bare.as_bytes(),
            b",",
            server_first,
            b",",
            without_proof.as_bytes(),
        ];
        let client_key = crypto::hmac(mech, &salted_password, &[b"Client Key"]);
        let stored_key = crypto::hash(mech, &client_key);
        let client_signature = crypto::hmac(mech, &stored_key, &auth_message);
        let proof = crypto::xor(&client_key, &client_signature)
            .ok_or(SaslClientError::Malformed("SCRAM: key lengths differ"))?;
        let server_key = crypto::hmac(mech, &salted_password, &[b"Server Key"]);
        let server_signature = crypto::hmac(mech, &server_key, &auth_message);
        self.state = State::SentFinal { server_signature };
        Ok(format!("{without_proof},p={}", encode_base64(&proof)).into_bytes())
    }

    /// Checks the server's last message: its signature proves that it holds the credential.
    pub fn verify_server_final(&mut self, server_final: &[u8]) -> Result<(), SaslClientError> {
        let State::SentFinal { server_signature } =
            std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(SaslClientError::IllegalState);
        };
        if server_final.len() > self.options.max_token_len {
            return Err(SaslClientError::Malformed(
                "SCRAM server final message too large",
            ));
        }
        let text = std::str::from_utf8(server_final)
            .map_err(|_| SaslClientError::Malformed("SCRAM server final message: not UTF-8"))?;
        match messages::parse_server_final(text).map_err(malformed)? {
            ServerFinal::Error(error) => Err(SaslClientError::ServerError {
                mechanism: self.mechanism,
                error: error.to_owned(),
            }),
            ServerFinal::Verifier(signature) => {
                if crypto::ct_eq(&signature, &server_signature) {
                    self.state = State::Complete;
                    Ok(())
                } else {
                    Err(SaslClientError::InvalidServerSignature)
                }
            }
        }
    }
}

impl SaslClient for ScramClient {
    fn mechanism(&self) -> Mechanism {
        self.mechanism.mechanism()
    }

    fn initial_response(&mut self) -> Result<Vec<u8>, SaslClientError> {
        self.client_first()
    }

    fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, SaslClientError> {
        match self.state {
            State::SentFirst { .. } => self.client_final(challenge).map(Some),
            State::SentFinal { .. } => self.verify_server_final(challenge).map(|()| None),
            _ => Err(SaslClientError::IllegalState),
        }
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete)
    }
}
