//! SASL/PLAIN ([RFC 4616](https://www.rfc-editor.org/rfc/rfc4616)), as Kafka's
//! [`PlainSaslServer`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/plain/internals/PlainSaslServer.java)
//! and `PlainServerCallbackHandler` run it: one client token `[authzid] NUL authcid NUL passwd`,
//! checked against the `user_<name>="<password>"` table of the listener's JAAS config, and an
//! empty answer.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::client::{SaslClient, SaslClientError};
use super::crypto;
use super::error::{FailureReason, SaslError};
use super::mechanism::Mechanism;
use super::{DEFAULT_MAX_TOKEN_LEN, SaslServer, Step};

const MECHANISM: Mechanism = Mechanism::Plain;

/// Kafka's answer to a wrong password or an unknown user (a `SaslAuthenticationException`).
const INVALID_USERNAME_OR_PASSWORD: &str = "Authentication failed: Invalid username or password";

/// Kafka's answer when the authorization id is not the user (PLAIN and SCRAM).
pub(super) const AUTHZID_MISMATCH: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// PLAIN's users and their passwords. [`Debug`](fmt::Debug) shows the names only.
#[derive(Clone, Default)]
pub struct PlainUsers {
    users: HashMap<String, String>,
}

impl PlainUsers {
    /// No users.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a user.
    pub fn insert(&mut self, user: impl Into<String>, password: impl Into<String>) {
        self.users.insert(user.into(), password.into());
    }

    /// Whether `user` is in the table.
    pub fn contains(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    /// The number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are no users.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The user names, in no order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// Whether `password` is `user`'s. The comparison takes the same time whether the user
    /// exists or not and wherever the passwords differ (digests compared in constant time).
    pub fn verify(&self, user: &str, password: &str) -> bool {
        match self.users.get(user) {
            Some(expected) => crypto::passwords_eq(expected.as_bytes(), password.as_bytes()),
            None => {
                // The same work as for a known user, and a refusal.
                let _ = crypto::passwords_eq(b"", password.as_bytes());
                false
            }
        }
    }
}

impl<U: Into<String>, P: Into<String>> FromIterator<(U, P)> for PlainUsers {
    fn from_iter<I: IntoIterator<Item = (U, P)>>(iter: I) -> Self {
        Self {
            users: iter
                .into_iter()
                .map(|(u, p)| (u.into(), p.into()))
                .collect(),
        }
    }
}

impl fmt::Debug for PlainUsers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.names().collect();
        names.sort_unstable();
        f.debug_struct("PlainUsers")
            .field("users", &names)
            .finish_non_exhaustive()
    }
}

/// The server side of one PLAIN exchange.
#[derive(Debug)]
pub struct PlainServer {
    users: Arc<PlainUsers>,
    max_token_len: usize,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Initial,
    Complete,
    Failed,
}

impl PlainServer {
    /// An exchange against `users`, taking tokens up to [`DEFAULT_MAX_TOKEN_LEN`] bytes.
    pub fn new(users: Arc<PlainUsers>) -> Self {
        Self {
            users,
            max_token_len: DEFAULT_MAX_TOKEN_LEN,
            state: State::Initial,
        }
    }

    /// The same with another token bound (RFC 4616 asks for at least 255 bytes per field).
    pub fn with_max_token_len(mut self, max_token_len: usize) -> Self {
        self.max_token_len = max_token_len;
        self
    }

    fn evaluate(&self, token: &[u8]) -> Result<String, SaslError> {
        if token.len() > self.max_token_len {
            return Err(SaslError::TokenTooLarge {
                mechanism: MECHANISM,
                len: token.len(),
                max: self.max_token_len,
            });
        }
        let text = std::str::from_utf8(token).map_err(|_| {
            SaslError::malformed(MECHANISM, "Invalid SASL/PLAIN response: not UTF-8")
        })?;
        let mut fields = text.split('\0');
        let (Some(authzid), Some(username), Some(password), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(SaslError::malformed(
                MECHANISM,
                "Invalid SASL/PLAIN response: expected 3 tokens",
            ));
        };
        if username.is_empty() {
            return Err(SaslError::failed(
                MECHANISM,
                FailureReason::UsernameNotSpecified,
            ));
        }
        if password.is_empty() {
            return Err(SaslError::failed(
                MECHANISM,
                FailureReason::PasswordNotSpecified,
            ));
        }
        if !self.users.verify(username, password) {
            return Err(SaslError::Rejected {
                mechanism: MECHANISM,
                message: INVALID_USERNAME_OR_PASSWORD,
            });
        }
        // Kafka checks the authorization id after the password, so that only a client that
        // knows the password learns about it.
        if !authzid.is_empty() && authzid != username {
            return Err(SaslError::Rejected {
                mechanism: MECHANISM,
                message: AUTHZID_MISMATCH,
            });
        }
        Ok(username.to_owned())
    }
}

