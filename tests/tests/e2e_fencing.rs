//! End-to-end scenario 3: zombie fencing. Producer A commits one transaction, begins
//! a second and writes to it; producer B with the same transactional.id initialises and so
//! fences A. Nothing A sends afterwards is acknowledged or becomes visible, A's open
//! transaction is aborted, and B's commit is visible.
//!
//! Runs real clients from `TXN_TEST_PYTHON`; skipped with a notice when it is not set.

use std::time::Duration;

use txn_tests::e2e::Json;
use txn_tests::e2e::checks::{Expect, Must, ev, values};
use txn_tests::e2e::{self, Cluster, ClusterSpec, Mode, TopicReader, args, run};

const TOPIC: &str = "fence";
const PARTITIONS: &str = "0,1,2";

fn scenario(mode: Mode, script: &str) {
    let test = format!("fencing_{}_{}", script.trim_end_matches(".py"), mode.tag());
    let Some(py) = e2e::python_or_skip(&test) else {
        return;
    };
    let cluster = Cluster::start(ClusterSpec::new(mode, &["fence:3"]));
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();
    let events = run(
        &py,
        &dir,
        "fence",
        script,
        &args(&[
            ("fence", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", TOPIC),
            ("--partitions", PARTITIONS),
            ("--txn-id", &format!("{test}-txn")),
            ("--prefix", &test),
            ("--txn-timeout-ms", "30000"),
            ("--deadline", "60"),
        ]),
        Duration::from_secs(90),
    );
    let find = |name: &str| -> &Json {
        events
            .iter()
            .find(|e| ev(e) == name)
            .unwrap_or_else(|| panic!("no {name} event: {events:?}"))
    };
    let post = find("a_post");
    // Values in the order they were written.
    let mut expect = Expect::default();
    let mut all = Expect::default();
    for e in &events {
        match ev(e) {
            "commit" => {
                let who = e
                    .get("who")
                    .and_then(Json::as_str)
                    .unwrap_or("?")
                    .to_owned();
                expect.add_txn(&who, &values(e, "values"), Must::Present);
                all.add_txn(&who, &values(e, "values"), Must::Present);
            }
            "a_pre_written" => {
                expect.add_txn("a-pre", &values(e, "values"), Must::Absent);
                all.add_txn("a-pre", &values(e, "values"), Must::Present);
            }
            "a_post" => {
                expect.add_txn("a-post", &values(e, "values"), Must::Absent);
                all.add_txn("a-post", &values(e, "values"), Must::Absent);
            }
            _ => {}
        }
    }
    find("a_pre_written");
    assert_eq!(
        events.iter().filter(|e| ev(e) == "commit").count(),
        2,
        "A's first and B's commit must both succeed: {events:?}"
    );
    let delivered = post
        .get("delivered")
        .and_then(Json::as_array)
        .expect("delivered");
    assert!(
        delivered.is_empty(),
        "the fenced producer had writes acknowledged after it was fenced: {post:?}"
    );
    let commit = post.get("commit").expect("commit result");
    assert_eq!(
        commit.get("ok").and_then(Json::as_bool),
        Some(false),
        "the fenced producer's commit succeeded: {post:?}"
    );

    let reader = TopicReader::new(&py, &dir, script, &bootstrap, TOPIC, PARTITIONS);
    reader.assert_reads("read_committed", "read_committed", &expect);
    // read_uncommitted sees A's pre-fence writes (so they were really written and then
    // aborted), and still nothing A sent after the fence.
    reader.assert_reads("read_uncommitted", "read_uncommitted", &all);
}

e2e::scenario_tests! {
    fencing_librdkafka_embedded: Embedded, "lr.py";
    fencing_kafka_python_embedded: Embedded, "kp.py";
    fencing_librdkafka_standalone: Standalone, "lr.py";
    fencing_kafka_python_standalone: Standalone, "kp.py";
}
