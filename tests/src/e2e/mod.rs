//! Process harness for the end-to-end tests: starts refbroker processes and the
//! `txn-coordinator` daemon on free loopback ports, runs the Python client programs of
//! `tests/e2e/`, and kills everything it started when dropped (also on panic).
//!
//! Part of the library so that it is compiled once, not once per integration-test file that
//! uses it (`use txn_tests::e2e`).

pub mod checks;
pub mod compat;

/// One event line of a client program (a JSON object).
pub use serde_json::Value as Json;

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiVersionsRequest, FindCoordinatorRequest};
use txn_testkit::blocking;
use txn_testkit::process::StdoutLines;
pub use txn_testkit::wire::free_port;
use txn_testkit::wire::sb;

use crate::etcd::EtcdCluster;

/// How long a process gets to answer ApiVersions after it was started.
const STARTUP: Duration = Duration::from_secs(30);

/// Coordinator nodes of a cluster on etcd: daemons (standalone) or brokers (embedded).
const ETCD_COORDINATORS: usize = 3;

/// The first node id of the standalone daemons of a cluster on etcd.
const ETCD_DAEMON_NODE_ID: usize = 1001;

/// The etcd lease of a coordinator on etcd unless the spec sets `etcd.lease.ttl.ms`.
pub const ETCD_LEASE_MS: u64 = 2000;

/// How long the coordinators of a cluster on etcd get to spread the log partitions.
const ETCD_SPREAD: Duration = Duration::from_secs(60);

/// Which side hosts the transaction coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every broker runs with `--embedded-coordinator`.
    Embedded,
    /// A standalone `txn-coordinator serve` daemon; brokers point at it with `--coordinator`.
    Standalone,
}

impl Mode {
    /// A short name for values and logs.
    pub fn tag(self) -> &'static str {
        match self {
            Self::Embedded => "emb",
            Self::Standalone => "std",
        }
    }
}

/// The Python interpreter with the Kafka clients, or `None` (and a printed skip notice).
pub fn python_or_skip(test: &str) -> Option<PathBuf> {
    match std::env::var_os("TXN_TEST_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            // Written to the process's stderr directly, past the test harness's capture.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: skipped: TXN_TEST_PYTHON not set (run scripts/test)"
            );
            None
        }
    }
}

/// The refbroker binary of this package, in the test's profile directory: cargo builds a
/// package's binaries before running its integration tests.
pub fn refbroker_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TXN_REFBROKER_BIN") {
        return PathBuf::from(p);
    }
    profile_dir().join("refbroker")
}

/// The daemon binary of the coordinator package, next to this test's profile directory.
pub fn daemon_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TXN_COORDINATOR_BIN") {
        return PathBuf::from(p);
    }
    profile_dir().join("txn-coordinator")
}

/// `target/<profile>`: the test executable lives in `target/<profile>/deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// The directory of the Python client programs.
fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e")
}

/// The Java client program's directory (`tests/java`).
fn java_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("java")
}

/// The environment variable holding the classpath of Kafka's jars (kafka-tools and
/// kafka-clients 4.4.x), which `scripts/test` resolves with Maven from `tests/java/pom.xml`.
const KAFKA_CLASSPATH_VAR: &str = "TXN_TEST_KAFKA_CLASSPATH";

/// The classpath of Kafka's jars, or `None` with a printed skip notice.
pub fn kafka_classpath_or_skip(test: &str) -> Option<String> {
    match std::env::var(KAFKA_CLASSPATH_VAR) {
        Ok(cp) if !cp.trim().is_empty() => Some(cp),
        _ => {
            // Past the harness's capture, so a skipped run is visible.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: SKIPPED: {KAFKA_CLASSPATH_VAR} is not set (scripts/test resolves \
                 Kafka's jars with Maven and sets it)"
            );
            None
        }
    }
}

/// Sends ApiVersions v0 and reads the answer: true if `addr` speaks Kafka with error 0.
fn answers_api_versions(addr: SocketAddr) -> bool {
    let request = ApiVersionsRequest::default();
    blocking::call(addr, "e2e-probe", &request, 0, Duration::from_secs(2))
        .is_ok_and(|r| r.error_code == 0)
}

