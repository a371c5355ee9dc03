//! Shell tests: the handle over `MemTxnLog` with the recording marker sink and a manual clock.

use std::sync::Arc;

use tokio::sync::mpsc;
use txn_log::{
    CoordinatorEpoch, LogPartition, MemTxnLog, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnLog, TxnState,
};

use super::*;
use crate::{AddPartitionsTxn, ListTransactionsRequest, MarkerOutcome};

struct Harness {
    coordinator: Coordinator,
    markers: RecordingMarkerSink,
    clock: ManualClock,
    log: Arc<MemTxnLog>,
}

fn harness_with(log: Arc<MemTxnLog>, auto_markers: bool) -> Harness {
    let (done_tx, done_rx) = mpsc::channel(1024);
    let markers = RecordingMarkerSink::new(done_tx, auto_markers);
    let clock = ManualClock::new(1_000_000);
    let coordinator = Coordinator::start(CoordinatorOptions {
        config: Config {
            transaction_state_log_num_partitions: 4,
            ..Config::default()
        },
        log: log.clone(),
        clock: Arc::new(clock.clone()),
        markers: Arc::new(markers.clone()),
        marker_completions: done_rx,
        catalog: Arc::new(EveryPartitionExists),
        metrics: Metrics::new(),
    });
    Harness {
        coordinator,
        markers,
        clock,
        log,
    }
}

fn harness(auto_markers: bool) -> Harness {
    harness_with(Arc::new(MemTxnLog::new()), auto_markers)
}

fn init(id: &str) -> InitProducerIdRequest {
    InitProducerIdRequest::new_producer(4, id, 60_000)
}

fn add(id: &str, pid: ProducerId, epoch: ProducerEpoch, topic: &str) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::add(3, id, pid, epoch, &[TopicPartition::new(topic, 0)])
}

fn end(id: &str, pid: ProducerId, epoch: ProducerEpoch, commit: bool) -> EndTxnRequest {
    EndTxnRequest {
        version: 3,
        transactional_id: id.into(),
        producer_id: pid,
        producer_epoch: epoch,
        committed: commit,
    }
}

/// Retries while the coordinator is still fetching a producer-id block.
async fn init_ok(c: &Coordinator, id: &str) -> InitProducerIdResponse {
    for _ in 0..1000 {
        let r = c.init_producer_id(init(id)).await;
        if r.error != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS {
            return r;
        }
        tokio::task::yield_now().await;
    }
    panic!("producer ids never became available");
}

/// Loads every partition, initializes `id` and adds partition `t`-0: its transaction is
/// Ongoing. Returns the producer id and epoch.
async fn begin(c: &Coordinator, id: &str) -> (ProducerId, ProducerEpoch) {
    c.load_all_partitions().await.expect("load");
    let r = init_ok(c, id).await;
    let (pid, epoch) = (r.producer_id, r.producer_epoch);
    let a = c.add_partitions_to_txn(add(id, pid, epoch, "t")).await;
    assert_eq!(a.results[0].partitions[0].1, ErrorCode::NONE);
    (pid, epoch)
}

