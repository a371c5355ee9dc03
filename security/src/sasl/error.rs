//! Failures of a server exchange, and what Kafka's broker answers for each.
//!
//! Kafka's
//! [`SaslServerAuthenticator`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/authenticator/SaslServerAuthenticator.java)
//! (`handleSaslToken`) answers a mechanism's failure with SASL_AUTHENTICATION_FAILED (58) in one
//! of two ways: a `SaslAuthenticationException`'s message goes to the client as is (here
//! [`SaslError::Rejected`]); any other `SaslException` is replaced by a fixed message that says
//! nothing about the cause, "Authentication failed during authentication due to invalid
//! credentials with SASL mechanism `<name>`", so that it cannot tell whether a user exists (here
//! [`SaslError::Failed`], whose [`FailureReason`] is for the server's log only).

use std::fmt;

use super::mechanism::Mechanism;

/// Kafka's SASL_AUTHENTICATION_FAILED error code.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// Kafka's UNSUPPORTED_SASL_MECHANISM error code.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// Kafka's ILLEGAL_SASL_STATE error code.
pub const ILLEGAL_SASL_STATE: i16 = 34;

/// Why an exchange failed, for the server's log. The client never sees it (see
/// [`SaslError::client_message`]). Where Kafka's mechanisms have a message for the same cause,
/// [`Display`](fmt::Display) gives Kafka's wording. No variant holds a password, a proof or a
/// token's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureReason {
    /// A token that is not the mechanism's message: what was wrong with it.
    Malformed(&'static str),
    /// SCRAM's client asked for channel binding (gs2 header `y` or `p=`), which Kafka does not
    /// support.
    ChannelBindingRequested,
    /// SCRAM's client-final `c=` is not the gs2 header of its client-first.
    ChannelBindingMismatch,
    /// SCRAM's reserved `m=` attribute, which RFC 5802 says must fail the exchange.
    MandatoryExtension,
    /// SCRAM's `tokenauth=true` extension: delegation tokens, which this server does not issue.
    DelegationTokenUnsupported,
    /// No credential for the user (for PLAIN: no such user or wrong password is
    /// [`SaslError::Rejected`], as in Kafka).
    UnknownUser,
    /// SCRAM's client-final nonce is not the one of server-first.
    NonceMismatch,
    /// SCRAM's client proof is wrong: wrong password, or a tampered message.
    InvalidProof,
    /// The stored credential's iteration count is under the mechanism's minimum.
    IterationsBelowMinimum {
        /// The credential's count.
        iterations: u32,
        /// The mechanism's minimum.
        minimum: u32,
    },
    /// The stored credential does not fit the mechanism (key lengths).
    InvalidCredential,
    /// The credential store failed; its message.
    CredentialUnavailable(String),
    /// PLAIN's authentication identity is empty.
    UsernameNotSpecified,
    /// PLAIN's password is empty.
    PasswordNotSpecified,
    /// The server itself failed (its random source).
    Internal(String),
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(what) => write!(f, "Invalid message: {what}"),
            Self::ChannelBindingRequested => f.write_str("channel binding is not supported"),
            Self::ChannelBindingMismatch => f.write_str(
                "channel binding in the final client message does not match the gs2 header",
            ),
            Self::MandatoryExtension => f.write_str("mandatory extension (m=) is not supported"),
            Self::DelegationTokenUnsupported => {
                f.write_str("Token Authentication failed: delegation tokens are not supported")
            }
            Self::UnknownUser => f.write_str("Authentication failed: Invalid user credentials"),
            Self::NonceMismatch => f.write_str("Invalid client nonce in the final client message."),
            Self::InvalidProof => f.write_str("Invalid client credentials"),
            Self::IterationsBelowMinimum {
                iterations,
                minimum,
            } => {
                write!(
                    f,
                    "Iterations {iterations} is less than the minimum {minimum}"
                )
            }
            Self::InvalidCredential => f.write_str("stored credential does not fit the mechanism"),
            Self::CredentialUnavailable(cause) => {
                write!(
                    f,
                    "Authentication failed: Credentials could not be obtained: {cause}"
                )
            }
            Self::UsernameNotSpecified => {
                f.write_str("Authentication failed: username not specified")
            }
            Self::PasswordNotSpecified => {
                f.write_str("Authentication failed: password not specified")
            }
            Self::Internal(cause) => write!(f, "internal error: {cause}"),
        }
    }
}

