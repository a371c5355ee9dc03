//! EndTxn (TV0/1 and TV2), then the markers of the decision and its Complete* record.

use txn_log::{
    LogOp, ProducerEpoch, ProducerId, TransactionalId, TxnMarkerRequest, TxnResult, TxnState,
    TxnVersion,
};

use super::state::{Producer, Session, Txn};
use super::{Continuation, Engine, MarkerWork, Status, assert_transition, is_epoch_exhausted};
use crate::request::{EndTxnRequest, EndTxnResponse};
use crate::{Effect, ErrorCode, Millis, RequestId, Response};

/// The continuation of an EndTxn's Prepare* append: answer (with the pair the producer goes
/// on with), then write the markers.
#[derive(Debug)]
struct Decided {
    to: RequestId,
    version: i16,
    /// The pair the producer goes on with.
    reply: (ProducerId, ProducerEpoch),
}

impl Continuation for Decided {
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    ) {
        if let Some(e) = error {
            return self.abandon(engine, e);
        }
        let resp = EndTxnResponse {
            error: ErrorCode::NONE,
            producer_id: self.reply.0,
            producer_epoch: self.reply.1,
        };
        engine.respond(self.to, Response::EndTxn(resp));
        let (id, _) = ops.first().expect("a decision writes one record");
        engine.after_prepare(id);
    }

    fn abandon(self: Box<Self>, engine: &mut Engine, code: ErrorCode) {
        engine.respond(self.to, Response::end_txn_error(self.version, code));
    }
}

/// The continuation of a Complete* append: the transaction is over (its parked requests run
/// again), or the append is retried after `complete_retry_backoff_ms`. `then`: a parked add
/// of the next transaction written in the same append (see `take_parked_add`).
#[derive(Debug)]
struct Completed {
    then: Option<Box<dyn Continuation>>,
}

impl Continuation for Completed {
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    ) {
        let Some((id, LogOp::Upsert(record))) = ops.first() else {
            panic!("a Complete append without its record: {ops:?}");
        };
        engine.complete_done(id.clone(), record.state, error);
        if let Some(add) = self.then {
            add.finish(engine, ops, error);
        }
    }

    fn abandon(self: Box<Self>, engine: &mut Engine, code: ErrorCode) {
        if let Some(add) = self.then {
            add.abandon(engine, code);
        }
    }
}

impl Engine {
    /// A Complete* append of `id` (writing `completed`) finished with `error`.
    fn complete_done(
        &mut self,
        id: TransactionalId,
        completed: TxnState,
        error: Option<ErrorCode>,
    ) {
        if error.is_some() {
            // Never leave a decided transaction stuck (unlike Kafka, which leaves it to the
            // next load): retry.
            self.complete_retry.insert(id);
            let at = Millis(self.now.0 + self.config.complete_retry_backoff_ms);
            self.complete_retry_at = Some(self.complete_retry_at.map_or(at, |t| t.min(at)));
            return;
        }
        self.markers.remove(&id);
        match completed {
            TxnState::CompleteCommit => self.metrics.transactions_committed += 1,
            TxnState::CompleteAbort => self.metrics.transactions_aborted += 1,
            other => panic!("{id}: Complete append wrote {other}"),
        }
        self.wake_parked(&id);
    }