async fn state_of(c: &Coordinator, id: &str) -> String {
    let d = c
        .describe_transactions(DescribeTransactionsRequest {
            transactional_ids: vec![id.into()],
        })
        .await;
    d[0].state
        .map(|st| st.name().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn requests_before_load_get_not_coordinator() {
    let h = harness(true);
    let r = h.coordinator.init_producer_id(init("one")).await;
    assert!(
        r.error == ErrorCode::NOT_COORDINATOR || r.error == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        "{r:?}"
    );
    h.coordinator.load_all_partitions().await.expect("load");
    let r = init_ok(&h.coordinator, "one").await;
    assert_eq!(r.error, ErrorCode::NONE);
    assert_eq!(r.producer_epoch, ProducerEpoch(0));
}

#[tokio::test]
async fn commit_cycle_writes_markers_and_completes() {
    let h = harness(true);
    let (pid, epoch) = begin(&h.coordinator, "app").await;
    assert_eq!(state_of(&h.coordinator, "app").await, "Ongoing");
    let e = h.coordinator.end_txn(end("app", pid, epoch, true)).await;
    assert_eq!(e.error, ErrorCode::NONE);
    // Markers complete at once; the CompleteCommit append follows.
    let mut state = String::new();
    for _ in 0..1000 {
        state = state_of(&h.coordinator, "app").await;
        if state == "CompleteCommit" {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(state, "CompleteCommit");
    let jobs = h.markers.jobs();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].partitions, vec![TopicPartition::new("t", 0)]);
    assert_eq!(jobs[0].producer_id, pid);
    assert_eq!(h.coordinator.metrics().transactions_committed.get(), 1);
}

#[tokio::test]
async fn prepare_commit_is_redriven_after_reload_with_the_new_epoch() {
    let h = harness(false);
    let (pid, epoch) = begin(&h.coordinator, "app").await;
    let e = h.coordinator.end_txn(end("app", pid, epoch, true)).await;
    assert_eq!(e.error, ErrorCode::NONE);
    assert_eq!(state_of(&h.coordinator, "app").await, "PrepareCommit");
    let p = h
        .coordinator
        .config()
        .partition_for(&TransactionalId::new("app").expect("id"));
    let first_epoch = h.markers.jobs()[0].coordinator_epoch;

    // A second coordinator over the same log takes over (as after a restart).
    h.coordinator.unload_partition(p).await;
    assert!(h.markers.cancelled().contains(&p));
    let h2 = harness_with(h.log.clone(), true);
    let new_epoch = h2
        .coordinator
        .load_partition_next_epoch(p)
        .await
        .expect("reload");
    assert!(new_epoch > first_epoch);
    let mut state = String::new();
    for _ in 0..1000 {
        state = state_of(&h2.coordinator, "app").await;
        if state == "CompleteCommit" {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(state, "CompleteCommit");
    assert_eq!(h2.markers.jobs()[0].coordinator_epoch, new_epoch);
}

#[tokio::test]
async fn a_fenced_append_unloads_and_answers_not_coordinator() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    let r = init_ok(&h.coordinator, "app").await;
    let p = h
        .coordinator
        .config()
        .partition_for(&TransactionalId::new("app").expect("id"));
    // Another owner claims the partition at a higher epoch behind our back.
    h.log.claim(p, CoordinatorEpoch(1000)).await.expect("claim");
    let a = h
        .coordinator
        .add_partitions_to_txn(add("app", r.producer_id, r.producer_epoch, "t"))
        .await;
    assert_eq!(a.results[0].partitions[0].1, ErrorCode::NOT_COORDINATOR);
    let again = h.coordinator.init_producer_id(init("app")).await;
    assert_eq!(again.error, ErrorCode::NOT_COORDINATOR);
    assert!(h.markers.cancelled().contains(&p));
}

#[tokio::test]
async fn reaper_aborts_a_timed_out_transaction_when_the_clock_moves() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    let mut req = init("slow");
    req.transaction_timeout_ms = 1000;
    let r = loop {
        let r = h.coordinator.init_producer_id(req.clone()).await;
        if r.error != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS {
            break r;
        }
        tokio::task::yield_now().await;
    };
    h.coordinator
        .add_partitions_to_txn(add("slow", r.producer_id, r.producer_epoch, "t"))
        .await;
    h.clock.advance(20_000);
    let mut state = String::new();
    for _ in 0..1000 {
        state = state_of(&h.coordinator, "slow").await;
        if state == "CompleteAbort" {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(state, "CompleteAbort");
    assert_eq!(h.coordinator.metrics().transactions_timed_out.get(), 1);
}

#[tokio::test]
async fn list_and_describe_span_partitions_in_request_order() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    for id in ["a", "b", "one", "two"] {
        assert_eq!(init_ok(&h.coordinator, id).await.error, ErrorCode::NONE);
    }
    let d = h
        .coordinator
        .describe_transactions(DescribeTransactionsRequest {
            transactional_ids: vec!["two".into(), "".into(), "a".into(), "missing".into()],
        })
        .await;
    let got: Vec<_> = d
        .iter()
        .map(|x| (x.transactional_id.as_str(), x.error))
        .collect();
    assert_eq!(
        got,
        vec![
            ("two", ErrorCode::NONE),
            ("", ErrorCode::INVALID_REQUEST),
            ("a", ErrorCode::NONE),
            ("missing", ErrorCode::TRANSACTIONAL_ID_NOT_FOUND),
        ]
    );
    let l = h
        .coordinator
        .list_transactions(ListTransactionsRequest {
            state_filters: vec!["Empty".into(), "Bogus".into()],
            producer_id_filters: vec![],
            duration_filter_ms: -1,
            transactional_id_pattern: None,
        })
        .await;
    assert_eq!(l.error, ErrorCode::NONE);
    assert_eq!(l.unknown_state_filters, vec!["Bogus".to_string()]);
    let ids: Vec<_> = l
        .transactions
        .iter()
        .map(|t| t.transactional_id.as_str())
        .collect();
    assert_eq!(ids, vec!["a", "b", "one", "two"]);
    assert!(l.transactions.iter().all(|t| t.state == TxnState::Empty));
}

#[tokio::test]
async fn shutdown_answers_later_requests_without_hanging() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    init_ok(&h.coordinator, "x").await;
    h.coordinator.shutdown().await;
    let r = h.coordinator.init_producer_id(init("x")).await;
    assert_ne!(r.error, ErrorCode::NONE);
    let _ = LogPartition(0);
}

#[test]
fn handle_futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let h = harness(true);
        is_send(&h.coordinator.log_failure());
        is_send(&h.coordinator.init_producer_id(init("x")));
        is_send(
            &h.coordinator
                .list_transactions(ListTransactionsRequest::default()),
        );
        is_send(&h.coordinator.load_all_partitions());
    });
}

