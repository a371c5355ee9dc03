//! etcd members for tests: a cluster of `etcd` processes (Debian's `etcd-server`, or the
//! binary named by `TXN_ETCD_BIN`) on free loopback ports with temporary data directories,
//! each of which can be killed, paused and restarted. Every member is killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use txn_log::{EtcdConfig, EtcdTxnLog};

use txn_testkit::wire::free_port;

use crate::fault::process::{Proc, Spec, bin_path, signal};

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
                client_port: free_port(),
                peer_port: free_port(),
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
            // A member that only missed heartbeats (just restarted, or stalled) asks whether it
            // could win before it campaigns, instead of deposing a working leader: the default
            // since etcd 3.5; Debian's 3.4 has it off. Added after a cluster test stayed
            // leaderless long enough that its daemon stopped serving (cause not confirmed;
            // docs/reliability.md).
            .arg("--pre-vote=true")
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

    /// The number of members (the fault harness picks one by index).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether member `i` runs (killed: false; paused still counts as running).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Keeps the members' data directories and logs after drop (the fault harness keeps an
    /// invalid run's files); returns their directory.
    pub fn keep_files(&mut self) -> PathBuf {
        self.dir.disable_cleanup(true);
        self.dir.path().to_owned()
    }

    /// The last `n` lines of every member's log, for a failure message.
    pub fn log_tails(&self, n: usize) -> String {
        let mut out = String::new();
        for m in &self.members {
            let path = self.dir.path().join(format!("{}.log", m.name));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(n);
            out.push_str(&format!("--- {} ({})\n", m.name, path.display()));
            for line in &lines[from..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
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
    let mut args = daemon_on_etcd_args(node, endpoints, dir);
    args.extend(["--listen".to_owned(), format!("127.0.0.1:{}", free_port())]);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    start_daemon(node, dir, args)
}

/// The arguments of `txn-coordinator serve` as node `node` with its log in etcd at
/// `endpoints` and its data directory under `dir`; no listener.
pub fn daemon_on_etcd_args(node: i32, endpoints: &str, dir: &Path) -> Vec<String> {
    [
        "serve",
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
    .to_vec()
}

/// Starts the daemon (the workspace binary, or `TXN_COORDINATOR_BIN`) as `daemon-NODE` with
/// `args`, its stderr in `dir/daemon-NODE.log` (`RUST_LOG=info`); waits until it is ready.
pub fn start_daemon(node: i32, dir: &Path, args: Vec<String>) -> anyhow::Result<Proc> {
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

/// Coordinator requests the cluster tests share, each bounded in time (they panic when the
/// bound passes: they are test steps).
pub mod requests {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use kafka_protocol::messages::{
        self as km, add_partitions_to_txn_request::AddPartitionsToTxnTopic,
    };
    use kafka_protocol::protocol::StrBytes;

    use txn_testkit::pool::Pool;
    use txn_testkit::requests::await_txn_state;

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.to_owned())
    }

    /// FindCoordinator(TRANSACTION, id) asked of `at`: the owner's (node id, address).
    pub async fn find(pool: &mut Pool, at: SocketAddr, id: &str) -> Option<(i32, SocketAddr)> {
        let req = km::FindCoordinatorRequest::default()
            .with_key(s(id))
            .with_key_type(1);
        let r = pool.call(at, &req, 3).await.ok()?;
        if r.error_code != 0 {
            return None;
        }
        let addr = format!("{}:{}", r.host, r.port).parse().ok()?;
        Some((r.node_id.0, addr))
    }

    /// One InitProducerId(id) at `at`: (producer id, epoch), or the error code (-1: no answer).
    pub async fn init(pool: &mut Pool, at: SocketAddr, id: &str) -> Result<(i64, i16), i16> {
        let req = km::InitProducerIdRequest::default()
            .with_transactional_id(Some(km::TransactionalId(s(id))))
            .with_transaction_timeout_ms(60_000);
        match pool.call(at, &req, 4).await {
            Ok(r) if r.error_code == 0 => Ok((r.producer_id.0, r.producer_epoch)),
            Ok(r) => Err(r.error_code),
            Err(_) => Err(-1),
        }
    }

    /// Follows FindCoordinator (asked of any of `ask`) until InitProducerId(id) succeeds at
    /// the owner; returns the owner's node id and the answer.
    pub async fn init_at_owner(
        pool: &mut Pool,
        ask: &[SocketAddr],
        id: &str,
        within: Duration,
    ) -> (i32, (i64, i16)) {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            for &a in ask {
                if let Some((node, owner)) = find(pool, a, id).await {
                    match init(pool, owner, id).await {
                        Ok(pe) => return (node, pe),
                        Err(code) => last = format!("node {node} answered {code}"),
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("InitProducerId({id}) did not succeed within {within:?}: {last}");
    }

    /// AddPartitionsToTxn(id, topic-p) at `at` with `pe`; its error code (-1: no answer).
    pub async fn add(
        pool: &mut Pool,
        at: SocketAddr,
        id: &str,
        pe: (i64, i16),
        topic: &str,
        p: i32,
    ) -> i16 {
        let req = km::AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(km::TransactionalId(s(id)))
            .with_v3_and_below_producer_id(km::ProducerId(pe.0))
            .with_v3_and_below_producer_epoch(pe.1)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(km::TopicName(s(topic)))
                    .with_partitions(vec![p]),
            ]);
        match pool.call(at, &req, 3).await {
            Ok(r) => r
                .results_by_topic_v3_and_below
                .first()
                .and_then(|t| t.results_by_partition.first())
                .map_or(-1, |p| p.partition_error_code),
            Err(_) => -1,
        }
    }

    /// EndTxn(id, commit) at `at` with `pe`; its error code (-1: no answer).
    pub async fn end(pool: &mut Pool, at: SocketAddr, id: &str, pe: (i64, i16)) -> i16 {
        let req = km::EndTxnRequest::default()
            .with_transactional_id(km::TransactionalId(s(id)))
            .with_producer_id(km::ProducerId(pe.0))
            .with_producer_epoch(pe.1)
            .with_committed(true);
        pool.call(at, &req, 3).await.map_or(-1, |r| r.error_code)
    }

    /// The partitions DescribeTransactions(id) at `at` reports once the state is `want`
    /// ([`await_txn_state`]'s wait).
    pub async fn wait_state(pool: &mut Pool, at: SocketAddr, id: &str, want: &str) -> Vec<i32> {
        let t = await_txn_state(pool, at, id, want).await;
        t.topics.iter().flat_map(|t| t.partitions.clone()).collect()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            let _ = self.resume(i);
            self.kill(i);
        }
    }
}
