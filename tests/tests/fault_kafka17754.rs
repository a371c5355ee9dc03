//! KAFKA-17754 reproducer (found by Jepsen in its Bufstream 0.1.0 analysis): an EndTxn is held in
//! the network while the client's retry of it succeeds over a new connection, and the client
//! starts its next transaction. The stale EndTxn then reaches the coordinator. The abort form
//! is below; the last test is the commit form, which makes an aborted value visible under TV1.
//!
//! - TV1 (EndTxn v3): the epoch does not change between transactions, so the stale abort
//!   is indistinguishable from an abort of the *new* transaction and aborts it; the client
//!   learns it only when its commit fails. The test records what happens and checks that the
//!   client's view and the log agree (no lost acknowledged commit, no aborted read).
//! - TV2 (EndTxn v5, KIP-890): every EndTxn bumps the epoch, so the stale abort carries an
//!   old epoch and is refused; the next transaction commits. The test requires exactly that.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use txn_log::TxnVersion;
use txn_tests::fault::client::{ClusterView, Fetcher, TxnProducer};
use txn_tests::fault::cluster::{ClusterOptions, FaultCluster};
use txn_tests::fault::proxy::RequestClass;

fn options(partitions: i32) -> ClusterOptions {
    ClusterOptions::from_env(
        PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
        1,
        "k",
        partitions,
        1,
    )
}

/// What one scenario observed.
#[derive(Debug)]
struct Observed {
    /// The first abort (answered through the retry).
    first_end: Result<(), String>,
    /// The EndTxn of the next transaction.
    second_end: Result<(), String>,
    /// Committed values read back.
    visible: Vec<String>,
    /// Epochs (before T1, for T2).
    epochs: (i16, i16),
}

/// T1 aborts and T2 commits: the form of the Bufstream analysis.
const ABORT_THEN_COMMIT: (bool, bool) = (false, true);

/// T1 commits and T2 aborts.
const COMMIT_THEN_ABORT: (bool, bool) = (true, false);