#[tokio::test]
async fn a_v4_batch_spanning_partitions_is_split_and_merged_in_request_order() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    let mut txns = Vec::new();
    // "two" -> partition 0, "a" -> 1, "b" -> 2 (of 4), plus an empty id.
    for id in ["two", "a", "b"] {
        let r = init_ok(&h.coordinator, id).await;
        txns.push(AddPartitionsTxn {
            transactional_id: id.into(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            verify_only: false,
            partitions: vec![TopicPartition::new("t", 0), TopicPartition::new("u", 1)],
        });
    }
    txns.insert(
        1,
        AddPartitionsTxn {
            transactional_id: String::new(),
            producer_id: ProducerId(1),
            producer_epoch: ProducerEpoch(0),
            verify_only: false,
            partitions: vec![TopicPartition::new("t", 0)],
        },
    );
    let r = h
        .coordinator
        .add_partitions_to_txn(AddPartitionsToTxnRequest {
            version: 4,
            transactions: txns,
        })
        .await;
    let ids: Vec<&str> = r
        .results
        .iter()
        .map(|t| t.transactional_id.as_str())
        .collect();
    assert_eq!(ids, vec!["two", "", "a", "b"]);
    assert_eq!(r.results[1].partitions[0].1, ErrorCode::INVALID_REQUEST);
    for i in [0, 2, 3] {
        assert!(
            r.results[i].partitions.iter().all(|(_, e)| e.is_none()),
            "{:?}",
            r.results[i]
        );
    }
    for id in ["two", "a", "b"] {
        assert_eq!(state_of(&h.coordinator, id).await, "Ongoing");
    }
}

