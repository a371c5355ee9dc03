//! Randomized model test: seeded sequences of init / add / verify / end / append ack / append
//! failure / markers done / tick / crash-restart-reload / fenced append over several ids.
//!
//! An [`EngineHarness`] plays the log (FIFO appends, held until the model acks them into a
//! `MemTxnLog`) and the marker writer; the model checks after every step:
//! - producer epochs of an id never decrease (same pid), and pids only move forward;
//! - a (pid, epoch) returned by InitProducerId without expectation was never handed out before;
//! - at most one decision (commit or abort) per transaction (Prepare* and Complete* agree,
//!   and markers carry the decided result);
//! - every durable transition is allowed by Kafka's table;
//! - no reply before its record is durable (each success reply matches the durable record);
//! - the engine's in-memory state equals the durable records (what a reload reproduces), and
//!   a restart from those records serves the same state and re-drives every Prepare*.

use std::collections::{BTreeMap, BTreeSet};

use txn_log::rng::Rng;
use txn_log::{
    CoordinatorEpoch, LogError, LogOp, LogPartition, MemTxnLog, ProducerEpoch, ProducerId,
    TopicPartition, TransactionalId, TxnRecord, TxnResult, TxnState,
};

use super::fixture::{io_error, tid};
use crate::testing::{Appends, EngineHarness};
use crate::*;

#[derive(Debug, Clone)]
enum Sent {
    Init {
        id: TransactionalId,
        expected: bool,
    },
    Add {
        id: TransactionalId,
        parts: Vec<TopicPartition>,
    },
    Verify,
    End {
        id: TransactionalId,
        version: i16,
    },
}

struct Harness {
    rng: Rng,
    driver: EngineHarness,
    config: Config,
    /// The model's mirror of the log's durable records, checked on every append.
    durable: BTreeMap<TransactionalId, TxnRecord>,
    sent: BTreeMap<RequestId, Sent>,
    /// The client's view per id: its current (pid, epoch).
    client: BTreeMap<TransactionalId, (ProducerId, ProducerEpoch)>,
    handed: BTreeSet<(i64, i16)>,
    /// Per id, the number of the current transaction (bumped when a transaction starts).
    txn_no: BTreeMap<TransactionalId, u64>,
    decisions: BTreeMap<(TransactionalId, u64), TxnResult>,
    high: BTreeMap<TransactionalId, (i64, i16)>,
    ids: Vec<TransactionalId>,
    stats: BTreeMap<&'static str, u64>,
}

impl Harness {
    fn new(seed: u64) -> Self {
        let config = Config {
            transaction_state_log_num_partitions: 1,
            abort_timed_out_transaction_cleanup_interval_ms: 100,
            remove_expired_transaction_cleanup_interval_ms: 700,
            transactional_id_expiration_ms: 3000,
            producer_id_block_size: 5,
            cleanup_scan_max: 2,
            expiry_batch_max: 2,
            ..Config::default()
        }
        .validate()
        .expect("valid");
        let driver = EngineHarness::new(
            MemTxnLog::new(),
            LogPartition(0),
            config.clone(),
            ProducerIdAllocator::new(),
        )
        .with_appends(Appends::Held);
        let mut h = Self {
            rng: Rng::new(seed),
            driver,
            config,
            durable: BTreeMap::new(),
            sent: BTreeMap::new(),
            client: BTreeMap::new(),
            handed: BTreeSet::new(),
            txn_no: BTreeMap::new(),
            decisions: BTreeMap::new(),
            high: BTreeMap::new(),
            ids: ["a", "b", "c", "d"].into_iter().map(tid).collect(),
            stats: BTreeMap::new(),
        };
        h.restart();
        h
    }

    fn restart(&mut self) {
        *self.stats.entry("parked").or_default() += self.driver.engine().metrics().requests_parked;
        self.sent.clear();
        let prepared = self
            .durable
            .values()
            .filter(|r| r.state.is_prepare())
            .count();
        let ce = CoordinatorEpoch(self.driver.epoch().0 + 1);
        self.driver.load(ce).expect("the log loads");
        self.drain();
        let redriven = self.driver.markers().len()
            + self
                .driver
                .held_appends()
                .filter(|es| {
                    es.iter()
                        .any(|e| matches!(&e.op, LogOp::Upsert(r) if !r.state.is_prepare()))
                })
                .count();
        assert_eq!(redriven, prepared, "every Prepare* is re-driven after load");
    }

