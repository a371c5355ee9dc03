//! Parking (`Config::park_max_ms`): a request that meets its id's previous transaction
//! completing waits for the Complete* instead of getting CONCURRENT_TRANSACTIONS at once.

use std::collections::BTreeSet;

use txn_log::{TopicPartition, TransactionalId};

use super::add_partitions::AddDecision;
use super::state::Txn;
use super::{Continuation, Engine};
#[cfg(doc)]
use crate::Config;
use crate::{ErrorCode, Millis, Request, RequestId};

/// A request that met its id's previous transaction completing and waits for its Complete*
/// (see [`Config::park_max_ms`]); it is handled again when that is durable, or at `until`
/// without waiting any longer. Only the requests a client sends right after EndTxn park:
/// InitProducerId, AddOffsetsToTxn and AddPartitionsToTxn with exactly one transaction (a
/// client's request, not a broker's batch).
#[derive(Debug)]
pub(super) struct Parked {
    to: RequestId,
    request: Request,
    until: Millis,
}

impl Engine {
    /// Whether `id`'s durable record is PrepareCommit/PrepareAbort and its markers or its
    /// Complete* append are under way (not refused), so a request that meets it can wait for
    /// the end.
    pub(super) fn completing(&self, id: &TransactionalId) -> bool {
        self.txn(id).is_some_and(|t| t.state().is_prepare()) && !self.is_refused(id)
    }

    /// Kafka's CONCURRENT_TRANSACTIONS for a request that met `id` busy; parked instead until
    /// `park_until` while `id` is completing.
    pub(super) fn busy(
        &mut self,
        id: &TransactionalId,
        to: RequestId,
        request: Request,
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
                let answer = request.error_response(ErrorCode::CONCURRENT_TRANSACTIONS);
                self.respond(to, answer);
            }
        }
    }

    /// The first parked request of `id` if it is an add that `complete` (the Complete* record
    /// state about to be written) accepts: taken off the parked list, with the next transaction's
    /// Ongoing record and the add's continuation, so that both go into one append. The add is
    /// answered only once that append is durable, as if it had arrived just after the
    /// Complete*; the client's next transaction then costs one log write less.
    pub(super) fn take_parked_add(
        &mut self,
        id: &TransactionalId,
        complete: &Txn,
    ) -> Option<(Txn, Box<dyn Continuation>)> {
        let first = self.parked.get(id)?.first()?;
        let (pid, epoch, parts) = match &first.request {
            Request::AddPartitionsToTxn(r) => {
                let t = r.transactions.first()?;
                let parts: BTreeSet<TopicPartition> = t.partitions.iter().cloned().collect();
                (t.producer_id, t.producer_epoch, parts)
            }
            Request::AddOffsetsToTxn(r) => {
                let parts = BTreeSet::from([self.config.offsets_partition_for(&r.group_id)]);
                (r.producer_id, r.producer_epoch, parts)
            }
            _ => return None,
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
        let then = self.resumed_add(p.to, &p.request, began);
        Some((ongoing, then))
    }

    /// `id`'s Complete* is durable: handle its parked requests again, in arrival order.
    pub(super) fn wake_parked(&mut self, id: &TransactionalId) {
        let Some(parked) = self.parked.remove(id) else {
            return;
        };
        for p in parked {
            self.park_deadlines.remove(&(p.until, p.to, id.clone()));
            self.dispatch(p.to, p.request, Some(p.until));
        }
    }

    /// Answers every parked request whose wait ended by `now` CONCURRENT_TRANSACTIONS (they
    /// are handled again without parking).
    pub(super) fn expire_parked(&mut self, now: Millis) {
        while let Some((until, to, id)) = self.park_deadlines.first().cloned()
            && until <= now
        {
            self.park_deadlines.pop_first();
            let parked = self
                .parked
                .get_mut(&id)
                .expect("a deadline has its request");
            let at = parked
                .iter()
                .position(|p| p.to == to)
                .expect("a deadline has its request");
            let p = parked.remove(at);
            if parked.is_empty() {
                self.parked.remove(&id);
            }
            self.metrics.parked_requests_timed_out += 1;
            self.dispatch(p.to, p.request, None);
        }
    }

    /// Answers every parked request of `id` `code` and forgets them.
    pub(super) fn answer_parked(&mut self, id: &TransactionalId, code: ErrorCode) {
        for p in self.parked.remove(id).unwrap_or_default() {
            self.park_deadlines.remove(&(p.until, p.to, id.clone()));
            self.respond(p.to, p.request.error_response(code));
        }
    }

    /// Answers every parked request `code` and forgets them.
    pub(super) fn drop_parked(&mut self, code: ErrorCode) {
        for (_, parked) in std::mem::take(&mut self.parked) {
            for p in parked {
                self.respond(p.to, p.request.error_response(code));
            }
        }
        self.park_deadlines.clear();
    }
}