impl SaslServer for PlainServer {
    fn mechanism(&self) -> Mechanism {
        MECHANISM
    }

    fn step(&mut self, token: &[u8]) -> Result<Step, SaslError> {
        match self.state {
            State::Initial => {}
            State::Complete => {
                return Err(SaslError::IllegalState {
                    mechanism: MECHANISM,
                    state: "COMPLETE",
                });
            }
            State::Failed => {
                return Err(SaslError::IllegalState {
                    mechanism: MECHANISM,
                    state: "FAILED",
                });
            }
        }
        match self.evaluate(token) {
            Ok(principal_name) => {
                self.state = State::Complete;
                Ok(Step::Done {
                    principal_name,
                    final_bytes: Vec::new(),
                })
            }
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }

    fn is_complete(&self) -> bool {
        self.state == State::Complete
    }
}

/// The client side of PLAIN: one token, then the server's empty answer.
/// [`Debug`](fmt::Debug) hides the password.
#[derive(Clone)]
pub struct PlainClient {
    authzid: String,
    username: String,
    password: String,
    state: ClientState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    Initial,
    Sent,
    Complete,
    Failed,
}

impl PlainClient {
    /// A client for `username` with `password`, without an authorization id (as Kafka's clients).
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            authzid: String::new(),
            username: username.into(),
            password: password.into(),
            state: ClientState::Initial,
        }
    }

    /// The same, asking to act as `authzid` (Kafka accepts only the user itself).
    pub fn with_authzid(mut self, authzid: impl Into<String>) -> Self {
        self.authzid = authzid.into();
        self
    }

    /// The token: `authzid NUL username NUL password`.
    pub fn token(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(self.authzid.len() + self.username.len() + self.password.len() + 2);
        out.extend_from_slice(self.authzid.as_bytes());
        out.push(0);
        out.extend_from_slice(self.username.as_bytes());
        out.push(0);
        out.extend_from_slice(self.password.as_bytes());
        out
    }
}