    fn send(&mut self, req: Request, sent: Sent) {
        let to = self.driver.request(req);
        self.sent.insert(to, sent);
    }

    fn pick(&mut self, n: usize) -> usize {
        usize::try_from(self.rng.below(n as u64)).expect("small")
    }

    fn pick_identity(&mut self, id: &TransactionalId) -> (ProducerId, ProducerEpoch) {
        let cur = self
            .client
            .get(id)
            .copied()
            .unwrap_or((ProducerId(0), ProducerEpoch(0)));
        match self.rng.below(20) {
            0 | 1 => (cur.0, ProducerEpoch(cur.1.0.saturating_sub(1).max(0))),
            2 | 3 => (
                ProducerId(i64::try_from(self.rng.below(20)).expect("small")),
                cur.1,
            ),
            // Garbage a client or a fuzzer could send: answered, never a panic.
            4 => {
                let e = [-1, 0, 32766, 32767, i16::MIN][self.pick(5)];
                let p = [-1, 0, i64::MAX][self.pick(3)];
                (ProducerId(p), ProducerEpoch(e))
            }
            _ => cur,
        }
    }

    fn step(&mut self) {
        let id = self.ids[usize::try_from(self.rng.below(4)).expect("small")].clone();
        let op = self.rng.below(100);
        match op {
            0..=11 => {
                let expected = if self.rng.chance(0.5) {
                    self.client.get(&id).copied()
                } else {
                    None
                };
                let timeout = if self.rng.chance(0.5) { 150 } else { 5000 };
                let (pid, epoch) = expected.unwrap_or((ProducerId::NONE, ProducerEpoch::NONE));
                self.send(
                    Request::InitProducerId(InitProducerIdRequest {
                        version: 4,
                        transactional_id: Some(id.to_string()),
                        transaction_timeout_ms: timeout,
                        producer_id: pid,
                        producer_epoch: epoch,
                        enable_2pc: false,
                        keep_prepared_txn: false,
                    }),
                    Sent::Init {
                        id,
                        expected: expected.is_some(),
                    },
                );
            }
            12..=23 => {
                let (pid, epoch) = self.pick_identity(&id);
                let n = if self.rng.chance(0.05) {
                    0
                } else {
                    1 + self.pick(2)
                };
                let parts: Vec<_> = (0..n)
                    .map(|_| TopicPartition::new("t", i32::try_from(self.pick(3)).expect("small")))
                    .collect();
                let verify = self.rng.chance(0.25);
                let sent = if verify {
                    Sent::Verify
                } else {
                    Sent::Add {
                        id: id.clone(),
                        parts: parts.clone(),
                    }
                };
                self.send(
                    Request::AddPartitionsToTxn({
                        let version = if verify { 5 } else { 3 };
                        let mut r = AddPartitionsToTxnRequest::add(
                            version,
                            id.as_str(),
                            pid,
                            epoch,
                            &parts,
                        );
                        r.transactions[0].verify_only = verify;
                        r
                    }),
                    sent,
                );
            }
            24..=33 => {
                let (pid, epoch) = self.pick_identity(&id);
                let version = if self.rng.chance(0.7) { 5 } else { 3 };
                let committed = self.rng.chance(0.5);
                self.send(
                    Request::EndTxn(EndTxnRequest {
                        version,
                        transactional_id: id.to_string(),
                        producer_id: pid,
                        producer_epoch: epoch,
                        committed,
                    }),
                    Sent::End { id, version },
                );
            }
            34..=63 => self.ack(),
            64..=69 => {
                if self.driver.fail_append(io_error()).is_some() {
                    self.bump("append_failed");
                }
            }
            70..=84 => {
                let held = self.driver.markers().len();
                if held > 0 {
                    let i = usize::try_from(self.rng.below(held as u64)).expect("small");
                    self.driver.complete_marker(i, MarkerOutcome::Completed);
                }
            }
            85..=95 => {
                let ms = i64::try_from(self.rng.below(400)).expect("small");
                self.driver.advance(ms);
            }
            96..=97 => {
                self.bump("restart");
                self.restart();
                return;
            }
            _ => {
                let err = LogError::Fenced {
                    partition: LogPartition(0),
                    current: CoordinatorEpoch(self.driver.epoch().0 + 1),
                };
                if self.driver.fail_append(err).is_some() {
                    self.drain();
                    assert!(!self.driver.engine().is_loaded(), "a fenced append unloads");
                    self.bump("fenced");
                    self.restart();
                    return;
                }
            }
        }
        self.drain();
    }

