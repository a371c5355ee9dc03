//! The client side, for the daemon's own connections to brokers and for tests.

use super::crypto::RandomError;
use super::mechanism::{Mechanism, ScramMechanism};

/// The client side of one SASL exchange.
///
/// Send [`initial_response`](Self::initial_response) in the first SaslAuthenticate request, then
/// give each response's `auth_bytes` to [`step`](Self::step) and send what it returns, until it
/// returns `None`: the server is then authenticated too (SCRAM) or has accepted (PLAIN).
pub trait SaslClient: Send + std::fmt::Debug {
    /// The mechanism to name in SaslHandshake.
    fn mechanism(&self) -> Mechanism;

    /// The first token.
    fn initial_response(&mut self) -> Result<Vec<u8>, SaslClientError>;

    /// Takes the server's token; `Some` is the next token to send, `None` the end.
    fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, SaslClientError>;

    /// Whether the exchange ended successfully.
    fn is_complete(&self) -> bool;
}

/// A failed client step. Messages follow Kafka's
/// [`ScramSaslClient`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/scram/internals/ScramSaslClient.java)
/// where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SaslClientError {
    /// The server's token is not the expected message: what was wrong with it.
    #[error("Invalid server message: {0}")]
    Malformed(&'static str),
    /// The server's nonce does not extend ours.
    #[error("Invalid server nonce: does not start with client nonce")]
    NonceMismatch,
    /// The server asks for fewer iterations than the mechanism's minimum.
    #[error("Requested iterations {iterations} is less than the minimum {minimum} for {mechanism}")]
    TooFewIterations {
        /// The server's count.
        iterations: u32,
        /// The mechanism's minimum.
        minimum: u32,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// The server asks for more iterations than this client computes.
    #[error(
        "Requested iterations {iterations} is more than this client's maximum {maximum} for {mechanism}"
    )]
    TooManyIterations {
        /// The server's count.
        iterations: u32,
        /// This client's maximum.
        maximum: u32,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// The server answered SCRAM's server-final with an `e=` error.
    #[error("Sasl authentication using {mechanism} failed with error: {error}")]
    ServerError {
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The server's error value.
        error: String,
    },
    /// The server's signature is wrong: it does not know the credential.
    #[error("Invalid server signature in server final message")]
    InvalidServerSignature,
    /// The client's own input cannot be sent (e.g. a NUL in a PLAIN field).
    #[error("invalid client input: {0}")]
    InvalidInput(&'static str),
    /// A call out of order, or after the end.
    #[error("Unexpected challenge in Sasl client state")]
    IllegalState,
    /// The random source failed.
    #[error(transparent)]
    Random(#[from] RandomError),
}