impl fmt::Debug for PlainClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainClient")
            .field("authzid", &self.authzid)
            .field("username", &self.username)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl SaslClient for PlainClient {
    fn mechanism(&self) -> Mechanism {
        MECHANISM
    }

    fn initial_response(&mut self) -> Result<Vec<u8>, SaslClientError> {
        if self.state != ClientState::Initial {
            return Err(SaslClientError::IllegalState);
        }
        for field in [&self.authzid, &self.username, &self.password] {
            if field.contains('\0') {
                self.state = ClientState::Failed;
                return Err(SaslClientError::InvalidInput(
                    "PLAIN fields cannot hold NUL",
                ));
            }
        }
        self.state = ClientState::Sent;
        Ok(self.token())
    }

    fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, SaslClientError> {
        if self.state != ClientState::Sent {
            return Err(SaslClientError::IllegalState);
        }
        if !challenge.is_empty() {
            self.state = ClientState::Failed;
            return Err(SaslClientError::Malformed(
                "PLAIN's server answer must be empty",
            ));
        }
        self.state = ClientState::Complete;
        Ok(None)
    }

    fn is_complete(&self) -> bool {
        self.state == ClientState::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> PlainServer {
        let users: PlainUsers = [("alice", "alice-secret"), ("admin", "admin-secret")]
            .into_iter()
            .collect();
        PlainServer::new(Arc::new(users))
    }

    #[test]
    fn sasl_plain_good_password() {
        let mut s = server();
        let step = s.step(b"\0alice\0alice-secret").unwrap();
        assert_eq!(
            step,
            Step::Done {
                principal_name: "alice".into(),
                final_bytes: vec![]
            }
        );
        assert!(s.is_complete());
        let err = s.step(b"\0alice\0alice-secret").unwrap_err();
        assert_eq!(
            err,
            SaslError::IllegalState {
                mechanism: Mechanism::Plain,
                state: "COMPLETE"
            }
        );
        assert_eq!(err.error_code(), 34);
        // An authorization id equal to the user is fine.
        let step = server().step(b"alice\0alice\0alice-secret").unwrap();
        assert!(matches!(step, Step::Done { principal_name, .. } if principal_name == "alice"));
    }

    #[test]
    fn sasl_plain_bad_password_and_unknown_user_answer_alike() {
        let wrong = server().step(b"\0alice\0admin-secret").unwrap_err();
        let unknown = server().step(b"\0mallory\0alice-secret").unwrap_err();
        let prefix = server().step(b"\0alice\0alice-secre").unwrap_err();
        for err in [&wrong, &unknown, &prefix] {
            assert_eq!(err.error_code(), 58);
            assert_eq!(
                err.client_message(false),
                "Authentication failed: Invalid username or password"
            );
        }
        assert_eq!(wrong, unknown);
        let mut s = server();
        s.step(b"\0alice\0nope").unwrap_err();
        assert!(!s.is_complete());
        assert_eq!(
            s.step(b"\0alice\0alice-secret").unwrap_err(),
            SaslError::IllegalState {
                mechanism: Mechanism::Plain,
                state: "FAILED"
            }
        );
    }

    #[test]
    fn sasl_plain_authzid_mismatch() {
        let err = server().step(b"admin\0alice\0alice-secret").unwrap_err();
        assert_eq!(
            err.client_message(false),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
        // With a wrong password the password is what fails, as in Kafka.
        let err = server().step(b"admin\0alice\0wrong").unwrap_err();
        assert_eq!(
            err.client_message(false),
            "Authentication failed: Invalid username or password"
        );
    }

    #[test]
    fn sasl_plain_malformed_tokens() {
        let generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN";
        for token in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0alice\0",
            b"\0\0alice-secret",
            b"alice\0alice-secret",
            b"\0alice\0alice-secret\0",
            b"\0alice\0alice\0secret",
            b"\0al\xffice\0alice-secret",
        ] {
            let err = server().step(token).unwrap_err();
            assert!(
                matches!(err, SaslError::Failed { .. }),
                "{token:?}: {err:?}"
            );
            assert_eq!(err.client_message(false), generic);
            assert_eq!(err.error_code(), 58);
        }
        assert_eq!(
            server().step(b"\0\0x").unwrap_err().reason(),
            Some(&FailureReason::UsernameNotSpecified)
        );
        assert_eq!(
            server().step(b"\0alice\0").unwrap_err().reason(),
            Some(&FailureReason::PasswordNotSpecified)
        );
    }

    #[test]
    fn sasl_plain_oversized_token() {
        let mut token = b"\0alice\0".to_vec();
        token.resize(DEFAULT_MAX_TOKEN_LEN + 1, b'x');
        let err = server().step(&token).unwrap_err();
        assert!(
            matches!(err, SaslError::TokenTooLarge { len, max: DEFAULT_MAX_TOKEN_LEN, .. } if len == token.len())
        );
        assert_eq!(
            err.client_message(false),
            "Failing SASL authentication due to invalid receive size"
        );
        let err = server()
            .with_max_token_len(10)
            .step(b"\0alice\0alice-secret")
            .unwrap_err();
        assert!(matches!(err, SaslError::TokenTooLarge { .. }));
    }

    #[test]
    fn sasl_plain_client_round_trip() {
        let mut c = PlainClient::new("admin", "admin-secret");
        let token = c.initial_response().unwrap();
        assert_eq!(token, b"\0admin\0admin-secret");
        let mut s = server();
        let Step::Done {
            principal_name,
            final_bytes,
        } = s.step(&token).unwrap()
        else {
            panic!()
        };
        assert_eq!(principal_name, "admin");
        assert_eq!(c.step(&final_bytes).unwrap(), None);
        assert!(c.is_complete());
        assert!(!format!("{c:?}").contains("admin-secret"));
        assert!(!format!("{:?}", server()).contains("alice-secret"));
        let mut c = PlainClient::new("a\0b", "p");
        assert!(c.initial_response().is_err());
        let mut c = PlainClient::new("alice", "alice-secret").with_authzid("alice");
        assert_eq!(c.initial_response().unwrap(), b"alice\0alice\0alice-secret");
    }
}