    pub(super) fn handle_end_txn(&mut self, to: RequestId, r: &EndTxnRequest) {
        use TxnResult::{Abort, Commit};
        use TxnState::*;
        let version = r.version;
        let reply = |e: ErrorCode| Response::end_txn_error(version, e);
        let Ok(id) = TransactionalId::new(r.transactional_id.as_str()) else {
            return self.respond(to, reply(ErrorCode::INVALID_REQUEST));
        };
        if let Err(e) = self.owner_check(&id) {
            return self.respond(to, reply(e));
        }
        let Some(entry) = self.txns.get(&id) else {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        };
        let pending = entry.pending.is_some();
        let Some(cur) = entry.txn.clone() else {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        };
        let result = if r.committed { Commit } else { Abort };
        if let Some(session) = cur.session() {
            return self.end_kept(&id, &cur, session, r, pending, to);
        }
        let state = cur.state();
        let producer = *cur.producer();
        let ok = |p: &Producer| {
            Response::EndTxn(EndTxnResponse {
                error: ErrorCode::NONE,
                producer_id: p.id,
                producer_epoch: p.epoch,
            })
        };
        // A new decision (Ongoing, Empty) follows the request's TV: v5+ on a TV2 cluster. A
        // request that meets a decision already made (Prepare*, Complete*) is judged by the TV
        // that decision was made under, as Kafka's `TransactionCoordinator` judges by the stored
        // metadata's TV (tests `s54_tv_downgrade_mid_flight`, `s55_tv_upgrade_mid_flight`).
        let request_tv2 = version >= 5 && self.config.transaction_version.bumps_epoch_per_txn();
        let tv2 = match state {
            Ongoing | Empty => request_tv2,
            _ => cur.client_txn_version().bumps_epoch_per_txn(),
        };
        if !tv2 {
            if r.producer_id != producer.id {
                return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
            }
            if r.producer_epoch != producer.epoch {
                return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
            }
            if pending {
                return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
            }
            match (state, result) {
                (Ongoing, _) => self.prepare_end(&id, &cur, result, false, to, version),
                (CompleteCommit, Commit) | (CompleteAbort, Abort) => {
                    self.respond(to, ok(&producer))
                }
                (PrepareCommit, Commit) | (PrepareAbort, Abort) => {
                    self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS))
                }
                _ => self.respond(to, reply(ErrorCode::INVALID_TXN_STATE)),
            }
            return;
        }
        // TV2 (KIP-890's EndTxn table as Kafka 4.1's `TransactionCoordinator.endTransaction` applies it,
        // and KAFKA-20785).
        // Kafka compares the previous producer id as stored: -1 when there is none.
        let retry_overflow = producer.prev_id.unwrap_or(ProducerId::NONE) == r.producer_id
            && r.producer_epoch == ProducerEpoch::MAX
            && producer.epoch == ProducerEpoch(0);
        if r.producer_id != producer.id && !retry_overflow {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        }
        if state.is_prepare() {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let is_current = r.producer_id == producer.id && r.producer_epoch == producer.epoch;
        let retry_bump = r.producer_id == producer.id
            && i32::from(producer.epoch.0) == i32::from(r.producer_epoch.0) + 1;
        let valid = match state {
            Ongoing | Empty => is_current,
            CompleteCommit | CompleteAbort => is_current || retry_bump || retry_overflow,
            other => panic!("{id}: state {other} in a record"),
        };
        if !valid {
            return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
        }
        if pending {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let retry = !is_current;
        match (state, result, retry) {
            (Ongoing, _, _) => self.prepare_end(&id, &cur, result, true, to, version),
            (Empty, Abort, false)
            | (CompleteAbort, Abort, false)
            | (CompleteCommit, Abort, false) => {
                self.prepare_end(&id, &cur, Abort, true, to, version)
            }
            (CompleteAbort, Abort, true) | (CompleteCommit, Commit, true) => {
                self.respond(to, ok(&producer))
            }
            // KAFKA-20785: a commit at a retry epoch (a bump, or the rotation at overflow) of an
            // aborted transaction is PRODUCER_FENCED, whoever aborted: the commit lost a race
            // with a coordinator-side abort, or is a late request of a producer that aborted.
            (CompleteAbort, Commit, true) => self.respond(to, reply(ErrorCode::PRODUCER_FENCED)),
            _ => self.respond(to, reply(ErrorCode::INVALID_TXN_STATE)),
        }
    }

    /// EndTxn on a transaction kept by `KeepPreparedTxn` (KIP-939): only its session may end
    /// it; the producer that began it is fenced. With the transaction's producer id the session
    /// takes over (its epoch becomes the transaction's, above the one the data was written
    /// with) and the transaction ends as any other. With another producer id (the old one's
    /// epochs were exhausted) the markers carry the old id at the next epoch, and the
    /// completion moves the id to the session's: epoch 0, or 1 under TV2, whose EndTxn always
    /// answers a newer epoch than the request's.
    fn end_kept(
        &mut self,
        id: &TransactionalId,
        cur: &Txn,
        session: Session,
        r: &EndTxnRequest,
        pending: bool,
        to: RequestId,
    ) {
        let version = r.version;
        let reply = |e: ErrorCode| Response::end_txn_error(version, e);
        let producer = *cur.producer();
        if (r.producer_id, r.producer_epoch) != session {
            let ours = r.producer_id == producer.id || r.producer_id == session.0;
            return self.respond(
                to,
                reply(if ours {
                    ErrorCode::PRODUCER_FENCED
                } else {
                    ErrorCode::INVALID_PRODUCER_ID_MAPPING
                }),
            );
        }
        if pending || cur.state().is_prepare() {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let result = if r.committed {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        };
        let tv2 = version >= 5 && self.config.transaction_version.bumps_epoch_per_txn();
        if session.0 == producer.id {
            let next = cur.taken_over(session);
            return self.prepare_end(id, &next, result, tv2, to, version);
        }
        assert_transition(id, cur.state(), prepare_state(result));
        let after = if tv2 {
            (session.0, ProducerEpoch(session.1.0.saturating_add(1)))
        } else {
            session
        };
        let next = cur.prepared(
            result,
            Producer {
                epoch: ProducerEpoch(producer.epoch.0.saturating_add(1)),
                last_epoch: Some(producer.epoch),
                ..producer
            },
            if tv2 { TxnVersion::V2 } else { TxnVersion::V0 },
            None,
            Some(after),
            self.now.0,
        );
        let decided = Decided {
            to,
            version,
            reply: after,
        };
        self.begin_one(id, &next, Box::new(decided));
    }

    /// `prepareAbortOrCommit`: TV2 bumps the epoch (and at exhaustion picks the next producer
    /// id); TV0/1 keep it.
    pub(super) fn prepare_end(
        &mut self,
        id: &TransactionalId,
        cur: &Txn,
        result: TxnResult,
        tv2: bool,
        to: RequestId,
        version: i16,
    ) {
        assert_transition(id, cur.state(), prepare_state(result));
        let producer = *cur.producer();
        let (next, reply) = if tv2 {
            let bumped = Producer {
                epoch: ProducerEpoch(producer.epoch.0.saturating_add(1)),
                last_epoch: Some(producer.epoch),
                ..producer
            };
            let next_pid = if is_epoch_exhausted(producer.epoch) {
                let Some(pid) = self.allocate_pid() else {
                    let e = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
                    return self.respond(to, Response::EndTxn(EndTxnResponse::error(e)));
                };
                Some(pid)
            } else {
                None
            };
            let next = cur.prepared(result, bumped, TxnVersion::V2, next_pid, None, self.now.0);
            let reply = next_pid.map_or((bumped.id, bumped.epoch), |p| (p, ProducerEpoch(0)));
            (next, reply)
        } else {
            let next = cur.prepared(result, producer, TxnVersion::V0, None, None, self.now.0);
            (next, (producer.id, producer.epoch))
        };
        self.begin_one(id, &next, Box::new(Decided { to, version, reply }));
    }

    /// A PrepareCommit/PrepareAbort is durable: write markers, or complete at once if the
    /// transaction has no partitions (TV2 abort of an empty transaction).
    pub(super) fn after_prepare(&mut self, id: &TransactionalId) {
        let Status::Loaded(coordinator_epoch) = self.status else {
            return;
        };
        let t = self.txn(id).expect("prepared id exists");
        let (Some(result), Some(partitions)) = (t.decision(), t.partitions()) else {
            panic!("{id}: markers for {}", t.state());
        };
        if partitions.is_empty() {
            self.start_complete(id);
            return;
        }
        let producer = t.producer();
        let work = MarkerWork {
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            coordinator_epoch,
        };
        let effect = Effect::WriteMarkers(TxnMarkerRequest {
            transactional_id: id.clone(),
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            coordinator_epoch,
            log_partition: self.partition,
            result,
            partitions: partitions.iter().cloned().collect(),
            txn_version: t.client_txn_version(),
        });
        self.markers.insert(id.clone(), work);
        self.effects.push_back(effect);
    }

    /// Kafka's `prepareComplete`: PrepareX -> CompleteX, TV2 overflow rolls to the next pid.
    pub(super) fn start_complete(&mut self, id: &TransactionalId) {
        let t = self.txn(id).expect("prepared id exists");
        let next = t.completed(self.now.0);
        assert_transition(id, t.state(), next.state());
        let work = MarkerWork {
            producer_id: t.producer().id,
            producer_epoch: t.producer().epoch,
            coordinator_epoch: self.coordinator_epoch().expect("loaded"),
        };
        self.markers.entry(id.clone()).or_insert(work);
        match self.take_parked_add(id, &next) {
            Some((ongoing, add)) => {
                let ops = vec![
                    (id.clone(), LogOp::Upsert(next.to_record())),
                    (id.clone(), LogOp::Upsert(ongoing.to_record())),
                ];
                self.begin(ops, Box::new(Completed { then: Some(add) }));
            }
            None => self.begin_one(id, &next, Box::new(Completed { then: None })),
        }
    }
}

/// The Prepare* state of a decision.
fn prepare_state(result: TxnResult) -> TxnState {
    match result {
        TxnResult::Commit => TxnState::PrepareCommit,
        TxnResult::Abort => TxnState::PrepareAbort,
    }
}
