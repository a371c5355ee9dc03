//! End-to-end failover on a coordinator cluster on etcd: a transactional producer (librdkafka
//! or kafka-python) runs a stream of commits and aborts over 3 partitions while the transaction
//! log is shared in a 3-member etcd by three coordinator nodes (`ClusterSpec::on_etcd`):
//!
//! - standalone: three `txn-coordinator serve` daemons, brokers with `--coordinator D1,D2,D3`;
//! - embedded: three `refbroker --embedded-coordinator` brokers.
//!
//! After a few commits the process hosting the coordinator of the producer's transactional id
//! (the daemon or broker FindCoordinator names) is SIGKILLed and left dead until FindCoordinator
//! names another node (a survivor took the id over: lease expiry plus a load). In embedded mode
//! the producer writes only to data partitions led by the other brokers (a broker's partitions
//! have no replica), and the killed broker is restarted after the takeover so it rejoins the
//! membership while the producer runs. The client completes its run; every acknowledged commit
//! is visible exactly once to read_committed, aborted transactions never, and no transaction
//! hangs: a sentinel transaction committed afterwards by a new producer instance with the same
//! transactional.id is visible, so the LSO advanced past everything. Prints the time from the
//! kill to the takeover and to the client's next successful commit.
//!
//! kafka-python 3.0.12 does not survive the kill on its own: a transactional request it sends
//! while the coordinator's connection is refused is lost (its sender's `await_ready` raises
//! instead of returning false, and the request is neither sent nor retried), so that
//! transaction never completes. kp.py therefore runs with `--recover-after-s`: it abandons a
//! transaction that does not complete within the bound and goes on with a new producer
//! instance of the same transactional.id, whose InitProducerId (at the new owner) fences the
//! old instance and aborts its transaction. An abandoned transaction never asked for its commit
//! and must stay invisible; one whose commit may have been sent must be all or nothing.
//!
//! Runs the clients from `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use txn_tests::e2e::checks::{Stream, commits_after, ev};
use txn_tests::e2e::{
    self, Client, Cluster, ClusterSpec, ETCD_LEASE_MS, Mode, TopicReader, args, run,
};
use txn_tests::refbroker::{Cluster as Placement, NodeAddr};

const TOPIC: &str = "failover";
const TOPIC_PARTITIONS: i32 = 6;
/// 20 transactions, 3 of them aborted.
const PATTERN: &str = "CCCCCACCCCACCCCCACCC";
/// Commits acknowledged before the kill.
const BEFORE_KILL: usize = 4;
/// kp.py's bound on a transaction's sends and end before it abandons the producer instance.
const KP_RECOVER_AFTER_S: &str = "10";
/// Bound on the takeover (FindCoordinator naming another node after the kill).
const TAKEOVER_BOUND: Duration = Duration::from_secs(30);

fn wall_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// The 3 partitions the producer writes: 0..3 in standalone mode; in embedded mode 3 partitions
/// led by brokers other than the current coordinator of `txn_id`, so the kill takes only the
/// coordinator away, not the data.
fn pick_partitions(cluster: &mut Cluster, txn_id: &str) -> Vec<i32> {
    if cluster.spec.mode == Mode::Standalone {
        return vec![0, 1, 2];
    }
    let owner = cluster
        .find_owner(txn_id)
        .unwrap_or_else(|e| panic!("FindCoordinator({txn_id}): {e}"));
    let nodes: BTreeMap<i32, NodeAddr> = cluster
        .brokers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let id = i32::try_from(i + 1).expect("node id");
            let addr = NodeAddr {
                host: b.addr.ip().to_string(),
                port: b.addr.port(),
            };
            (id, addr)
        })
        .collect();
    let owner_node = cluster
        .brokers
        .iter()
        .position(|b| b.addr == owner)
        .map(|i| i32::try_from(i + 1).expect("node id"))
        .unwrap_or_else(|| panic!("coordinator {owner} is not a broker"));
    let placement = Placement::new(nodes);
    let picked: Vec<i32> = (0..TOPIC_PARTITIONS)
        .filter(|p| placement.leader(TOPIC, *p) != owner_node)
        .take(3)
        .collect();
    assert_eq!(picked.len(), 3, "3 partitions led by survivors");
    picked
}