#[tokio::test]
async fn a_log_written_with_another_partition_count_fails_to_load_as_corrupt() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    for id in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(init_ok(&h.coordinator, id).await.error, ErrorCode::NONE);
    }
    h.coordinator.shutdown().await;

    // The same log under 3 log partitions instead of 4: some ids sit in the wrong partition.
    let (done_tx, done_rx) = mpsc::channel(1024);
    let config = Config {
        transaction_state_log_num_partitions: 3,
        ..Config::default()
    };
    let c = Coordinator::start(CoordinatorOptions {
        config: config.clone(),
        log: h.log.clone(),
        clock: Arc::new(ManualClock::new(1_000_000)),
        markers: Arc::new(RecordingMarkerSink::new(done_tx, true)),
        marker_completions: done_rx,
        catalog: Arc::new(EveryPartitionExists),
        metrics: Metrics::new(),
    });
    let mut failed = Vec::new();
    for p in 0..3 {
        match c.load_partition_next_epoch(LogPartition(p)).await {
            Ok(_) => {}
            Err(LogError::Corrupt {
                partition, reason, ..
            }) => {
                assert_eq!(partition, Some(LogPartition(p)));
                assert!(
                    reason.contains("transaction.state.log.num.partitions"),
                    "{reason}"
                );
                failed.push(LogPartition(p));
            }
            Err(e) => panic!("unexpected load error {e:?}"),
        }
    }
    assert!(!failed.is_empty(), "no partition held a misrouted id");
    // The ids of a partition that failed to load are not served.
    for id in ["a", "b", "c", "d", "e", "f"] {
        let tid = TransactionalId::new(id).expect("id");
        if failed.contains(&config.partition_for(&tid)) {
            let r = c.init_producer_id(init(id)).await;
            assert_eq!(r.error, ErrorCode::NOT_COORDINATOR, "{id}");
        }
    }
    c.shutdown().await;
}

/// Parking through the shell: the next transaction's AddPartitionsToTxn waits while the
/// markers are held, is answered NONE once they complete, and a parked request whose markers
/// never come is answered CONCURRENT_TRANSACTIONS when the clock passes `txn.park.max.ms`.
#[tokio::test]
async fn an_add_after_commit_waits_for_the_markers_then_for_the_clock() {
    let h = harness(false);
    let (pid, epoch) = begin(&h.coordinator, "park").await;
    let e = h.coordinator.end_txn(end("park", pid, epoch, true)).await;
    assert_eq!(e.error, ErrorCode::NONE);

    let c = h.coordinator.clone();
    let next =
        tokio::spawn(async move { c.add_partitions_to_txn(add("park", pid, epoch, "u")).await });
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!next.is_finished(), "answered while the markers are out");
    assert_eq!(h.coordinator.metrics().requests_parked.get(), 1);
    assert_eq!(h.markers.complete_held(MarkerOutcome::Completed).await, 1);
    let a = next.await.expect("join");
    assert_eq!(a.results[0].partitions[0].1, ErrorCode::NONE);

    // The second transaction's markers are never completed: the next add waits out the park.
    let e = h.coordinator.end_txn(end("park", pid, epoch, false)).await;
    assert_eq!(e.error, ErrorCode::NONE);
    let c = h.coordinator.clone();
    let next =
        tokio::spawn(async move { c.add_partitions_to_txn(add("park", pid, epoch, "v")).await });
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!next.is_finished());
    h.clock.advance(Config::default().park_max_ms - 1);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!next.is_finished(), "answered before the wait ran out");
    h.clock.advance(1);
    let a = next.await.expect("join");
    assert_eq!(
        a.results[0].partitions[0].1,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(h.coordinator.metrics().parked_requests_timed_out.get(), 1);
}