    /// Liveness: acks every append, completes every marker job and lets the park wait pass
    /// until nothing is left; then every request sent to this engine has been answered.
    fn quiesce(&mut self) {
        for _ in 0..100 {
            while self.driver.held_appends().next().is_some() {
                self.ack();
                self.drain();
            }
            for _ in 0..self.driver.markers().len() {
                self.driver.complete_marker(0, MarkerOutcome::Completed);
                self.drain();
            }
            if self.settled() {
                self.driver.advance(self.config.park_max_ms);
                self.drain();
                if self.settled() {
                    break;
                }
            }
        }
        assert!(
            self.sent.is_empty(),
            "requests never answered: {:?}",
            self.sent.keys()
        );
        *self.stats.entry("parked").or_default() += self.driver.engine().metrics().requests_parked;
    }

    /// No append and no marker request held.
    fn settled(&self) -> bool {
        self.driver.held_appends().next().is_none() && self.driver.markers().is_empty()
    }

    fn bump(&mut self, k: &'static str) {
        *self.stats.entry(k).or_default() += 1;
    }

    fn ack(&mut self) {
        let Some((entries, written)) = self.driver.ack_append() else {
            return;
        };
        written.expect("the log takes every append of the current epoch");
        for e in entries {
            let prev = self.durable.get(&e.id).cloned();
            match e.op {
                LogOp::Upsert(r) => {
                    if let Some(p) = &prev {
                        assert!(
                            p.state.can_transition_to(r.state),
                            "{}: {} -> {}",
                            e.id,
                            p.state,
                            r.state
                        );
                    }
                    let hi = self.high.get(&e.id).copied();
                    let now = (r.producer_id.0, r.producer_epoch.0);
                    if let Some(hi) = hi {
                        assert!(
                            now >= hi,
                            "{}: identity went backwards {hi:?} -> {now:?}",
                            e.id
                        );
                    }
                    self.high.insert(e.id.clone(), now);
                    let starts =
                        prev.as_ref().is_none_or(|p| p.state.is_idle()) && !r.state.is_idle();
                    if starts {
                        *self.txn_no.entry(e.id.clone()).or_default() += 1;
                    }
                    let no = self.txn_no.get(&e.id).copied().unwrap_or(0);
                    let decided = match r.state {
                        TxnState::PrepareCommit | TxnState::CompleteCommit => {
                            Some(TxnResult::Commit)
                        }
                        TxnState::PrepareAbort | TxnState::CompleteAbort => Some(TxnResult::Abort),
                        _ => None,
                    };
                    if let Some(d) = decided {
                        let old = self.decisions.insert((e.id.clone(), no), d);
                        assert!(
                            old.is_none_or(|o| o == d),
                            "{}: transaction {no} decided {old:?} then {d:?}",
                            e.id
                        );
                    }
                    self.durable.insert(e.id, r);
                }
                LogOp::Tombstone => {
                    let p = prev.expect("tombstone of a live id");
                    assert!(
                        p.state.can_transition_to(TxnState::Dead),
                        "{}: {} -> Dead",
                        e.id,
                        p.state
                    );
                    self.durable.remove(&e.id);
                    self.high.remove(&e.id);
                    self.client.remove(&e.id);
                    self.bump("expired");
                }
            }
        }
    }

