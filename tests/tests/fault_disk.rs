//! Disk faults at the library level: a failing durability step poisons the log;
//! the coordinator shell then answers COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR, and nothing
//! that is not durable is ever acknowledged. Driven through `coordinator::shell::Coordinator`
//! over `MemTxnLog` (fault injection, durable snapshot) and `SledTxnLog` (`fail_next_sync`).

use std::sync::Arc;
use std::time::Duration;

use coordinator::shell::{
    Coordinator, CoordinatorOptions, ManualClock, Metrics, RecordingMarkerSink,
};
use coordinator::{
    AddPartitionsToTxnRequest, Config, EndTxnRequest, ErrorCode, InitProducerIdRequest,
};
use tokio::sync::mpsc;
use txn_log::mem::{Fault, MemOp};
use txn_log::{
    LogPartition, MemTxnLog, ProducerEpoch, ProducerId, SledTxnLog, TopicPartition, TxnLog,
    TxnState,
};

fn start(log: Arc<dyn TxnLog>) -> Coordinator {
    let (done_tx, done_rx) = mpsc::channel(1024);
    Coordinator::start(CoordinatorOptions {
        config: Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        },
        log,
        clock: Arc::new(ManualClock::new(1_000_000)),
        markers: Arc::new(RecordingMarkerSink::new(done_tx, true)),
        marker_completions: done_rx,
        catalog: Arc::new(coordinator::shell::EveryPartitionExists),
        metrics: Metrics::new(),
    })
}

fn init(id: &str) -> InitProducerIdRequest {
    InitProducerIdRequest {
        version: 4,
        transactional_id: Some(id.into()),
        transaction_timeout_ms: 60_000,
        producer_id: ProducerId::NONE,
        producer_epoch: ProducerEpoch::NONE,
        enable_2pc: false,
        keep_prepared_txn: false,
    }
}

fn add(id: &str, pid: ProducerId, epoch: ProducerEpoch) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::add(3, id, pid, epoch, &[TopicPartition::new("t", 0)])
}

fn end(id: &str, pid: ProducerId, epoch: ProducerEpoch) -> EndTxnRequest {
    EndTxnRequest {
        version: 3,
        transactional_id: id.into(),
        producer_id: pid,
        producer_epoch: epoch,
        committed: true,
    }
}

fn unavailable(e: ErrorCode) -> bool {
    e == ErrorCode::COORDINATOR_NOT_AVAILABLE || e == ErrorCode::NOT_COORDINATOR
}

/// Opens a transaction on "a" and returns (pid, epoch).
async fn open_txn(c: &Coordinator) -> (ProducerId, ProducerEpoch) {
    let r = c.init_producer_id(init("a")).await;
    assert_eq!(r.error, ErrorCode::NONE, "{r:?}");
    let a = c
        .add_partitions_to_txn(add("a", r.producer_id, r.producer_epoch))
        .await;
    assert_eq!(a.results[0].partitions[0].1, ErrorCode::NONE, "{a:?}");
    (r.producer_id, r.producer_epoch)
}

#[tokio::test]
async fn a_poisoned_mem_log_fails_requests_and_acknowledges_nothing_undurable() {
    let log = Arc::new(MemTxnLog::new());
    let c = start(log.clone());
    c.load_all_partitions().await.expect("load");
    let (pid, epoch) = open_txn(&c).await;

    // The PrepareCommit append is applied but never made durable; the log is poisoned.
    log.fail_next(MemOp::Append, Fault::Poison);
    let e = c.end_txn(end("a", pid, epoch)).await;
    assert!(unavailable(e.error), "EndTxn over a failed flush: {e:?}");
    assert!(log.is_poisoned());
    let durable = log.durable_snapshot(LogPartition(0));
    let a = durable
        .records
        .iter()
        .find(|(id, _)| id.as_str() == "a")
        .map(|(_, r)| r.state);
    assert_eq!(a, Some(TxnState::Ongoing), "durable state: {durable:?}");

    // Every later request fails the same way, whatever it is.
    let r = c.init_producer_id(init("b")).await;
    assert!(unavailable(r.error), "{r:?}");
    let e = c.end_txn(end("a", pid, epoch)).await;
    assert!(unavailable(e.error), "retried EndTxn: {e:?}");
    let a2 = c.add_partitions_to_txn(add("a", pid, epoch)).await;
    assert!(unavailable(a2.results[0].partitions[0].1), "{a2:?}");
    assert!(!c.log_failure().await.is_empty());
}

#[tokio::test]
async fn a_failed_io_append_is_not_acknowledged() {
    let log = Arc::new(MemTxnLog::new());
    let c = start(log.clone());
    c.load_all_partitions().await.expect("load");
    let (pid, epoch) = open_txn(&c).await;
    log.fail_next(MemOp::Append, Fault::Io);
    let e = c.end_txn(end("a", pid, epoch)).await;
    assert_ne!(e.error, ErrorCode::NONE, "{e:?}");
    let durable = log.durable_snapshot(LogPartition(0));
    assert!(
        durable
            .records
            .iter()
            .all(|(_, r)| r.state != TxnState::PrepareCommit),
        "{durable:?}"
    );
}

#[tokio::test]
async fn a_failed_sled_fsync_poisons_the_log_and_the_coordinator_stops_acknowledging() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().to_path_buf();
    let log = Arc::new(
        tokio::task::spawn_blocking(move || SledTxnLog::open_path(path))
            .await
            .expect("join")
            .expect("open"),
    );
    let c = start(log.clone());
    c.load_all_partitions().await.expect("load");
    let (pid, epoch) = open_txn(&c).await;
    log.fail_next_sync();
    let e = c.end_txn(end("a", pid, epoch)).await;
    assert!(unavailable(e.error), "EndTxn over a failed fsync: {e:?}");
    assert!(log.is_poisoned());
    let r = tokio::time::timeout(Duration::from_secs(10), c.init_producer_id(init("b")))
        .await
        .expect("bounded");
    assert!(unavailable(r.error), "{r:?}");
    c.shutdown().await;
    let l = log.clone();
    tokio::task::spawn_blocking(move || l.shutdown())
        .await
        .expect("join");
}
