//! The daemon's transaction log (`txn.log.backend`): sled in the data directory, or etcd.

use std::sync::Arc;

use anyhow::Context;
use txn_log::{GroupCommitStats, SledTxnLog, SyncMode, TxnLog};

use super::settings::{LogBackend, Settings};

/// The opened log of one backend (`txn.log.backend`), as the daemon and an embedding broker
/// open it.
#[derive(Debug, Clone)]
pub enum DaemonLog {
    /// `txn.log.backend=sled`.
    Sled(Arc<SledTxnLog>),
    /// `txn.log.backend=etcd`.
    #[cfg(feature = "etcd")]
    Etcd(Arc<txn_log::EtcdTxnLog>),
}

impl DaemonLog {
    /// Opens the backend `settings` name; sled in `data_dir`, whose partition count is checked
    /// against the one recorded there. etcd is retried with backoff until it answers,
    /// each failure logged with the endpoints.
    pub async fn open(settings: &Settings, data_dir: &std::path::Path) -> anyhow::Result<Self> {
        match settings.txn_log_backend {
            LogBackend::Sled => {
                super::check_partition_count(
                    data_dir,
                    settings.engine.transaction_state_log_num_partitions,
                )?;
                let sled_config = settings.sled_config(data_dir);
                if sled_config.sync_mode == SyncMode::OsBuffered {
                    tracing::warn!(
                        "txn.log.sync=os-buffered: acknowledged transactions are NOT durable against a power loss or kernel crash"
                    );
                }
                let log = tokio::task::spawn_blocking(move || SledTxnLog::open(sled_config))
                    .await
                    .context("opening the transaction log")?
                    .with_context(|| {
                        format!("cannot open the transaction log in {}", data_dir.display())
                    })?;
                Ok(Self::Sled(Arc::new(log)))
            }
            #[cfg(feature = "etcd")]
            LogBackend::Etcd => {
                let config = txn_log::EtcdConfig {
                    prefix: settings.etcd_key_prefix.clone(),
                    request_timeout: etcd_request_timeout(settings),
                    ..txn_log::EtcdConfig::new(settings.etcd_endpoints.clone())
                };
                let mut backoff = std::time::Duration::from_millis(200);
                loop {
                    match txn_log::EtcdTxnLog::connect(config.clone()).await {
                        Ok(log) => {
                            tracing::info!(endpoints = %config.endpoints.join(","), prefix = %config.prefix, "transaction log in etcd");
                            return Ok(Self::Etcd(Arc::new(log)));
                        }
                        Err(e) => {
                            tracing::error!(error = %e, retry_in_ms = backoff.as_millis() as u64, "etcd unreachable; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                        }
                    }
                }
            }
            #[cfg(not(feature = "etcd"))]
            LogBackend::Etcd => anyhow::bail!(
                "txn.log.backend=etcd: this txn-coordinator was built without the `etcd` feature"
            ),
        }
    }

    /// The log as the coordinator takes it.
    pub fn as_txn_log(&self) -> Arc<dyn TxnLog> {
        match self {
            Self::Sled(l) => l.clone(),
            #[cfg(feature = "etcd")]
            Self::Etcd(l) => l.clone(),
        }
    }

    /// Where the ACLs and SCRAM credentials are kept: the same backend.
    pub fn as_security_store(&self) -> Arc<dyn txn_log::SecurityStore> {
        match self {
            Self::Sled(l) => l.clone(),
            #[cfg(feature = "etcd")]
            Self::Etcd(l) => l.clone(),
        }
    }

    /// sled's group-commit counters (none for etcd).
    pub fn group_commit_stats(&self) -> Option<GroupCommitStats> {
        match self {
            Self::Sled(l) => Some(l.stats()),
            #[cfg(feature = "etcd")]
            Self::Etcd(_) => None,
        }
    }

    /// Flushes and closes sled (etcd needs nothing).
    pub async fn close(&self) -> anyhow::Result<()> {
        match self {
            Self::Sled(l) => {
                let l = l.clone();
                tokio::task::spawn_blocking(move || l.shutdown())
                    .await
                    .context("closing the transaction log")?;
                tracing::info!("transaction log flushed and closed");
            }
            #[cfg(feature = "etcd")]
            Self::Etcd(_) => {}
        }
        Ok(())
    }
}

/// The bound on one etcd request: `request.timeout.ms`, at most 5 s, and at most half the
/// membership lease. A write stuck on a dead etcd leader is then given up (and the partition
/// loaded again under a new epoch) while the daemon still holds its lease, instead of after
/// the survivors could have served the partition for seconds.
#[cfg(feature = "etcd")]
fn etcd_request_timeout(settings: &Settings) -> std::time::Duration {
    std::time::Duration::from_millis(
        settings
            .request_timeout_ms
            .min(5_000)
            .min(settings.etcd_lease_ttl_ms / 2)
            .max(1),
    )
}

#[cfg(all(test, feature = "etcd"))]
mod tests {
    use super::*;

    #[test]
    fn etcd_requests_are_bounded_by_half_the_lease() {
        let mut s = Settings::default();
        assert_eq!(etcd_request_timeout(&s).as_millis(), 1_500);
        s.etcd_lease_ttl_ms = 20_000;
        assert_eq!(etcd_request_timeout(&s).as_millis(), 5_000);
        s.request_timeout_ms = 800;
        assert_eq!(etcd_request_timeout(&s).as_millis(), 800);
    }
}
