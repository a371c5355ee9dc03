//! The daemon's ACLs and SCRAM credentials: kept in the log backend
//! ([`txn_log::SecurityStore`]: sled's `security` tree, or `{prefix}/security/` in etcd) and
//! served from memory.
//!
//! - [`SecurityState::authorizer`]: the [`StandardAuthorizer`] of `authorizer.class.name`
//!   (`None` without one), with every stored ACL; replaced as a whole (an `Arc` swap) when
//!   ACLs change, so a check never waits for a write.
//! - [`credentials`]: the SCRAM credentials as a [`CredentialStore`], for the SASL listeners.
//! - Writes (CreateAcls, DeleteAcls, AlterUserScramCredentials) go to the store first, then to
//!   memory; one at a time.
//! - With several daemons on etcd, each reads the whole security space again every
//!   [`REFRESH_INTERVAL`] ([`SecurityState::spawn_refresh`]): a change made through one daemon
//!   is seen by the others within that interval. Polling, not a watch: the space is small
//!   (one range read), and a poll cannot miss an event across a reconnect.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use security::acl::{AclBinding, Authorizer, StandardAuthorizer, StandardAuthorizerConfig};
use security::sasl::{CredentialLookupError, CredentialStore, ScramCredential, ScramMechanism};
use txn_log::{LogError, SecurityChange, SecuritySnapshot, SecurityStore};

use crate::sync::Mutex;

/// How often a daemon on etcd reads the ACLs and credentials again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(2);

type Credentials = HashMap<(String, ScramMechanism), ScramCredential>;

/// The ACLs and credentials of one daemon; see the [module docs](self).
pub struct SecurityState {
    store: Arc<dyn SecurityStore>,
    config: Option<StandardAuthorizerConfig>,
    authorizer: Mutex<Option<Arc<StandardAuthorizer>>>,
    credentials: Mutex<Arc<Credentials>>,
    /// Serializes writes (and refreshes) so memory follows the store in order.
    writes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SecurityState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityState")
            .field("authorizer", &self.config.is_some())
            .finish_non_exhaustive()
    }
}

impl SecurityState {
    /// Reads everything `store` holds; `config` is the authorizer's (`None`: no authorizer).
    pub async fn open(
        store: Arc<dyn SecurityStore>,
        config: Option<StandardAuthorizerConfig>,
    ) -> Result<Arc<Self>, LogError> {
        let state = Arc::new(Self {
            store,
            config,
            authorizer: Mutex::new(None),
            credentials: Mutex::new(Arc::default()),
            writes: tokio::sync::Mutex::new(()),
        });
        let snapshot = state.store.load_security().await?;
        state.install(&snapshot);
        Ok(state)
    }

    /// A state over an in-memory store (tests, the fuzz dispatcher).
    pub fn in_memory(config: Option<StandardAuthorizerConfig>) -> Arc<Self> {
        let state = Arc::new(Self {
            store: Arc::new(txn_log::MemTxnLog::new()),
            config: config.clone(),
            authorizer: Mutex::new(None),
            credentials: Mutex::new(Arc::default()),
            writes: tokio::sync::Mutex::new(()),
        });
        state.install(&SecuritySnapshot::default());
        state
    }

    fn install(&self, snapshot: &SecuritySnapshot) {
        if let Some(config) = &self.config {
            let mut a = StandardAuthorizer::new(config.clone());
            for (binding, result) in snapshot.acls.iter().zip(a.create(&snapshot.acls)) {
                if let Err(e) = result {
                    tracing::warn!(%binding, error = %e, "stored ACL not applied");
                }
            }
            *self.authorizer.lock() = Some(Arc::new(a));
        }
        let creds: Credentials = snapshot
            .credentials
            .iter()
            .map(|c| ((c.user.clone(), c.mechanism), c.credential.clone()))
            .collect();
        *self.credentials.lock() = Arc::new(creds);
    }

    /// The authorizer with the current ACLs, `None` without `authorizer.class.name`.
    pub fn authorizer(&self) -> Option<Arc<StandardAuthorizer>> {
        self.authorizer.lock().clone()
    }

    /// Whether an authorizer is configured.
    pub fn has_authorizer(&self) -> bool {
        self.config.is_some()
    }

    /// Reads the store again and replaces what memory holds.
    pub async fn refresh(&self) -> Result<(), LogError> {
        let _w = self.writes.lock().await;
        let snapshot = self.store.load_security().await?;
        self.install(&snapshot);
        Ok(())
    }

