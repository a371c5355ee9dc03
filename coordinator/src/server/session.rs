//! Who is on the other end of a client connection: the principal it authenticated as and the
//! address it connects from, which authorization checks against ACLs.

use std::net::IpAddr;

use security::Principal;

/// The principal of a connection that did not authenticate (a PLAINTEXT listener), as Kafka's
/// `KafkaPrincipal.ANONYMOUS`.
pub fn anonymous() -> Principal {
    Principal {
        kind: "User".to_owned(),
        name: "ANONYMOUS".to_owned(),
    }
}

/// One client connection's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The authenticated principal (`User:ANONYMOUS` before or without authentication).
    pub principal: Principal,
    /// The client's address.
    pub client_host: IpAddr,
}

impl Session {
    /// An unauthenticated connection from `client_host`.
    pub fn anonymous(client_host: IpAddr) -> Self {
        Self {
            principal: anonymous(),
            client_host,
        }
    }
}
