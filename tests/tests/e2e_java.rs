//! Apache Kafka's Java client (kafka-clients 4.4.x, `tests/java/TxnClient.java`) through
//! refbroker and our coordinator, in standalone and embedded mode: consume-transform-produce
//! with `sendOffsetsToTransaction`, every third transaction aborted and its input read again,
//! and a zombie. The first transformer holds each transaction open for a while; a second one
//! with the same `transactional.id` starts during such a transaction. Its `initTransactions`
//! fences the first, which must see ProducerFencedException and stop. The second finishes the
//! input. Afterwards the output holds exactly one `out-v` per input `v`, on the input's
//! partition and in input order; the aborted and fenced outputs are in the log but not read
//! under read_committed; and the group's committed offsets are the input's end offsets.
//!
//! Each scenario runs with transaction version 1 and 2, as the brokers finalize it
//! (`--set transaction.version=1|2`). With 2 the Java client sends no AddPartitionsToTxn or
//! AddOffsetsToTxn: its Produce v12 and TxnOffsetCommit v5 make the broker add the partition
//! (KIP-890 part 2), and every EndTxn (v5) bumps the producer epoch. That TV2 was really used
//! is checked at the end: the coordinator's DescribeTransactions shows the successor's epoch
//! advanced by at least one per transaction it ended (under TV1 it stays where
//! initTransactions left it, which is checked too).
//!
//! Needs the Kafka jars that `scripts/test` resolves with Maven (`TXN_TEST_KAFKA_CLASSPATH`);
//! without them the tests print that they were skipped.

use std::path::Path;
use std::time::Duration;

use txn_tests::e2e::checks::{
    Expect, Expected, Must, ReadResult, assert_clean, ev, int, offsets, seeded_inputs, values,
};
use txn_tests::e2e::{self, Client, Cluster, ClusterSpec, Mode, args};

const PARTITIONS: &str = "0,1,2";
const PER_PARTITION: usize = 12;

/// Reads `topic` from the start with the Java consumer at `isolation`.
fn read(
    cp: &str,
    dir: &Path,
    bootstrap: &str,
    topic: &str,
    isolation: &str,
    min: usize,
) -> ReadResult {
    let events = Client::spawn_java(
        cp,
        dir,
        &format!("read-{topic}-{isolation}"),
        &args(&[
            ("consume", ""),
            ("--bootstrap", bootstrap),
            ("--topic", topic),
            ("--partitions", PARTITIONS),
            ("--isolation", isolation),
            ("--min-records", &min.to_string()),
            ("--deadline", "40"),
        ]),
    )
    .finish(Duration::from_secs(70));
    ReadResult::from_events(&events)
}

/// The producer epoch the coordinator of `txn_id` describes (DescribeTransactions v0, asked
/// at the coordinator a broker names).
fn described_epoch(broker: std::net::SocketAddr, txn_id: &str) -> i16 {
    use kafka_protocol::messages::{DescribeTransactionsRequest, TransactionalId};
    let coordinator = e2e::find_coordinator(broker, txn_id)
        .unwrap_or_else(|e| panic!("FindCoordinator for {txn_id}: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut pool = txn_testkit::pool::Pool::new("e2e-java", Duration::from_secs(5));
        let req =
            DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(
                kafka_protocol::protocol::StrBytes::from_string(txn_id.to_owned()),
            )]);
        let r = pool
            .call(coordinator, &req, 0)
            .await
            .unwrap_or_else(|e| panic!("DescribeTransactions at {coordinator}: {e}"));
        let t = r.transaction_states.first().expect("one transaction state");
        assert_eq!(t.error_code, 0, "DescribeTransactions of {txn_id}");
        t.producer_epoch
    })
}