/// The last `n` lines of a log file, for failure messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// One server process (a broker or the daemon) that can be killed and restarted with the same
/// arguments.
#[derive(Debug)]
pub struct Server {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    /// Where it listens.
    pub addr: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
}

impl Server {
    fn new(name: &str, program: PathBuf, args: Vec<String>, addr: SocketAddr, dir: &Path) -> Self {
        Self {
            name: name.to_owned(),
            program,
            args,
            addr,
            log: dir.join(format!("{name}.log")),
            child: None,
        }
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open server log");
        let _ = writeln!(
            log,
            "=== e2e harness: starting {} {:?} {}",
            self.name,
            self.program,
            self.args.join(" ")
        );
        let err = log.try_clone().expect("clone log");
        let child = Command::new(&self.program)
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("E2E_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} ({:?}): {e}", self.name, self.program));
        self.child = Some(child);
    }

    /// Whether the process is still alive.
    fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits until the process answers ApiVersions; `Err` if it exited or the bound passed.
    fn await_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP;
        loop {
            if !self.running() {
                return Err(format!(
                    "{} exited during startup; log:\n{}",
                    self.name,
                    tail(&self.log, 40)
                ));
            }
            if answers_api_versions(self.addr) {
                // Another process could own the port: make sure ours is still alive.
                std::thread::sleep(Duration::from_millis(100));
                if self.running() {
                    return Ok(());
                }
                continue;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not answer ApiVersions on {} within {STARTUP:?}; log:\n{}",
                    self.name,
                    self.addr,
                    tail(&self.log, 40)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            if let Ok(mut log) = OpenOptions::new().append(true).open(&self.log) {
                let _ = writeln!(log, "=== e2e harness: SIGKILLed {}", self.name);
            }
        }
    }

    /// Starts the process again with the same arguments (same port, same data dir) and waits
    /// until it answers; retries while the port is still held (bounded).
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        for _ in 0..5 {
            self.spawn();
            match self.await_ready() {
                Ok(()) => return,
                Err(e) => {
                    last = e;
                    self.kill();
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        panic!("restart of {} failed: {last}", self.name);
    }

    /// The server's name (`broker2`, `daemon-1002`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Where the coordinator lives.
    pub mode: Mode,
    /// Number of brokers (node ids 1..=n).
    pub brokers: usize,
    /// `NAME:PARTITIONS` topic specs.
    pub topics: Vec<String>,
    /// Coordinator settings (`KEY=VALUE`), passed as `--set` to whichever process hosts it.
    pub settings: Vec<String>,
    /// Broker-only settings (`KEY=VALUE`), passed as `--set` to every refbroker in both modes
    /// (e.g. `transaction.partition.verification.enable=false`).
    pub broker_settings: Vec<String>,
    /// A coordinator cluster on etcd (`on_etcd`): a 3-member etcd and 3 coordinator nodes
    /// sharing the transaction log there.
    pub etcd: bool,
}

impl ClusterSpec {
    /// Two brokers in `mode` with the given topics and the default settings.
    pub fn new(mode: Mode, topics: &[&str]) -> Self {
        Self {
            mode,
            brokers: 2,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            settings: Vec::new(),
            broker_settings: Vec::new(),
            etcd: false,
        }
    }

    /// Adds a broker setting (every refbroker, both modes).
    pub fn broker_set(mut self, kv: &str) -> Self {
        self.broker_settings.push(kv.to_owned());
        self
    }

    /// A coordinator cluster on etcd (3 etcd members started with the cluster). Standalone:
    /// three daemons (node ids 1001..=1003, `--bootstrap-servers` the brokers) and brokers
    /// with `--coordinator D1,D2,D3`. Embedded: three brokers (node ids 1..=3), each with
    /// `--embedded-coordinator` on the shared log. Both with
    /// `etcd.lease.ttl.ms=ETCD_LEASE_MS` unless a setting names it.
    pub fn on_etcd(mut self) -> Self {
        self.etcd = true;
        if self.mode == Mode::Embedded {
            self.brokers = ETCD_COORDINATORS;
        }
        self
    }

    /// Adds a coordinator setting.
    pub fn set(mut self, kv: &str) -> Self {
        self.settings.push(kv.to_owned());
        self
    }
}

/// Running brokers and, in standalone mode, the daemon. Everything is killed on drop; on a
/// panic the tails of all logs are printed first.
#[derive(Debug)]
pub struct Cluster {
    /// The spec it was started from.
    pub spec: ClusterSpec,
    /// Brokers, index i is node id i + 1.
    pub brokers: Vec<Server>,
    /// The standalone daemon.
    pub daemon: Option<Server>,
    /// The standalone daemons of a cluster on etcd, index i is node id 1001 + i.
    pub daemons: Vec<Server>,
    /// The etcd members of a cluster on etcd (dropped after the servers).
    etcd: Option<EtcdCluster>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the cluster; retries with fresh ports if a process could not start (bounded).
    pub fn start(spec: ClusterSpec) -> Self {
        let mut last = String::new();
        for attempt in 0..3 {
            match Self::try_start(&spec) {
                Ok(c) => return c,
                Err(e) => {
                    eprintln!("e2e harness: cluster start attempt {attempt} failed: {e}");
                    last = e;
                }
            }
        }
        panic!("could not start the cluster: {last}");
    }

    fn try_start(spec: &ClusterSpec) -> Result<Self, String> {
        if spec.etcd {
            return Self::try_start_on_etcd(spec);
        }
        let dir = tempfile::Builder::new()
            .prefix("txn-e2e-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let ports: Vec<u16> = (0..spec.brokers + 1).map(|_| free_port()).collect();
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let broker_addrs: Vec<SocketAddr> =
            ports[..spec.brokers].iter().map(|p| addr(*p)).collect();
        let daemon_addr = addr(ports[spec.brokers]);
        let mut daemon = None;
        if spec.mode == Mode::Standalone {
            daemon = Some(daemon_server(
                "daemon",
                dir.path(),
                daemon_addr,
                &broker_addrs,
                &[],
                &spec.settings,
            )?);
        }
        let brokers = refbroker_servers(
            spec,
            dir.path(),
            &broker_addrs,
            &spec.settings,
            &daemon_addr.to_string(),
        )?;
        let mut cluster = Self {
            spec: spec.clone(),
            brokers,
            daemon,
            daemons: Vec::new(),
            etcd: None,
            dir,
        };
        for b in &mut cluster.brokers {
            b.spawn();
        }
        if let Some(d) = &mut cluster.daemon {
            d.spawn();
        }
        for b in &mut cluster.brokers {
            b.await_ready()?;
        }
        if let Some(d) = &mut cluster.daemon {
            d.await_ready()?;
        }
        Ok(cluster)
    }

    /// `try_start` for a coordinator cluster on etcd (`ClusterSpec::on_etcd`).
    fn try_start_on_etcd(spec: &ClusterSpec) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let etcd = rt
            .block_on(EtcdCluster::start(3))
            .map_err(|e| format!("etcd: {e:#}"))?;
        drop(rt);
        let dir = tempfile::Builder::new()
            .prefix("txn-e2e-etcd-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let broker_addrs: Vec<SocketAddr> = (0..spec.brokers).map(|_| addr(free_port())).collect();
        let daemon_count = match spec.mode {
            Mode::Standalone => ETCD_COORDINATORS,
            Mode::Embedded => 0,
        };
        let daemon_addrs: Vec<SocketAddr> = (0..daemon_count).map(|_| addr(free_port())).collect();
        let mut settings = vec![
            "txn.log.backend=etcd".to_owned(),
            format!("etcd.endpoints={}", etcd.endpoints_arg()),
        ];
        if !spec
            .settings
            .iter()
            .any(|kv| kv.starts_with("etcd.lease.ttl.ms="))
        {
            settings.push(format!("etcd.lease.ttl.ms={ETCD_LEASE_MS}"));
        }
        settings.extend(spec.settings.iter().cloned());
        let mut daemons = Vec::new();
        for (i, a) in daemon_addrs.iter().enumerate() {
            let node = ETCD_DAEMON_NODE_ID + i;
            daemons.push(daemon_server(
                &format!("daemon-{node}"),
                dir.path(),
                *a,
                &broker_addrs,
                &["--node-id".to_owned(), node.to_string()],
                &settings,
            )?);
        }
        let brokers = refbroker_servers(
            spec,
            dir.path(),
            &broker_addrs,
            &settings,
            &join_addrs(&daemon_addrs),
        )?;
        let mut cluster = Self {
            spec: spec.clone(),
            brokers,
            daemon: None,
            daemons,
            etcd: Some(etcd),
            dir,
        };
        for s in cluster.brokers.iter_mut().chain(cluster.daemons.iter_mut()) {
            s.spawn();
        }
        for s in cluster.brokers.iter_mut().chain(cluster.daemons.iter_mut()) {
            s.await_ready()?;
        }
        cluster.await_coordinators_spread()?;
        Ok(cluster)
    }

    /// Waits (bounded) until every broker names the same coordinator for each of a set of
    /// probe ids and the owners are all `ETCD_COORDINATORS` coordinator nodes: the log
    /// partitions are spread over the members and no start-up handover is still under way.
    fn await_coordinators_spread(&self) -> Result<(), String> {
        let ids: Vec<String> = (0..24).map(|i| format!("e2e-spread-probe-{i}")).collect();
        let deadline = Instant::now() + ETCD_SPREAD;
        let mut last = String::new();
        loop {
            let mut owners = std::collections::BTreeSet::new();
            let mut agreed = true;
            'ids: for id in &ids {
                let mut first = None;
                for b in &self.brokers {
                    match find_coordinator(b.addr, id) {
                        Ok(a) if first.is_none_or(|f| f == a) => first = Some(a),
                        Ok(a) => {
                            last = format!("{id}: {} names {a}, another broker {first:?}", b.name);
                            agreed = false;
                            break 'ids;
                        }
                        Err(e) => {
                            last = format!("{id}: {} answers {e}", b.name);
                            agreed = false;
                            break 'ids;
                        }
                    }
                }
                owners.extend(first);
            }
            if agreed && owners.len() == ETCD_COORDINATORS {
                return Ok(());
            }
            if agreed {
                last = format!("the probe ids are owned by {owners:?} only");
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the coordinators did not spread the log within {ETCD_SPREAD:?}: {last}; logs:\n{}",
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The coordinator of `txn_id` as the first running broker that answers FindCoordinator
    /// names it.
    pub fn find_owner(&mut self, txn_id: &str) -> Result<SocketAddr, String> {
        let mut last = "no broker is running".to_owned();
        for b in &mut self.brokers {
            if !b.running() {
                continue;
            }
            match find_coordinator(b.addr, txn_id) {
                Ok(a) => return Ok(a),
                Err(e) => last = format!("{}: {e}", b.name),
            }
        }
        Err(last)
    }

    /// The server (broker or daemon) listening on `addr`.
    pub fn server_at(&mut self, addr: SocketAddr) -> Option<&mut Server> {
        self.brokers
            .iter_mut()
            .chain(self.daemons.iter_mut())
            .chain(self.daemon.iter_mut())
            .find(|s| s.addr == addr)
    }

    /// `host:port,host:port` of all brokers.
    pub fn bootstrap(&self) -> String {
        self.brokers
            .iter()
            .map(|b| b.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The scratch directory (client logs go here too).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process hosting the transaction coordinator: the daemon, or in embedded mode the
    /// broker that answers FindCoordinator(TRANSACTION) for `txn_id`.
    pub fn coordinator_host(&mut self, txn_id: &str) -> &mut Server {
        if self.spec.etcd {
            let addr = self
                .find_owner(txn_id)
                .unwrap_or_else(|e| panic!("FindCoordinator({txn_id}): {e}"));
            return self
                .server_at(addr)
                .unwrap_or_else(|| panic!("coordinator {addr} is not one of the servers"));
        }
        match self.spec.mode {
            Mode::Standalone => self.daemon.as_mut().expect("daemon"),
            Mode::Embedded => {
                let addr = find_coordinator(self.brokers[0].addr, txn_id)
                    .unwrap_or_else(|e| panic!("FindCoordinator({txn_id}): {e}"));
                self.brokers
                    .iter_mut()
                    .find(|b| b.addr == addr)
                    .unwrap_or_else(|| panic!("coordinator {addr} is not one of the brokers"))
            }
        }
    }

    /// Tails of every server log.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for s in self
            .brokers
            .iter()
            .chain(self.daemon.iter())
            .chain(self.daemons.iter())
        {
            let _ = writeln!(
                out,
                "----- {} ({}) -----\n{}",
                s.name,
                s.addr,
                tail(&s.log, 60)
            );
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !std::thread::panicking()
            && let Some(broker) = self.brokers.first()
        {
            let mode = match self.spec.mode {
                Mode::Embedded => "embedded",
                Mode::Standalone => "standalone",
            };
            compat::record(mode, self.spec.etcd, broker.addr);
        }
        if std::thread::panicking() {
            eprintln!("e2e harness: test failed; server logs:\n{}", self.logs());
            if std::env::var_os("E2E_KEEP").is_some() {
                let kept = self.dir.path().to_path_buf();
                eprintln!("e2e harness: keeping {}", kept.display());
                let d = std::mem::replace(
                    &mut self.dir,
                    tempfile::tempdir().expect("replacement tempdir"),
                );
                let _ = d.keep();
                if let Some(etcd) = &mut self.etcd {
                    let kept = etcd.keep_files();
                    eprintln!(
                        "e2e harness: keeping the etcd members' files in {}",
                        kept.display()
                    );
                }
            }
        }
        for b in &mut self.brokers {
            b.kill();
        }
        if let Some(d) = &mut self.daemon {
            d.kill();
        }
        for d in &mut self.daemons {
            d.kill();
        }
        // The etcd members go after the servers that use them.
        self.etcd.take();
    }
}

/// `a,b,c` from addresses.
fn join_addrs(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A `txn-coordinator serve` named `name` on `addr` for `brokers`, its data in
/// `dir/<name>-data`, with `extra` arguments and each of `settings` as `--set`.
fn daemon_server(
    name: &str,
    dir: &Path,
    addr: SocketAddr,
    brokers: &[SocketAddr],
    extra: &[String],
    settings: &[String],
) -> Result<Server, String> {
    let data = dir.join(format!("{name}-data"));
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let mut args = vec![
        "serve".to_owned(),
        "--listen".to_owned(),
        addr.to_string(),
        "--data-dir".to_owned(),
        data.display().to_string(),
        "--bootstrap-servers".to_owned(),
        join_addrs(brokers),
    ];
    args.extend(extra.iter().cloned());
    for kv in settings {
        args.push("--set".to_owned());
        args.push(kv.clone());
    }
    Ok(Server::new(name, daemon_bin(), args, addr, dir))
}

/// The refbrokers of `spec` on `addrs` (node ids from 1), their data in `dir/broker<N>-data`:
/// embedded, each coordinator with `settings`; standalone, using the daemons at
/// `coordinators` (`host:port[,...]`).
fn refbroker_servers(
    spec: &ClusterSpec,
    dir: &Path,
    addrs: &[SocketAddr],
    settings: &[String],
    coordinators: &str,
) -> Result<Vec<Server>, String> {
    let cluster_arg = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut brokers = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let data = dir.join(format!("broker{}-data", i + 1));
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let mut args = vec![
            "--listen".to_owned(),
            a.to_string(),
            "--data-dir".to_owned(),
            data.display().to_string(),
            "--topics".to_owned(),
            spec.topics.join(","),
            "--node-id".to_owned(),
            (i + 1).to_string(),
            "--cluster".to_owned(),
            cluster_arg.clone(),
        ];
        match spec.mode {
            Mode::Embedded => {
                args.push("--embedded-coordinator".to_owned());
                for kv in settings {
                    args.push("--set".to_owned());
                    args.push(kv.clone());
                }
            }
            Mode::Standalone => {
                args.push("--coordinator".to_owned());
                args.push(coordinators.to_owned());
            }
        }
        for kv in &spec.broker_settings {
            args.push("--set".to_owned());
            args.push(kv.clone());
        }
        brokers.push(Server::new(
            &format!("broker{}", i + 1),
            refbroker_bin(),
            args,
            *a,
            dir,
        ));
    }
    Ok(brokers)
}

/// FindCoordinator v1 (key_type 1) against `broker`: the coordinator's address.
pub fn find_coordinator(broker: SocketAddr, key: &str) -> Result<SocketAddr, String> {
    let request = FindCoordinatorRequest::default()
        .with_key(sb(key))
        .with_key_type(1);
    let r = blocking::call(broker, "e2e-probe", &request, 1, Duration::from_secs(5))?;
    if r.error_code != 0 {
        return Err(format!("error code {}", r.error_code));
    }
    format!("{}:{}", r.host.as_str(), r.port)
        .parse()
        .map_err(|e| format!("bad address {}:{}: {e}", r.host.as_str(), r.port))
}

/// A running client program: its JSON events are read from its stdout as it prints them.
#[derive(Debug)]
pub struct Client {
    name: String,
    child: Option<Child>,
    stdout: StdoutLines,
    /// Every event seen so far, in order.
    pub events: Vec<Json>,
    stderr: PathBuf,
}

impl Client {
    /// Starts `python <script> <args>` in the scripts directory; stderr goes to a file in
    /// `dir`.
    pub fn spawn(python: &Path, dir: &Path, name: &str, script: &str, args: &[String]) -> Self {
        match script {
            "lr.py" => compat::used("librdkafka"),
            "kp.py" => compat::used("kafka-python"),
            _ => {}
        }
        let mut cmd = Command::new(python);
        cmd.arg("-u")
            .arg(scripts_dir().join(script))
            .args(args)
            .current_dir(scripts_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        Self::spawn_command(dir, name, cmd)
    }

    /// Starts the Java client program `tests/java/TxnClient.java` (single-file source launch)
    /// with Kafka's jars on `classpath`; stderr goes to a file in `dir`.
    pub fn spawn_java(classpath: &str, dir: &Path, name: &str, args: &[String]) -> Self {
        compat::used("java");
        let mut cmd = crate::kafka_tool::java(classpath);
        cmd.arg(java_dir().join("TxnClient.java")).args(args);
        Self::spawn_command(dir, name, cmd)
    }

    /// Starts `cmd`, a program that prints one JSON event per line; stderr goes to a file in
    /// `dir`.
    fn spawn_command(dir: &Path, name: &str, mut cmd: Command) -> Self {
        let stderr = dir.join(format!("client-{name}.stderr"));
        let err = File::create(&stderr).expect("client stderr file");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn client {name} ({cmd:?}): {e}"));
        let stdout = StdoutLines::read(child.stdout.take().expect("client stdout"));
        Self {
            name: name.to_owned(),
            child: Some(child),
            stdout,
            events: Vec::new(),
            stderr,
        }
    }

    fn context(&self) -> String {
        format!(
            "client {}: events so far:\n{}\nstderr tail:\n{}",
            self.name,
            self.events
                .iter()
                .map(|e| format!("  {e:?}"))
                .collect::<Vec<_>>()
                .join("\n"),
            tail(&self.stderr, 40)
        )
    }

    fn take_line(&mut self, line: &str) -> Json {
        let ev = serde_json::from_str::<Json>(line).unwrap_or_else(|e| {
            panic!(
                "client {} printed a non-JSON line {line:?}: {e}\n{}",
                self.name,
                self.context()
            )
        });
        self.events.push(ev.clone());
        ev
    }

    /// Waits (bounded) for the next event with `ev == name`; panics if the program ends or
    /// the bound passes first.
    pub fn wait_event(&mut self, name: &str, within: Duration) -> Json {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.next(left) {
                Ok(line) => {
                    let ev = self.take_line(&line);
                    if ev.get("ev").and_then(Json::as_str) == Some(name) {
                        return ev;
                    }
                    if ev.get("ev").and_then(Json::as_str) == Some("fatal") {
                        panic!(
                            "client {} failed while waiting for {name}\n{}",
                            self.name,
                            self.context()
                        );
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {name:?} event within {within:?}\n{}", self.context())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("client ended before a {name:?} event\n{}", self.context())
                }
            }
        }
    }

    /// Waits (bounded) for the program to exit with status 0 and returns all its events.
    pub fn finish(mut self, within: Duration) -> Vec<Json> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.next(left) {
                Ok(line) => {
                    self.take_line(&line);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let ctx = self.context();
                    self.kill();
                    panic!("client did not finish within {within:?}\n{ctx}");
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let mut child = self.child.take().expect("child");
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("client closed stdout but did not exit\n{}", self.context());
                }
            }
        };
        assert!(
            status.success(),
            "client exited with {status}\n{}",
            self.context()
        );
        std::mem::take(&mut self.events)
    }

    /// SIGKILLs the program (the events read so far stay in `events`).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        while let Ok(line) = self.stdout.next(Duration::from_millis(200)) {
            if serde_json::from_str::<Json>(&line).is_ok() {
                self.take_line(&line);
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a client program to its end (bounded) and returns its events.
pub fn run(
    python: &Path,
    dir: &Path,
    name: &str,
    script: &str,
    args: &[String],
    within: Duration,
) -> Vec<Json> {
    Client::spawn(python, dir, name, script, args).finish(within)
}

/// `["--k", "v", ...]` from pairs.
pub fn args(pairs: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.push((*k).to_owned());
        if !v.is_empty() {
            out.push((*v).to_owned());
        }
    }
    out
}

/// One topic's partitions as a scenario reads them back with a client script.
pub struct TopicReader<'a> {
    python: &'a Path,
    dir: &'a Path,
    script: &'a str,
    bootstrap: &'a str,
    topic: &'a str,
    partitions: &'a str,
}

impl<'a> TopicReader<'a> {
    /// `topic`'s `partitions` on the cluster at `bootstrap`, read with `script`.
    pub fn new(
        python: &'a Path,
        dir: &'a Path,
        script: &'a str,
        bootstrap: &'a str,
        topic: &'a str,
        partitions: &'a str,
    ) -> Self {
        Self {
            python,
            dir,
            script,
            bootstrap,
            topic,
            partitions,
        }
    }

    /// Reads the partitions from the beginning with the script's `consume` at `isolation`
    /// until every partition is at its end and at least `min` records were read (bounded).
    pub fn read(&self, isolation: &str, min: usize) -> checks::ReadResult {
        let events = run(
            self.python,
            self.dir,
            isolation,
            self.script,
            &args(&[
                ("consume", ""),
                ("--bootstrap", self.bootstrap),
                ("--topic", self.topic),
                ("--partitions", self.partitions),
                ("--isolation", isolation),
                ("--min-records", &min.to_string()),
                ("--deadline", "30"),
            ]),
            Duration::from_secs(60),
        );
        checks::ReadResult::from_events(&events)
    }

    /// Reads at `isolation` (as `read`, for `expect`'s present records) and asserts the read
    /// holds to `expect`, reported as `what`; returns the read.
    pub fn assert_reads(
        &self,
        isolation: &str,
        what: &str,
        expect: &checks::Expect,
    ) -> checks::ReadResult {
        let read = self.read(isolation, expect.present());
        checks::assert_clean(&expect.check(what, &read), &read);
        read
    }
}

/// The `#[test]` cases of a scenario file, each `name: Mode, "script";` calling the file's
/// `scenario(Mode, &str)`.
#[macro_export]
macro_rules! scenario_tests {
    ($($name:ident: $mode:ident, $script:literal;)+) => {
        $(
            #[test]
            fn $name() {
                scenario($crate::e2e::Mode::$mode, $script);
            }
        )+
    };
}
pub use crate::scenario_tests;
