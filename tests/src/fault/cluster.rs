//! The fault topology: one `txn-coordinator` daemon and N refbrokers, each behind its own
//! [`FaultProxy`], all on loopback with temporary data directories.
//!
//! ```text
//!  clients ──► proxy_c ──► daemon            (FindCoordinator answers proxy_c)
//!  clients ──► proxy_i ──► refbroker i       (Metadata advertises proxy_i)
//!  daemon  ──► proxy_i ──► refbroker i       (WriteTxnMarkers go through the same proxies)
//!  refbroker ► proxy_c ──► daemon            (forwarded coordinator requests)
//! ```
//!
//! Cluster mode ([`EtcdOptions`]): etcd members and several daemons sharing their
//! log in etcd, each daemon behind its own proxy (its advertised listener), the refbrokers
//! pointed at all of them (`--coordinator proxy_c1,proxy_c2,...`). The daemons reach etcd
//! directly (etcd faults are process faults: SIGKILL / SIGSTOP of a member).
//!
//! ```text
//!  clients ──► proxy_cK ──► daemon K ──► etcd members   (FindCoordinator names the owner's proxy)
//!  refbroker ► proxy_c1..n                              (FindCoordinator relayed to a live daemon)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use txn_testkit::wire::free_port;

use super::process::{Proc, Spec, bin_path};
use super::proxy::FaultProxy;
use crate::etcd::EtcdCluster;

/// Cluster mode: the coordinator as several daemons sharing their log in etcd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// etcd members.
    pub members: usize,
    /// Daemons.
    pub daemons: usize,
    /// `etcd.lease.ttl.ms` of every daemon (a dead daemon's partitions move after about this).
    pub lease_ms: u64,
    /// Node id of the first daemon (the next ones follow); must not collide with the
    /// refbrokers' ids (1..=brokers).
    pub first_node_id: i32,
}

impl Default for EtcdOptions {
    /// Three members, three daemons 1001-1003, a 2 s lease.
    fn default() -> Self {
        Self {
            members: 3,
            daemons: 3,
            lease_ms: 2000,
            first_node_id: 1001,
        }
    }
}

/// The etcd part of a cluster-mode [`FaultCluster`].
#[derive(Debug)]
pub struct EtcdPart {
    /// What it was built from.
    pub options: EtcdOptions,
    /// The etcd members.
    pub etcd: EtcdCluster,
    /// The daemons after the first (the first is [`FaultCluster::daemon`]).
    pub daemons: Vec<Proc>,
    /// Their proxies.
    pub daemon_proxies: Vec<FaultProxy>,
}

/// How to build the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of refbrokers.
    pub brokers: usize,
    /// The workload topic.
    pub topic: String,
    /// Its partition count.
    pub partitions: i32,
    /// Further topics every broker hosts, as (name, partitions).
    pub extra_topics: Vec<(String, i32)>,
    /// `transaction.state.log.num.partitions` of the daemon.
    pub txn_log_partitions: u32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub reaper_interval_ms: u64,
    /// `transaction.version` of the daemon.
    pub transaction_version: u8,
    /// Path of the daemon binary.
    pub daemon_bin: PathBuf,
    /// Path of the refbroker binary.
    pub refbroker_bin: PathBuf,
    /// Keep process logs here (stderr of every process is appended to NAME.log); without
    /// it they go to `logs/` in the run's temporary root, kept only if the run is invalid
    /// ([`FaultCluster::keep_files`]).
    pub log_dir: Option<PathBuf>,
}

impl ClusterOptions {
    /// `brokers` refbrokers (`refbroker_bin`) hosting `partitions` of `topic` and one daemon
    /// with `txn_log_partitions` log partitions, the reaper every 500 ms, transaction version
    /// 2; the daemon from `TXN_COORDINATOR_BIN` (else [`bin_path`]), the process logs in
    /// `TXN_FAULT_LOG_DIR` when it is set.
    pub fn from_env(
        refbroker_bin: PathBuf,
        brokers: usize,
        topic: &str,
        partitions: i32,
        txn_log_partitions: u32,
    ) -> Self {
        Self {
            brokers,
            topic: topic.to_owned(),
            partitions,
            extra_topics: Vec::new(),
            txn_log_partitions,
            reaper_interval_ms: 500,
            transaction_version: 2,
            daemon_bin: daemon_bin_from_env(),
            refbroker_bin,
            log_dir: std::env::var_os("TXN_FAULT_LOG_DIR").map(PathBuf::from),
        }
    }
}

