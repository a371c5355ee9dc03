//! Shared helpers of the daemon integration tests: start the real binary on a free loopback
//! port, talk to it with the test kit's requests over `markers::wire`, and the test kit's fake
//! broker set up as the daemon's broker.
#![allow(dead_code, unreachable_pub)]

/// Test certificates, shared with the `txn-tests` TLS tests.
#[path = "../../../tests/tests/pki/mod.rs"]
pub mod pki;
pub use txn_testkit::fake_broker::{FakeBrokerConfig, Reply};
pub use txn_testkit::requests::*;
pub use txn_testkit::wire::sb as s;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{self as km, ApiKey, RequestKind};
use kafka_protocol::protocol::VersionRange;
use markers::wire::{KafkaConnection, read_frame, write_frame};
use tokio::net::TcpStream;
use txn_log::sync::Mutex;
use txn_testkit::process::{Listeners, StdoutLines};

pub const BIN: &str = env!("CARGO_BIN_EXE_txn-coordinator");

/// A running daemon; killed on drop.
pub struct Daemon {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub metrics_url: Option<String>,
    pub data_dir: PathBuf,
    stderr: Arc<Mutex<String>>,
    /// The listeners by name (`txn-coordinator listening on NAME://ADDR` lines).
    pub listeners: Listeners,
}

