//! AddPartitionsToTxn (also the KIP-890 verify-only form) and AddOffsetsToTxn: the shared add
//! path and the per-request reply of a broker's batch.

use super::*;

/// The answer to an AddPartitionsToTxn that needs no log partition: v0-3 (one transaction)
/// with an empty transactional id gets INVALID_REQUEST. `None`: route it (v4+ batches name
/// their ids one by one, and the shell answers an invalid one per transaction).
pub(crate) fn add_partitions_precheck(
    r: &AddPartitionsToTxnRequest,
) -> Option<AddPartitionsToTxnResponse> {
    (r.version < 4 && r.transactions.iter().all(|t| t.transactional_id.is_empty()))
        .then(|| AddPartitionsToTxnResponse::all(r, ErrorCode::INVALID_REQUEST))
}

#[derive(Debug)]
pub(super) struct BatchReply {
    pub(super) version: i16,
    pub(super) response: AddPartitionsToTxnResponse,
    pub(super) outstanding: usize,
}

impl Engine {
    /// The continuation of one transaction's add in an AddPartitionsToTxn batch.
    pub(super) fn add_partitions_done(
        &mut self,
        to: RequestId,
        index: usize,
        began: bool,
        error: Option<ErrorCode>,
    ) {
        if error.is_none() && began {
            self.metrics.transactions_begun += 1;
        }
        self.batch_fill(to, index, error.unwrap_or(ErrorCode::NONE));
    }