/// The daemon binary: `TXN_COORDINATOR_BIN`, else the workspace's (see [`bin_path`]).
pub fn daemon_bin_from_env() -> PathBuf {
    std::env::var_os("TXN_COORDINATOR_BIN")
        .map_or_else(|| bin_path("txn-coordinator"), PathBuf::from)
}

/// A running fault cluster (every process killed on drop).
#[derive(Debug)]
pub struct FaultCluster {
    /// Options it was built from.
    pub options: ClusterOptions,
    root: tempfile::TempDir,
    /// The daemon (in cluster mode the first of them).
    pub daemon: Proc,
    /// The daemon's proxy.
    pub daemon_proxy: FaultProxy,
    /// Cluster mode: etcd and the further daemons.
    pub etcd: Option<EtcdPart>,
    /// The refbrokers (node id = index + 1).
    pub brokers: Vec<Proc>,
    /// Their proxies.
    pub broker_proxies: Vec<FaultProxy>,
    /// The daemons' stderr, with the `txn_transition` trail (one file per daemon).
    daemon_logs: Vec<PathBuf>,
}

const STARTUP: Duration = Duration::from_secs(30);

impl FaultCluster {
    /// Starts the proxies, the brokers and the daemon.
    pub async fn start(options: ClusterOptions) -> anyhow::Result<Self> {
        Self::start_on(options, None).await
    }

    /// As [`FaultCluster::start`], every broker also given `--set KEY=VALUE` for each of
    /// `broker_settings` (e.g. `transaction.partition.verification.enable=false`).
    pub async fn start_with_broker_settings(
        options: ClusterOptions,
        broker_settings: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_inner(options, None, broker_settings).await
    }

    /// Starts the proxies, the brokers and the daemon; with `etcd` (cluster mode) first the
    /// etcd members, then the brokers and every daemon on the etcd log.
    pub async fn start_on(
        options: ClusterOptions,
        etcd_options: Option<EtcdOptions>,
    ) -> anyhow::Result<Self> {
        Self::start_inner(options, etcd_options, &[]).await
    }

