//! The reaper (timed-out transactions are fenced and aborted) and transactional-id expiry, each
//! examining a bounded slice of ids per call.

use std::ops::Bound;

use txn_log::{LogOp, TransactionalId, TxnState};

use super::{Continuation, Engine, assert_transition};
use crate::{ErrorCode, Millis};

/// The continuation of an expiry batch of tombstones: count them once durable.
#[derive(Debug)]
struct Expired;

impl Continuation for Expired {
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    ) {
        if error.is_none() {
            engine.metrics.transactional_ids_expired += ops.len() as u64;
        }
    }

    fn abandon(self: Box<Self>, _engine: &mut Engine, _code: ErrorCode) {}
}

impl Engine {
    pub(super) fn scan_ids(
        &self,
        cursor: &Option<TransactionalId>,
    ) -> (Vec<TransactionalId>, bool) {
        let lower = match cursor {
            Some(c) => Bound::Excluded(c.clone()),
            None => Bound::Unbounded,
        };
        let max = self.config.cleanup_scan_max;
        let mut ids: Vec<TransactionalId> = self
            .txns
            .range((lower, Bound::Unbounded))
            .take(max + 1)
            .map(|(id, _)| id.clone())
            .collect();
        let finished = ids.len() <= max;
        ids.truncate(max);
        (ids, finished)
    }

    pub(super) fn reap_chunk(&mut self, now: Millis) {
        let (ids, finished) = self.scan_ids(&self.reap_cursor);
        for id in &ids {
            // A two-phase-commit transaction (KIP-939) is never timed out: only a producer
            // ends it.
            let timed_out = self.txns[id].idle().is_some_and(|t| {
                t.state() == TxnState::Ongoing
                    && !t.two_phase_commit()
                    && t.start_ms()
                        .is_some_and(|s| s + i64::from(t.timeout_ms()) < now.0)
            });
            if timed_out {
                self.fence_and_abort(id, None, 0, true);
            }
        }
        if finished {
            self.reap_cursor = None;
            self.next_reap =
                Millis(now.0 + self.config.abort_timed_out_transaction_cleanup_interval_ms);
        } else {
            self.reap_cursor = ids.last().cloned();
            self.next_reap = now;
        }
    }

    pub(super) fn expire_chunk(&mut self, now: Millis) {
        let (ids, mut finished) = self.scan_ids(&self.expire_cursor);
        let deadline = now.0 - self.config.transactional_id_expiration_ms;
        let mut batch = Vec::new();
        let mut last = None;
        for id in ids {
            let expired = self.txns[&id].idle().filter(|t| {
                t.state().is_idle()
                    && !self.markers.contains_key(&id)
                    && t.last_update_ms() <= deadline
            });
            if let Some(t) = expired {
                assert_transition(&id, t.state(), TxnState::Dead);
                batch.push((id.clone(), LogOp::Tombstone));
            }
            last = Some(id);
            if batch.len() >= self.config.expiry_batch_max {
                finished = false;
                break;
            }
        }
        if !batch.is_empty() {
            self.begin(batch, Box::new(Expired));
        }
        if finished {
            self.expire_cursor = None;
            self.next_expire =
                Millis(now.0 + self.config.remove_expired_transaction_cleanup_interval_ms);
        } else {
            self.expire_cursor = last;
            self.next_expire = now;
        }
    }
}
