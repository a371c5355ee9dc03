//! InitProducerId: the pre-checks that need no partition, the epoch bump or producer-id
//! rotation, and the fence of an open transaction.

use txn_log::{LogOp, ProducerEpoch, ProducerId, TransactionalId, TxnResult, TxnState};

use super::add_partitions::add_partitions_precheck;
use super::state::{Producer, Txn};
use super::{Continuation, Engine, assert_transition, is_epoch_exhausted};
use crate::request::{EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse};
use crate::{Config, Effect, ErrorCode, Millis, ProducerIdAllocator, Request, RequestId, Response};

/// What the pre-checks of InitProducerId decided before any partition is involved.
pub(super) enum InitPrecheck {
    Answer(InitProducerIdResponse),
    Continue(TransactionalId, Option<(ProducerId, ProducerEpoch)>),
}

/// Answers a request that needs no log partition, or returns `None` if it must be routed to
/// the engine of `partition_for(id)`.
///
/// Covers InitProducerId with a null id (served from `allocator`, nothing persisted), with
/// half an expectation or an empty id (INVALID_REQUEST) or an invalid timeout
/// (INVALID_TRANSACTION_TIMEOUT, checked before ownership as Kafka does; not checked with
/// `Enable2Pc`), with `Enable2Pc` while `transaction.two.phase.commit.enable` is off
/// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka) or `KeepPreparedTxn` without `Enable2Pc`
/// (INVALID_REQUEST), and EndTxn /
/// AddOffsetsToTxn / AddPartitionsToTxn v0-3 with an empty id (INVALID_REQUEST). When the
/// answer is COORDINATOR_LOAD_IN_PROGRESS because the allocator is empty, the caller should
/// refill it if [`ProducerIdAllocator::begin_refill`] says so.
pub fn handle_unrouted(
    config: &Config,
    allocator: &ProducerIdAllocator,
    request: &Request,
) -> Option<Response> {
    match request {
        Request::InitProducerId(r) => match init_precheck(config, allocator, r) {
            InitPrecheck::Answer(resp) => Some(Response::InitProducerId(resp)),
            InitPrecheck::Continue(..) => None,
        },
        Request::EndTxn(r) if r.transactional_id.is_empty() => Some(Response::EndTxn(
            EndTxnResponse::error(ErrorCode::INVALID_REQUEST),
        )),
        Request::AddOffsetsToTxn(r) if r.transactional_id.is_empty() => {
            Some(Response::AddOffsetsToTxn(ErrorCode::INVALID_REQUEST))
        }
        Request::AddPartitionsToTxn(r) => {
            add_partitions_precheck(r).map(Response::AddPartitionsToTxn)
        }
        _ => None,
    }
}