#[tokio::test]
async fn refused_marker_decisions_wait_in_the_driver_and_keep_their_order() {
    let h = harness(true);
    h.coordinator.load_all_partitions().await.expect("load");
    // Two ids of one log partition, so one driver holds both decisions.
    let first = TransactionalId::new("bp-0").expect("id");
    let second = (1..1000)
        .map(|i| TransactionalId::new(format!("bp-{i}")).expect("id"))
        .find(|id| crate::partition_for(id, 4) == crate::partition_for(&first, 4))
        .expect("an id of the same log partition");
    let mut producers = Vec::new();
    for id in [&first, &second] {
        let r = init_ok(&h.coordinator, id.as_str()).await;
        let a = h
            .coordinator
            .add_partitions_to_txn(add(id.as_str(), r.producer_id, r.producer_epoch, "t"))
            .await;
        assert_eq!(a.results[0].partitions[0].1, ErrorCode::NONE);
        producers.push((id.clone(), r.producer_id, r.producer_epoch));
    }
    // The writer is "full" for the next 5 offers: both decisions wait in the driver.
    h.markers.refuse_next(5);
    for (id, pid, epoch) in &producers {
        let e = h
            .coordinator
            .end_txn(end(id.as_str(), *pid, *epoch, true))
            .await;
        assert_eq!(e.error, ErrorCode::NONE);
    }
    for (id, _, _) in &producers {
        let mut state = String::new();
        for _ in 0..500 {
            state = state_of(&h.coordinator, id.as_str()).await;
            if state == "CompleteCommit" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(state, "CompleteCommit", "{id}");
    }
    let order: Vec<_> = h
        .markers
        .jobs()
        .into_iter()
        .map(|j| j.transactional_id)
        .collect();
    assert_eq!(
        order,
        vec![first, second],
        "decisions reach the sink in order"
    );
    let m = h.coordinator.metrics();
    assert_eq!(m.marker_submissions_deferred.get(), 2);
    assert_eq!(m.markers_deferred.get(), 0);
    assert_eq!(m.markers_pending.get(), 0);
}

/// KIP-890 in process: the coordinator is a `markers::verify::TxnVerifier` behind the
/// library's `Verifier`, with no conversion by the broker. A partition in the transaction is
/// verified, one outside it is not, an old epoch is fenced, an add (TV2) puts a partition in
/// the transaction, and nothing is answered for an id of a log partition not owned here.
#[tokio::test]
async fn the_coordinator_verifies_and_adds_in_process() {
    use ::markers::verify::{Operation, Verdict, VerificationConfig, Verifier, VerifyTxn};

    let h = harness(true);
    let (pid, epoch) = begin(&h.coordinator, "app").await;
    let txn = |epoch, topic: &str, operation| VerifyTxn {
        transactional_id: "app".into(),
        producer_id: pid,
        producer_epoch: epoch,
        partitions: vec![TopicPartition::new(topic, 0)],
        operation,
    };
    let config = VerificationConfig {
        cache_ttl: std::time::Duration::ZERO,
        ..VerificationConfig::default()
    };
    let verifier = Verifier::new(Arc::new(h.coordinator.clone()), config);
    let one = |out: Vec<(TopicPartition, Verdict)>| {
        assert_eq!(out.len(), 1, "{out:?}");
        out[0].1
    };
    let verdict = one(verifier.verify(txn(epoch, "t", Operation::Verify)).await);
    assert_eq!(verdict, Verdict::Verified);
    let verdict = one(verifier.verify(txn(epoch, "u", Operation::Verify)).await);
    assert!(!verdict.allows_append(), "{verdict:?}");
    assert_eq!(verdict.produce_code(), ErrorCode::INVALID_TXN_STATE);
    let old = ProducerEpoch(epoch.0 - 1);
    let verdict = one(verifier.verify(txn(old, "t", Operation::Verify)).await);
    assert_eq!(verdict, Verdict::ProducerFenced);
    // The add of transaction version 2: "u" joins the transaction, then verifies.
    let verdict = one(verifier.verify(txn(epoch, "u", Operation::Add)).await);
    assert_eq!(verdict, Verdict::Verified);
    let verdict = one(verifier.verify(txn(epoch, "u", Operation::Verify)).await);
    assert_eq!(verdict, Verdict::Verified);
    let d = h
        .coordinator
        .describe_transactions(DescribeTransactionsRequest {
            transactional_ids: vec!["app".into()],
        })
        .await;
    assert_eq!(d[0].partitions.len(), 2, "{d:?}");

    // Not the owner: the log partition is unloaded here.
    let id = TransactionalId::new("app").expect("id");
    let lp = h.coordinator.config().partition_for(&id);
    h.coordinator.unload_partition(lp).await;
    let out = h
        .coordinator
        .verify_txns(&[txn(epoch, "t", Operation::Verify)])
        .await
        .expect("answered");
    assert_eq!(
        out,
        vec![vec![Verdict::CoordinatorUnavailable {
            code: ErrorCode::NOT_COORDINATOR
        }]]
    );
}

/// A [`MemTxnLog`] whose `load` waits until [`GatedLoad::open`]: a partition that takes as long
/// as the test wants to load.
struct GatedLoad {
    inner: MemTxnLog,
    gate: tokio::sync::Semaphore,
}

impl GatedLoad {
    fn open(&self) {
        self.gate.add_permits(1_000);
    }
}

#[async_trait::async_trait]
impl TxnLog for GatedLoad {
    async fn claim(&self, p: LogPartition, epoch: CoordinatorEpoch) -> Result<(), LogError> {
        self.inner.claim(p, epoch).await
    }
    async fn claim_next(&self, p: LogPartition) -> Result<CoordinatorEpoch, LogError> {
        self.inner.claim_next(p).await
    }
    fn append(
        &self,
        p: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<txn_log::LogEntry>,
    ) -> txn_log::Appending {
        self.inner.append(p, epoch, batch)
    }
    async fn load(&self, p: LogPartition) -> Result<txn_log::LoadedPartition, LogError> {
        let _permit = self.gate.acquire().await.map_err(|_| LogError::Closed)?;
        self.inner.load(p).await
    }
    async fn allocate_block(
        &self,
        len: u32,
        floor: txn_log::ProducerId,
    ) -> Result<txn_log::ProducerIdBlock, LogError> {
        self.inner.allocate_block(len, floor).await
    }
}

/// A coordinator over a [`GatedLoad`] log with `txn.park.max.ms` = `park_max_ms`, its partition
/// of `id` loading (held at the gate).
async fn loading(park_max_ms: i64, id: &str) -> (Coordinator, Arc<GatedLoad>, ManualClock) {
    let log = Arc::new(GatedLoad {
        inner: MemTxnLog::new(),
        gate: tokio::sync::Semaphore::new(0),
    });
    let (_done_tx, done_rx) = mpsc::channel(1024);
    let clock = ManualClock::new(1_000_000);
    let config = Config {
        transaction_state_log_num_partitions: 4,
        park_max_ms,
        ..Config::default()
    };
    let lp = config.partition_for(&TransactionalId::new(id).expect("id"));
    let coordinator = Coordinator::start(CoordinatorOptions {
        config,
        log: log.clone(),
        clock: Arc::new(clock.clone()),
        markers: Arc::new(RecordingMarkerSink::new(_done_tx, true)),
        marker_completions: done_rx,
        catalog: Arc::new(EveryPartitionExists),
        metrics: Metrics::new(),
    });
    let c = coordinator.clone();
    tokio::spawn(async move { c.load_partition_next_epoch(lp).await });
    // The load is under way once a request meets it (requests and loads share the driver's
    // queue in order; the load was sent first).
    tokio::task::yield_now().await;
    (coordinator, log, clock)
}

#[tokio::test]
async fn a_request_during_a_load_is_answered_once_loaded() {
    let (c, log, _clock) = loading(1_000, "held").await;
    let c2 = c.clone();
    let mut answer = tokio::spawn(async move { c2.init_producer_id(init("held")).await });
    // Held, not answered COORDINATOR_LOAD_IN_PROGRESS, while the load waits at the gate.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(20), &mut answer)
            .await
            .is_err(),
        "answered during the load"
    );
    log.open();
    let r = answer.await.expect("task");
    // The producer-id block may still be on its way; what must not come is a load error.
    assert_ne!(r.error, ErrorCode::NOT_COORDINATOR, "{r:?}");
    if r.error != ErrorCode::NONE {
        assert_eq!(r.error, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, "{r:?}");
        assert_eq!(init_ok(&c, "held").await.error, ErrorCode::NONE);
    }
}

