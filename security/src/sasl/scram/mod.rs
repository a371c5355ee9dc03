//! SCRAM-SHA-256 and SCRAM-SHA-512 ([RFC 5802](https://www.rfc-editor.org/rfc/rfc5802),
//! [RFC 7677](https://www.rfc-editor.org/rfc/rfc7677)), as Kafka runs them
//! ([KIP-84](https://cwiki.apache.org/confluence/display/KAFKA/KIP-84%3A+Support+SASL+SCRAM+mechanisms)).

mod client;
mod credential;
mod messages;
mod server;

pub use client::{ScramClient, ScramClientOptions};
pub use credential::{
    Alteration, AlterationResult, DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND, SCRAM_CREDENTIAL_VERSION,
    ScramApiError, ScramCredential, ScramDeletion, ScramUpsertion, UNACCEPTABLE_CREDENTIAL,
    UNKNOWN_SERVER_ERROR, validate_alterations, validate_deletion, validate_upsertion,
};
pub use server::{
    CredentialLookupError, CredentialStore, DummySaltKey, ScramServer, ScramServerOptions,
    UnknownUserPolicy,
};
