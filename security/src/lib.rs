//! Kafka's security model, apart from any transport: who the caller is ([`Principal`]), what it
//! may do (ACLs and the [`acl::Authorizer`]) and how it proves who it is (SASL server
//! exchanges, [`sasl`]). No IO and no async runtime: the daemon, a broker embedding the
//! coordinator and the reference broker put it behind their own listeners.

pub mod acl;
pub mod sasl;

pub use acl::Principal;
