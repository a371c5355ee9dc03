//! Parking (`Config::park_max_ms`): a request that meets its id's previous transaction
//! completing waits for the Complete* instead of getting CONCURRENT_TRANSACTIONS at once.

use super::*;

/// A request that met its id's previous transaction completing and waits for its Complete*
/// (see [`Config::park_max_ms`]); it is handled again when that is durable, or at `until`
/// without waiting any longer.
#[derive(Debug)]
pub(super) struct Parked {
    pub(super) to: RequestId,
    pub(super) request: ParkedRequest,
    pub(super) until: Millis,
}

/// The requests that may park: those a client sends right after EndTxn.
#[derive(Debug)]
pub(super) enum ParkedRequest {
    InitProducerId(InitProducerIdRequest),
    /// With exactly one transaction (a client's request, not a broker's batch).
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
}

impl ParkedRequest {
    /// The answer `code` for every part of the request.
    pub(super) fn error(&self, code: ErrorCode) -> Response {
        match self {
            Self::InitProducerId(r) => Response::InitProducerId(InitProducerIdResponse::error(
                code.for_version(r.version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
            )),
            Self::AddPartitionsToTxn(r) => {
                Response::AddPartitionsToTxn(AddPartitionsToTxnResponse::all(
                    r,
                    code.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                ))
            }
            Self::AddOffsetsToTxn(r) => Response::AddOffsetsToTxn(
                code.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
            ),
        }
    }
}

impl Engine {
    /// Whether `id`'s durable record is PrepareCommit/PrepareAbort: its markers or its
    /// Complete* append are under way, so a request that meets it can wait for the end.
    pub(super) fn completing(&self, id: &TransactionalId) -> bool {
        self.txns
            .get(id)
            .is_some_and(|e| e.durable && e.record.state.is_prepare())
    }

    /// Kafka's CONCURRENT_TRANSACTIONS for a request that met `id` busy; parked instead until
    /// `park_until` while `id` is completing.
    pub(super) fn busy(
        &mut self,
        id: &TransactionalId,
        to: RequestId,
        request: ParkedRequest,
        park_until: Option<Millis>,
    ) {
        match park_until {
            Some(until) if self.completing(id) => {
                self.metrics.requests_parked += 1;
                self.park_deadlines.insert((until, to, id.clone()));
                self.parked
                    .entry(id.clone())
                    .or_default()
                    .push(Parked { to, request, until });
            }
            _ => {
                let answer = request.error(ErrorCode::CONCURRENT_TRANSACTIONS);
                self.respond(to, answer);
            }
        }
    }

    /// The first parked request of `id` if it is an add that `complete` (the Complete* record
    /// about to be written) accepts: taken off the parked list, with the next transaction's
    /// Ongoing record and the add's continuation, so that both go into one append. The add is
    /// answered only once that append is durable, as if it had arrived just after the
    /// Complete*; the client's next transaction then costs one log write less.
    pub(super) fn take_parked_add(
        &mut self,
        id: &TransactionalId,
        complete: &TxnRecord,
    ) -> Option<(TxnRecord, Purpose)> {
        let first = self.parked.get(id)?.first()?;
        let (pid, epoch, parts) = match &first.request {
            ParkedRequest::AddPartitionsToTxn(r) => {
                let t = r.transactions.first()?;
                let parts: BTreeSet<TopicPartition> = t.partitions.iter().cloned().collect();
                (t.producer_id, t.producer_epoch, parts)
            }
            ParkedRequest::AddOffsetsToTxn(r) => {
                let parts = BTreeSet::from([self.config.offsets_partition_for(&r.group_id)]);
                (r.producer_id, r.producer_epoch, parts)
            }
            ParkedRequest::InitProducerId(_) => return None,
        };
        let AddDecision::Write(ongoing, began) = self.add_to(id, complete, pid, epoch, &parts)
        else {
            return None;
        };
        let parked = self.parked.get_mut(id)?;
        let p = parked.remove(0);
        if parked.is_empty() {
            self.parked.remove(id);
        }
        self.park_deadlines.remove(&(p.until, p.to, id.clone()));
        let purpose = match p.request {
            ParkedRequest::AddPartitionsToTxn(r) => {
                self.batches.insert(
                    p.to,
                    BatchReply {
                        version: r.version,
                        response: AddPartitionsToTxnResponse::all(&r, ErrorCode::NONE),
                        outstanding: 1,
                    },
                );
                Purpose::AddPartitions {
                    to: p.to,
                    index: 0,
                    began,
                }
            }
            ParkedRequest::AddOffsetsToTxn(r) => Purpose::AddOffsets {
                to: p.to,
                version: r.version,
                began,
            },
            ParkedRequest::InitProducerId(_) => unreachable!("checked above"),
        };
        Some((ongoing, purpose))
    }

    /// `id`'s Complete* is durable: handle its parked requests again, in arrival order.
    pub(super) fn wake_parked(&mut self, id: &TransactionalId) {
        let Some(parked) = self.parked.remove(id) else {
            return;
        };
        for p in parked {
            self.park_deadlines.remove(&(p.until, p.to, id.clone()));
            self.dispatch_parked(p.to, p.request, Some(p.until));
        }
    }

    pub(super) fn dispatch_parked(
        &mut self,
        to: RequestId,
        request: ParkedRequest,
        park_until: Option<Millis>,
    ) {
        match request {
            ParkedRequest::InitProducerId(r) => self.handle_init_producer_id(to, r, park_until),
            ParkedRequest::AddPartitionsToTxn(r) => self.handle_add_partitions(to, r, park_until),
            ParkedRequest::AddOffsetsToTxn(r) => self.handle_add_offsets(to, r, park_until),
        }
    }
}
