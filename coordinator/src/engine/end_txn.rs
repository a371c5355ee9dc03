//! EndTxn (TV0/1 and TV2), then the markers of the decision and its Complete* record.

use super::*;

impl Engine {
    /// The continuation of an EndTxn's Prepare* append: answer, then write the markers.
    pub(super) fn end_txn_done(
        &mut self,
        id: &TransactionalId,
        to: RequestId,
        version: i16,
        (pid, epoch): (ProducerId, ProducerEpoch),
        error: Option<ErrorCode>,
    ) {
        let resp = match error {
            None => EndTxnResponse {
                error: ErrorCode::NONE,
                producer_id: pid,
                producer_epoch: epoch,
            },
            Some(e) => {
                EndTxnResponse::error(e.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE))
            }
        };
        self.respond(to, Response::EndTxn(resp));
        if error.is_none() {
            self.after_prepare(id);
        }
    }

    /// The continuation of a Complete* append: the transaction is over (its parked requests
    /// run again), or the append is retried after `complete_retry_backoff_ms`.
    pub(super) fn complete_done(
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
        let version = r.version;
        let reply = |e: ErrorCode| {
            Response::EndTxn(EndTxnResponse::error(
                e.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
            ))
        };
        let Ok(id) = TransactionalId::new(r.transactional_id.as_str()) else {
            return self.respond(to, reply(ErrorCode::INVALID_REQUEST));
        };
        if let Err(e) = self.owner_check(&id) {
            return self.respond(to, reply(e));
        }
        let Some(entry) = self.txns.get(&id).filter(|e| e.durable) else {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        };
        let pending = entry.pending.is_some();
        let cur = entry.record.clone();
        let result = if r.committed { Commit } else { Abort };
        if let Some(session) = cur.session() {
            return self.end_kept(&id, &cur, session, r, pending, to);
        }
        let ok = |pid, epoch| {
            Response::EndTxn(EndTxnResponse {
                error: ErrorCode::NONE,
                producer_id: pid,
                producer_epoch: epoch,
            })
        };
        // A new decision (Ongoing, Empty) follows the request's TV: v5+ on a TV2 cluster. A
        // request that meets a decision already made (Prepare*, Complete*) is judged by the TV
        // that decision was made under, as Kafka's `TransactionCoordinator` judges by the stored
        // metadata's TV (tests `s54_tv_downgrade_mid_flight`, `s55_tv_upgrade_mid_flight`).
        let request_tv2 = version >= 5 && self.config.transaction_version.bumps_epoch_per_txn();
        let tv2 = match cur.state {
            Ongoing | Empty => request_tv2,
            _ => cur.client_txn_version.bumps_epoch_per_txn(),
        };
        use TxnResult::{Abort, Commit};
        use TxnState::*;
        if !tv2 {
            if r.producer_id != cur.producer_id {
                return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
            }
            if r.producer_epoch != cur.producer_epoch {
                return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
            }
            if pending {
                return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
            }
            match (cur.state, result) {
                (Ongoing, _) => self.prepare_end(&id, &cur, result, false, to, version),
                (CompleteCommit, Commit) | (CompleteAbort, Abort) => {
                    self.respond(to, ok(cur.producer_id, cur.producer_epoch))
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
        let retry_overflow = cur.prev_producer_id == r.producer_id
            && r.producer_epoch == ProducerEpoch::MAX
            && cur.producer_epoch == ProducerEpoch(0);
        if r.producer_id != cur.producer_id && !retry_overflow {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        }
        if cur.state.is_prepare() {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let is_current = r.producer_id == cur.producer_id && r.producer_epoch == cur.producer_epoch;
        let retry_bump = r.producer_id == cur.producer_id
            && i32::from(cur.producer_epoch.0) == i32::from(r.producer_epoch.0) + 1;
        let valid = match cur.state {
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
        match (cur.state, result, retry) {
            (Ongoing, _, _) => self.prepare_end(&id, &cur, result, true, to, version),
            (Empty, Abort, false)
            | (CompleteAbort, Abort, false)
            | (CompleteCommit, Abort, false) => {
                self.prepare_end(&id, &cur, Abort, true, to, version)
            }
            (CompleteAbort, Abort, true) | (CompleteCommit, Commit, true) => {
                self.respond(to, ok(cur.producer_id, cur.producer_epoch))
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
        cur: &TxnRecord,
        session: (ProducerId, ProducerEpoch),
        r: &EndTxnRequest,
        pending: bool,
        to: RequestId,
    ) {
        let version = r.version;
        let reply = |e: ErrorCode| {
            Response::EndTxn(EndTxnResponse::error(
                e.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
            ))
        };
        if (r.producer_id, r.producer_epoch) != session {
            let ours = r.producer_id == cur.producer_id || r.producer_id == session.0;
            return self.respond(
                to,
                reply(if ours {
                    ErrorCode::PRODUCER_FENCED
                } else {
                    ErrorCode::INVALID_PRODUCER_ID_MAPPING
                }),
            );
        }
        if pending || cur.state.is_prepare() {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let result = if r.committed {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        };
        let tv2 = version >= 5 && self.config.transaction_version.bumps_epoch_per_txn();
        let mut next = cur.clone();
        next.session_producer_id = ProducerId::NONE;
        next.session_producer_epoch = ProducerEpoch::NONE;
        if session.0 == cur.producer_id {
            next.last_producer_epoch = cur.producer_epoch;
            next.producer_epoch = session.1;
            return self.prepare_end(id, &next, result, tv2, to, version);
        }
        let target = if result.is_commit() {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        assert_transition(id, cur.state, target);
        let after = if tv2 {
            (session.0, ProducerEpoch(session.1.0.saturating_add(1)))
        } else {
            session
        };
        next.state = target;
        next.producer_epoch = ProducerEpoch(cur.producer_epoch.0.saturating_add(1));
        next.last_producer_epoch = cur.producer_epoch;
        next.session_producer_id = after.0;
        next.session_producer_epoch = after.1;
        next.client_txn_version = if tv2 { TxnVersion::V2 } else { TxnVersion::V0 };
        next.txn_last_update_ms = self.now.0;
        self.begin_one(
            id,
            next,
            Purpose::EndTxn {
                to,
                version,
                pid: after.0,
                epoch: after.1,
            },
        );
    }

    /// `prepareAbortOrCommit`: TV2 bumps the epoch (and at exhaustion picks the next producer
    /// id); TV0/1 keep it.
    pub(super) fn prepare_end(
        &mut self,
        id: &TransactionalId,
        cur: &TxnRecord,
        result: TxnResult,
        tv2: bool,
        to: RequestId,
        version: i16,
    ) {
        let target = if result.is_commit() {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        assert_transition(id, cur.state, target);
        let mut next = cur.clone();
        next.state = target;
        next.txn_last_update_ms = self.now.0;
        if cur.state.is_idle() {
            next.txn_start_ms = self.now.0;
        }
        let (reply_pid, reply_epoch) = if tv2 {
            next.client_txn_version = TxnVersion::V2;
            next.last_producer_epoch = cur.producer_epoch;
            next.producer_epoch = ProducerEpoch(cur.producer_epoch.0.saturating_add(1));
            if is_epoch_exhausted(cur.producer_epoch) {
                let Some(pid) = self.allocate_pid() else {
                    let e = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
                    return self.respond(to, Response::EndTxn(EndTxnResponse::error(e)));
                };
                next.next_producer_id = pid;
                (pid, ProducerEpoch(0))
            } else {
                (next.producer_id, next.producer_epoch)
            }
        } else {
            next.client_txn_version = TxnVersion::V0;
            (next.producer_id, next.producer_epoch)
        };
        self.begin_one(
            id,
            next,
            Purpose::EndTxn {
                to,
                version,
                pid: reply_pid,
                epoch: reply_epoch,
            },
        );
    }

    /// A PrepareCommit/PrepareAbort is durable: write markers, or complete at once if the
    /// transaction has no partitions (TV2 abort of an empty transaction).
    pub(super) fn after_prepare(&mut self, id: &TransactionalId) {
        let Status::Loaded(coordinator_epoch) = self.status else {
            return;
        };
        let r = &self.txns.get(id).expect("prepared id exists").record;
        assert!(r.state.is_prepare(), "{id}: markers for {}", r.state);
        if r.partitions.is_empty() {
            self.start_complete(id);
            return;
        }
        let work = MarkerWork {
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch,
        };
        let effect = Effect::WriteMarkers(TxnMarkerRequest {
            transactional_id: id.clone(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch,
            log_partition: self.partition,
            result: if r.state == TxnState::PrepareCommit {
                TxnResult::Commit
            } else {
                TxnResult::Abort
            },
            partitions: r.partitions.iter().cloned().collect(),
            txn_version: r.client_txn_version,
        });
        self.markers.insert(id.clone(), work);
        self.effects.push_back(effect);
    }

    /// Kafka's `prepareComplete`: PrepareX -> CompleteX, TV2 overflow rolls to the next pid.
    pub(super) fn start_complete(&mut self, id: &TransactionalId) {
        let r = &self.txns.get(id).expect("prepared id exists").record;
        let target = match r.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            other => panic!("{id}: complete from {other}"),
        };
        assert_transition(id, r.state, target);
        let mut next = r.clone();
        next.state = target;
        next.partitions = BTreeSet::new();
        next.txn_last_update_ms = self.now.0;
        // The last epoch stays what the Prepare* record says, as in Kafka's `prepareComplete`:
        // 32766 after a client's EndTxn (the last epoch it used), -1 after a coordinator-side
        // abort (KAFKA-20090).
        if let Some((pid, epoch)) = r.session() {
            // A kept transaction ended by a session with another producer id (`end_kept`):
            // the id is the session's from now on; under TV2 its last epoch is the one its
            // EndTxn was sent with, for retries.
            next.prev_producer_id = r.producer_id;
            next.producer_id = pid;
            next.producer_epoch = epoch;
            next.last_producer_epoch = if r.client_txn_version.bumps_epoch_per_txn() {
                ProducerEpoch(epoch.0 - 1)
            } else {
                ProducerEpoch::NONE
            };
            next.session_producer_id = ProducerId::NONE;
            next.session_producer_epoch = ProducerEpoch::NONE;
            next.next_producer_id = ProducerId::NONE;
        } else if r.next_producer_id.is_some() {
            next.prev_producer_id = r.producer_id;
            next.producer_id = r.next_producer_id;
            next.next_producer_id = ProducerId::NONE;
            next.producer_epoch = ProducerEpoch(0);
        }
        let work = MarkerWork {
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch: self.coordinator_epoch().expect("loaded"),
        };
        self.markers.entry(id.clone()).or_insert(work);
        match self.take_parked_add(id, &next) {
            Some((ongoing, add)) => {
                let ops = vec![
                    (id.clone(), LogOp::Upsert(next)),
                    (id.clone(), LogOp::Upsert(ongoing)),
                ];
                self.begin(ops, Purpose::CompleteThenAdd(Box::new(add)));
            }
            None => self.begin_one(id, next, Purpose::Complete),
        }
    }
}
