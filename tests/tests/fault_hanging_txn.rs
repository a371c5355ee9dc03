//! The hanging transaction of KIP-890 part 1 (scenario TV1), and the broker-side
//! verification that prevents it.
//!
//! A TV1 producer writes to a partition in its transaction; its next Produce to the same
//! partition is held in the network (the broker's fault proxy) while the producer aborts the
//! transaction. The coordinator writes the ABORT marker and completes the abort; only then
//! does the held Produce reach the broker.
//!
//! - With `transaction.partition.verification.enable=true` (refbroker's default, as Kafka's)
//!   the broker asks the coordinator whether the partition is in the producer's ongoing
//!   transaction; it is not (the transaction is CompleteAbort), so the Produce is refused with
//!   INVALID_TXN_STATE, nothing is appended, and the last stable offset moves on: a later
//!   committed transaction on the partition is visible to read_committed readers.
//! - With it `false` the late batch opens a transaction no coordinator knows: the last stable
//!   offset stays at that batch, a later committed transaction stays invisible, and
//!   `txn-coordinator find-hanging --topic` reports the producer at that offset. (Kafka's own
//!   `kafka-transactions.sh find-hanging` on the same kind of hang: `kafka_tools`.)
//!
//! Embedded mode asks the broker's own coordinator in process: a Produce sent after its
//! transaction was aborted is refused there too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, ProduceRequest, ProducerId as WireProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use txn_log::TxnVersion;
use txn_testkit::requests::await_txn_state;
use txn_testkit::wire::{connect, record_batch, sb};
use txn_tests::fault::client::{ClientError, ClusterView, Fetcher, TxnProducer, loopback_pool};
use txn_tests::fault::cluster::{ClusterOptions, FaultCluster, daemon_bin_from_env};
use txn_tests::fault::proxy::RequestClass;
use txn_tests::refbroker::process::BrokerProcess;

const TOPIC: &str = "hv";
const TID: &str = "tv1-late";
/// How long the broker's proxy holds the late Produce: the abort completes well within it.
const HOLD: Duration = Duration::from_secs(4);
const INVALID_TXN_STATE: i16 = 48;

fn options() -> ClusterOptions {
    ClusterOptions::from_env(
        PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
        1,
        TOPIC,
        1,
        1,
    )
}

/// Polls DescribeTransactions at `coordinator` until `tid` is in `state`.
async fn await_state(coordinator: std::net::SocketAddr, tid: &str, state: &str) {
    let mut pool = loopback_pool("hanging-test", Duration::from_secs(3));
    await_txn_state(&mut pool, coordinator, tid, state).await;
}

/// One transactional Produce (v9, acks=all) of `value` at sequence `seq`, sent once on a
/// connection of its own with no client-side retry: (error code, base offset).
async fn raw_produce(
    leader: std::net::SocketAddr,
    pid: i64,
    epoch: i16,
    seq: i32,
    value: &str,
) -> (i16, i64) {
    let mut conn = connect(leader, "late-producer").await;
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(sb(TID))))
        .with_acks(-1)
        .with_timeout_ms(3000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(sb(TOPIC)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(record_batch(
                            Some((pid, epoch, seq)),
                            true,
                            &[value.to_owned()],
                        ))),
                ]),
        ]);
    let r = tokio::time::timeout(Duration::from_secs(30), conn.call(&req, 9))
        .await
        .expect("the held Produce is answered")
        .expect("Produce");
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// What the scenario left on partition 0.
#[derive(Debug)]
struct Outcome {
    /// The late Produce's answer: (error code, base offset).
    late: (i16, i64),
    /// The hanging producer.
    pid: i64,
    /// read_committed: last stable offset and high watermark once the later transaction
    /// committed, and the values a read_committed reader gets.
    lso: i64,
    hw: i64,
    visible: Vec<String>,
    /// `txn-coordinator find-hanging --topic hv --max-transaction-timeout 0`: exit code, stdout.
    find_hanging: (Option<i32>, String),
}

