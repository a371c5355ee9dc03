//! The reaper (timed-out transactions are fenced and aborted) and transactional-id expiry, each
//! examining a bounded slice of ids per call.

use super::*;

impl Engine {
    /// The continuation of an expiry batch of `ids` tombstones.
    pub(super) fn expire_done(&mut self, ids: usize, error: Option<ErrorCode>) {
        if error.is_none() {
            self.metrics.transactional_ids_expired += ids as u64;
        }
    }

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
            let e = &self.txns[id];
            // A two-phase-commit transaction (KIP-939) is never timed out: only a producer
            // ends it.
            let timed_out = e.durable
                && e.pending.is_none()
                && e.record.state == TxnState::Ongoing
                && !e.record.two_phase_commit
                && e.record.txn_start_ms + i64::from(e.record.timeout_ms) < now.0;
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
            let e = &self.txns[&id];
            let expired = e.durable
                && e.pending.is_none()
                && e.record.state.is_idle()
                && !self.markers.contains_key(&id)
                && e.record.txn_last_update_ms <= deadline;
            if expired {
                assert_transition(&id, e.record.state, TxnState::Dead);
                batch.push((id.clone(), LogOp::Tombstone));
            }
            last = Some(id);
            if batch.len() >= self.config.expiry_batch_max {
                finished = false;
                break;
            }
        }
        if !batch.is_empty() {
            self.begin(batch, Purpose::Expire);
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