#[tokio::test]
async fn a_request_held_past_the_park_bound_gets_load_in_progress() {
    let (c, log, clock) = loading(1_000, "held").await;
    let c2 = c.clone();
    let answer = tokio::spawn(async move { c2.init_producer_id(init("held")).await });
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    clock.advance(1_000);
    let r = tokio::time::timeout(std::time::Duration::from_secs(10), answer)
        .await
        .expect("answered once the park bound passed")
        .expect("task");
    assert_eq!(r.error, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, "{r:?}");
    log.open();
}

#[tokio::test]
async fn without_parking_a_request_during_a_load_gets_load_in_progress_at_once() {
    let (c, log, _clock) = loading(0, "held").await;
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        c.init_producer_id(init("held")),
    )
    .await
    .expect("answered at once");
    assert_eq!(r.error, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, "{r:?}");
    log.open();
}

#[tokio::test]
async fn shutdown_answers_requests_held_for_a_load() {
    let (c, log, _clock) = loading(1_000, "held").await;
    let c2 = c.clone();
    let answer = tokio::spawn(async move { c2.init_producer_id(init("held")).await });
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let c3 = c.clone();
    let stopping = tokio::spawn(async move { c3.shutdown().await });
    let r = tokio::time::timeout(std::time::Duration::from_secs(10), answer)
        .await
        .expect("answered at shutdown")
        .expect("task");
    assert_eq!(r.error, ErrorCode::COORDINATOR_NOT_AVAILABLE, "{r:?}");
    log.open();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), stopping).await;
}

