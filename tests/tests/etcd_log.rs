//! `EtcdTxnLog` against a real 3-member etcd cluster (started here on free loopback ports):
//! the `TxnLog` conformance suite, fencing between two coordinators' connections, member
//! kills (the leader among them) and the loss of quorum.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use txn_log::suite::{self, record, tid};
use txn_log::{CoordinatorEpoch, EtcdTxnLog, LogEntry, LogError, LogPartition, TxnLog, TxnState};
use txn_tests::etcd::EtcdCluster;

const P: LogPartition = LogPartition(3);

/// The tests run their clusters one at a time: four three-member clusters electing at once on
/// a 2-core machine with a 500 ms election timeout can leave one leaderless for seconds
/// (docs/reliability.md).
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_on_three_members() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    let base = EtcdTxnLog::connect(cluster.config("/base"))
        .await
        .expect("connect");
    let n = AtomicUsize::new(0);
    suite::run_all(|| base.with_prefix(&format!("/suite-{}", n.fetch_add(1, Ordering::Relaxed))))
        .await;
    assert!(
        n.load(Ordering::Relaxed) >= 13,
        "every check ran on its own prefix"
    );
}

/// Two coordinators, each with its own connection: once the second claimed the partition,
/// the first one's appends are refused by etcd and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_is_fenced_in_the_store() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    let old = EtcdTxnLog::connect(cluster.config("/fence"))
        .await
        .expect("old");
    let new = EtcdTxnLog::connect(cluster.config("/fence"))
        .await
        .expect("new");
    old.claim(P, CoordinatorEpoch(1)).await.expect("claim 1");
    let a = record(1, TxnState::Ongoing, 1);
    old.append(
        P,
        CoordinatorEpoch(1),
        vec![LogEntry::upsert(tid("a"), a.clone())],
    )
    .await
    .expect("owner's append");
    new.claim(P, CoordinatorEpoch(2)).await.expect("claim 2");
    let stale = record(5, TxnState::PrepareCommit, 1);
    let err = old
        .append(
            P,
            CoordinatorEpoch(1),
            vec![LogEntry::upsert(tid("a"), stale)],
        )
        .await
        .expect_err("the stale owner's append");
    assert!(
        matches!(err, LogError::Fenced { current, .. } if current == CoordinatorEpoch(2)),
        "{err:?}"
    );
    assert!(
        old.claim(P, CoordinatorEpoch(1)).await.is_err(),
        "a claim never lowers the epoch"
    );
    let loaded = new.load(P).await.expect("load");
    assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(2)));
    assert_eq!(loaded.records, vec![(tid("a"), a)]);
}

/// Runs `call` until it does not fail `Unavailable` (the retriable error), for at most 20 s;
/// returns its value and how long that took. On any other error, or past the bound, the
/// members' files are kept and their logs' last lines are in the panic message.
async fn until_available<T, F, Fut>(
    cluster: &mut EtcdCluster,
    what: &str,
    mut call: F,
) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LogError>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Ok(v) => return (v, started.elapsed()),
            Err(LogError::Unavailable { .. }) if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                let kept = cluster.keep_files();
                panic!(
                    "{what} failed after {:?}: {e}\nfiles kept in {}\n{}",
                    started.elapsed(),
                    kept.display(),
                    cluster.log_tails(40)
                );
            }
        }
    }
}

/// Appends `id` with retries until it is acknowledged ([`until_available`]); how long it took.
async fn append_until_ok(
    cluster: &mut EtcdCluster,
    log: &EtcdTxnLog,
    epoch: i32,
    id: &str,
    pid: i64,
) -> Duration {
    let entry = || LogEntry::upsert(tid(id), record(pid, TxnState::Ongoing, 1));
    let what = format!("append of {id}");
    until_available(cluster, &what, || {
        log.append(P, CoordinatorEpoch(epoch), vec![entry()])
    })
    .await
    .1
}

