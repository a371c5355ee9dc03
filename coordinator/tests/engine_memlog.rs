//! The pure engine driven against the real in-memory `TxnLog` (`txn_log::MemTxnLog`), with the
//! log's epoch fence and crash model: failover, fencing of a stale coordinator, KIP-360 retries
//! after a crash, and reload equality. Uses only the public API, as a shell would.

use coordinator::{
    AddPartitionsToTxnRequest, AddPartitionsTxn, Config, Effect, EndTxnRequest, Engine, ErrorCode,
    InitProducerIdRequest, MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator, Request,
    RequestId, Response,
};
use txn_log::{
    CoordinatorEpoch, LogPartition, MemTxnLog, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnState,
};

const P: LogPartition = LogPartition(0);

/// One coordinator process owning partition 0: runs effects against the shared log.
struct Node {
    eng: Engine,
    log: MemTxnLog,
    alloc: ProducerIdAllocator,
    ce: CoordinatorEpoch,
    replies: Vec<(RequestId, Response)>,
    markers: Vec<MarkerCompletion>,
    unloaded: bool,
    next_req: u64,
}

fn config() -> Config {
    Config {
        transaction_state_log_num_partitions: 1,
        ..Config::default()
    }
}

impl Node {
    /// Claims the partition at `ce`, loads it and starts an engine on it.
    fn start(log: &MemTxnLog, ce: i32) -> Self {
        let alloc = ProducerIdAllocator::new();
        let ce = CoordinatorEpoch(ce);
        log.claim_sync(P, ce).expect("claim");
        let loaded = log.load_sync(P).expect("load");
        let mut eng = Engine::new(P, config(), alloc.clone());
        eng.handle_load(Millis(0), ce, loaded);
        let mut n = Self {
            eng,
            log: log.clone(),
            alloc,
            ce,
            replies: Vec::new(),
            markers: Vec::new(),
            unloaded: false,
            next_req: 1,
        };
        n.pump();
        n
    }

    fn pump(&mut self) {
        while let Some(e) = self.eng.poll_effect() {
            match e {
                Effect::AppendLog {
                    io,
                    partition,
                    coordinator_epoch,
                    entries,
                } => {
                    assert_eq!(coordinator_epoch, self.ce);
                    match self.log.append_sync(partition, coordinator_epoch, entries) {
                        Ok(t) => {
                            assert!(self.log.is_durable(t).expect("no error"), "Immediate mode");
                            self.eng.handle_append_done(io);
                        }
                        Err(err) => self.eng.handle_append_failed(io, err),
                    }
                }
                Effect::Respond { to, response } => self.replies.push((to, response)),
                Effect::WriteMarkers(request) => self
                    .markers
                    .push(MarkerCompletion::of(&request, MarkerOutcome::Completed)),
                Effect::NeedProducerIds { block_size } => {
                    let (block, _) = self.log.allocate_block_sync(block_size).expect("block");
                    self.alloc.add_block(block).expect("fresh block");
                }
                Effect::Unloaded { .. } => self.unloaded = true,
                _ => {}
            }
        }
    }

    fn call(&mut self, req: Request) -> Response {
        let to = RequestId(self.next_req);
        self.next_req += 1;
        self.eng.handle_request(Millis(1), to, req);
        self.pump();
        let i = self
            .replies
            .iter()
            .position(|(t, _)| *t == to)
            .expect("answered");
        self.replies.remove(i).1
    }

    fn init(&mut self, id: &str, expected: Option<(i64, i16)>) -> (ErrorCode, i64, i16) {
        let (pid, epoch) = expected.unwrap_or((-1, -1));
        // Retry COORDINATOR_LOAD_IN_PROGRESS (block being fetched) as a client does.
        for _ in 0..3 {
            let Response::InitProducerId(r) =
                self.call(Request::InitProducerId(InitProducerIdRequest {
                    version: 4,
                    transactional_id: Some(id.into()),
                    transaction_timeout_ms: 60_000,
                    producer_id: ProducerId(pid),
                    producer_epoch: ProducerEpoch(epoch),
                    enable_2pc: false,
                    keep_prepared_txn: false,
                }))
            else {
                panic!("wrong response")
            };
            if r.error != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS {
                return (r.error, r.producer_id.0, r.producer_epoch.0);
            }
        }
        panic!("no producer id block arrived")
    }

