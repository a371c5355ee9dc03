//! End-to-end, scenario 1 widened: a librdkafka and a kafka-python transactional producer run
//! their commit/abort mixes at the same time over the same 4 partitions. In embedded mode their
//! transactional ids are picked so that different nodes coordinate them (this is the shape
//! that exposed duplicate producer ids across embedded coordinators). Both clients'
//! read_committed consumers see exactly each producer's committed messages, in that producer's
//! order, once; read_uncommitted sees all of them.
//!
//! Runs real clients from `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

use std::time::Duration;

use txn_tests::e2e::checks::{Expect, Outcomes, ReadResult, assert_clean};
use txn_tests::e2e::{self, Client, Cluster, ClusterSpec, Mode, TopicReader, args};

const TOPIC: &str = "mixed";
const PARTITIONS: &str = "0,1,2,3";

/// Two transactional ids; in embedded mode coordinated by different brokers.
fn txn_ids(cluster: &Cluster, test: &str) -> (String, String) {
    let a = format!("{test}-lr");
    if cluster.spec.mode == Mode::Standalone {
        return (a, format!("{test}-kp"));
    }
    let coord = |id: &str| {
        e2e::find_coordinator(cluster.brokers[0].addr, id)
            .unwrap_or_else(|e| panic!("FindCoordinator({id}): {e}"))
    };
    let ca = coord(&a);
    for i in 0..64 {
        let b = format!("{test}-kp{i}");
        if coord(&b) != ca {
            return (a, b);
        }
    }
    panic!("no transactional id coordinated by another node than {a}'s");
}

/// The records whose value starts with `prefix`.
fn only(read: &ReadResult, prefix: &str) -> ReadResult {
    ReadResult {
        records: read
            .records
            .iter()
            .filter(|r| r.value.starts_with(prefix))
            .cloned()
            .collect(),
        eof: read.eof,
        timed_out: read.timed_out,
    }
}

fn scenario(mode: Mode) {
    let test = format!("mixed_{}", mode.tag());
    let Some(py) = e2e::python_or_skip(&test) else {
        return;
    };
    let cluster = Cluster::start(ClusterSpec::new(mode, &["mixed:4"]));
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();
    let (lr_id, kp_id) = txn_ids(&cluster, &test);
    let producers = [("lr.py", lr_id, "CACCA"), ("kp.py", kp_id, "ACCAC")];
    let clients: Vec<(String, Client)> = producers
        .iter()
        .map(|(script, id, pattern)| {
            let prefix = format!("{test}-{}", script.trim_end_matches(".py"));
            let c = Client::spawn(
                &py,
                &dir,
                &format!("producer-{script}"),
                script,
                &args(&[
                    ("txns", ""),
                    ("--bootstrap", &bootstrap),
                    ("--topic", TOPIC),
                    ("--partitions", PARTITIONS),
                    ("--txn-id", id),
                    ("--pattern", pattern),
                    ("--per-partition", "2"),
                    ("--prefix", &prefix),
                    ("--deadline", "60"),
                ]),
            );
            (prefix, c)
        })
        .collect();
    let mut histories = Vec::new();
    for (prefix, c) in clients {
        let events = c.finish(Duration::from_secs(90));
        let outcomes = Outcomes::of(&events, |e| format!("{prefix}-{:?}", e.get("txn")));
        assert_eq!(
            outcomes.sequence.len(),
            5,
            "{prefix}: every transaction must end: {events:?}"
        );
        histories.push((prefix, outcomes.committed, outcomes.all));
    }
    let present = |f: fn(&(String, Expect, Expect)) -> &Expect| -> usize {
        histories.iter().map(|h| f(h).present()).sum()
    };
    for reader in ["lr.py", "kp.py"] {
        for isolation in ["read_committed", "read_uncommitted"] {
            let min = if isolation == "read_committed" {
                present(|h| &h.1)
            } else {
                present(|h| &h.2)
            };
            let read = TopicReader::new(&py, &dir, reader, &bootstrap, TOPIC, PARTITIONS)
                .read(isolation, min);
            let foreign: Vec<_> = read
                .records
                .iter()
                .filter(|r| !histories.iter().any(|h| r.value.starts_with(&h.0)))
                .collect();
            assert!(
                foreign.is_empty(),
                "{reader} {isolation}: unknown records {foreign:?}"
            );
            for (prefix, committed, all) in &histories {
                let mine = only(&read, &format!("{prefix}-"));
                let expect = if isolation == "read_committed" {
                    committed
                } else {
                    all
                };
                assert_clean(
                    &expect.check(&format!("{reader} {isolation}, {prefix}'s values"), &mine),
                    &mine,
                );
            }
        }
    }
}

#[test]
fn mixed_clients_embedded() {
    scenario(Mode::Embedded);
}

#[test]
fn mixed_clients_standalone() {
    scenario(Mode::Standalone);
}