    fn drain(&mut self) {
        // The harness checks the epochs of appends and markers, and takes producer-id blocks
        // from the log.
        while let Some(effect) = self.driver.step() {
            match effect {
                Effect::Respond { to, response } => self.check_reply(to, response),
                Effect::WriteMarkers(request) => {
                    let TxnMarkerRequest {
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        coordinator_epoch,
                        result,
                        ..
                    } = request;
                    assert_eq!(coordinator_epoch, self.driver.epoch());
                    let d = self
                        .durable
                        .get(&transactional_id)
                        .expect("markers for a durable id");
                    let want = if result.is_commit() {
                        TxnState::PrepareCommit
                    } else {
                        TxnState::PrepareAbort
                    };
                    assert_eq!(
                        (d.state, d.producer_id, d.producer_epoch),
                        (want, producer_id, producer_epoch)
                    );
                    let no = self.txn_no.get(&transactional_id).copied().unwrap_or(0);
                    let decided = self.decisions.get(&(transactional_id.clone(), no)).copied();
                    assert!(
                        decided.is_none_or(|d| d == result),
                        "{transactional_id}: markers contradict the decision"
                    );
                    self.bump(if result.is_commit() {
                        "commit_markers"
                    } else {
                        "abort_markers"
                    });
                }
                Effect::AppendLog { .. }
                | Effect::NeedProducerIds { .. }
                | Effect::Unloaded { .. } => {}
            }
        }
        let mem: Vec<_> = self
            .driver
            .engine()
            .records()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let dur: Vec<_> = self
            .durable
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            self.driver.log().durable_snapshot(LogPartition(0)).records,
            dur,
            "the model's mirror equals the log"
        );
        if self.driver.engine().is_loaded() {
            assert_eq!(mem, dur, "in-memory state equals the durable log");
        }
    }

    fn check_reply(&mut self, to: RequestId, response: Response) {
        let sent = self.sent.remove(&to).expect("one reply per request");
        match (sent, response) {
            (Sent::Init { id, expected }, Response::InitProducerId(r)) if r.error.is_none() => {
                let d = self
                    .durable
                    .get(&id)
                    .expect("InitProducerId success only after durable");
                assert_eq!(
                    (d.state, d.producer_id, d.producer_epoch),
                    (TxnState::Empty, r.producer_id, r.producer_epoch)
                );
                let pair = (r.producer_id.0, r.producer_epoch.0);
                if !expected {
                    assert!(self.handed.insert(pair), "{pair:?} handed out twice");
                } else {
                    self.handed.insert(pair);
                }
                self.client.insert(id, (r.producer_id, r.producer_epoch));
                self.bump("init_ok");
            }
            (Sent::Add { id, parts }, Response::AddPartitionsToTxn(r))
                if !parts.is_empty()
                    && r.results[0].partitions.iter().all(|(_, c)| c.is_none()) =>
            {
                let d = self
                    .durable
                    .get(&id)
                    .expect("add success only after durable");
                assert_eq!(d.state, TxnState::Ongoing);
                assert!(parts.iter().all(|p| d.partitions.contains(p)));
                self.bump("add_ok");
            }
            (Sent::End { id, version }, Response::EndTxn(r)) if r.error.is_none() => {
                let d = self
                    .durable
                    .get(&id)
                    .expect("EndTxn success only after durable");
                assert!(
                    d.state.is_prepare()
                        || matches!(d.state, TxnState::CompleteCommit | TxnState::CompleteAbort)
                );
                if version >= 5 {
                    let want = if d.state.is_prepare() && d.next_producer_id.is_some() {
                        (d.next_producer_id, ProducerEpoch(0))
                    } else {
                        (d.producer_id, d.producer_epoch)
                    };
                    assert_eq!((r.producer_id, r.producer_epoch), want);
                    self.handed.insert((r.producer_id.0, r.producer_epoch.0));
                    self.client.insert(id, (r.producer_id, r.producer_epoch));
                }
                self.bump("end_ok");
            }
            _ => {}
        }
    }
}

#[test]
fn randomized_model_keeps_every_invariant() {
    let mut totals: BTreeMap<&'static str, u64> = BTreeMap::new();
    for seed in 0..32u64 {
        let mut h = Harness::new(seed);
        for _ in 0..3000 {
            h.step();
        }
        h.quiesce();
        for (k, v) in h.stats {
            *totals.entry(k).or_default() += v;
        }
    }
    eprintln!("model totals: {totals:?}");
    // The run must actually exercise the interesting paths (else the invariants prove little).
    for k in [
        "init_ok",
        "add_ok",
        "end_ok",
        "commit_markers",
        "abort_markers",
        "restart",
        "append_failed",
        "fenced",
        "parked",
    ] {
        assert!(
            totals.get(k).copied().unwrap_or(0) > 0,
            "{k} never happened: {totals:?}"
        );
    }
}
