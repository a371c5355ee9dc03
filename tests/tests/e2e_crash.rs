//! End-to-end scenario 4: coordinator crash. A transactional producer runs a stream
//! of commits over 3 partitions; after a few, the process hosting its coordinator (the daemon
//! in standalone mode, the broker FindCoordinator names in embedded mode) is SIGKILLed and
//! restarted with the same arguments and data dir. The client completes its run; every
//! acknowledged commit is visible exactly once, aborted ones never, and no transaction hangs:
//! a sentinel transaction committed afterwards by a new producer instance with the same
//! transactional.id is visible to read_committed, so the LSO advanced past everything.
//!
//! Runs librdkafka from `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

use std::time::Duration;

use txn_tests::e2e::checks::{Stream, commits_after, ev};
use txn_tests::e2e::{self, Client, Cluster, ClusterSpec, Mode, TopicReader, args, run};

const TOPIC: &str = "crash";
const PARTITIONS: &str = "0,1,2";
const TXNS: usize = 20;

fn scenario(mode: Mode) {
    let test = format!("crash_lr_{}", mode.tag());
    let Some(py) = e2e::python_or_skip(&test) else {
        return;
    };
    let mut cluster = Cluster::start(ClusterSpec::new(mode, &["crash:3"]));
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();
    let txn_id = format!("{test}-txn");
    let producer_args = |pattern: &str, prefix: &str| {
        args(&[
            ("txns", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--txn-id", &txn_id),
            ("--pattern", pattern),
            ("--prefix", prefix),
            ("--sleep-ms", "150"),
            ("--txn-timeout-ms", "20000"),
            ("--deadline", "100"),
        ])
    };
    let mut producer = Client::spawn(
        &py,
        &dir,
        "producer",
        "lr.py",
        &producer_args(&"C".repeat(TXNS), &test),
    );
    for _ in 0..4 {
        producer.wait_event("commit", Duration::from_secs(60));
    }
    let host = cluster.coordinator_host(&txn_id);
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    host.kill();
    std::thread::sleep(Duration::from_millis(1500));
    host.restart();
    let events = producer.finish(Duration::from_secs(150));
    assert!(
        events.iter().any(|e| ev(e) == "done"),
        "the producer must complete its run: {events:?}"
    );

    let sentinel = run(
        &py,
        &dir,
        "sentinel",
        "lr.py",
        &producer_args("C", &format!("{test}-sentinel")),
        Duration::from_secs(120),
    );

    let Stream {
        expect, commits, ..
    } = Stream::of(events.iter().chain(&sentinel));
    let after_restart = commits_after(&events, killed_at).len();
    assert!(
        after_restart >= 1 && commits >= 5,
        "the stream must go on committing after the restart: {commits} commits, \
         {after_restart} after the kill"
    );
    assert!(
        sentinel.iter().any(|e| ev(e) == "commit"),
        "the sentinel transaction must commit: {sentinel:?}"
    );
    let reader = TopicReader::new(&py, &dir, "lr.py", &bootstrap, TOPIC, PARTITIONS);
    reader.assert_reads("read_committed", "read_committed after the crash", &expect);
}

#[test]
fn crash_librdkafka_embedded() {
    scenario(Mode::Embedded);
}

#[test]
fn crash_librdkafka_standalone() {
    scenario(Mode::Standalone);
}