pub(super) fn init_precheck(
    config: &Config,
    allocator: &ProducerIdAllocator,
    r: &InitProducerIdRequest,
) -> InitPrecheck {
    let err = |e: ErrorCode| InitPrecheck::Answer(InitProducerIdResponse::error(e));
    // KafkaApis: exactly one of (ProducerId, ProducerEpoch) set -> INVALID_REQUEST.
    let expected = match (r.producer_id.is_some(), r.producer_epoch.is_some()) {
        (false, false) => None,
        (true, true) => Some((r.producer_id, r.producer_epoch)),
        _ => return err(ErrorCode::INVALID_REQUEST),
    };
    let Some(raw) = r.transactional_id.as_deref() else {
        return match allocator.next_id() {
            Some(pid) => InitPrecheck::Answer(InitProducerIdResponse::ok(pid, ProducerEpoch(0))),
            None => err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
        };
    };
    let Ok(id) = TransactionalId::new(raw) else {
        return err(ErrorCode::INVALID_REQUEST);
    };
    // Kafka's `validateTransactionTimeoutMs`: a 2PC transaction has no timeout to check.
    if !r.enable_2pc
        && (r.transaction_timeout_ms <= 0
            || r.transaction_timeout_ms > config.transaction_max_timeout_ms)
    {
        return err(ErrorCode::INVALID_TRANSACTION_TIMEOUT);
    }
    if r.enable_2pc && !config.transaction_two_phase_commit_enable {
        return err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    if r.keep_prepared_txn && !r.enable_2pc {
        return err(ErrorCode::INVALID_REQUEST);
    }
    InitPrecheck::Continue(id, expected)
}

/// The timeout an id initialized by `r` stores: Kafka's encoding of a two-phase-commit
/// transaction (`isDistributedTwoPhaseCommitTxn`) is `Int.MaxValue`, which DescribeTransactions
/// shows; the engine itself reads [`Txn::two_phase_commit`].
fn stored_timeout_ms(r: &InitProducerIdRequest) -> i32 {
    if r.enable_2pc {
        i32::MAX
    } else {
        r.transaction_timeout_ms
    }
}

/// The pair after `(pid, epoch)` for a new producer session: the next epoch, or epoch 0 of
/// `fresh_pid()` once the epochs of `pid` are exhausted (`None`: no id to hand out).
fn next_session(
    (pid, epoch): (ProducerId, ProducerEpoch),
    fresh_pid: impl FnOnce() -> Option<ProducerId>,
) -> Option<(ProducerId, ProducerEpoch)> {
    if is_epoch_exhausted(epoch) {
        fresh_pid().map(|p| (p, ProducerEpoch(0)))
    } else {
        Some((pid, ProducerEpoch(epoch.0 + 1)))
    }
}

/// The continuation of an InitProducerId's append: answer the new pair.
#[derive(Debug)]
struct Initialized {
    to: RequestId,
    version: i16,
    pid: ProducerId,
    epoch: ProducerEpoch,
    /// The kept transaction's pair (KIP-939 `KeepPreparedTxn`), if one was kept.
    ongoing: Option<(ProducerId, ProducerEpoch)>,
}

impl Initialized {
    /// Answers `producer`'s pair, no kept transaction.
    fn new_pair(to: RequestId, version: i16, producer: Producer) -> Box<Self> {
        Box::new(Self {
            to,
            version,
            pid: producer.id,
            epoch: producer.epoch,
            ongoing: None,
        })
    }
}

impl Continuation for Initialized {
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        _ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    ) {
        if let Some(e) = error {
            return self.abandon(engine, e);
        }
        engine.metrics.producer_ids_initialized += 1;
        let (ongoing_pid, ongoing_epoch) = self
            .ongoing
            .unwrap_or((ProducerId::NONE, ProducerEpoch::NONE));
        let resp = InitProducerIdResponse {
            ongoing_txn_producer_id: ongoing_pid,
            ongoing_txn_producer_epoch: ongoing_epoch,
            ..InitProducerIdResponse::ok(self.pid, self.epoch)
        };
        engine.respond(self.to, Response::InitProducerId(resp));
    }

    fn abandon(self: Box<Self>, engine: &mut Engine, code: ErrorCode) {
        engine.respond(
            self.to,
            Response::init_producer_id_error(self.version, code),
        );
    }
}

/// The continuation of a fence (PrepareEpochFence, then PrepareAbort): an InitProducerId's
/// (`to`) or the reaper's. The caller gets CONCURRENT_TRANSACTIONS (it retries once the abort
/// completed); the markers are written.
#[derive(Debug)]
struct Fenced {
    to: Option<RequestId>,
    version: i16,
    timed_out: bool,
}

