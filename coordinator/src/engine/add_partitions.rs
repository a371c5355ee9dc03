//! AddPartitionsToTxn (also the KIP-890 verify-only form) and AddOffsetsToTxn: the shared add
//! path and the per-request reply of a broker's batch.

use std::collections::BTreeSet;

use txn_log::{LogOp, ProducerEpoch, ProducerId, TopicPartition, TransactionalId, TxnState};

use super::state::Txn;
use super::{Continuation, Engine, assert_transition};
use crate::request::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    AddPartitionsTxn, AddPartitionsTxnResult,
};
use crate::{ErrorCode, Millis, Request, RequestId, Response};

/// The answer to an AddPartitionsToTxn that needs no log partition: v0-3 (one transaction)
/// with an empty transactional id gets INVALID_REQUEST. `None`: route it (v4+ batches name
/// their ids one by one, and the shell answers an invalid one per transaction).
pub(crate) fn add_partitions_precheck(
    r: &AddPartitionsToTxnRequest,
) -> Option<AddPartitionsToTxnResponse> {
    (r.version < 4 && r.transactions.iter().all(|t| t.transactional_id.is_empty()))
        .then(|| AddPartitionsToTxnResponse::all(r, ErrorCode::INVALID_REQUEST))
}

/// The reply to an AddPartitionsToTxn batch, filled in as its transactions' appends finish.
#[derive(Debug)]
pub(super) struct BatchReply {
    version: i16,
    response: AddPartitionsToTxnResponse,
    outstanding: usize,
}

/// The continuation of an add's append: count a transaction begun, then answer.
#[derive(Debug)]
struct Added {
    to: RequestId,
    /// The add begins a transaction.
    began: bool,
    answer: AddAnswer,
}

/// Where an [`Added`] answers.
#[derive(Debug)]
enum AddAnswer {
    /// Its transaction's slot (`index`) of an AddPartitionsToTxn batch's reply.
    BatchSlot { index: usize },
    /// An AddOffsetsToTxn reply of `version`.
    Offsets { version: i16 },
}

impl Added {
    fn batch_slot(to: RequestId, index: usize, began: bool) -> Box<Self> {
        Box::new(Self {
            to,
            began,
            answer: AddAnswer::BatchSlot { index },
        })
    }

    fn offsets(to: RequestId, version: i16, began: bool) -> Box<Self> {
        Box::new(Self {
            to,
            began,
            answer: AddAnswer::Offsets { version },
        })
    }
}

impl Continuation for Added {
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        _ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    ) {
        if error.is_none() && self.began {
            engine.metrics.transactions_begun += 1;
        }
        self.abandon(engine, error.unwrap_or(ErrorCode::NONE));
    }

    fn abandon(self: Box<Self>, engine: &mut Engine, code: ErrorCode) {
        match self.answer {
            AddAnswer::BatchSlot { index } => engine.batch_fill(self.to, index, code),
            AddAnswer::Offsets { version } => {
                engine.respond(self.to, Response::add_offsets_error(version, code));
            }
        }
    }
}

impl Engine {
    /// The continuation of `request`, a client's add that was parked and now goes into the
    /// append of its id's Complete* (see `take_parked_add`); `began`: it begins a transaction.
    pub(super) fn resumed_add(
        &mut self,
        to: RequestId,
        request: &Request,
        began: bool,
    ) -> Box<dyn Continuation> {
        match request {
            Request::AddPartitionsToTxn(r) => {
                self.batches.insert(
                    to,
                    BatchReply {
                        version: r.version,
                        response: AddPartitionsToTxnResponse::all(r, ErrorCode::NONE),
                        outstanding: 1,
                    },
                );
                Added::batch_slot(to, 0, began)
            }
            Request::AddOffsetsToTxn(r) => Added::offsets(to, r.version, began),
            other => panic!("{other:?} is not an add"),
        }
    }