    async fn start_inner(
        options: ClusterOptions,
        etcd_options: Option<EtcdOptions>,
        broker_settings: &[&str],
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            options.daemon_bin.exists(),
            "daemon binary {} not found (build it: cargo build --release -p coordinator)",
            options.daemon_bin.display()
        );
        let root = tempfile::tempdir()?;
        let etcd = match &etcd_options {
            Some(e) => Some(
                EtcdCluster::start(e.members)
                    .await
                    .context("starting etcd")?,
            ),
            None => None,
        };
        let daemons = etcd_options.as_ref().map_or(1, |e| e.daemons.max(1));
        let daemon_ports: Vec<u16> = (0..daemons).map(|_| free_port()).collect();
        let broker_ports: Vec<u16> = (0..options.brokers).map(|_| free_port()).collect();
        let mut daemon_proxies = Vec::new();
        for p in &daemon_ports {
            daemon_proxies.push(FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], *p))).await?);
        }
        let coordinator_arg = daemon_proxies
            .iter()
            .map(|p| p.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut broker_proxies = Vec::new();
        for p in &broker_ports {
            broker_proxies.push(FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], *p))).await?);
        }
        let cluster_arg = broker_proxies
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}={}", i + 1, p.addr()))
            .collect::<Vec<_>>()
            .join(",");
        let log_dir = options
            .log_dir
            .clone()
            .unwrap_or_else(|| root.path().join("logs"));
        std::fs::create_dir_all(&log_dir)?;
        let log = |name: &str| Some(log_dir.join(format!("{name}.log")));
        let mut brokers = Vec::new();
        for (i, port) in broker_ports.iter().enumerate() {
            let dir = root.path().join(format!("broker-{}", i + 1));
            let mut args = vec![
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--data-dir".into(),
                dir.to_string_lossy().into_owned(),
                "--topics".into(),
                std::iter::once((&options.topic, &options.partitions))
                    .chain(options.extra_topics.iter().map(|(t, n)| (t, n)))
                    .map(|(t, n)| format!("{t}:{n}"))
                    .collect::<Vec<_>>()
                    .join(","),
                "--coordinator".into(),
                coordinator_arg.clone(),
                "--node-id".into(),
                (i + 1).to_string(),
                "--cluster".into(),
                cluster_arg.clone(),
                "--offsets-partitions".into(),
                "4".into(),
                "--set".into(),
                "fetch.max.wait.ms=50".into(),
            ];
            for kv in broker_settings {
                args.extend(["--set".into(), (*kv).to_owned()]);
            }
            brokers.push(Proc::start(
                Spec {
                    name: format!("broker-{}", i + 1),
                    bin: options.refbroker_bin.clone(),
                    args,
                    ready_prefix: "refbroker listening on ".into(),
                    log_file: log(&format!("broker-{}", i + 1)),
                    env: Vec::new(),
                },
                STARTUP,
            )?);
        }
        let bootstrap = broker_proxies
            .iter()
            .map(|p| p.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        // The daemon's stderr carries the transition trail (I10): always kept, in this run's
        // own file (runs may share `log_dir`); `stop` appends it to `log_dir/daemon.log`
        // (cluster mode: `daemon-NODE.log` per daemon).
        let rust_log = format!(
            "{},{}=debug",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            coordinator::shell::TRANSITION_TARGET
        );
        let mut procs = Vec::new();
        let mut daemon_logs = Vec::new();
        for (i, (daemon_port, daemon_proxy)) in daemon_ports.iter().zip(&daemon_proxies).enumerate()
        {
            let name = match &etcd_options {
                Some(e) => format!("daemon-{}", e.first_node_id + i32::try_from(i)?),
                None => "daemon".to_owned(),
            };
            let daemon_log = root.path().join(format!("{name}.log"));
            let mut args = vec![
                "serve".into(),
                "--listen".into(),
                format!("127.0.0.1:{daemon_port}"),
                "--advertised-listener".into(),
                daemon_proxy.addr().to_string(),
                "--data-dir".into(),
                root.path().join(&name).to_string_lossy().into_owned(),
                "--bootstrap-servers".into(),
                bootstrap.clone(),
            ];
            if let (Some(e), Some(members)) = (&etcd_options, &etcd) {
                args.extend([
                    "--node-id".into(),
                    (e.first_node_id + i32::try_from(i)?).to_string(),
                    "--set".into(),
                    "txn.log.backend=etcd".into(),
                    "--set".into(),
                    format!("etcd.endpoints={}", members.endpoints_arg()),
                    "--set".into(),
                    format!("etcd.lease.ttl.ms={}", e.lease_ms),
                ]);
            }
            args.extend(daemon_settings(&options));
            procs.push(
                Proc::start(
                    Spec {
                        name: name.clone(),
                        bin: options.daemon_bin.clone(),
                        args,
                        ready_prefix: "txn-coordinator listening on ".into(),
                        log_file: Some(daemon_log.clone()),
                        env: vec![("RUST_LOG".into(), rust_log.clone())],
                    },
                    STARTUP,
                )
                .with_context(|| format!("starting {name}"))?,
            );
            daemon_logs.push(daemon_log);
        }
        let mut procs = procs.into_iter();
        let mut proxies = daemon_proxies.into_iter();
        let (Some(daemon), Some(daemon_proxy)) = (procs.next(), proxies.next()) else {
            anyhow::bail!("no daemon");
        };
        let etcd = match (etcd_options, etcd) {
            (Some(options), Some(etcd)) => Some(EtcdPart {
                options,
                etcd,
                daemons: procs.collect(),
                daemon_proxies: proxies.collect(),
            }),
            _ => None,
        };
        Ok(Self {
            options,
            root,
            daemon,
            daemon_proxy,
            etcd,
            brokers,
            broker_proxies,
            daemon_logs,
        })
    }

    /// A broker proxy clients bootstrap from.
    pub fn bootstrap(&self) -> SocketAddr {
        self.broker_proxies[0].addr()
    }

    /// The daemon's data directory.
    pub fn daemon_data_dir(&self) -> PathBuf {
        self.root.path().join("daemon")
    }

    /// The daemon's stderr (every start of this run), with the `txn_transition` trail (in
    /// cluster mode: the first daemon's; [`Self::daemon_logs`] lists all).
    pub fn daemon_log(&self) -> &Path {
        &self.daemon_logs[0]
    }

    /// Every daemon's stderr, with its `txn_transition` trail.
    pub fn daemon_logs(&self) -> &[PathBuf] {
        &self.daemon_logs
    }

    /// The number of daemons (1, or in cluster mode `EtcdOptions::daemons`).
    pub fn daemon_count(&self) -> usize {
        1 + self.etcd.as_ref().map_or(0, |e| e.daemons.len())
    }

    /// Daemon `i` (0: [`Self::daemon`]).
    pub fn daemon_at(&mut self, i: usize) -> &mut Proc {
        match (i, &mut self.etcd) {
            (0, _) | (_, None) => &mut self.daemon,
            (i, Some(e)) => &mut e.daemons[i - 1],
        }
    }

    /// The proxy of daemon `i` (0: [`Self::daemon_proxy`]).
    pub fn daemon_proxy_at(&self, i: usize) -> &FaultProxy {
        match (i, &self.etcd) {
            (0, _) | (_, None) => &self.daemon_proxy,
            (i, Some(e)) => &e.daemon_proxies[i - 1],
        }
    }

    /// Cluster mode: `etcd.endpoints` of the daemons.
    pub fn etcd_endpoints(&self) -> Option<String> {
        self.etcd.as_ref().map(|e| e.etcd.endpoints_arg())
    }

    /// The temporary root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Removes every proxy fault and resumes / restarts every process: the etcd members
    /// first (cluster mode; [`Self::wait_etcd`] waits for their quorum), then the daemons
    /// and the brokers.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        if let Some(e) = &mut self.etcd {
            for i in 0..e.etcd.len() {
                e.etcd.resume(i)?;
                if !e.etcd.is_running(i) {
                    e.etcd.restart(i)?;
                }
            }
            for p in &e.daemon_proxies {
                p.heal();
            }
        }
        self.daemon_proxy.heal();
        for p in &self.broker_proxies {
            p.heal();
        }
        let extra = self.etcd.iter_mut().flat_map(|e| e.daemons.iter_mut());
        for p in std::iter::once(&mut self.daemon)
            .chain(extra)
            .chain(self.brokers.iter_mut())
        {
            p.resume()?;
            if !p.is_running() {
                p.restart(STARTUP)?;
            }
        }
        Ok(())
    }

    /// Cluster mode: waits (bounded) until etcd answers a read through every endpoint.
    pub async fn wait_etcd(&self, within: Duration) -> anyhow::Result<()> {
        match &self.etcd {
            Some(e) => e.etcd.wait_ready(within).await,
            None => Ok(()),
        }
    }

    /// Keeps the temporary root (data directories, the daemon's log and, without a
    /// `log_dir`, every process log) after drop, and in cluster mode the etcd members' data
    /// directories and logs (their path is written to `etcd-dir.txt` in the root); returns
    /// the root's path.
    pub fn keep_files(&mut self) -> PathBuf {
        self.root.disable_cleanup(true);
        if let Some(e) = &mut self.etcd {
            let dir = e.etcd.keep_files();
            let note = self.root.path().join("etcd-dir.txt");
            if let Err(err) = std::fs::write(&note, format!("{}\n", dir.display())) {
                tracing::warn!("writing {}: {err}", note.display());
            }
        }
        self.root.path().to_owned()
    }

    /// Kills every daemon and broker (the data directories stay until drop; in cluster mode
    /// etcd keeps running for the audit) and appends each daemon's stderr to
    /// `log_dir/<its file name>`, if a log directory was given.
    pub fn stop(&mut self) {
        self.daemon.kill();
        if let Some(e) = &mut self.etcd {
            for d in &mut e.daemons {
                d.kill();
            }
        }
        for b in &mut self.brokers {
            b.kill();
        }
        if let Some(d) = &self.options.log_dir {
            for log in &self.daemon_logs {
                let name = log.file_name().unwrap_or_default();
                let copied = std::fs::File::open(log).and_then(|mut from| {
                    let mut to = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(d.join(name))?;
                    std::io::copy(&mut from, &mut to)
                });
                if let Err(e) = copied {
                    tracing::warn!("copying the daemon log to {}: {e}", d.display());
                }
            }
        }
    }
}

/// The daemon settings every topology uses.
fn daemon_settings(options: &ClusterOptions) -> Vec<String> {
    vec![
        "--set".into(),
        format!(
            "transaction.state.log.num.partitions={}",
            options.txn_log_partitions
        ),
        "--set".into(),
        format!(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms={}",
            options.reaper_interval_ms
        ),
        "--set".into(),
        format!("transaction.version={}", options.transaction_version),
        "--set".into(),
        "offsets.topic.num.partitions=4".into(),
    ]
}