/// Each member in turn (so the leader too) is SIGKILLed: writes go on after at most an
/// election, and every acknowledged write is there at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_the_kill_of_any_member() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let mut cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    let log = EtcdTxnLog::connect(cluster.config("/kills"))
        .await
        .expect("log");
    log.claim(P, CoordinatorEpoch(1)).await.expect("claim");
    let mut acked = Vec::new();
    for i in 0..3 {
        cluster.kill(i);
        let id = format!("after-kill-{i}");
        let took = append_until_ok(
            &mut cluster,
            &log,
            1,
            &id,
            10 + i64::try_from(i).unwrap_or(0),
        )
        .await;
        println!("member {i} killed: the next append was acknowledged after {took:?}");
        acked.push(id);
        cluster.restart(i).expect("restart");
        cluster
            .wait_ready(Duration::from_secs(30))
            .await
            .expect("ready again");
    }
    // A read right after a restart may meet an election: `Unavailable` is retriable.
    let (loaded, _) = until_available(&mut cluster, "load", || log.load(P)).await;
    let ids: Vec<String> = loaded
        .records
        .iter()
        .map(|(id, _)| id.to_string())
        .collect();
    assert_eq!(ids, acked);
}

/// With two of three members stopped, writes fail with a retriable `Unavailable` naming the
/// endpoints (never an acknowledgement); once they are back, a new owner's claim fences the
/// old epoch, so a write whose outcome was unknown cannot land afterwards, and the
/// acknowledged writes are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_writes_fail_and_nothing_acknowledged_is_lost() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let mut cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    let log = EtcdTxnLog::connect(cluster.config("/quorum"))
        .await
        .expect("log");
    log.claim(P, CoordinatorEpoch(1)).await.expect("claim");
    append_until_ok(&mut cluster, &log, 1, "before", 1).await;
    cluster.kill(1);
    cluster.kill(2);
    let started = Instant::now();
    let err = log
        .append(
            P,
            CoordinatorEpoch(1),
            vec![LogEntry::upsert(
                tid("during"),
                record(2, TxnState::Ongoing, 1),
            )],
        )
        .await
        .expect_err("no quorum, no acknowledgement");
    assert!(matches!(err, LogError::Unavailable { .. }), "{err:?}");
    assert!(
        err.to_string().contains("127.0.0.1"),
        "names the endpoints: {err}"
    );
    println!(
        "without quorum the append failed after {:?}: {err}",
        started.elapsed()
    );
    cluster.restart(1).expect("restart 1");
    cluster.restart(2).expect("restart 2");
    cluster
        .wait_ready(Duration::from_secs(30))
        .await
        .expect("ready again");
    let successor = EtcdTxnLog::connect(cluster.config("/quorum"))
        .await
        .expect("successor");
    // Right after the restarts an election may still be settling: a claim can time out
    // (Unavailable, outcome unknown). Claiming the same epoch again is safe; a real owner
    // retries the same way.
    let started = Instant::now();
    loop {
        match successor.claim(P, CoordinatorEpoch(2)).await {
            Ok(()) => break,
            Err(e @ LogError::Unavailable { .. })
                if started.elapsed() < Duration::from_secs(20) =>
            {
                println!("claim 2 after the restarts: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("claim 2: {e}"),
        }
    }
    let late = log
        .append(
            P,
            CoordinatorEpoch(1),
            vec![LogEntry::upsert(
                tid("late"),
                record(3, TxnState::Ongoing, 1),
            )],
        )
        .await;
    assert!(matches!(late, Err(LogError::Fenced { .. })), "{late:?}");
    let loaded = successor.load(P).await.expect("load");
    let ids: Vec<String> = loaded
        .records
        .iter()
        .map(|(id, _)| id.to_string())
        .collect();
    assert!(ids.contains(&"before".to_owned()), "{ids:?}");
    assert!(!ids.contains(&"late".to_owned()), "{ids:?}");
}
