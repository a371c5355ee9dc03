//! DescribeTransactions and ListTransactions: read-only answers from the durable records.

use super::*;

impl Engine {
    /// DescribeTransactions for one id (Kafka's `TransactionCoordinator.handleDescribeTransactions`).
    pub fn describe(&self, raw: &str) -> DescribedTxn {
        let Ok(id) = TransactionalId::new(raw) else {
            return DescribedTxn::error(raw, ErrorCode::INVALID_REQUEST);
        };
        if let Err(e) = self.owner_check(&id) {
            return DescribedTxn::error(raw, e);
        }
        let Some(r) = self.record(&id) else {
            return DescribedTxn::error(raw, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND);
        };
        DescribedTxn {
            error: ErrorCode::NONE,
            transactional_id: raw.to_owned(),
            state: Some(r.state),
            timeout_ms: r.timeout_ms,
            start_time_ms: r.txn_start_ms,
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            partitions: r.partitions.iter().cloned().collect(),
        }
    }

    /// ListTransactions over this partition (Kafka's `TransactionStateManager.listTransactionStates`); merge engines with
    /// [`crate::merge_list_responses`].
    pub fn list_transactions(
        &self,
        now: Millis,
        req: &ListTransactionsRequest,
    ) -> ListTransactionsResponse {
        let unknown = unknown_state_filters(&req.state_filters);
        let mut out = ListTransactionsResponse {
            error: ErrorCode::NONE,
            unknown_state_filters: unknown,
            transactions: Vec::new(),
        };
        match self.status {
            Status::Loading => {
                out.error = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
                return out;
            }
            Status::Unloaded => return out,
            Status::Loaded(_) => {}
        }
        let states: Vec<TxnState> = req
            .state_filters
            .iter()
            .filter_map(|s| TxnState::from_name(s))
            .collect();
        // Only unknown names given: nothing matches.
        if !req.state_filters.is_empty() && states.is_empty() {
            return out;
        }
        for (id, r) in self.records() {
            if r.state == TxnState::Dead {
                continue;
            }
            if !req.producer_id_filters.is_empty()
                && !req.producer_id_filters.contains(&r.producer_id)
            {
                continue;
            }
            if !states.is_empty() && !states.contains(&r.state) {
                continue;
            }
            if req.duration_filter_ms >= 0 && now.0 - r.txn_start_ms <= req.duration_filter_ms {
                continue;
            }
            if let Some(p) = &req.transactional_id_pattern
                && !p.matches(id.as_str())
            {
                continue;
            }
            out.transactions.push(ListedTxn {
                transactional_id: id.to_string(),
                producer_id: r.producer_id,
                state: r.state,
            });
        }
        out
    }
}
