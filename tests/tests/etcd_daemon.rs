//! The daemon on the etcd backend (`--set txn.log.backend=etcd`): the transaction state lives
//! in a 3-member etcd cluster, so a second daemon (another node id, another data directory)
//! started after the first one was SIGKILLed continues its transactions: an open transaction
//! commits through it with the producer's epoch, a decided one keeps its decision, and the
//! producer ids it hands out do not collide with the first daemon's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use txn_testkit::pool::Pool;
use txn_testkit::wire::free_port;
use txn_tests::etcd::{EtcdCluster, daemon_on_etcd, requests};
use txn_tests::fault::process::{Proc, Spec, bin_path};

const STARTUP: Duration = Duration::from_secs(60);

async fn init(pool: &mut Pool, at: std::net::SocketAddr, id: &str) -> (i64, i16) {
    requests::init_at_owner(pool, &[at], id, Duration::from_secs(30))
        .await
        .1
}

async fn add(pool: &mut Pool, at: std::net::SocketAddr, id: &str, pe: (i64, i16), p: i32) {
    let code = requests::add(pool, at, id, pe, "t", p).await;
    assert_eq!(code, 0, "AddPartitionsToTxn({id}, t-{p})");
}

/// A refbroker with topic `t` (2 partitions) and its data and log under `dir`; returns it and
/// its address for `--bootstrap-servers`.
fn start_broker(dir: &Path) -> (Proc, String) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let broker = Proc::start(
        Spec {
            name: "broker".into(),
            bin: PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
            args: [
                "--listen",
                &addr,
                "--data-dir",
                &dir.join("broker").to_string_lossy(),
                "--topics",
                "t:2",
                "--coordinator",
                "127.0.0.1:1",
            ]
            .map(str::to_owned)
            .to_vec(),
            ready_prefix: "refbroker listening on ".into(),
            log_file: Some(dir.join("broker.log")),
            env: Vec::new(),
        },
        STARTUP,
    )
    .expect("refbroker starts");
    (broker, addr)
}

