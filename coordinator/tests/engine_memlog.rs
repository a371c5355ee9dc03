//! The pure engine driven against the real in-memory `TxnLog` (`txn_log::MemTxnLog`), with the
//! log's epoch fence and crash model: failover, fencing of a stale coordinator, KIP-360 retries
//! after a crash, and reload equality. Uses only the public API, as a shell would.

use coordinator::testing::EngineHarness;
use coordinator::{
    AddPartitionsToTxnRequest, Config, EndTxnRequest, ErrorCode, InitProducerIdRequest,
    ProducerIdAllocator, Request, Response,
};
use txn_log::{
    CoordinatorEpoch, LogPartition, MemTxnLog, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnState,
};

const P: LogPartition = LogPartition(0);

fn config() -> Config {
    Config {
        transaction_state_log_num_partitions: 1,
        ..Config::default()
    }
}

/// One coordinator process owning partition 0 of `log`, claimed and loaded at `ce`, its
/// re-driven effects executed.
fn start(log: &MemTxnLog, ce: i32) -> EngineHarness {
    let mut h = EngineHarness::new(log.clone(), P, config(), ProducerIdAllocator::new());
    h.load(CoordinatorEpoch(ce)).expect("claim and load");
    h.drive();
    h
}

fn init(h: &mut EngineHarness, id: &str, expected: Option<(i64, i16)>) -> (ErrorCode, i64, i16) {
    let (pid, epoch) = expected.unwrap_or((-1, -1));
    // Retry COORDINATOR_LOAD_IN_PROGRESS (block being fetched) as a client does.
    for _ in 0..3 {
        let Response::InitProducerId(r) = h.call(Request::InitProducerId(InitProducerIdRequest {
            version: 4,
            transactional_id: Some(id.into()),
            transaction_timeout_ms: 60_000,
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            enable_2pc: false,
            keep_prepared_txn: false,
        })) else {
            panic!("wrong response")
        };
        if r.error != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS {
            return (r.error, r.producer_id.0, r.producer_epoch.0);
        }
    }
    panic!("no producer id block arrived")
}

fn add(h: &mut EngineHarness, id: &str, pid: i64, epoch: i16) -> ErrorCode {
    let Response::AddPartitionsToTxn(r) =
        h.call(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest::add(
            3,
            id,
            ProducerId(pid),
            ProducerEpoch(epoch),
            &[TopicPartition::new("orders", 0)],
        )))
    else {
        panic!("wrong response")
    };
    r.results[0].partitions[0].1
}

fn end(
    h: &mut EngineHarness,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> (ErrorCode, i64, i16) {
    let Response::EndTxn(r) = h.call(Request::EndTxn(EndTxnRequest {
        version: 5,
        transactional_id: id.into(),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(epoch),
        committed: commit,
    })) else {
        panic!("wrong response")
    };
    (r.error, r.producer_id.0, r.producer_epoch.0)
}

fn id(s: &str) -> TransactionalId {
    TransactionalId::new(s).expect("non-empty")
}

#[test]
fn full_cycle_through_the_log_and_reload_equality() {
    let log = MemTxnLog::new();
    let mut n = start(&log, 1);
    let (e, pid, epoch) = init(&mut n, "app", None);
    assert_eq!(e, ErrorCode::NONE);
    assert_eq!(add(&mut n, "app", pid, epoch), ErrorCode::NONE);
    let (e, pid2, epoch2) = end(&mut n, "app", pid, epoch, true);
    assert_eq!((e, pid2, epoch2), (ErrorCode::NONE, pid, epoch + 1));
    assert_eq!(
        n.engine().record(&id("app")).map(|r| r.state),
        Some(TxnState::PrepareCommit)
    );
    n.complete_markers();
    assert_eq!(
        n.engine().record(&id("app")).map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
    n.assert_matches_log();
}

#[test]
fn stale_coordinator_is_fenced_by_the_log_and_unloads() {
    let log = MemTxnLog::new();
    let mut old = start(&log, 1);
    let (_, pid, epoch) = init(&mut old, "app", None);
    let mut new = start(&log, 2);
    // The old owner's next write is refused by the log's epoch fence.
    assert_eq!(add(&mut old, "app", pid, epoch), ErrorCode::NOT_COORDINATOR);
    assert!(!old.unloads().is_empty() && !old.engine().is_loaded());
    assert_eq!(add(&mut new, "app", pid, epoch), ErrorCode::NONE);
    new.assert_matches_log();
}

/// KAFKA-20357 fixed, end to end: a KIP-360 bump, a crash, a new coordinator, the retry.
#[test]
fn kip360_retry_after_crash_and_failover_returns_the_same_epoch() {
    let log = MemTxnLog::new();
    let mut a = start(&log, 1);
    let (_, pid, epoch) = init(&mut a, "app", None);
    let first = init(&mut a, "app", Some((pid, epoch)));
    assert_eq!(first, (ErrorCode::NONE, pid, epoch + 1));
    a.crash();
    let mut b = start(&log, 2);
    assert_eq!(
        init(&mut b, "app", Some((pid, epoch))),
        first,
        "the retry is recognised after failover"
    );
    // Once a new producer took over, the old identity is a zombie and is fenced.
    assert_eq!(init(&mut b, "app", None), (ErrorCode::NONE, pid, epoch + 2));
    assert_eq!(
        init(&mut b, "app", Some((pid, epoch))).0,
        ErrorCode::PRODUCER_FENCED
    );
}

#[test]
fn decided_transaction_survives_crash_and_completes_with_the_new_epoch() {
    let log = MemTxnLog::new();
    let mut a = start(&log, 1);
    let (_, pid, epoch) = init(&mut a, "app", None);
    add(&mut a, "app", pid, epoch);
    let (e, ..) = end(&mut a, "app", pid, epoch, false);
    assert_eq!(e, ErrorCode::NONE, "acknowledged abort");
    a.crash();
    let mut b = start(&log, 2);
    assert_eq!(b.markers().len(), 1, "markers re-driven on load");
    assert_eq!(b.markers()[0].coordinator_epoch, CoordinatorEpoch(2));
    b.complete_markers();
    assert_eq!(
        b.engine().record(&id("app")).map(|r| r.state),
        Some(TxnState::CompleteAbort)
    );
    b.assert_matches_log();
}
