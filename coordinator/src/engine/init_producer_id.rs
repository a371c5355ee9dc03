//! InitProducerId: the pre-checks that need no partition, the epoch bump or producer-id
//! rotation, and the fence of an open transaction.

use super::*;

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
/// shows; the engine itself reads [`TxnRecord::two_phase_commit`].
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

impl Engine {
    /// The continuation of an InitProducerId's append.
    pub(super) fn init_producer_id_done(
        &mut self,
        to: RequestId,
        version: i16,
        (pid, epoch): (ProducerId, ProducerEpoch),
        ongoing: Option<(ProducerId, ProducerEpoch)>,
        error: Option<ErrorCode>,
    ) {
        let resp = match error {
            None => {
                self.metrics.producer_ids_initialized += 1;
                let (ongoing_pid, ongoing_epoch) =
                    ongoing.unwrap_or((ProducerId::NONE, ProducerEpoch::NONE));
                InitProducerIdResponse {
                    ongoing_txn_producer_id: ongoing_pid,
                    ongoing_txn_producer_epoch: ongoing_epoch,
                    ..InitProducerIdResponse::ok(pid, epoch)
                }
            }
            Some(e) => InitProducerIdResponse::error(
                e.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
            ),
        };
        self.respond(to, Response::InitProducerId(resp));
    }

    /// The continuation of a fence (an InitProducerId's, `to`, or the reaper's): answer the
    /// caller CONCURRENT_TRANSACTIONS (it retries once the abort completed), write the markers.
    pub(super) fn fence_abort_done(
        &mut self,
        id: &TransactionalId,
        to: Option<RequestId>,
        version: i16,
        timed_out: bool,
        error: Option<ErrorCode>,
    ) {
        if error.is_none() {
            self.metrics.producers_fenced += 1;
            if timed_out {
                self.metrics.transactions_timed_out += 1;
            }
        }
        if let Some(to) = to {
            let code = error.unwrap_or(ErrorCode::CONCURRENT_TRANSACTIONS);
            self.respond(
                to,
                Response::InitProducerId(InitProducerIdResponse::error(
                    code.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
                )),
            );
        }
        if error.is_none() {
            self.after_prepare(id);
        }
    }