async fn held_produce_past_its_abort(verification: bool) -> Outcome {
    let settings: &[&str] = if verification {
        &[]
    } else {
        &["transaction.partition.verification.enable=false"]
    };
    let cluster = FaultCluster::start_with_broker_settings(options(), settings)
        .await
        .expect("cluster");
    let view = ClusterView::discover(cluster.bootstrap(), TOPIC, TID, Duration::from_secs(30))
        .await
        .expect("discover");
    let leader = view.leaders[&0];

    // T1: one batch in, the partition added and verified.
    let mut p = TxnProducer::new(view.clone(), TID, 60_000, TxnVersion::V1);
    p.init().await.expect("init");
    p.add_partitions(&[0]).await.expect("add");
    p.produce(0, &["t1-first".to_owned()], true)
        .await
        .expect("first produce");
    let (pid, epoch) = p.pid_epoch();

    // T1's next batch (sequence 1) is held by the broker's proxy...
    cluster.broker_proxies[0].hold(RequestClass::Api(ApiKey::Produce), HOLD, 1);
    let late = tokio::spawn(raw_produce(leader, pid, epoch, 1, "t1-late"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.broker_proxies[0].stats().held == 0 {
        assert!(Instant::now() < deadline, "the late Produce was not held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...while the producer aborts T1 and the coordinator completes the abort (ABORT marker
    // on the partition).
    p.end(false).await.expect("abort");
    await_state(view.coordinator, TID, "CompleteAbort").await;
    assert!(
        !late.is_finished(),
        "the Produce must reach the broker only after the abort completed"
    );
    let late = late.await.expect("late produce task");

    // Another producer commits a transaction on the partition afterwards.
    let mut q = TxnProducer::new(view.clone(), "tv1-next", 60_000, TxnVersion::V1);
    q.init().await.expect("init next");
    q.add_partitions(&[0]).await.expect("add next");
    q.produce(0, &["next-committed".to_owned()], true)
        .await
        .expect("produce next");
    q.end(true).await.expect("commit next");
    await_state(view.coordinator, "tv1-next", "CompleteCommit").await;

    let mut f = Fetcher::new(view.clone(), "reader");
    let r = f.fetch(0, 0).await.expect("fetch");
    let visible = r.records.iter().map(|d| d.value.clone()).collect();

    let out = std::process::Command::new(daemon_bin_from_env())
        .args([
            "find-hanging",
            "--topic",
            TOPIC,
            "--max-transaction-timeout",
            "0",
            "--bootstrap-server",
            &view.coordinator.to_string(),
        ])
        .output()
        .expect("runs txn-coordinator find-hanging");
    Outcome {
        late,
        pid,
        lso: r.last_stable_offset,
        hw: r.high_watermark,
        visible,
        find_hanging: (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tv1_a_produce_held_past_its_abort_is_refused_and_the_lso_moves() {
    let o = held_produce_past_its_abort(true).await;
    // Refused as Kafka's broker refuses it: the partition is not in an ongoing transaction.
    assert_eq!(o.late.0, INVALID_TXN_STATE, "{o:?}");
    // Log: t1-first (0), ABORT (1), next-committed (2), COMMIT (3); nothing unstable.
    assert_eq!((o.lso, o.hw), (4, 4), "{o:?}");
    assert_eq!(o.visible, ["next-committed"], "{o:?}");
    let (code, out) = &o.find_hanging;
    assert_eq!(*code, Some(0), "{out}");
    assert_eq!(
        out.lines().count(),
        1,
        "only the header, nothing hangs: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tv1_without_verification_the_held_produce_hangs_and_find_hanging_reports_it() {
    let o = held_produce_past_its_abort(false).await;
    // Appended after the ABORT marker, at offset 2, in a transaction nobody will end.
    assert_eq!(o.late, (0, 2), "{o:?}");
    // The LSO stays at the hanging batch; the later commit (3, marker 4) stays invisible.
    assert_eq!((o.lso, o.hw), (2, 5), "{o:?}");
    assert!(o.visible.is_empty(), "{o:?}");
    let (code, out) = &o.find_hanging;
    assert_eq!(*code, Some(0), "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 1, "one hanging transaction: {out}");
    // Topic, Partition, ProducerId, ProducerEpoch, CoordinatorEpoch, StartOffset, ...
    let pid = o.pid.to_string();
    assert_eq!(
        (rows[0][0], rows[0][1], rows[0][2], rows[0][5]),
        (TOPIC, "0", pid.as_str(), "2"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_produce_after_its_abort_is_refused_in_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().expect("utf-8 path"),
        "--topics",
        "hv:1",
        "--embedded-coordinator",
        "--offsets-partitions",
        "2",
        "--set",
        "transaction.state.log.num.partitions=2",
        "--set",
        "fetch.max.wait.ms=50",
    ];
    let broker = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_refbroker")), &args);
    let view = ClusterView::discover(broker.addr(), TOPIC, TID, Duration::from_secs(30))
        .await
        .expect("discover");
    let mut p = TxnProducer::new(view.clone(), TID, 60_000, TxnVersion::V1);
    p.init().await.expect("init");
    p.add_partitions(&[0]).await.expect("add");
    p.produce(0, &["t1-first".to_owned()], true)
        .await
        .expect("first produce (verified in process)");
    let (pid, epoch) = p.pid_epoch();
    p.end(false).await.expect("abort");
    await_state(view.coordinator, TID, "CompleteAbort").await;
    // The same producer's next batch of that transaction, late.
    let late = raw_produce(view.leaders[&0], pid, epoch, 1, "t1-late").await;
    assert_eq!(late.0, INVALID_TXN_STATE, "{late:?}");
    // A late TxnOffsetCommit of the aborted transaction (its group's __consumer_offsets
    // partition was never added) is refused the same way.
    let mut pool = loopback_pool("late-offsets", Duration::from_secs(5));
    let commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(sb(TID)))
        .with_group_id(GroupId(sb("hv-group")))
        .with_producer_id(WireProducerId(pid))
        .with_producer_epoch(epoch)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(sb(TOPIC)))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ]),
        ]);
    let r = pool
        .call(broker.addr(), &commit, 3)
        .await
        .expect("TxnOffsetCommit");
    assert_eq!(
        r.topics[0].partitions[0].error_code, INVALID_TXN_STATE,
        "{r:?}"
    );
    // A new transaction that adds the partition is verified and appended as usual, and so is
    // its offset commit (AddOffsetsToTxn added the offsets partition).
    p.add_partitions(&[0]).await.expect("add again");
    match p.produce(0, &["t2".to_owned()], true).await {
        Ok(offset) => assert_eq!(offset, 2, "after t1-first (0) and the ABORT marker (1)"),
        Err(ClientError::Definite { code, .. }) => panic!("t2 refused with {code}"),
        Err(e) => panic!("t2: {e}"),
    }
    p.send_offsets(broker.addr(), "hv-group", TOPIC, &[(0, 1)])
        .await
        .expect("t2's offsets verified and committed");
    p.end(true).await.expect("commit");
    let mut f = Fetcher::new(view, "reader");
    let r = f
        .read_all_stable(0, Duration::from_secs(20))
        .await
        .expect("partition stabilises");
    let values: Vec<String> = r.into_iter().map(|d| d.value).collect();
    assert_eq!(values, ["t2"]);
}