/// A failover test's world: etcd, a scratch directory with a refbroker in it, and the daemons'
/// arguments (that broker, 8 log partitions, then the test's own).
struct Failover {
    // dropped in this order: the broker, etcd, then their directory
    _broker: Proc,
    etcd: EtcdCluster,
    dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Failover {
    /// etcd with `members` members, the broker, and the daemon arguments ending with `more`.
    async fn start(members: usize, more: &[&str]) -> Self {
        let etcd = EtcdCluster::start(members).await.expect("etcd");
        let dir = tempfile::tempdir().expect("tmp");
        let (broker, addr) = start_broker(dir.path());
        let mut args: Vec<String> = [
            "--bootstrap-servers",
            &addr,
            "--set",
            "transaction.state.log.num.partitions=8",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(more.iter().map(|a| (*a).to_owned()));
        Self {
            etcd,
            dir,
            _broker: broker,
            args,
        }
    }

    /// Daemon `node` on this etcd with the arguments.
    fn daemon(&self, node: i32) -> Proc {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        daemon_on_etcd(node, &self.etcd.endpoints_arg(), self.dir.path(), &args)
            .unwrap_or_else(|e| panic!("daemon {node}: {e:#}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_continues_the_transactions_of_a_killed_one() {
    let world = Failover::start(3, &[]).await;
    let endpoints = world.etcd.endpoints_arg();
    let mut pool = Pool::new("etcd-daemon-test", Duration::from_secs(10));

    let mut first = world.daemon(1);
    let a = first.addr().expect("first daemon's address");
    let app = init(&mut pool, a, "app").await;
    add(&mut pool, a, "app", app, 0).await;
    assert_eq!(requests::end(&mut pool, a, "app", app).await, 0);
    requests::wait_state(&mut pool, a, "app", "CompleteCommit").await;
    add(&mut pool, a, "app", app, 1).await;
    requests::wait_state(&mut pool, a, "app", "Ongoing").await;
    first.kill();

    let second = world.daemon(2);
    let b = second.addr().expect("second daemon's address");
    let parts = requests::wait_state(&mut pool, b, "app", "Ongoing").await;
    assert_eq!(
        parts,
        vec![1],
        "the open transaction and its partition, read from etcd"
    );
    assert_eq!(
        requests::end(&mut pool, b, "app", app).await,
        0,
        "the producer's epoch is still valid"
    );
    requests::wait_state(&mut pool, b, "app", "CompleteCommit").await;
    let other = init(&mut pool, b, "other").await;
    assert_ne!(
        other.0, app.0,
        "producer id blocks are unique across daemons"
    );
    let again = init(&mut pool, b, "app").await;
    assert_eq!(
        again,
        (app.0, app.1 + 1),
        "the epoch continues from the first daemon's"
    );

    // dump-log reads the same log from etcd while the daemon runs.
    let out = std::process::Command::new(
        std::env::var_os("TXN_COORDINATOR_BIN")
            .map_or_else(|| bin_path("txn-coordinator"), PathBuf::from),
    )
    .args(["dump-log", "--json", "--set", "txn.log.backend=etcd"])
    .args(["--set", &format!("etcd.endpoints={endpoints}")])
    .args(["--set", "transaction.state.log.num.partitions=8"])
    .output()
    .expect("dump-log runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("\"transactionalId\":\"app\""), "{text}");
    assert!(text.contains("\"transactionalId\":\"other\""), "{text}");
}

/// `/ready` on etcd: each daemon is ready once the partitions it owns in its view are loaded;
/// with two daemons settled, both are ready and the log partitions they serve (their
/// `partition_coordinator_epoch` series) are disjoint and cover all 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_means_this_daemons_share_is_loaded() {
    let etcd = EtcdCluster::start(1).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let endpoints = etcd.endpoints_arg();
    let mut metrics = Vec::new();
    let mut daemons = Vec::new();
    for node in [1, 2] {
        let m = format!("127.0.0.1:{}", free_port());
        let extra = [
            "--set",
            "transaction.state.log.num.partitions=8",
            "--metrics-listen",
            m.as_str(),
        ];
        daemons.push(daemon_on_etcd(node, &endpoints, dir.path(), &extra).expect("daemon"));
        metrics.push(m);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    loop {
        assert!(std::time::Instant::now() < deadline, "not settled: {last}");
        let mut served: Vec<Vec<u32>> = Vec::new();
        let mut all_ready = true;
        last.clear();
        for m in &metrics {
            let ready = txn_testkit::http::get(m, "/ready").await;
            match &ready {
                Some((200, body)) => assert_eq!(body, "ready\n"),
                Some((503, body)) => {
                    assert!(body.starts_with("not ready: "), "{body}");
                    all_ready = false;
                }
                other => panic!("/ready answered {other:?}"),
            }
            let (status, text) = txn_testkit::http::get(m, "/metrics")
                .await
                .expect("metrics");
            assert_eq!(status, 200);
            let parts: Vec<u32> = text
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("txn_coordinator_partition_coordinator_epoch{partition=\"")?
                        .split('"')
                        .next()?
                        .parse()
                        .ok()
                })
                .collect();
            last.push_str(&format!("{m}: {ready:?} serves {parts:?}; "));
            served.push(parts);
        }
        let mut union: Vec<u32> = served.concat();
        union.sort_unstable();
        if all_ready
            && union == (0..8).collect::<Vec<u32>>()
            && served.iter().all(|s| !s.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // /health answers throughout.
    for m in &metrics {
        assert_eq!(
            txn_testkit::http::get(m, "/health").await,
            Some((200, "ok\n".to_owned()))
        );
    }
    drop(daemons);
}

/// KIP-939 across a failover on etcd: a two-phase-commit transaction kept by a new producer
/// session (`KeepPreparedTxn`) on the first daemon, which is then SIGKILLed, is still kept on
/// the second: Ongoing, never timed out, the old producer fenced, and the session's EndTxn
/// commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_two_phase_transaction_survives_a_failover() {
    use kafka_protocol::messages as km;
    let world = Failover::start(1, &["--set", "transaction.two.phase.commit.enable=true"]).await;
    let mut pool = Pool::new("etcd-2pc-test", Duration::from_secs(10));
    // InitProducerId v6 of "xa" with Enable2Pc at the only daemon, retried while retriable.
    async fn init_2pc(
        pool: &mut Pool,
        at: std::net::SocketAddr,
        keep: bool,
    ) -> km::InitProducerIdResponse {
        let req = km::InitProducerIdRequest::default()
            .with_transactional_id(Some(km::TransactionalId("xa".into())))
            .with_transaction_timeout_ms(60_000)
            .with_enable_2_pc(true)
            .with_keep_prepared_txn(keep);
        for _ in 0..300 {
            // 51, 14, 16: a transaction completing, a partition loading or not owned yet.
            if let Ok(r) = pool.call(at, &req, 6).await
                && ![51, 14, 16].contains(&r.error_code)
            {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("InitProducerId(xa) v6 kept failing at {at}");
    }

    let mut first = world.daemon(1);
    let a = first.addr().expect("first daemon's address");
    let r = init_2pc(&mut pool, a, false).await;
    assert_eq!(r.error_code, 0);
    let txn = (r.producer_id.0, r.producer_epoch);
    add(&mut pool, a, "xa", txn, 0).await;
    let r = init_2pc(&mut pool, a, true).await;
    assert_eq!(
        (
            r.error_code,
            r.ongoing_txn_producer_id.0,
            r.ongoing_txn_producer_epoch
        ),
        (0, txn.0, txn.1)
    );
    let session = (r.producer_id.0, r.producer_epoch);
    assert_eq!(session, (txn.0, txn.1 + 1));
    first.kill();

    let second = world.daemon(2);
    let b = second.addr().expect("second daemon's address");
    let parts = requests::wait_state(&mut pool, b, "xa", "Ongoing").await;
    assert_eq!(parts, vec![0], "the kept transaction, read from etcd");
    assert_ne!(
        requests::end(&mut pool, b, "xa", txn).await,
        0,
        "the producer that began it is fenced"
    );
    assert_eq!(
        requests::end(&mut pool, b, "xa", session).await,
        0,
        "the session commits it"
    );
    requests::wait_state(&mut pool, b, "xa", "CompleteCommit").await;
}