/// The marker writer answers the driver that submitted each decision on that driver's own
/// inbox: two transactions of two log partitions both reach CompleteCommit while the channel
/// handed to `Coordinator::start` has no sender (nothing could come through a router), and the
/// writer's own completions channel stays empty.
#[tokio::test]
async fn writer_completions_reach_their_own_driver_without_a_router() {
    use ::markers::writer::{
        BrokerEndpoint, InProcessTransport, StaticLeaderResolver, WriterConfig, build_response,
        codes,
    };
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let seen = delivered.clone();
    let transport = InProcessTransport::from_fn(move |_, request, _| {
        seen.lock()
            .extend(request.markers.iter().map(|m| m.producer_id.0));
        Ok(build_response(&request, |_, _, _| codes::NONE))
    });
    let (writer_tx, mut writer_rx) = mpsc::channel(16);
    let sink = WriterSink::spawn(
        Arc::new(StaticLeaderResolver::single(BrokerEndpoint::new(
            1,
            "in-process",
            0,
        ))),
        Arc::new(transport),
        WriterConfig::default(),
        writer_tx,
    );
    let (unused_tx, unused_rx) = mpsc::channel(1);
    drop(unused_tx);
    let coordinator = Coordinator::start(CoordinatorOptions {
        config: Config {
            transaction_state_log_num_partitions: 4,
            ..Config::default()
        },
        log: Arc::new(MemTxnLog::new()),
        clock: Arc::new(SystemClock::new()),
        markers: Arc::new(sink),
        marker_completions: unused_rx,
        catalog: Arc::new(EveryPartitionExists),
        metrics: Metrics::new(),
    });
    coordinator.load_all_partitions().await.expect("load");
    let first = TransactionalId::new("direct-0").expect("id");
    let second = (1..1000)
        .map(|i| TransactionalId::new(format!("direct-{i}")).expect("id"))
        .find(|id| crate::partition_for(id, 4) != crate::partition_for(&first, 4))
        .expect("an id of another log partition");
    let mut pids = Vec::new();
    for id in [&first, &second] {
        let r = init_ok(&coordinator, id.as_str()).await;
        let a = coordinator
            .add_partitions_to_txn(add(id.as_str(), r.producer_id, r.producer_epoch, "t"))
            .await;
        assert_eq!(a.results[0].partitions[0].1, ErrorCode::NONE);
        let e = coordinator
            .end_txn(end(id.as_str(), r.producer_id, r.producer_epoch, true))
            .await;
        assert_eq!(e.error, ErrorCode::NONE);
        pids.push(r.producer_id.0);
    }
    for id in [&first, &second] {
        let mut state = String::new();
        for _ in 0..1000 {
            state = state_of(&coordinator, id.as_str()).await;
            if state == "CompleteCommit" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(state, "CompleteCommit", "{id}");
    }
    assert_eq!(*delivered.lock(), pids, "both decisions were delivered");
    assert!(
        writer_rx.try_recv().is_err(),
        "no completion went to the writer's channel"
    );
    assert_eq!(coordinator.metrics().markers_pending.get(), 0);
}