    /// The continuation of an AddOffsetsToTxn's append.
    pub(super) fn add_offsets_done(
        &mut self,
        to: RequestId,
        version: i16,
        began: bool,
        error: Option<ErrorCode>,
    ) {
        if error.is_none() && began {
            self.metrics.transactions_begun += 1;
        }
        let code = error
            .unwrap_or(ErrorCode::NONE)
            .for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE);
        self.respond(to, Response::AddOffsetsToTxn(code));
    }

    pub(super) fn batch_fill(&mut self, to: RequestId, index: usize, code: ErrorCode) {
        let b = self
            .batches
            .get_mut(&to)
            .expect("batch exists while a slot is outstanding");
        let code = code.for_version(b.version, ErrorCode::TXN_REQUEST_FENCED_SINCE);
        for (_, c) in &mut b.response.results[index].partitions {
            *c = code;
        }
        b.outstanding -= 1;
        if b.outstanding == 0 {
            let b = self.batches.remove(&to).expect("present");
            self.respond(to, Response::AddPartitionsToTxn(b.response));
        }
    }

    pub(super) fn handle_add_partitions(
        &mut self,
        to: RequestId,
        r: AddPartitionsToTxnRequest,
        park_until: Option<Millis>,
    ) {
        assert!(
            !self.batches.contains_key(&to),
            "request id {to:?} reused while in flight"
        );
        let version = r.version;
        let mut response = AddPartitionsToTxnResponse::all(&r, ErrorCode::NONE);
        let mut outstanding = 0;
        let mut writes = Vec::new();
        // Only a client's request (one transaction) parks; a broker's batch is answered at once.
        let may_park = park_until.is_some() && r.transactions.len() == 1;
        let mut park = None;
        for (index, txn) in r.transactions.iter().enumerate() {
            let verify = version >= 4 && txn.verify_only;
            let result = if verify {
                AddOutcome::Done(self.verify_partitions(txn))
            } else {
                match TransactionalId::new(txn.transactional_id.as_str()) {
                    Err(_) => AddOutcome::Done(AddPartitionsTxnResult::all(
                        txn,
                        ErrorCode::INVALID_REQUEST,
                    )),
                    Ok(id) => {
                        let parts: BTreeSet<TopicPartition> =
                            txn.partitions.iter().cloned().collect();
                        match self.prepare_add(&id, txn.producer_id, txn.producer_epoch, &parts) {
                            AddDecision::Reply(code) => {
                                AddOutcome::Done(AddPartitionsTxnResult::all(txn, code))
                            }
                            AddDecision::Busy if may_park && self.completing(&id) => {
                                park = Some(id);
                                break;
                            }
                            AddDecision::Busy => AddOutcome::Done(AddPartitionsTxnResult::all(
                                txn,
                                ErrorCode::CONCURRENT_TRANSACTIONS,
                            )),
                            AddDecision::Write(record, began) => {
                                // Mark pending now so a duplicate id later in the batch sees it.
                                outstanding += 1;
                                writes.push((index, id, record, began));
                                AddOutcome::Pending
                            }
                        }
                    }
                }
            };
            if let AddOutcome::Done(res) = result {
                let code_mapped: Vec<_> = res
                    .partitions
                    .into_iter()
                    .map(|(p, c)| {
                        (
                            p,
                            c.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                        )
                    })
                    .collect();
                response.results[index].partitions = code_mapped;
            }
            if let Some((_, id, record, began)) = writes.last().filter(|w| w.0 == index) {
                let (id, record, began) = (id.clone(), record.clone(), *began);
                self.batches.entry(to).or_insert_with(|| BatchReply {
                    version,
                    response: AddPartitionsToTxnResponse {
                        error: ErrorCode::NONE,
                        results: Vec::new(),
                    },
                    outstanding: 0,
                });
                self.begin_one(&id, record, Purpose::AddPartitions { to, index, began });
            }
        }
        if let Some(id) = park {
            return self.busy(&id, to, ParkedRequest::AddPartitionsToTxn(r), park_until);
        }
        if outstanding == 0 {
            self.batches.remove(&to);
            self.respond(to, Response::AddPartitionsToTxn(response));
        } else {
            let b = self
                .batches
                .get_mut(&to)
                .expect("created with the first write");
            b.response = response;
            b.outstanding = outstanding;
        }
    }

    pub(super) fn handle_add_offsets(
        &mut self,
        to: RequestId,
        r: AddOffsetsToTxnRequest,
        park_until: Option<Millis>,
    ) {
        let reply = |e: ErrorCode| {
            Response::AddOffsetsToTxn(e.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE))
        };
        let Ok(id) = TransactionalId::new(r.transactional_id.as_str()) else {
            return self.respond(to, reply(ErrorCode::INVALID_REQUEST));
        };
        let parts = BTreeSet::from([self.config.offsets_partition_for(&r.group_id)]);
        match self.prepare_add(&id, r.producer_id, r.producer_epoch, &parts) {
            AddDecision::Reply(code) => self.respond(to, reply(code)),
            AddDecision::Busy => {
                self.busy(&id, to, ParkedRequest::AddOffsetsToTxn(r), park_until);
            }
            AddDecision::Write(record, began) => {
                self.begin_one(
                    &id,
                    record,
                    Purpose::AddOffsets {
                        to,
                        version: r.version,
                        began,
                    },
                );
            }
        }
    }

    /// The coordinator add path (`handleAddPartitionsToTransaction`), trunk order: pending
    /// first (so a TV2 client that already uses its next producer id waits), then pid, epoch,
    /// state.
    pub(super) fn prepare_add(
        &self,
        id: &TransactionalId,
        pid: ProducerId,
        epoch: ProducerEpoch,
        parts: &BTreeSet<TopicPartition>,
    ) -> AddDecision {
        if let Err(e) = self.owner_check(id) {
            return AddDecision::Reply(e);
        }
        let Some(entry) = self.txns.get(id).filter(|e| e.durable) else {
            return AddDecision::Reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        if entry.pending.is_some() {
            return AddDecision::Busy;
        }
        self.add_to(id, &entry.record, pid, epoch, parts)
    }

    /// The add path from `r`, the id's record with no transition in flight: the Ongoing record
    /// to write, or the answer.
    pub(super) fn add_to(
        &self,
        id: &TransactionalId,
        r: &TxnRecord,
        pid: ProducerId,
        epoch: ProducerEpoch,
        parts: &BTreeSet<TopicPartition>,
    ) -> AddDecision {
        if r.state.is_prepare() && r.next_producer_id.is_some() && pid == r.next_producer_id {
            return AddDecision::Busy;
        }
        if let Some((spid, sepoch)) = r.session() {
            // A kept transaction (KIP-939): its session may only end it, the producer that
            // began it is fenced. A session that ended it with another producer id waits for
            // the completion, as a TV2 producer on its next id does.
            if r.state.is_prepare() && pid == spid {
                return AddDecision::Busy;
            }
            return AddDecision::Reply(if (pid, epoch) == (spid, sepoch) {
                ErrorCode::INVALID_TXN_STATE
            } else if pid == spid || pid == r.producer_id {
                ErrorCode::PRODUCER_FENCED
            } else {
                ErrorCode::INVALID_PRODUCER_ID_MAPPING
            });
        }
        if pid != r.producer_id {
            return AddDecision::Reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if epoch != r.producer_epoch {
            return AddDecision::Reply(ErrorCode::PRODUCER_FENCED);
        }
        if r.state.is_prepare() {
            return AddDecision::Busy;
        }
        // Already present (Kafka answers NONE without a write), or nothing to add: NONE without a write. (An empty add would
        // make Kafka write an Ongoing transaction without partitions; we write nothing.)
        if parts.is_empty() || (r.state == TxnState::Ongoing && parts.is_subset(&r.partitions)) {
            return AddDecision::Reply(ErrorCode::NONE);
        }
        assert_transition(id, r.state, TxnState::Ongoing);
        let began = r.state.is_idle();
        let mut next = r.clone();
        next.state = TxnState::Ongoing;
        next.partitions.extend(parts.iter().cloned());
        if began {
            next.txn_start_ms = self.now.0;
        }
        next.txn_last_update_ms = self.now.0;
        AddDecision::Write(next, began)
    }

    /// The verify path (`handleVerifyPartitionsInTransaction`, KIP-890 part 1): no write,
    /// pending transitions deliberately ignored.
    pub(super) fn verify_partitions(&self, txn: &AddPartitionsTxn) -> AddPartitionsTxnResult {
        let all = |c| AddPartitionsTxnResult::all(txn, c);
        let Ok(id) = TransactionalId::new(txn.transactional_id.as_str()) else {
            return all(ErrorCode::INVALID_REQUEST);
        };
        if let Err(e) = self.owner_check(&id) {
            return all(e);
        }
        let Some(r) = self.record(&id) else {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        if r.producer_id != txn.producer_id {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        // The producer that began a kept transaction (KIP-939) is fenced.
        if r.producer_epoch != txn.producer_epoch || r.session().is_some() {
            return all(ErrorCode::PRODUCER_FENCED);
        }
        if r.state.is_prepare() {
            return all(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        AddPartitionsTxnResult {
            transactional_id: txn.transactional_id.clone(),
            partitions: txn
                .partitions
                .iter()
                .map(|p| {
                    let c = if r.partitions.contains(p) {
                        ErrorCode::NONE
                    } else {
                        ErrorCode::TRANSACTION_ABORTABLE
                    };
                    (p.clone(), c)
                })
                .collect(),
        }
    }
}

pub(super) enum AddDecision {
    Reply(ErrorCode),
    /// CONCURRENT_TRANSACTIONS: the id has a transition in flight or is completing.
    Busy,
    Write(TxnRecord, bool),
}

pub(super) enum AddOutcome {
    Done(AddPartitionsTxnResult),
    Pending,
}