    pub(super) fn handle_init_producer_id(
        &mut self,
        to: RequestId,
        r: InitProducerIdRequest,
        park_until: Option<Millis>,
    ) {
        let version = r.version;
        let reply = |e: ErrorCode| {
            Response::InitProducerId(InitProducerIdResponse::error(
                e.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
            ))
        };
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
            return self.busy(&id, to, ParkedRequest::InitProducerId(r), park_until);
        }
        let current = match self.txns.get(&id) {
            Some(e) => e.record.clone(),
            None => {
                let Some(pid) = self.allocate_pid() else {
                    return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
                };
                let fresh = TxnRecord {
                    producer_id: pid,
                    prev_producer_id: ProducerId::NONE,
                    next_producer_id: ProducerId::NONE,
                    producer_epoch: ProducerEpoch::NONE,
                    last_producer_epoch: ProducerEpoch::NONE,
                    session_producer_epoch: ProducerEpoch::NONE,
                    session_producer_id: ProducerId::NONE,
                    two_phase_commit: r.enable_2pc,
                    timeout_ms: stored_timeout_ms(&r),
                    state: TxnState::Empty,
                    partitions: BTreeSet::new(),
                    txn_start_ms: -1,
                    txn_last_update_ms: now,
                    client_txn_version: TxnVersion::V0,
                };
                self.txns.insert(
                    id.clone(),
                    Entry {
                        record: fresh.clone(),
                        durable: false,
                        pending: None,
                    },
                );
                fresh
            }
        };
        if let Some((epid, eepoch)) = expected {
            let valid = current.producer_epoch == ProducerEpoch::NONE
                || epid == current.producer_id
                || current.session().is_some_and(|(spid, _)| spid == epid)
                || (epid == current.prev_producer_id && is_epoch_exhausted(eepoch));
            if !valid {
                self.drop_if_fresh(&id);
                return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
            }
        }
        match current.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                self.busy(&id, to, ParkedRequest::InitProducerId(r), park_until)
            }
            TxnState::Ongoing if r.keep_prepared_txn => {
                self.keep_prepared(&id, &current, to, version)
            }
            TxnState::Ongoing => self.fence_and_abort(&id, Some(to), version, false),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut next = current.clone();
                let exhausted = is_epoch_exhausted(current.producer_epoch);
                if exhausted && expected.is_none_or(|(_, e)| e == current.producer_epoch) {
                    // Rotation (prepareProducerIdRotation).
                    let Some(pid) = self.allocate_pid() else {
                        return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
                    };
                    next.prev_producer_id = current.producer_id;
                    next.producer_id = pid;
                    next.producer_epoch = ProducerEpoch(0);
                    next.last_producer_epoch = if expected.is_some() {
                        current.producer_epoch
                    } else {
                        ProducerEpoch::NONE
                    };
                } else {
                    // prepareIncrementProducerEpoch.
                    match expected {
                        None => {
                            next.producer_epoch = ProducerEpoch(current.producer_epoch.0 + 1);
                            next.last_producer_epoch = ProducerEpoch::NONE;
                        }
                        Some((_, e))
                            if !exhausted
                                && (e == current.producer_epoch
                                    || current.producer_epoch == ProducerEpoch::NONE) =>
                        {
                            next.producer_epoch = ProducerEpoch(current.producer_epoch.0 + 1);
                            next.last_producer_epoch = current.producer_epoch;
                        }
                        // A retry of a call that already bumped: same epoch, no second bump.
                        Some((_, e)) if e == current.last_producer_epoch => {}
                        Some(_) => {
                            self.drop_if_fresh(&id);
                            return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
                        }
                    }
                }
                assert_transition(&id, current.state, TxnState::Empty);
                next.state = TxnState::Empty;
                next.partitions.clear();
                next.txn_start_ms = -1;
                next.timeout_ms = stored_timeout_ms(&r);
                next.two_phase_commit = r.enable_2pc;
                next.txn_last_update_ms = now;
                next.next_producer_id = ProducerId::NONE;
                let (pid, epoch) = (next.producer_id, next.producer_epoch);
                self.begin_one(
                    &id,
                    next,
                    Purpose::InitProducerId {
                        to,
                        version,
                        pid,
                        epoch,
                        ongoing: None,
                    },
                );
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                panic!("{id}: pending-only state {} in a record", current.state)
            }
        }
    }

    /// KIP-939 `KeepPreparedTxn` on an Ongoing transaction: the transaction stays open, with
    /// its producer id and epoch, for a new producer session to commit or abort with its next
    /// EndTxn; the session gets the next epoch after the last one handed out (or a new
    /// producer id once they are exhausted), which fences the producer that began the
    /// transaction. Only a two-phase-commit transaction may be kept (INVALID_TXN_STATE
    /// otherwise: the coordinator may time any other out).
    fn keep_prepared(
        &mut self,
        id: &TransactionalId,
        current: &TxnRecord,
        to: RequestId,
        version: i16,
    ) {
        let reply = |e: ErrorCode| {
            Response::InitProducerId(InitProducerIdResponse::error(
                e.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
            ))
        };
        if !current.two_phase_commit {
            return self.respond(to, reply(ErrorCode::INVALID_TXN_STATE));
        }
        let txn = (current.producer_id, current.producer_epoch);
        let last_session = current.session().unwrap_or(txn);
        let Some((pid, epoch)) = next_session(last_session, || self.allocate_pid()) else {
            return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
        };
        assert_transition(id, current.state, TxnState::Ongoing);
        let mut next = current.clone();
        next.session_producer_id = pid;
        next.session_producer_epoch = epoch;
        next.txn_last_update_ms = self.now.0;
        self.begin_one(
            id,
            next,
            Purpose::InitProducerId {
                to,
                version,
                pid,
                epoch,
                ongoing: Some(txn),
            },
        );
    }

    pub(super) fn drop_if_fresh(&mut self, id: &TransactionalId) {
        if self.txns.get(id).is_some_and(|e| !e.durable) {
            self.txns.remove(id);
        }
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
        let current = self.txns.get(id).expect("exists").record.clone();
        assert_transition(id, current.state, TxnState::PrepareEpochFence);
        assert_transition(id, TxnState::PrepareEpochFence, TxnState::PrepareAbort);
        let fenced = match current.session() {
            Some((pid, epoch)) if pid == current.producer_id => epoch,
            _ => current.producer_epoch,
        };
        let mut next = current.clone();
        next.producer_epoch = ProducerEpoch(fenced.0.saturating_add(1));
        next.last_producer_epoch = ProducerEpoch::NONE;
        next.session_producer_id = ProducerId::NONE;
        next.session_producer_epoch = ProducerEpoch::NONE;
        next.state = TxnState::PrepareAbort;
        next.txn_last_update_ms = self.now.0;
        next.client_txn_version = self.config.transaction_version;
        if next.client_txn_version.bumps_epoch_per_txn() && is_epoch_exhausted(fenced) {
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
            next.next_producer_id = pid;
        }
        self.begin_one(
            id,
            next,
            Purpose::FenceAbort {
                to,
                version,
                timed_out,
            },
        );
    }
}
