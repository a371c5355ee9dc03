//! Servers for the mechanisms a listener enables.

use std::fmt;
use std::sync::Arc;

use super::SaslServer;
use super::error::UnsupportedMechanism;
use super::mechanism::Mechanism;
use super::plain::{PlainServer, PlainUsers};
use super::scram::{CredentialStore, ScramServer, ScramServerOptions};

/// A listener's mechanisms cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FactoryError {
    /// `sasl.enabled.mechanisms` is empty (Kafka's message).
    #[error("No SASL mechanisms are enabled")]
    NoMechanisms,
    /// A mechanism is enabled without what it checks against (a user table for PLAIN, a
    /// credential store for SCRAM); Kafka's message.
    #[error("Callback handler not specified for SASL mechanism {0}")]
    Missing(Mechanism),
}

/// Makes a [`SaslServer`] for the mechanism a client names in SaslHandshake, among the
/// listener's `sasl.enabled.mechanisms`.
#[derive(Clone)]
pub struct SaslServerFactory {
    enabled: Vec<Mechanism>,
    plain_users: Option<Arc<PlainUsers>>,
    scram_store: Option<Arc<dyn CredentialStore>>,
    scram_options: ScramServerOptions,
}

impl fmt::Debug for SaslServerFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslServerFactory")
            .field("enabled", &self.enabled)
            .field("plain_users", &self.plain_users)
            .field("scram_options", &self.scram_options)
            .finish_non_exhaustive()
    }
}

impl SaslServerFactory {
    /// A factory for `enabled` (duplicates dropped), checking each against `plain_users`
    /// (PLAIN) or `scram_store` (SCRAM). `scram_options.max_token_len` bounds PLAIN's token too.
    pub fn new(
        enabled: &[Mechanism],
        plain_users: Option<Arc<PlainUsers>>,
        scram_store: Option<Arc<dyn CredentialStore>>,
        scram_options: ScramServerOptions,
    ) -> Result<Self, FactoryError> {
        let mut unique = Vec::new();
        for &m in enabled {
            let backed = if m.scram().is_some() {
                scram_store.is_some()
            } else {
                plain_users.is_some()
            };
            if !backed {
                return Err(FactoryError::Missing(m));
            }
            if !unique.contains(&m) {
                unique.push(m);
            }
        }
        if unique.is_empty() {
            return Err(FactoryError::NoMechanisms);
        }
        Ok(Self {
            enabled: unique,
            plain_users,
            scram_store,
            scram_options,
        })
    }

    /// The enabled mechanisms, in configuration order.
    pub fn enabled(&self) -> &[Mechanism] {
        &self.enabled
    }

    /// The enabled mechanisms' names, for SaslHandshake's `mechanisms`.
    pub fn enabled_names(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|m| m.name()).collect()
    }

    /// A server for the mechanism named `name` in a SaslHandshake; an unknown or disabled one is
    /// UNSUPPORTED_SASL_MECHANISM (33) "Unsupported SASL mechanism `<name>`", as Kafka answers.
    pub fn server(&self, name: &str) -> Result<Box<dyn SaslServer>, UnsupportedMechanism> {
        let mechanism: Mechanism = name.parse()?;
        if !self.enabled.contains(&mechanism) {
            return Err(UnsupportedMechanism::new(name));
        }
        let max_token_len = self.scram_options.max_token_len;
        match (mechanism.scram(), &self.plain_users, &self.scram_store) {
            (None, Some(users), _) => Ok(Box::new(
                PlainServer::new(users.clone()).with_max_token_len(max_token_len),
            )),
            (Some(scram), _, Some(store)) => Ok(Box::new(ScramServer::new(
                scram,
                store.clone(),
                self.scram_options.clone(),
            ))),
            // `new` checked that every enabled mechanism has its backing.
            _ => Err(UnsupportedMechanism::new(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::{ScramMechanism, UnknownUserPolicy};
    use super::*;

    #[test]
    fn sasl_factory() {
        let store: Arc<dyn CredentialStore> = Arc::new(HashMap::new());
        let options = ScramServerOptions::new(UnknownUserPolicy::FailAtClientFirst);
        assert_eq!(
            SaslServerFactory::new(
                &[Mechanism::Plain],
                None,
                Some(store.clone()),
                options.clone()
            )
            .unwrap_err(),
            FactoryError::Missing(Mechanism::Plain)
        );
        assert_eq!(
            SaslServerFactory::new(
                &[Mechanism::ScramSha256],
                Some(Arc::default()),
                None,
                options.clone()
            )
            .unwrap_err()
            .to_string(),
            "Callback handler not specified for SASL mechanism SCRAM-SHA-256"
        );
        assert_eq!(
            SaslServerFactory::new(&[], None, None, options.clone()).unwrap_err(),
            FactoryError::NoMechanisms
        );
        let f = SaslServerFactory::new(
            &[
                Mechanism::ScramSha512,
                Mechanism::Plain,
                Mechanism::ScramSha512,
            ],
            Some(Arc::default()),
            Some(store),
            options,
        )
        .unwrap();
        assert_eq!(f.enabled_names(), ["SCRAM-SHA-512", "PLAIN"]);
        assert_eq!(f.server("PLAIN").unwrap().mechanism(), Mechanism::Plain);
        assert_eq!(
            f.server("SCRAM-SHA-512").unwrap().mechanism(),
            ScramMechanism::Sha512.mechanism()
        );
        for name in ["SCRAM-SHA-256", "GSSAPI", "plain", ""] {
            let err = f.server(name).unwrap_err();
            assert_eq!(err.error_code(), 33);
            assert_eq!(
                err.to_string(),
                format!("Unsupported SASL mechanism {name}")
            );
        }
    }
}