/// T1 ends with `first` (true: commit) with its first EndTxn held for 4 s; T2 writes partition
/// 0; with `split`, T2 waits for the stale EndTxn to land and then adds partition 1 and writes
/// it too; T2 ends with `second`.
async fn scenario(
    tv: TxnVersion,
    tag: &str,
    split: bool,
    (first, second): (bool, bool),
) -> Observed {
    let cluster = FaultCluster::start(options(if split { 2 } else { 1 }))
        .await
        .expect("cluster");
    let view = ClusterView::discover(cluster.bootstrap(), "k", tag, Duration::from_secs(30))
        .await
        .expect("discover");
    let mut p = TxnProducer::new(view.clone(), tag, 60_000, tv);
    p.init().await.expect("init");
    let e1 = p.pid_epoch().1;

    // T1: one write, then an EndTxn whose first copy is held for 4 s.
    p.add_partitions(&[0]).await.expect("add T1");
    p.produce(0, &[format!("{tag}-t1")], true)
        .await
        .expect("produce T1");
    let hold = Duration::from_secs(4);
    cluster
        .daemon_proxy
        .hold(RequestClass::EndTxn { committed: first }, hold, 1);
    let held_at = Instant::now();
    // The first attempt times out after 1.5 s; the retry on a new connection passes.
    let first_end = p.end(first).await.map_err(|e| e.to_string());
    assert_eq!(cluster.daemon_proxy.stats().held, 1, "the EndTxn was held");

    // T2 starts before the stale EndTxn arrives...
    let e2 = p.pid_epoch().1;
    p.add_partitions(&[0]).await.expect("add T2");
    p.produce(0, &[format!("{tag}-t2")], true)
        .await
        .expect("produce T2");
    // ...and the stale EndTxn reaches the coordinator now.
    tokio::time::sleep(
        (held_at + hold + Duration::from_millis(500)).saturating_duration_since(Instant::now()),
    )
    .await;
    if split {
        // Under TV1 this starts a new transaction (the stale EndTxn ended T2), which the
        // client cannot tell.
        p.add_partitions(&[1])
            .await
            .expect("add T2's second partition");
        p.produce(1, &[format!("{tag}-t2b")], true)
            .await
            .expect("produce T2's second value");
    }
    let second_end = p.end(second).await.map_err(|e| e.to_string());

    let mut f = Fetcher::new(view, "reader");
    let mut visible = Vec::new();
    for partition in 0..if split { 2 } else { 1 } {
        visible.extend(
            f.read_all_stable(partition, Duration::from_secs(30))
                .await
                .expect("partition stabilises")
                .into_iter()
                .map(|d| d.value),
        );
    }
    Observed {
        first_end,
        second_end,
        visible,
        epochs: (e1, e2),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_17754_a_delayed_abort_is_harmless_with_tv2_and_recorded_with_tv1() {
    let tv2 = scenario(TxnVersion::V2, "k17754-tv2", false, ABORT_THEN_COMMIT).await;
    println!("TV2 (EndTxn v5): {tv2:?}");
    assert_eq!(tv2.first_end, Ok(()), "{tv2:?}");
    assert!(
        tv2.epochs.1 > tv2.epochs.0,
        "TV2 bumps the epoch at EndTxn: {tv2:?}"
    );
    assert_eq!(
        tv2.second_end,
        Ok(()),
        "the stale abort must not hit T2: {tv2:?}"
    );
    assert_eq!(tv2.visible, vec!["k17754-tv2-t2".to_owned()], "{tv2:?}");

    let tv1 = scenario(TxnVersion::V1, "k17754-tv1", false, ABORT_THEN_COMMIT).await;
    println!("TV1 (EndTxn v3): {tv1:?}");
    assert_eq!(tv1.first_end, Ok(()), "{tv1:?}");
    assert_eq!(tv1.epochs.0, tv1.epochs.1, "TV1 keeps the epoch: {tv1:?}");
    // T1's value is never visible; T2's is visible exactly when its commit was acknowledged.
    assert!(
        !tv1.visible.contains(&"k17754-tv1-t1".to_owned()),
        "{tv1:?}"
    );
    let t2_visible = tv1.visible.contains(&"k17754-tv1-t2".to_owned());
    match &tv1.second_end {
        Ok(()) => assert!(t2_visible, "acknowledged commit lost: {tv1:?}"),
        Err(e) if e.contains("indeterminate") => {}
        Err(_) => assert!(!t2_visible, "refused commit visible: {tv1:?}"),
    }
}

/// The form a 240 s TV1 round of `txn-faults` met (seed 3933688674795772055): the
/// stale abort lands while T2 is open, and T2 then adds a second partition. Under TV1 the
/// stale abort ends T2 on partition 0; the add of partition 1 starts a new transaction, and
/// the client's commit of "T2" succeeds although its first value was aborted: an
/// acknowledged write lost. Apache Kafka's coordinator answers the same requests the same
/// way (TV1 has no transaction identity in EndTxn: KAFKA-17754); TV2 refuses the stale abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_17754_with_a_second_partition_loses_an_acknowledged_write_only_under_tv1() {
    let tv2 = scenario(TxnVersion::V2, "k17754s-tv2", true, ABORT_THEN_COMMIT).await;
    println!("TV2 (EndTxn v5), two partitions: {tv2:?}");
    assert_eq!(tv2.second_end, Ok(()), "{tv2:?}");
    let mut seen = tv2.visible.clone();
    seen.sort();
    assert_eq!(
        seen,
        vec!["k17754s-tv2-t2".to_owned(), "k17754s-tv2-t2b".to_owned()],
        "TV2: the whole of T2 is committed: {tv2:?}"
    );

    let tv1 = scenario(TxnVersion::V1, "k17754s-tv1", true, ABORT_THEN_COMMIT).await;
    println!("TV1 (EndTxn v3), two partitions: {tv1:?}");
    assert_eq!(
        tv1.second_end,
        Ok(()),
        "TV1: the commit is acknowledged: {tv1:?}"
    );
    assert_eq!(
        tv1.visible,
        vec!["k17754s-tv1-t2b".to_owned()],
        "TV1: the stale abort took T2's first value (KAFKA-17754): {tv1:?}"
    );
}

/// The form a 300 s TV1 round of `txn-faults` met on 2026-12-05 (seed 11709925747176308360):
/// the held EndTxn was T1's commit, and the client aborted T2. Under TV1 the stale commit ends
/// T2 on partition 0 with a COMMIT; the add of partition 1 starts a new transaction, which
/// the client's abort ends. T2's first value is then visible although the client's abort of
/// T2 was acknowledged: an aborted read, from the same hazard (KAFKA-17754). TV2 refuses the
/// stale commit by its epoch, and nothing of T2 is visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_17754_a_stale_commit_makes_part_of_an_aborted_transaction_visible_only_under_tv1() {
    let tv2 = scenario(TxnVersion::V2, "k17754c-tv2", true, COMMIT_THEN_ABORT).await;
    println!("TV2 (EndTxn v5), stale commit: {tv2:?}");
    assert_eq!(tv2.first_end, Ok(()), "{tv2:?}");
    assert_eq!(tv2.second_end, Ok(()), "{tv2:?}");
    assert_eq!(
        tv2.visible,
        vec!["k17754c-tv2-t1".to_owned()],
        "TV2: T1 committed, nothing of the aborted T2: {tv2:?}"
    );

    let tv1 = scenario(TxnVersion::V1, "k17754c-tv1", true, COMMIT_THEN_ABORT).await;
    println!("TV1 (EndTxn v3), stale commit: {tv1:?}");
    assert_eq!(tv1.first_end, Ok(()), "{tv1:?}");
    assert_eq!(
        tv1.second_end,
        Ok(()),
        "TV1: the abort is acknowledged: {tv1:?}"
    );
    let mut seen = tv1.visible.clone();
    seen.sort();
    assert_eq!(
        seen,
        vec!["k17754c-tv1-t1".to_owned(), "k17754c-tv1-t2".to_owned()],
        "TV1: the stale commit made T2's first value visible (KAFKA-17754): {tv1:?}"
    );
}
