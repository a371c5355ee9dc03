//! SASL exchanges for Kafka listeners, apart from any transport: bytes in, bytes out.
//!
//! A Kafka client picks a mechanism with SaslHandshake, then sends its tokens one by one in
//! SaslAuthenticate requests and gets the server's tokens back in the responses
//! ([KIP-152](https://cwiki.apache.org/confluence/display/KAFKA/KIP-152+-+Improve+diagnostics+for+SASL+authentication+failures)).
//! This module holds the mechanisms' state machines; the listener owns the connection.
//!
//! - [`Mechanism`]: the names of `sasl.enabled.mechanisms` (`PLAIN`, `SCRAM-SHA-256`,
//!   `SCRAM-SHA-512`), and [`ScramMechanism`] with Kafka's iteration bounds.
//! - [`SaslServer`]: one exchange on the server side, fed token by token ([`Step`]); made by
//!   [`SaslServerFactory`] for a mechanism named in a handshake, or directly as
//!   [`PlainServer`] and [`ScramServer`]. Failures are [`SaslError`]s that carry the error code
//!   and the message Kafka's broker answers.
//! - PLAIN ([RFC 4616](https://www.rfc-editor.org/rfc/rfc4616)) against a [`PlainUsers`] table,
//!   read from Kafka's JAAS form ([`JaasConfig`], [`PlainJaasConfig`]).
//! - SCRAM ([RFC 5802](https://www.rfc-editor.org/rfc/rfc5802),
//!   [RFC 7677](https://www.rfc-editor.org/rfc/rfc7677)) against a [`CredentialStore`] of
//!   [`ScramCredential`]s, which are made from a password or from what AlterUserScramCredentials
//!   carries ([`validate_alterations`]).
//! - The client side, for the daemon's own connections and for tests: [`SaslClient`],
//!   [`PlainClient`], [`ScramClient`].

mod client;
mod crypto;
mod error;
mod factory;
mod jaas;
mod mechanism;
mod plain;
mod scram;

#[cfg(test)]
mod tests;

pub use client::{SaslClient, SaslClientError};
pub use crypto::{FixedNonce, NonceSource, RandomError, RandomNonce};
pub use error::{
    FailureReason, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, SaslError,
    UNSUPPORTED_SASL_MECHANISM, UnsupportedMechanism,
};
pub use factory::{FactoryError, SaslServerFactory};
pub use jaas::{
    ClientCredentials, ControlFlag, JaasConfig, JaasEntry, JaasError, JaasErrorKind,
    PLAIN_LOGIN_MODULE, PlainJaasConfig, SCRAM_LOGIN_MODULE,
};
pub use mechanism::{Mechanism, ScramMechanism};
pub use plain::{PlainClient, PlainServer, PlainUsers};
pub use scram::{
    Alteration, AlterationResult, CredentialLookupError, CredentialStore, DUPLICATE_RESOURCE,
    DummySaltKey, RESOURCE_NOT_FOUND, SCRAM_CREDENTIAL_VERSION, ScramApiError, ScramClient,
    ScramClientOptions, ScramCredential, ScramDeletion, ScramServer, ScramServerOptions,
    ScramUpsertion, UNACCEPTABLE_CREDENTIAL, UNKNOWN_SERVER_ERROR, UnknownUserPolicy,
    validate_alterations, validate_deletion, validate_upsertion,
};

/// The largest client token a server takes by default, in bytes. SCRAM and PLAIN tokens are a
/// few hundred bytes; a larger one is refused before it is parsed.
pub const DEFAULT_MAX_TOKEN_LEN: usize = 4096;

/// What a server answers to one client token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes (SaslAuthenticate's `auth_bytes`) and wait for the client's next token.
    Continue(Vec<u8>),
    /// The client is authenticated as `principal_name` (the `User:` principal's name); send
    /// `final_bytes` (empty for PLAIN, SCRAM's server-final message) as the last response.
    Done {
        /// The authenticated user name.
        principal_name: String,
        /// The last token to send to the client.
        final_bytes: Vec<u8>,
    },
}

/// The server side of one SASL exchange, fed the client's tokens in order.
///
/// Object safe: a listener keeps a `Box<dyn SaslServer>` per connection. After an error or
/// after [`Step::Done`] every further call fails with [`SaslError::IllegalState`].
pub trait SaslServer: Send + std::fmt::Debug {
    /// The mechanism this exchange runs.
    fn mechanism(&self) -> Mechanism;

    /// Takes the client's next token and answers it.
    fn step(&mut self, token: &[u8]) -> Result<Step, SaslError>;

    /// Whether the exchange ended with the client authenticated.
    fn is_complete(&self) -> bool;
}
