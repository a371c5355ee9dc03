//! etcd members for tests: a cluster of `etcd` processes (Debian's `etcd-server`, or the
//! binary named by `TXN_ETCD_BIN`) on free loopback ports with temporary data directories,
//! each of which can be killed, paused and restarted. Every member is killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use txn_log::{EtcdConfig, EtcdTxnLog};

use crate::fault::process::{Proc, Spec, bin_path, free_port, signal};

/// One member.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    paused: bool,
}

/// A running etcd cluster.
#[derive(Debug)]
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    token: String,
    members: Vec<Member>,
}

/// The etcd binary: `TXN_ETCD_BIN`, else `etcd` on the PATH.
pub fn etcd_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("TXN_ETCD_BIN") {
        return Ok(PathBuf::from(p));
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    });
    found.context(
        "etcd not found (install Debian's etcd-server: apt-get install etcd-server, or set \
         TXN_ETCD_BIN); scripts/test installs it",
    )
}

impl EtcdCluster {
    /// Starts `n` members and waits (bounded) until the cluster answers a read.
    pub async fn start(n: usize) -> anyhow::Result<Self> {
        let bin = etcd_bin()?;
        let mut members = Vec::new();
        for i in 0..n {
            members.push(Member {
                name: format!("m{i}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                child: None,
                paused: false,
            });
        }
        let token = format!(
            "txn-test-{}-{}",
            std::process::id(),
            members.first().map_or(0, |m| m.client_port)
        );
        let mut c = Self {
            dir: tempfile::tempdir()?,
            bin,
            token,
            members,
        };
        for i in 0..n {
            c.spawn(i, "new")?;
        }
        c.wait_ready(Duration::from_secs(30)).await?;
        Ok(c)
    }

    fn spawn(&mut self, i: usize, state: &str) -> anyhow::Result<()> {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", m.name)))?;
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new(&self.bin)
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(self.dir.path().join(&m.name))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            // Fast elections on loopback (defaults: 100 ms heartbeat, 1000 ms election).
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.members[i].child = Some(child);
        self.members[i].paused = false;
        Ok(())
    }

    /// Client URLs of every member (`http://127.0.0.1:port`).
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The endpoints as `etcd.endpoints` takes them (comma-separated).
    pub fn endpoints_arg(&self) -> String {
        self.endpoints().join(",")
    }

    /// A log config over every member with `prefix` and a short request timeout.
    pub fn config(&self, prefix: &str) -> EtcdConfig {
        EtcdConfig {
            prefix: prefix.to_owned(),
            request_timeout: Duration::from_secs(2),
            ..EtcdConfig::new(self.endpoints())
        }
    }

    /// Waits until a read through every endpoint's client succeeds (a quorum answers).
    pub async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            match EtcdTxnLog::connect(self.config("/ready")).await {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "etcd cluster not ready within {within:?}: {last}; logs in {}",
            self.dir.path().display()
        )
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.members[i].paused = false;
    }

    /// Restarts killed member `i` on its data directory.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill(i);
        self.spawn(i, "existing")
    }

    /// SIGSTOPs member `i`.
    pub fn pause(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(c) = &self.members[i].child {
            signal(c.id(), "STOP")?;
            self.members[i].paused = true;
        }
        Ok(())
    }

    /// SIGCONTs member `i`.
    pub fn resume(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(c) = &self.members[i].child
            && self.members[i].paused
        {
            signal(c.id(), "CONT")?;
            self.members[i].paused = false;
        }
        Ok(())
    }
}

/// Starts `txn-coordinator serve` (the workspace binary, or `TXN_COORDINATOR_BIN`) on a free
/// loopback port with its log in etcd at `endpoints` (comma-separated), node id `node`, its
/// data directory and stderr log under `dir`, and `extra` arguments; waits until it is ready.
pub fn daemon_on_etcd(
    node: i32,
    endpoints: &str,
    dir: &Path,
    extra: &[&str],
) -> anyhow::Result<Proc> {
    let port = free_port()?;
    let mut args: Vec<String> = [
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--node-id",
        &node.to_string(),
        "--data-dir",
        &dir.join(format!("daemon-{node}")).to_string_lossy(),
        "--set",
        "txn.log.backend=etcd",
        "--set",
        &format!("etcd.endpoints={endpoints}"),
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Proc::start(
        Spec {
            name: format!("daemon-{node}"),
            bin: std::env::var_os("TXN_COORDINATOR_BIN")
                .map_or_else(|| bin_path("txn-coordinator"), PathBuf::from),
            args,
            ready_prefix: "txn-coordinator listening on ".into(),
            log_file: Some(dir.join(format!("daemon-{node}.log"))),
            env: vec![("RUST_LOG".into(), "info".into())],
        },
        Duration::from_secs(60),
    )
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            let _ = self.resume(i);
            self.kill(i);
        }
    }
}