impl Daemon {
    /// Starts `txn-coordinator serve --listen 127.0.0.1:0 --data-dir DIR EXTRA...` and waits
    /// (bounded) until it prints its bound address.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with(data_dir, &["--listen", "127.0.0.1:0"], extra)
    }

    /// Starts `txn-coordinator serve --data-dir DIR EXTRA...` (listeners from `EXTRA`'s keys).
    pub fn start_listeners(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with(data_dir, &[], extra)
    }

    /// The address of the listener named `name`.
    pub fn listener(&self, name: &str) -> SocketAddr {
        self.listeners
            .get(name)
            .unwrap_or_else(|| panic!("no listener {name}: {:?}", self.listeners))
    }

    fn start_with(data_dir: &Path, listen: &[&str], extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(listen)
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn txn-coordinator");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let lines = StdoutLines::read(child.stdout.take().expect("stdout"));
        let prefix = "txn-coordinator listening on ";
        let listening = match lines.listening(prefix, Duration::from_secs(120)) {
            Ok(l) => l,
            Err(e) => {
                let _ = child.kill();
                panic!("daemon did not start: {e:#}; stderr:\n{}", stderr.lock());
            }
        };
        let addr = listening.addr;
        let metrics_url = listening.before.iter().find_map(|line| {
            line.strip_prefix("txn-coordinator metrics on ")
                .map(|url| url.trim().to_owned())
        });
        let listeners = lines.listeners(prefix).expect("listener lines");
        Self {
            child: Some(child),
            addr,
            metrics_url,
            data_dir: data_dir.to_owned(),
            stderr,
            listeners,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    pub async fn conn(&self) -> KafkaConnection<TcpStream> {
        txn_testkit::wire::connect(self.addr, "daemon-test").await
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (bounded) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("-TERM")
    }

    /// Sends `signal` (e.g. `-INT`) and waits (bounded) for the exit status.
    pub fn signal(&mut self, signal: &str) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let ok = Command::new("kill")
            .arg(signal)
            .arg(c.id().to_string())
            .status()
            .expect("kill -TERM");
        assert!(ok.success());
        for _ in 0..600 {
            if let Some(st) = c.try_wait().expect("try_wait") {
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        panic!(
            "daemon did not exit after SIGTERM; stderr:\n{}",
            self.stderr()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the admin `command` against the daemon at `bootstrap` (`--bootstrap-server`), with
/// `args` after it, as [`run_cli`] does.
pub fn run_admin(command: &str, bootstrap: &str, args: &[&str]) -> (ExitStatus, String, String) {
    let mut all = vec![command, "--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    run_cli(&all)
}

/// Runs the binary with `args` to completion (bounded) and returns (status, stdout, stderr).
pub fn run_cli(args: &[&str]) -> (ExitStatus, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = String::new();
    let mut err = String::new();
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = se.read_to_string(&mut e);
        e
    });
    let _ = so.read_to_string(&mut out);
    err.push_str(&t.join().expect("stderr thread"));
    for _ in 0..1200 {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return (st, out, err);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("{args:?} did not finish");
}

// ===== requests =====

pub async fn describe(
    c: &mut KafkaConnection<TcpStream>,
    id: &str,
) -> km::describe_transactions_response::TransactionState {
    let r = c
        .call(
            &km::DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![km::TransactionalId(s(id))]),
            0,
        )
        .await
        .expect("describe");
    r.transaction_states.into_iter().next().expect("one state")
}

/// InitProducerId v4 for `id`, retrying (bounded) while the answer is retriable.
pub async fn init_ok(c: &mut KafkaConnection<TcpStream>, id: &str, timeout_ms: i32) -> (i64, i16) {
    for _ in 0..200 {
        let r = c
            .call(&init_req(Some(id), timeout_ms), 4)
            .await
            .expect("init");
        match r.error_code {
            0 => return (r.producer_id.0, r.producer_epoch),
            14 | 51 => tokio::time::sleep(Duration::from_millis(50)).await,
            e => panic!("InitProducerId({id}) failed with {e}"),
        }
    }
    panic!("InitProducerId({id}) kept being retriable");
}

/// Polls DescribeTransactions (bounded) until `id` is in `state`.
pub async fn wait_state(c: &mut KafkaConnection<TcpStream>, id: &str, state: &str) {
    let mut last = String::new();
    for _ in 0..400 {
        let d = describe(c, id).await;
        last = d.transaction_state.to_string();
        if last == state {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} never reached {state}; last state {last}");
}

// ===== fake broker =====

/// The test kit's fake broker as the daemon's broker (node 1): topics `t`, `t2` (3
/// partitions) and `__consumer_offsets` (50), led by itself; it coordinates every group and
/// acknowledges WriteTxnMarkers, recording each request in `markers`.
pub struct FakeBroker {
    pub addr: SocketAddr,
    pub node_id: i32,
    pub markers: Arc<Mutex<Vec<km::WriteTxnMarkersRequest>>>,
    _broker: txn_testkit::fake_broker::FakeBroker,
}

pub fn all(_: ApiKey) -> Option<VersionRange> {
    Some(VersionRange {
        min: 0,
        max: i16::MAX,
    })
}

impl FakeBroker {
    pub async fn start() -> Self {
        let markers = Arc::new(Mutex::new(Vec::new()));
        let broker =
            txn_testkit::fake_broker::FakeBroker::start("127.0.0.1:0", fake_config(&markers))
                .await
                .expect("start fake broker");
        Self {
            addr: broker.addr(),
            node_id: 1,
            markers,
            _broker: broker,
        }
    }

    pub fn markers(&self) -> Vec<km::WriteTxnMarkersRequest> {
        self.markers.lock().clone()
    }
}

/// The fake broker's configuration: the topics above, Metadata 0-12, FindCoordinator 0-6 and
/// WriteTxnMarkers 1-2, as Kafka 4.2 lists it, so that the daemon's marker writer sends v2
/// (with each marker's transaction version); every WriteTxnMarkers is pushed to `markers`.
pub fn fake_config(markers: &Arc<Mutex<Vec<km::WriteTxnMarkersRequest>>>) -> FakeBrokerConfig {
    let markers = markers.clone();
    FakeBrokerConfig {
        topics: vec![
            ("t".into(), 3),
            ("t2".into(), 3),
            ("__consumer_offsets".into(), 50),
        ],
        apis: vec![
            (ApiKey::Metadata, 0, 12),
            (ApiKey::ApiVersions, 0, 3),
            (ApiKey::FindCoordinator, 0, 6),
            (ApiKey::WriteTxnMarkers, 1, 2),
        ],
        script: Some(Arc::new(move |body, _| {
            if let RequestKind::WriteTxnMarkers(r) = body {
                markers.lock().push(r.clone());
            }
            Reply::Default
        })),
        ..FakeBrokerConfig::default()
    }
}

/// A raw request frame body (header v1 with a null client id + `body`), for hand-made input.
pub fn raw_request(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&api_key.to_be_bytes());
    v.extend_from_slice(&version.to_be_bytes());
    v.extend_from_slice(&correlation_id.to_be_bytes());
    v.extend_from_slice(&(-1i16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Sends one framed `payload` and reads one response frame (None if the server closed).
pub async fn roundtrip_raw(addr: SocketAddr, payload: &[u8]) -> Option<Bytes> {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    write_frame(&mut sock, payload).await.ok()?;
    tokio::time::timeout(Duration::from_secs(30), read_frame(&mut sock, 1 << 24))
        .await
        .ok()?
        .ok()?
}