/// Polls FindCoordinator (asked of the running brokers) until it names a node other than
/// `dead`; returns the new owner.
fn await_takeover(
    cluster: &mut Cluster,
    txn_id: &str,
    dead: SocketAddr,
    since: Instant,
) -> SocketAddr {
    let deadline = since + TAKEOVER_BOUND;
    loop {
        let last = match cluster.find_owner(txn_id) {
            Ok(a) if a != dead => return a,
            Ok(a) => format!("still names {a}"),
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "no survivor took {txn_id} over within {TAKEOVER_BOUND:?} of the kill: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scenario(mode: Mode, script: &str) {
    let client = match script {
        "lr.py" => "lr",
        _ => "kp",
    };
    let test = format!("failover_{client}_{}", mode.tag());
    let Some(py) = e2e::python_or_skip(&test) else {
        return;
    };
    let started = Instant::now();
    let topic_spec = format!("{TOPIC}:{TOPIC_PARTITIONS}");
    let mut cluster = Cluster::start(ClusterSpec::new(mode, &[&topic_spec]).on_etcd());
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();
    let txn_id = format!("{test}-txn");
    let partitions = pick_partitions(&mut cluster, &txn_id);
    let partitions_arg = partitions
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let producer_args = |pattern: &str, prefix: &str| {
        let mut a = args(&[
            ("txns", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", &partitions_arg),
            ("--txn-id", &txn_id),
            ("--pattern", pattern),
            ("--prefix", prefix),
            ("--sleep-ms", "150"),
            ("--txn-timeout-ms", "20000"),
            ("--deadline", "100"),
        ]);
        if script == "kp.py" {
            // kafka-python 3.0.12 loses a transactional request sent while its coordinator's
            // connection is refused and then never completes the transaction; kp.py abandons
            // such a transaction and goes on with a new producer instance (same id).
            a.extend(args(&[("--recover-after-s", KP_RECOVER_AFTER_S)]));
        }
        a
    };
    let mut producer = Client::spawn(
        &py,
        &dir,
        "producer",
        script,
        &producer_args(PATTERN, &test),
    );
    for _ in 0..BEFORE_KILL {
        producer.wait_event("commit", Duration::from_secs(60));
    }

    let victim_addr = cluster
        .find_owner(&txn_id)
        .unwrap_or_else(|e| panic!("FindCoordinator({txn_id}): {e}"));
    let victim = cluster
        .server_at(victim_addr)
        .unwrap_or_else(|| panic!("coordinator {victim_addr} is not one of the servers"));
    let victim_name = victim.name().to_owned();
    victim.kill();
    let killed = Instant::now();
    let killed_at = wall_clock();
    let new_owner = await_takeover(&mut cluster, &txn_id, victim_addr, killed);
    let takeover = killed.elapsed();
    let new_name = cluster
        .server_at(new_owner)
        .map_or_else(|| new_owner.to_string(), |s| s.name().to_owned());
    let mut restarted = None;
    if mode == Mode::Embedded {
        // Its data partitions (none of the producer's) and its membership come back.
        cluster
            .server_at(victim_addr)
            .expect("the killed broker")
            .restart();
        restarted = Some(killed.elapsed());
    }

    let events = producer.finish(Duration::from_secs(100));
    assert!(
        events.iter().any(|e| ev(e) == "done"),
        "the producer must complete its run: {events:?}"
    );

    let sentinel = run(
        &py,
        &dir,
        "sentinel",
        script,
        &producer_args("C", &format!("{test}-sentinel")),
        Duration::from_secs(60),
    );

    let Stream {
        expect,
        commits,
        aborts,
        abandoned,
        ambiguous,
    } = Stream::of(events.iter().chain(&sentinel));
    let commit_times = commits_after(&events, killed_at);
    let next_commit = commit_times.iter().copied().reduce(f64::min);
    assert!(
        !commit_times.is_empty() && commits > BEFORE_KILL,
        "the stream must go on committing after the kill: {commits} commits, {} after the kill",
        commit_times.len()
    );
    assert!(
        sentinel.iter().any(|e| ev(e) == "commit"),
        "the sentinel transaction must commit: {sentinel:?}"
    );
    let reader = TopicReader::new(&py, &dir, "lr.py", &bootstrap, TOPIC, &partitions_arg);
    reader.assert_reads(
        "read_committed",
        "read_committed after the failover",
        &expect,
    );

    let restart_note = restarted.map_or_else(String::new, |r| {
        format!(", restarted it {r:.2?} after the kill")
    });
    println!(
        "{test}: SIGKILLed {victim_name} (coordinator of {txn_id}); {new_name} took the id over \
         {takeover:.2?} after the kill (lease {ETCD_LEASE_MS} ms){restart_note}; the client's next \
         commit came {:.2} s after the kill; {commits} commits ({} after the kill), {aborts} \
         aborts, {abandoned} abandoned, {ambiguous} ambiguous (producer instances: {}), \
         partitions {partitions_arg}; test took {:.1?}",
        next_commit.map_or(f64::NAN, |t| t - killed_at),
        commit_times.len(),
        events.iter().filter(|e| ev(e) == "init").count(),
        started.elapsed()
    );
}

e2e::scenario_tests! {
    failover_librdkafka_embedded: Embedded, "lr.py";
    failover_librdkafka_standalone: Standalone, "lr.py";
    failover_kafka_python_embedded: Embedded, "kp.py";
    failover_kafka_python_standalone: Standalone, "kp.py";
}