    /// Refreshes every `every` until `shutdown` (a failed read is logged, and memory kept;
    /// corruption is logged as an error).
    pub fn spawn_refresh(
        self: &Arc<Self>,
        every: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let state = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => return,
                    () = tokio::time::sleep(every) => {}
                }
                match state.refresh().await {
                    Ok(()) => {}
                    Err(e @ LogError::Corrupt { .. }) => {
                        tracing::error!(error = %e, "ACLs and SCRAM credentials: corrupt value in the store; keeping the previous ones");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "ACLs and SCRAM credentials not refreshed");
                    }
                }
            }
        });
    }

    /// Stores `changes`, then applies them to memory (the ACLs by re-reading nothing: the
    /// authorizer is updated with the same bindings).
    async fn apply(&self, changes: Vec<SecurityChange>) -> Result<(), LogError> {
        let _w = self.writes.lock().await;
        if changes.is_empty() {
            return Ok(());
        }
        self.store.apply_security(&changes).await?;
        let mut authorizer = self.authorizer().map(|a| (*a).clone());
        let mut creds = (**self.credentials.lock()).clone();
        for c in changes {
            match c {
                SecurityChange::PutAcl(b) => {
                    if let Some(a) = &mut authorizer {
                        let _ = a.create(&[b]);
                    }
                }
                SecurityChange::DeleteAcl(b) => {
                    if let Some(a) = &mut authorizer {
                        let _ = a.delete(&[b.to_filter()]);
                    }
                }
                SecurityChange::PutScram(s) => {
                    creds.insert((s.user, s.mechanism), s.credential);
                }
                SecurityChange::DeleteScram { user, mechanism } => {
                    creds.remove(&(user, mechanism));
                }
            }
        }
        if let Some(a) = authorizer {
            *self.authorizer.lock() = Some(Arc::new(a));
        }
        *self.credentials.lock() = Arc::new(creds);
        Ok(())
    }

    /// Stores and applies new ACL bindings (already validated).
    pub async fn add_acls(&self, bindings: Vec<AclBinding>) -> Result<(), LogError> {
        self.apply(bindings.into_iter().map(SecurityChange::PutAcl).collect())
            .await
    }

    /// Removes ACL bindings.
    pub async fn remove_acls(&self, bindings: Vec<AclBinding>) -> Result<(), LogError> {
        self.apply(
            bindings
                .into_iter()
                .map(SecurityChange::DeleteAcl)
                .collect(),
        )
        .await
    }

    /// Stores and applies credential changes.
    pub async fn alter_credentials(&self, changes: Vec<SecurityChange>) -> Result<(), LogError> {
        self.apply(changes).await
    }

    /// The current credentials.
    pub fn credential_map(&self) -> Arc<HashMap<(String, ScramMechanism), ScramCredential>> {
        self.credentials.lock().clone()
    }
}

impl CredentialStore for SecurityState {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, CredentialLookupError> {
        Ok(self
            .credentials
            .lock()
            .get(&(user.to_owned(), mechanism))
            .cloned())
    }
}

/// The SCRAM credentials of the log backend, as the SASL listeners read them (from memory,
/// kept up to date by AlterUserScramCredentials and, on etcd, by the refresh).
pub fn credentials(state: &Arc<SecurityState>) -> Arc<dyn CredentialStore> {
    state.clone()
}

/// Writes `changes` into the log backend of `settings` without a running daemon: sled in
/// `data_dir` (fails while a daemon holds the database's lock), or etcd (at any time; the
/// daemons see the change at their next refresh). The offline bootstrap of
/// `txn-coordinator scram add` and `acl add`.
pub async fn apply_offline(
    settings: &super::Settings,
    data_dir: &std::path::Path,
    changes: &[SecurityChange],
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let log = super::DaemonLog::open(settings, data_dir).await?;
    let result = log
        .as_security_store()
        .apply_security(changes)
        .await
        .context("writing to the transaction log's security records");
    log.close().await?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use security::acl::{
        AccessControlEntry, AclOperation, AclPermissionType, Action, Principal, RequestContext,
        ResourcePattern, ResourceType,
    };
    use txn_log::StoredScram;

    #[tokio::test]
    async fn writes_reach_the_store_and_memory() {
        let log = Arc::new(txn_log::MemTxnLog::new());
        let state = SecurityState::open(log.clone(), Some(StandardAuthorizerConfig::default()))
            .await
            .unwrap();
        let b = AclBinding::new(
            ResourcePattern::literal(ResourceType::TransactionalId, "t"),
            AccessControlEntry::new("User:a", "*", AclOperation::Write, AclPermissionType::Allow),
        );
        state.add_acls(vec![b.clone()]).await.unwrap();
        let ctx = RequestContext::new(Principal::user("a"), "1.2.3.4");
        let act = Action::new(AclOperation::Write, ResourceType::TransactionalId, "t");
        assert!(
            state
                .authorizer()
                .unwrap()
                .authorize(&ctx, std::slice::from_ref(&act))[0]
                .is_allowed()
        );
        assert_eq!(log.load_security().await.unwrap().acls, vec![b.clone()]);
        let m = ScramMechanism::Sha256;
        let cred = ScramCredential::from_password_and_salt(m, "pw", b"s", 4096).unwrap();
        state
            .alter_credentials(vec![SecurityChange::PutScram(StoredScram {
                user: "a".into(),
                mechanism: m,
                credential: cred.clone(),
            })])
            .await
            .unwrap();
        assert_eq!(
            credentials(&state).scram_credential("a", m).unwrap(),
            Some(cred)
        );
        // Another daemon's view after a refresh.
        let other = SecurityState::open(log.clone(), Some(StandardAuthorizerConfig::default()))
            .await
            .unwrap();
        state.remove_acls(vec![b]).await.unwrap();
        other.refresh().await.unwrap();
        assert!(!other.authorizer().unwrap().authorize(&ctx, &[act])[0].is_allowed());
        assert!(other.credential_map().contains_key(&("a".to_owned(), m)));
    }
}