fn scenario(mode: Mode, tv: i16) {
    let test = format!(
        "java_transform_{}{}",
        if tv >= 2 { "tv2_" } else { "" },
        mode.tag()
    );
    let Some(cp) = e2e::kafka_classpath_or_skip(&test) else {
        return;
    };
    let cluster = Cluster::start(
        ClusterSpec::new(mode, &["input:3", "output:3"])
            .broker_set(&format!("transaction.version={tv}")),
    );
    let bootstrap = cluster.bootstrap();
    let dir = cluster.dir().to_path_buf();

    let seeded = Client::spawn_java(
        &cp,
        &dir,
        "seed",
        &args(&[
            ("seed", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", "input"),
            ("--partitions", PARTITIONS),
            ("--per-partition", &PER_PARTITION.to_string()),
            ("--prefix", &test),
        ]),
    )
    .finish(Duration::from_secs(60));
    let (inputs, input_end) = seeded_inputs(&seeded, 3, PER_PARTITION);

    let group = format!("{test}-group");
    let txn_id = format!("{test}-txn");
    let transformer = |name: &str, hold_ms: &str| {
        Client::spawn_java(
            &cp,
            &dir,
            name,
            &args(&[
                ("transform", ""),
                ("--bootstrap", &bootstrap),
                ("--input", "input"),
                ("--output", "output"),
                ("--partitions", PARTITIONS),
                ("--group", &group),
                ("--txn-id", &txn_id),
                ("--client-id", name),
                ("--batch", "4"),
                ("--abort-every", "3"),
                ("--hold-ms", hold_ms),
                ("--deadline", "120"),
            ]),
        )
    };

    // The zombie: one commit, then transactions held open for longer than the successor
    // takes to start, so that its initTransactions lands inside one of them.
    let mut zombie = transformer("zombie", "8000");
    zombie.wait_event("commit", Duration::from_secs(90));
    zombie.wait_event("txn_produced", Duration::from_secs(30));
    let successor = transformer("successor", "0");
    let zombie_events = zombie.finish(Duration::from_secs(60));
    let fenced = zombie_events
        .iter()
        .find(|e| ev(e) == "fenced")
        .unwrap_or_else(|| panic!("the zombie was not fenced: {zombie_events:?}"));
    let open = zombie_events
        .iter()
        .find(|e| ev(e) == "txn_produced" && int(e, "txn") == int(fenced, "txn"))
        .unwrap_or_else(|| panic!("the fenced transaction sent nothing: {zombie_events:?}"))
        .clone();

    let events = successor.finish(Duration::from_secs(150));
    let done = events
        .iter()
        .find(|e| ev(e) == "done")
        .unwrap_or_else(|| panic!("the successor did not finish: {events:?}"));
    assert_eq!(
        offsets(done, "committed"),
        input_end,
        "the successor's final committed offsets must be the input's end offsets"
    );
    let aborts = events.iter().filter(|e| ev(e) == "abort").count();
    assert!(aborts > 0, "every third transaction aborts: {events:?}");

    // Which transaction version the client used: TV2 bumps the epoch at every EndTxn, TV1
    // keeps the one initTransactions gave (1 or 2 after fencing the zombie).
    let ended = events
        .iter()
        .filter(|e| ev(e) == "abort" || ev(e) == "commit")
        .count();
    let epoch = described_epoch(cluster.brokers[0].addr, &txn_id);
    if tv >= 2 {
        assert!(
            usize::try_from(epoch).unwrap_or(0) >= ended,
            "TV2: the successor ended {ended} transactions, so its epoch should have been \
             bumped at least as often, but the coordinator describes epoch {epoch}"
        );
    } else {
        assert!(
            epoch <= 3 && ended > 3,
            "TV1: the epoch stays where initTransactions left it; described {epoch} after \
             {ended} transactions"
        );
    }

    // Exactly one output per input, on the input's partition, in input order.
    let mut expect = Expect::default();
    for (p, v, _) in &inputs {
        expect.add(
            &format!("out-{v}"),
            Expected {
                txn: format!("in-{v}"),
                partition: *p,
                offset: None,
                must: Must::Present,
            },
        );
    }
    let rc = read(
        &cp,
        &dir,
        &bootstrap,
        "output",
        "read_committed",
        expect.present(),
    );
    assert_clean(&expect.check("output read_committed", &rc), &rc);

    // The aborted and the fenced transactions' outputs are in the log: read_uncommitted
    // sees more than read_committed.
    let ru = read(
        &cp,
        &dir,
        &bootstrap,
        "output",
        "read_uncommitted",
        rc.records.len() + 1,
    );
    assert!(
        ru.records.len() > rc.records.len(),
        "read_uncommitted saw {} records, read_committed {}: the aborted outputs are missing",
        ru.records.len(),
        rc.records.len()
    );
    let zombie_outputs: Vec<String> = values(&open, "outputs")
        .into_iter()
        .map(|(_, v, _)| v)
        .collect();
    for v in &zombie_outputs {
        let n = ru.records.iter().filter(|r| &r.value == v).count();
        assert!(
            n >= 2,
            "{v}: the zombie's write and the successor's should both be in the log \
             (read_uncommitted saw it {n} times)"
        );
    }
}

#[test]
fn java_transform_standalone() {
    scenario(Mode::Standalone, 1);
}

#[test]
fn java_transform_embedded() {
    scenario(Mode::Embedded, 1);
}

#[test]
fn java_transform_tv2_standalone() {
    scenario(Mode::Standalone, 2);
}

#[test]
fn java_transform_tv2_embedded() {
    scenario(Mode::Embedded, 2);
}