impl Continuation for Fenced {
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    ) {
        if error.is_none() {
            engine.metrics.producers_fenced += 1;
            if self.timed_out {
                engine.metrics.transactions_timed_out += 1;
            }
        }
        if let Some(to) = self.to {
            let code = error.unwrap_or(ErrorCode::CONCURRENT_TRANSACTIONS);
            engine.respond(to, Response::init_producer_id_error(self.version, code));
        }
        if error.is_none() {
            let (id, _) = ops.first().expect("a fence writes one record");
            engine.after_prepare(id);
        }
    }

    fn abandon(self: Box<Self>, engine: &mut Engine, code: ErrorCode) {
        if let Some(to) = self.to {
            engine.respond(to, Response::init_producer_id_error(self.version, code));
        }
    }
}

impl Engine {
    pub(super) fn handle_init_producer_id(
        &mut self,
        to: RequestId,
        r: InitProducerIdRequest,
        park_until: Option<Millis>,
    ) {
        let version = r.version;
        let reply = |e: ErrorCode| Response::init_producer_id_error(version, e);
        let (id, expected) = match init_precheck(&self.config, &self.allocator, &r) {
            InitPrecheck::Answer(resp) => {
                if resp.error == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                    && self.allocator.begin_refill()
                {
                    self.effects.push_back(Effect::NeedProducerIds {
                        block_size: self.config.producer_id_block_size,
                    });
                }
                self.respond(to, Response::InitProducerId(resp));
                return;
            }
            InitPrecheck::Continue(id, expected) => (id, expected),
        };
        if let Err(e) = self.owner_check(&id) {
            return self.respond(to, reply(e));
        }
        let now = self.now.0;
        if self.has_pending(&id) {
            return self.busy(&id, to, Request::InitProducerId(r), park_until);
        }
        let Some(current) = self.txn(&id).cloned() else {
            // A new id: any expectation is met (Kafka compares it with no epoch).
            let Some(pid) = self.allocate_pid() else {
                return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
            };
            let next = Txn::fresh(pid, stored_timeout_ms(&r), r.enable_2pc, now);
            let producer = *next.producer();
            return self.begin_one(&id, &next, Initialized::new_pair(to, version, producer));
        };
        let cur = *current.producer();
        if let Some((epid, eepoch)) = expected {
            let valid = epid == cur.id
                || current.session().is_some_and(|(spid, _)| spid == epid)
                || (Some(epid) == cur.prev_id && is_epoch_exhausted(eepoch));
            if !valid {
                return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
            }
        }
        match current.state() {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                // A refused decision is delivered again: the producer restarting, or an
                // operator's force-terminate once the participant is fixed.
                self.redrive_refused(&id);
                self.busy(&id, to, Request::InitProducerId(r), park_until)
            }
            TxnState::Ongoing if r.keep_prepared_txn => {
                self.keep_prepared(&id, &current, to, version)
            }
            TxnState::Ongoing => self.fence_and_abort(&id, Some(to), version, false),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let exhausted = is_epoch_exhausted(cur.epoch);
                let producer = if exhausted && expected.is_none_or(|(_, e)| e == cur.epoch) {
                    // Rotation (prepareProducerIdRotation).
                    let Some(pid) = self.allocate_pid() else {
                        return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
                    };
                    Producer {
                        id: pid,
                        epoch: ProducerEpoch(0),
                        last_epoch: expected.map(|_| cur.epoch),
                        prev_id: Some(cur.id),
                    }
                } else {
                    // prepareIncrementProducerEpoch.
                    let bumped = ProducerEpoch(cur.epoch.0 + 1);
                    match expected {
                        None => Producer {
                            epoch: bumped,
                            last_epoch: None,
                            ..cur
                        },
                        Some((_, e)) if !exhausted && e == cur.epoch => Producer {
                            epoch: bumped,
                            last_epoch: Some(cur.epoch),
                            ..cur
                        },
                        // A retry of a call that already bumped: same epoch, no second bump.
                        Some((_, e)) if Some(e) == cur.last_epoch => cur,
                        Some(_) => {
                            return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
                        }
                    }
                };
                assert_transition(&id, current.state(), TxnState::Empty);
                let next = current.initialized(producer, stored_timeout_ms(&r), r.enable_2pc, now);
                self.begin_one(&id, &next, Initialized::new_pair(to, version, producer));
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                panic!("{id}: pending-only state {} in a record", current.state())
            }
        }
    }

    /// KIP-939 `KeepPreparedTxn` on an Ongoing transaction: the transaction stays open, with
    /// its producer id and epoch, for a new producer session to commit or abort with its next
    /// EndTxn; the session gets the next epoch after the last one handed out (or a new
    /// producer id once they are exhausted), which fences the producer that began the
    /// transaction. Only a two-phase-commit transaction may be kept (INVALID_TXN_STATE
    /// otherwise: the coordinator may time any other out).
    fn keep_prepared(&mut self, id: &TransactionalId, current: &Txn, to: RequestId, version: i16) {
        let reply = |e: ErrorCode| Response::init_producer_id_error(version, e);
        if !current.two_phase_commit() {
            return self.respond(to, reply(ErrorCode::INVALID_TXN_STATE));
        }
        let txn = (current.producer().id, current.producer().epoch);
        let last_session = current.session().unwrap_or(txn);
        let Some((pid, epoch)) = next_session(last_session, || self.allocate_pid()) else {
            return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
        };
        assert_transition(id, current.state(), TxnState::Ongoing);
        let next = current.kept((pid, epoch), self.now.0);
        self.begin_one(
            id,
            &next,
            Box::new(Initialized {
                to,
                version,
                pid,
                epoch,
                ongoing: Some(txn),
            }),
        );
    }

    /// Kafka's `prepareFenceProducerEpoch` + `endTransaction(ABORT, isFromClient = false)`:
    /// one PrepareAbort record with the epoch bumped once (trunk behaviour, also for TV2, see
    /// KAFKA-19367) and last epoch -1. The PrepareEpochFence state is pending-only and never
    /// persisted.
    ///
    /// Under TV2, as a client's EndTxn, an abort from an exhausted epoch (≥ 32766) also names the
    /// next producer id, and its completion moves to (next id, 0) (KAFKA-20090): the bumped
    /// epoch 32767 is never handed to a client. With no id to hand out it writes nothing: an
    /// InitProducerId gets COORDINATOR_LOAD_IN_PROGRESS, the reaper tries again next round.
    ///
    /// A kept transaction (KIP-939) is fenced above its session's epoch too, and the session
    /// dropped: neither the producer that began it nor the one that kept it may go on.
    pub(super) fn fence_and_abort(
        &mut self,
        id: &TransactionalId,
        to: Option<RequestId>,
        version: i16,
        timed_out: bool,
    ) {
        let current = self.txn(id).expect("exists");
        assert_transition(id, current.state(), TxnState::PrepareEpochFence);
        assert_transition(id, TxnState::PrepareEpochFence, TxnState::PrepareAbort);
        let producer = *current.producer();
        let fenced = match current.session() {
            Some((pid, epoch)) if pid == producer.id => epoch,
            _ => producer.epoch,
        };
        let version_now = self.config.transaction_version;
        let next_pid = if version_now.bumps_epoch_per_txn() && is_epoch_exhausted(fenced) {
            let Some(pid) = self.allocate_pid() else {
                if let Some(to) = to {
                    let e = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
                    self.respond(
                        to,
                        Response::InitProducerId(InitProducerIdResponse::error(e)),
                    );
                }
                return;
            };
            Some(pid)
        } else {
            None
        };
        let current = self.txn(id).expect("exists");
        let next = current.prepared(
            TxnResult::Abort,
            Producer {
                epoch: ProducerEpoch(fenced.0.saturating_add(1)),
                last_epoch: None,
                ..producer
            },
            version_now,
            next_pid,
            None,
            self.now.0,
        );
        self.begin_one(
            id,
            &next,
            Box::new(Fenced {
                to,
                version,
                timed_out,
            }),
        );
    }
}