    fn batch_fill(&mut self, to: RequestId, index: usize, code: ErrorCode) {
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
                let began = *began;
                self.batches.entry(to).or_insert_with(|| BatchReply {
                    version,
                    response: AddPartitionsToTxnResponse {
                        error: ErrorCode::NONE,
                        results: Vec::new(),
                    },
                    outstanding: 0,
                });
                self.begin_one(id, record, Added::batch_slot(to, index, began));
            }
        }
        if let Some(id) = park {
            return self.busy(&id, to, Request::AddPartitionsToTxn(r), park_until);
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
        let reply = |e: ErrorCode| Response::add_offsets_error(r.version, e);
        let Ok(id) = TransactionalId::new(r.transactional_id.as_str()) else {
            return self.respond(to, reply(ErrorCode::INVALID_REQUEST));
        };
        let parts = BTreeSet::from([self.config.offsets_partition_for(&r.group_id)]);
        match self.prepare_add(&id, r.producer_id, r.producer_epoch, &parts) {
            AddDecision::Reply(code) => self.respond(to, reply(code)),
            AddDecision::Busy => {
                self.busy(&id, to, Request::AddOffsetsToTxn(r), park_until);
            }
            AddDecision::Write(record, began) => {
                self.begin_one(&id, &record, Added::offsets(to, r.version, began));
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
        let Some(entry) = self.txns.get(id).filter(|e| e.txn.is_some()) else {
            return AddDecision::Reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        match entry.idle() {
            None => AddDecision::Busy,
            Some(txn) => self.add_to(id, txn, pid, epoch, parts),
        }
    }

    /// The add path from `txn`, the id's state with no transition in flight: the Ongoing state
    /// to write, or the answer.
    pub(super) fn add_to(
        &self,
        id: &TransactionalId,
        txn: &Txn,
        pid: ProducerId,
        epoch: ProducerEpoch,
        parts: &BTreeSet<TopicPartition>,
    ) -> AddDecision {
        let state = txn.state();
        let producer = txn.producer();
        if state.is_prepare() && txn.next_producer_id() == Some(pid) {
            return AddDecision::Busy;
        }
        if let Some((spid, sepoch)) = txn.session() {
            // A kept transaction (KIP-939): its session may only end it, the producer that
            // began it is fenced. A session that ended it with another producer id waits for
            // the completion, as a TV2 producer on its next id does.
            if state.is_prepare() && pid == spid {
                return AddDecision::Busy;
            }
            return AddDecision::Reply(if (pid, epoch) == (spid, sepoch) {
                ErrorCode::INVALID_TXN_STATE
            } else if pid == spid || pid == producer.id {
                ErrorCode::PRODUCER_FENCED
            } else {
                ErrorCode::INVALID_PRODUCER_ID_MAPPING
            });
        }
        if pid != producer.id {
            return AddDecision::Reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if epoch != producer.epoch {
            return AddDecision::Reply(ErrorCode::PRODUCER_FENCED);
        }
        if state.is_prepare() {
            return AddDecision::Busy;
        }
        // Already present (Kafka answers NONE without a write), or nothing to add: NONE without a write. (An empty add would
        // make Kafka write an Ongoing transaction without partitions; we write nothing.)
        if parts.is_empty() || txn.partitions().is_some_and(|p| parts.is_subset(p)) {
            return AddDecision::Reply(ErrorCode::NONE);
        }
        assert_transition(id, state, TxnState::Ongoing);
        AddDecision::Write(txn.with_partitions(parts, self.now.0), state.is_idle())
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
        let Some(t) = self.txn(&id) else {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        if t.producer().id != txn.producer_id {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        // The producer that began a kept transaction (KIP-939) is fenced.
        if t.producer().epoch != txn.producer_epoch || t.session().is_some() {
            return all(ErrorCode::PRODUCER_FENCED);
        }
        if t.state().is_prepare() {
            return all(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        let present = t.partitions();
        AddPartitionsTxnResult::each(txn, |p| {
            if present.is_some_and(|ps| ps.contains(p)) {
                ErrorCode::NONE
            } else {
                ErrorCode::TRANSACTION_ABORTABLE
            }
        })
    }
}

pub(super) enum AddDecision {
    Reply(ErrorCode),
    /// CONCURRENT_TRANSACTIONS: the id has a transition in flight or is completing.
    Busy,
    /// The Ongoing state to append, and whether it begins a transaction.
    Write(Txn, bool),
}

pub(super) enum AddOutcome {
    Done(AddPartitionsTxnResult),
    Pending,
}
