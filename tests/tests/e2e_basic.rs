//! End-to-end scenario 1: a transactional producer commits and aborts a mix of
//! transactions spanning 4 partitions led by 2 brokers; a read_committed consumer sees exactly
//! the committed messages, in order, once; read_uncommitted sees all of them.
//!
//! Runs real clients (librdkafka through confluent-kafka, and kafka-python) from
//! `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use txn_tests::e2e::checks::{Outcomes, ev};
use txn_tests::e2e::{self, Cluster, ClusterSpec, Mode, TopicReader, args, run};

const TOPIC: &str = "basic";
const PARTITIONS: &str = "0,1,2,3";

fn scenario(mode: Mode, script: &str) {
    let test = format!("basic_{}_{}", script.trim_end_matches(".py"), mode.tag());
    let Some(py) = e2e::python_or_skip(&test) else {
        return;
    };
    let cluster = Cluster::start(ClusterSpec::new(mode, &["basic:4"]));
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();
    check_leaders(&py, &dir, &bootstrap);

    let prefix = test.clone();
    let events = run(
        &py,
        &dir,
        "producer",
        script,
        &args(&[
            ("txns", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--txn-id", &format!("{prefix}-txn")),
            ("--pattern", "CACCAC"),
            ("--per-partition", "2"),
            ("--prefix", &prefix),
            ("--txn-timeout-ms", "30000"),
            ("--deadline", "60"),
        ]),
        Duration::from_secs(90),
    );
    let outcomes = Outcomes::of(&events, |e| format!("{:?}", e.get("txn")));
    assert_eq!(
        outcomes.sequence, "CACCAC",
        "the producer must complete every transaction as asked: {events:?}"
    );

    let reader = TopicReader::new(&py, &dir, script, &bootstrap, TOPIC, PARTITIONS);
    let rc = reader.assert_reads("read_committed", "read_committed", &outcomes.committed);
    let ru = reader.assert_reads("read_uncommitted", "read_uncommitted", &outcomes.all);
    assert!(
        ru.records.len() > rc.records.len(),
        "read_uncommitted must also see the aborted records"
    );
}

/// The topic's partitions must be led by at least two brokers.
fn check_leaders(py: &Path, dir: &Path, bootstrap: &str) {
    let events = run(
        py,
        dir,
        "metadata",
        "lr.py",
        &args(&[
            ("metadata", ""),
            ("--bootstrap", bootstrap),
            ("--topic", TOPIC),
        ]),
        Duration::from_secs(30),
    );
    let md = events
        .iter()
        .find(|e| ev(e) == "metadata")
        .expect("metadata event");
    let leaders: BTreeSet<i64> = md
        .get("leaders")
        .and_then(e2e::Json::as_array)
        .expect("leaders")
        .iter()
        .filter_map(|pl| pl.as_array().and_then(|pl| pl[1].as_i64()))
        .collect();
    assert!(
        leaders.len() >= 2,
        "partitions must be spread over >= 2 brokers: {md:?}"
    );
}

e2e::scenario_tests! {
    basic_librdkafka_embedded: Embedded, "lr.py";
    basic_kafka_python_embedded: Embedded, "kp.py";
    basic_librdkafka_standalone: Standalone, "lr.py";
    basic_kafka_python_standalone: Standalone, "kp.py";
}

/// The compatibility notes land where cargo puts integration tests' scratch files, named after
/// this test file, although the harness is in the library and finds both at run time.
#[test]
fn compat_notes_go_to_cargo_target_tmpdir() {
    assert_eq!(
        e2e::compat::dir(),
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("compat")
    );
    assert_eq!(e2e::compat::test_crate_name(), env!("CARGO_CRATE_NAME"));
}
