//! End-to-end scenario 5: transaction timeout. Producer A begins a transaction,
//! writes to every partition, then stalls past its `transaction.timeout.ms`. Producer B
//! commits after A's writes. The reaper aborts A, so a read_committed consumer gets past A's
//! records to B's within timeout + reaper interval (plus slack for process start-up), A's
//! records never become visible, and A's late commit fails.
//!
//! Runs librdkafka and kafka-python from `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

use std::time::Duration;

use txn_tests::e2e::Json;
use txn_tests::e2e::checks::{Expect, Must, ReadResult, assert_clean, ev, values};
use txn_tests::e2e::{self, Client, Cluster, ClusterSpec, Mode, TopicReader, args, run};

const TOPIC: &str = "stall";
const PARTITIONS: &str = "0,1,2";
const TXN_TIMEOUT_MS: u64 = 5000;
const REAPER_INTERVAL_MS: u64 = 1000;
/// Slack on top of timeout + reaper interval for client start-up and fetch waits.
const SLACK_MS: u64 = 15000;

fn scenario(mode: Mode, script: &str) {
    let test = format!("timeout_{}_{}", script.trim_end_matches(".py"), mode.tag());
    let Some(py) = e2e::python_or_skip(&test) else {
        return;
    };
    let spec = ClusterSpec::new(mode, &["stall:3"]).set(&format!(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms={REAPER_INTERVAL_MS}"
    ));
    let cluster = Cluster::start(spec);
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();

    let stall_s = (TXN_TIMEOUT_MS + REAPER_INTERVAL_MS + 4000) / 1000;
    let mut stalled = Client::spawn(
        &py,
        &dir,
        "stalled",
        script,
        &args(&[
            ("stall", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--txn-id", &format!("{test}-a")),
            ("--prefix", &format!("{test}-a")),
            ("--txn-timeout-ms", &TXN_TIMEOUT_MS.to_string()),
            ("--stall-s", &stall_s.to_string()),
            ("--deadline", "60"),
        ]),
    );
    let written = stalled.wait_event("written", Duration::from_secs(30));
    let a_values = values(&written, "values");
    assert!(
        a_values.iter().all(|(_, _, o)| o.is_some()),
        "A's writes must be acknowledged: {written:?}"
    );

    let b_events = run(
        &py,
        &dir,
        "producer-b",
        script,
        &args(&[
            ("txns", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--txn-id", &format!("{test}-b")),
            ("--pattern", "C"),
            ("--prefix", &format!("{test}-b")),
            ("--deadline", "30"),
        ]),
        Duration::from_secs(60),
    );
    let b_commit = b_events
        .iter()
        .find(|e| ev(e) == "commit")
        .unwrap_or_else(|| panic!("B did not commit: {b_events:?}"));
    let b_values = values(b_commit, "values");

    let mut expect = Expect::default();
    expect.add_txn("a", &a_values, Must::Absent);
    expect.add_txn("b", &b_values, Must::Present);

    // The consumer must move on past A's open transaction within the bound.
    let bound = Duration::from_millis(TXN_TIMEOUT_MS + REAPER_INTERVAL_MS + SLACK_MS);
    let moved_on = ReadResult::from_events(&run(
        &py,
        &dir,
        "read-committed-moves-on",
        script,
        &args(&[
            ("consume", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--isolation", "read_committed"),
            ("--min-records", &b_values.len().to_string()),
            ("--deadline", &bound.as_secs().to_string()),
        ]),
        bound + Duration::from_secs(30),
    ));
    assert_clean(
        &expect.check(
            &format!("read_committed within {bound:?} of B's commit"),
            &moved_on,
        ),
        &moved_on,
    );

    let stalled_events = stalled.finish(Duration::from_secs(stall_s + 40));
    let late = stalled_events
        .iter()
        .find(|e| ev(e) == "late_commit")
        .expect("late_commit event");
    assert_eq!(
        late.get("ok").and_then(Json::as_bool),
        Some(false),
        "A's commit after its transaction timed out must fail: {late:?}"
    );

    let reader = TopicReader::new(&py, &dir, script, &bootstrap, TOPIC, PARTITIONS);
    reader.assert_reads("read_committed", "final read_committed", &expect);
    let mut all = Expect::default();
    all.add_txn("a", &a_values, Must::Present);
    all.add_txn("b", &b_values, Must::Present);
    reader.assert_reads("read_uncommitted", "read_uncommitted", &all);
}

e2e::scenario_tests! {
    timeout_librdkafka_embedded: Embedded, "lr.py";
    timeout_kafka_python_embedded: Embedded, "kp.py";
    timeout_librdkafka_standalone: Standalone, "lr.py";
    timeout_kafka_python_standalone: Standalone, "kp.py";
}
