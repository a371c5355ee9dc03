//! End-to-end scenario 1: a transactional producer commits and aborts a mix of
//! transactions spanning 4 partitions led by 2 brokers; a read_committed consumer sees exactly
//! the committed messages, in order, once; read_uncommitted sees all of them.
//!
//! Runs real clients (librdkafka through confluent-kafka, and kafka-python) from
//! `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

mod e2e;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use e2e::checks::{Expect, Must, ReadResult, assert_clean, ev, values};
use e2e::{Cluster, ClusterSpec, Mode, args, run};

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
    let mut committed = Expect::default();
    let mut all = Expect::default();
    let mut outcomes = Vec::new();
    for e in &events {
        let txn = format!("{:?}", e.get("txn"));
        match ev(e) {
            "commit" => {
                committed.add_txn(&txn, &values(e, "values"), Must::Present);
                all.add_txn(&txn, &values(e, "values"), Must::Present);
                outcomes.push('C');
            }
            "abort" => {
                committed.add_txn(&txn, &values(e, "values"), Must::Absent);
                all.add_txn(&txn, &values(e, "values"), Must::Present);
                outcomes.push('A');
            }
            _ => {}
        }
    }
    assert_eq!(
        outcomes.iter().collect::<String>(),
        "CACCAC",
        "the producer must complete every transaction as asked: {events:?}"
    );

    let rc = read(
        &py,
        &dir,
        script,
        &bootstrap,
        "read_committed",
        committed.present(),
    );
    assert_clean(&committed.check("read_committed", &rc), &rc);
    let ru = read(
        &py,
        &dir,
        script,
        &bootstrap,
        "read_uncommitted",
        all.present(),
    );
    assert_clean(&all.check("read_uncommitted", &ru), &ru);
    assert!(
        ru.records.len() > rc.records.len(),
        "read_uncommitted must also see the aborted records"
    );
}

fn read(
    py: &Path,
    dir: &Path,
    script: &str,
    bootstrap: &str,
    isolation: &str,
    min: usize,
) -> ReadResult {
    let events = run(
        py,
        dir,
        isolation,
        script,
        &args(&[
            ("consume", ""),
            ("--bootstrap", bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--isolation", isolation),
            ("--min-records", &min.to_string()),
            ("--deadline", "30"),
        ]),
        Duration::from_secs(60),
    );
    ReadResult::from_events(&events)
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
        .and_then(e2e::json::Json::as_arr)
        .expect("leaders")
        .iter()
        .filter_map(|pl| pl.as_arr().and_then(|pl| pl[1].as_i64()))
        .collect();
    assert!(
        leaders.len() >= 2,
        "partitions must be spread over >= 2 brokers: {md:?}"
    );
}

#[test]
fn basic_librdkafka_embedded() {
    scenario(Mode::Embedded, "lr.py");
}

#[test]
fn basic_kafka_python_embedded() {
    scenario(Mode::Embedded, "kp.py");
}

#[test]
fn basic_librdkafka_standalone() {
    scenario(Mode::Standalone, "lr.py");
}

#[test]
fn basic_kafka_python_standalone() {
    scenario(Mode::Standalone, "kp.py");
}