    fn add(&mut self, id: &str, pid: i64, epoch: i16) -> ErrorCode {
        let Response::AddPartitionsToTxn(r) =
            self.call(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
                version: 3,
                transactions: vec![AddPartitionsTxn {
                    transactional_id: id.into(),
                    producer_id: ProducerId(pid),
                    producer_epoch: ProducerEpoch(epoch),
                    verify_only: false,
                    partitions: vec![TopicPartition::new("orders", 0)],
                }],
            }))
        else {
            panic!("wrong response")
        };
        r.results[0].partitions[0].1
    }

    fn end(&mut self, id: &str, pid: i64, epoch: i16, commit: bool) -> (ErrorCode, i64, i16) {
        let Response::EndTxn(r) = self.call(Request::EndTxn(EndTxnRequest {
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

    fn finish_markers(&mut self) {
        for m in std::mem::take(&mut self.markers) {
            self.eng.handle_markers_done(Millis(2), m);
            self.pump();
        }
    }

    fn assert_matches_log(&self) {
        let loaded = self.log.durable_snapshot(P);
        let mem: Vec<_> = self
            .eng
            .records()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            mem, loaded.records,
            "engine state equals what a reload reads"
        );
    }
}

fn id(s: &str) -> TransactionalId {
    TransactionalId::new(s).expect("non-empty")
}

#[test]
fn full_cycle_through_the_log_and_reload_equality() {
    let log = MemTxnLog::new();
    let mut n = Node::start(&log, 1);
    let (e, pid, epoch) = n.init("app", None);
    assert_eq!(e, ErrorCode::NONE);
    assert_eq!(n.add("app", pid, epoch), ErrorCode::NONE);
    let (e, pid2, epoch2) = n.end("app", pid, epoch, true);
    assert_eq!((e, pid2, epoch2), (ErrorCode::NONE, pid, epoch + 1));
    assert_eq!(
        n.eng.record(&id("app")).map(|r| r.state),
        Some(TxnState::PrepareCommit)
    );
    n.finish_markers();
    assert_eq!(
        n.eng.record(&id("app")).map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
    n.assert_matches_log();
}

#[test]
fn stale_coordinator_is_fenced_by_the_log_and_unloads() {
    let log = MemTxnLog::new();
    let mut old = Node::start(&log, 1);
    let (_, pid, epoch) = old.init("app", None);
    let mut new = Node::start(&log, 2);
    // The old owner's next write is refused by the log's epoch fence.
    assert_eq!(old.add("app", pid, epoch), ErrorCode::NOT_COORDINATOR);
    assert!(old.unloaded && !old.eng.is_loaded());
    assert_eq!(new.add("app", pid, epoch), ErrorCode::NONE);
    new.assert_matches_log();
}

/// KAFKA-20357 fixed, end to end: a KIP-360 bump, a crash, a new coordinator, the retry.
#[test]
fn kip360_retry_after_crash_and_failover_returns_the_same_epoch() {
    let log = MemTxnLog::new();
    let mut a = Node::start(&log, 1);
    let (_, pid, epoch) = a.init("app", None);
    let first = a.init("app", Some((pid, epoch)));
    assert_eq!(first, (ErrorCode::NONE, pid, epoch + 1));
    log.crash();
    let mut b = Node::start(&log, 2);
    assert_eq!(
        b.init("app", Some((pid, epoch))),
        first,
        "the retry is recognised after failover"
    );
    // Once a new producer took over, the old identity is a zombie and is fenced.
    assert_eq!(b.init("app", None), (ErrorCode::NONE, pid, epoch + 2));
    assert_eq!(
        b.init("app", Some((pid, epoch))).0,
        ErrorCode::PRODUCER_FENCED
    );
}

#[test]
fn decided_transaction_survives_crash_and_completes_with_the_new_epoch() {
    let log = MemTxnLog::new();
    let mut a = Node::start(&log, 1);
    let (_, pid, epoch) = a.init("app", None);
    a.add("app", pid, epoch);
    let (e, ..) = a.end("app", pid, epoch, false);
    assert_eq!(e, ErrorCode::NONE, "acknowledged abort");
    log.crash();
    let mut b = Node::start(&log, 2);
    assert_eq!(b.markers.len(), 1, "markers re-driven on load");
    assert_eq!(b.markers[0].coordinator_epoch, CoordinatorEpoch(2));
    b.finish_markers();
    assert_eq!(
        b.eng.record(&id("app")).map(|r| r.state),
        Some(TxnState::CompleteAbort)
    );
    b.assert_matches_log();
}
