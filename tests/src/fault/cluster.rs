//! The fault topology: one `txn-coordinator` daemon and N refbrokers, each behind its own
//! [`FaultProxy`], all on loopback with temporary data directories.
//!
//! ```text
//!  clients ──► proxy_c ──► daemon            (FindCoordinator answers proxy_c)
//!  clients ──► proxy_i ──► refbroker i       (Metadata advertises proxy_i)
//!  daemon  ──► proxy_i ──► refbroker i       (WriteTxnMarkers go through the same proxies)
//!  refbroker ► proxy_c ──► daemon            (forwarded coordinator requests)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::process::{Proc, Spec, free_port};
use super::proxy::FaultProxy;

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

/// A running fault cluster (every process killed on drop).
#[derive(Debug)]
pub struct FaultCluster {
    /// Options it was built from.
    pub options: ClusterOptions,
    root: tempfile::TempDir,
    /// The daemon.
    pub daemon: Proc,
    /// The daemon's proxy.
    pub daemon_proxy: FaultProxy,
    /// The refbrokers (node id = index + 1).
    pub brokers: Vec<Proc>,
    /// Their proxies.
    pub broker_proxies: Vec<FaultProxy>,
    /// The daemon's stderr, with the `txn_transition` trail.
    daemon_log: PathBuf,
}

const STARTUP: Duration = Duration::from_secs(30);

impl FaultCluster {
    /// Starts the proxies, the brokers and the daemon.
    pub async fn start(options: ClusterOptions) -> anyhow::Result<Self> {
        anyhow::ensure!(
            options.daemon_bin.exists(),
            "daemon binary {} not found (build it: cargo build --release -p coordinator)",
            options.daemon_bin.display()
        );
        let root = tempfile::tempdir()?;
        let daemon_port = free_port()?;
        let broker_ports: Vec<u16> = (0..options.brokers)
            .map(|_| free_port())
            .collect::<Result<_, _>>()?;
        let daemon_proxy =
            FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], daemon_port))).await?;
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
            let args = vec![
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
                daemon_proxy.addr().to_string(),
                "--node-id".into(),
                (i + 1).to_string(),
                "--cluster".into(),
                cluster_arg.clone(),
                "--offsets-partitions".into(),
                "4".into(),
                "--set".into(),
                "fetch.max.wait.ms=50".into(),
            ];
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
        // own file (runs may share `log_dir`); `stop` appends it to `log_dir/daemon.log`.
        let daemon_log = root.path().join("daemon.log");
        let rust_log = format!(
            "{},{}=debug",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            coordinator::shell::TRANSITION_TARGET
        );
        let args = vec![
            "serve".into(),
            "--listen".into(),
            format!("127.0.0.1:{daemon_port}"),
            "--advertised-listener".into(),
            daemon_proxy.addr().to_string(),
            "--data-dir".into(),
            root.path().join("daemon").to_string_lossy().into_owned(),
            "--bootstrap-servers".into(),
            bootstrap,
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
        ];
        let daemon = Proc::start(
            Spec {
                name: "daemon".into(),
                bin: options.daemon_bin.clone(),
                args,
                ready_prefix: "txn-coordinator listening on ".into(),
                log_file: Some(daemon_log.clone()),
                env: vec![("RUST_LOG".into(), rust_log)],
            },
            STARTUP,
        )
        .context("starting the daemon")?;
        Ok(Self {
            options,
            root,
            daemon,
            daemon_proxy,
            brokers,
            broker_proxies,
            daemon_log,
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

    /// The daemon's stderr (every start of this run), with the `txn_transition` trail.
    pub fn daemon_log(&self) -> &Path {
        &self.daemon_log
    }

    /// The temporary root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Removes every proxy fault and resumes / restarts every process.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        self.daemon_proxy.heal();
        for p in &self.broker_proxies {
            p.heal();
        }
        for p in std::iter::once(&mut self.daemon).chain(self.brokers.iter_mut()) {
            p.resume()?;
            if !p.is_running() {
                p.restart(STARTUP)?;
            }
        }
        Ok(())
    }

    /// Keeps the temporary root (data directories, the daemon's log and, without a
    /// `log_dir`, every process log) after drop; returns its path.
    pub fn keep_files(&mut self) -> PathBuf {
        self.root.disable_cleanup(true);
        self.root.path().to_owned()
    }

    /// Kills every process (the data directories stay until drop) and appends the daemon's
    /// stderr to `log_dir/daemon.log`, if a log directory was given.
    pub fn stop(&mut self) {
        self.daemon.kill();
        for b in &mut self.brokers {
            b.kill();
        }
        if let Some(d) = &self.options.log_dir {
            let copied = std::fs::File::open(&self.daemon_log).and_then(|mut from| {
                let mut to = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(d.join("daemon.log"))?;
                std::io::copy(&mut from, &mut to)
            });
            if let Err(e) = copied {
                tracing::warn!("copying the daemon log to {}: {e}", d.display());
            }
        }
    }
}