/// A failed step of a server exchange. The exchange is over: further steps fail with
/// [`SaslError::IllegalState`].
///
/// [`Display`](fmt::Display) is for the server's log; answer the client with
/// [`error_code`](Self::error_code) and [`client_message`](Self::client_message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SaslError {
    /// Kafka's `SaslException`: the client gets only Kafka's generic message.
    #[error("SASL/{mechanism} authentication failed: {reason}")]
    Failed {
        /// The exchange's mechanism.
        mechanism: Mechanism,
        /// Why, for the log.
        reason: FailureReason,
    },
    /// Kafka's `SaslAuthenticationException`: the message is Kafka's, and goes to the client.
    #[error("SASL/{mechanism} authentication failed: {message}")]
    Rejected {
        /// The exchange's mechanism.
        mechanism: Mechanism,
        /// The message for the client.
        message: &'static str,
    },
    /// The token is longer than the server takes; it was not parsed.
    #[error("SASL/{mechanism} token of {len} bytes is over the limit of {max} bytes")]
    TokenTooLarge {
        /// The exchange's mechanism.
        mechanism: Mechanism,
        /// The token's length.
        len: usize,
        /// The server's limit.
        max: usize,
    },
    /// A token after the exchange ended (Kafka's `IllegalSaslStateException`).
    #[error("Unexpected challenge in Sasl server state {state}")]
    IllegalState {
        /// The exchange's mechanism.
        mechanism: Mechanism,
        /// `COMPLETE` or `FAILED`.
        state: &'static str,
    },
}

impl SaslError {
    pub(super) const fn failed(mechanism: Mechanism, reason: FailureReason) -> Self {
        Self::Failed { mechanism, reason }
    }

    pub(super) const fn malformed(mechanism: Mechanism, what: &'static str) -> Self {
        Self::Failed {
            mechanism,
            reason: FailureReason::Malformed(what),
        }
    }

    /// The exchange's mechanism.
    pub const fn mechanism(&self) -> Mechanism {
        match self {
            Self::Failed { mechanism, .. }
            | Self::Rejected { mechanism, .. }
            | Self::TokenTooLarge { mechanism, .. }
            | Self::IllegalState { mechanism, .. } => *mechanism,
        }
    }

    /// The error code for the SaslAuthenticate response: SASL_AUTHENTICATION_FAILED (58), or
    /// ILLEGAL_SASL_STATE (34) for a token after the end.
    pub const fn error_code(&self) -> i16 {
        match self {
            Self::IllegalState { .. } => ILLEGAL_SASL_STATE,
            _ => SASL_AUTHENTICATION_FAILED,
        }
    }

    /// The error message for the SaslAuthenticate response, worded as Kafka's broker words it
    /// (clients show it). `reauthenticating` is true in a re-authentication (KIP-368), where
    /// Kafka says "re-authentication" for "authentication".
    pub fn client_message(&self, reauthenticating: bool) -> String {
        match self {
            Self::Failed { mechanism, .. } => {
                let during = if reauthenticating {
                    "re-authentication"
                } else {
                    "authentication"
                };
                format!(
                    "Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"
                )
            }
            Self::Rejected { message, .. } => (*message).to_owned(),
            Self::TokenTooLarge { .. } => {
                "Failing SASL authentication due to invalid receive size".to_owned()
            }
            Self::IllegalState { .. } => self.to_string(),
        }
    }

    /// The reason, for a [`SaslError::Failed`].
    pub const fn reason(&self) -> Option<&FailureReason> {
        match self {
            Self::Failed { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// A mechanism name this server does not run (SaslHandshake's UNSUPPORTED_SASL_MECHANISM, 33).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unsupported SASL mechanism {name}")]
pub struct UnsupportedMechanism {
    /// The name asked for, cut to 256 bytes.
    pub name: String,
}

impl UnsupportedMechanism {
    pub(super) fn new(name: &str) -> Self {
        let mut end = name.len().min(256);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            name: name[..end].to_owned(),
        }
    }

    /// UNSUPPORTED_SASL_MECHANISM (33).
    pub const fn error_code(&self) -> i16 {
        UNSUPPORTED_SASL_MECHANISM
    }
}
