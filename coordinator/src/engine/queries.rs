//! DescribeTransactions and ListTransactions: read-only answers from the durable records.

use txn_log::{TransactionalId, TxnState};

use super::{Engine, Status};
use crate::request::{
    DescribedTxn, ListTransactionsRequest, ListTransactionsResponse, ListedTxn,
    unknown_state_filters,
};
use crate::{ErrorCode, Millis};

impl Engine {
    /// DescribeTransactions for one id (Kafka's `TransactionCoordinator.handleDescribeTransactions`).
    pub fn describe(&self, raw: &str) -> DescribedTxn {
        let Ok(id) = TransactionalId::new(raw) else {
            return DescribedTxn::error(raw, ErrorCode::INVALID_REQUEST);
        };
        if let Err(e) = self.owner_check(&id) {
            return DescribedTxn::error(raw, e);
        }
        let Some(t) = self.txn(&id) else {
            return DescribedTxn::error(raw, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND);
        };
        DescribedTxn {
            error: ErrorCode::NONE,
            transactional_id: raw.to_owned(),
            state: Some(t.state()),
            timeout_ms: t.timeout_ms(),
            // Kafka's -1: no transaction started.
            start_time_ms: t.start_ms().unwrap_or(-1),
            producer_id: t.producer().id,
            producer_epoch: t.producer().epoch,
            // A held refused decision lists what still lacks its marker, as Kafka's
            // topicPartitions shrink while markers are acknowledged.
            partitions: match self.refused_partitions(&id) {
                Some(refused) => refused.iter().map(|r| r.partition.clone()).collect(),
                None => t.partitions().into_iter().flatten().cloned().collect(),
            },
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
        for (id, t) in self
            .txns
            .iter()
            .filter_map(|(id, e)| Some((id, e.txn.as_ref()?)))
        {
            let (state, producer_id) = (t.state(), t.producer().id);
            if !req.producer_id_filters.is_empty()
                && !req.producer_id_filters.contains(&producer_id)
            {
                continue;
            }
            if !states.is_empty() && !states.contains(&state) {
                continue;
            }
            // Kafka's duration is measured from the start time as stored (-1: none).
            let start_ms = t.start_ms().unwrap_or(-1);
            if req.duration_filter_ms >= 0 && now.0 - start_ms <= req.duration_filter_ms {
                continue;
            }
            if let Some(p) = &req.transactional_id_pattern
                && !p.matches(id.as_str())
            {
                continue;
            }
            out.transactions.push(ListedTxn {
                transactional_id: id.to_string(),
                producer_id,
                state,
            });
        }
        out
    }
}
