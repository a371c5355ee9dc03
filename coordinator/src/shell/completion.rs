//! Waiting for a transaction to end: [`Coordinator::transaction_completed`].

use std::time::Duration;

use txn_log::TxnState;

use super::Coordinator;
use crate::{DescribeTransactionsRequest, ErrorCode};

/// First and longest pause between two looks at the transaction.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(20);

impl Coordinator {
    /// Resolves once `transactional_id` has no transaction in flight: its state is
    /// `CompleteCommit` or `CompleteAbort` (the markers of its last transaction are on every
    /// participant and the `Complete*` record is durable) or `Empty`; returns that state.
    ///
    /// An `Ongoing` transaction is waited for too, until the client ends it or the coordinator
    /// aborts it at its timeout. Looks at the state as DescribeTransactions does, every 1 ms at
    /// first, backing off to every 20 ms: a transaction that completes and has its producer start
    /// the next one in between two looks is seen as the next one's. `COORDINATOR_LOAD_IN_PROGRESS`
    /// is waited out; any other error (`NOT_COORDINATOR`: the id's log partition is not loaded
    /// here; `TRANSACTIONAL_ID_NOT_FOUND`) is returned. Bound the wait with `tokio::time::timeout`.
    pub async fn transaction_completed(
        &self,
        transactional_id: &str,
    ) -> Result<TxnState, ErrorCode> {
        let mut pause = FIRST_PAUSE;
        loop {
            let described = self
                .describe_transactions(DescribeTransactionsRequest {
                    transactional_ids: vec![transactional_id.to_owned()],
                })
                .await;
            let Some(d) = described.into_iter().next() else {
                return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
            };
            match (d.error, d.state) {
                (ErrorCode::NONE, Some(s))
                    if matches!(
                        s,
                        TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty
                    ) =>
                {
                    return Ok(s);
                }
                (ErrorCode::NONE, _) | (ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, _) => {}
                (e, _) => return Err(e),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use markers::writer::MarkerOutcome;
    use txn_log::{MemTxnLog, ProducerEpoch, ProducerId, TopicPartition};

    use super::*;
    use crate::shell::RecordingMarkerSink;
    use crate::{
        AddPartitionsToTxnRequest, AddPartitionsTxn, Config, EndTxnRequest, InitProducerIdRequest,
    };

    #[tokio::test]
    async fn resolves_when_the_markers_are_done_and_the_complete_record_durable() {
        let slot = Arc::new(txn_log::sync::Mutex::new(None));
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let c = Coordinator::builder(config, Arc::new(MemTxnLog::new()))
            .marker_sink({
                let slot = slot.clone();
                move |tx| {
                    let s = Arc::new(RecordingMarkerSink::new(tx, false));
                    *slot.lock() = Some(s.clone());
                    s
                }
            })
            .start()
            .unwrap();
        let sink = slot.lock().take().unwrap();
        c.load_all_partitions().await.unwrap();
        let init = c
            .init_producer_id(InitProducerIdRequest {
                version: 4,
                transactional_id: Some("app".into()),
                transaction_timeout_ms: 60_000,
                producer_id: ProducerId::NONE,
                producer_epoch: ProducerEpoch::NONE,
            })
            .await;
        assert_eq!(c.transaction_completed("app").await, Ok(TxnState::Empty));
        c.add_partitions_to_txn(AddPartitionsToTxnRequest {
            version: 3,
            transactions: vec![AddPartitionsTxn {
                transactional_id: "app".into(),
                producer_id: init.producer_id,
                producer_epoch: init.producer_epoch,
                verify_only: false,
                partitions: vec![TopicPartition::new("t", 0)],
            }],
        })
        .await;
        let end = c
            .end_txn(EndTxnRequest {
                version: 4,
                transactional_id: "app".into(),
                producer_id: init.producer_id,
                producer_epoch: init.producer_epoch,
                committed: false,
            })
            .await;
        assert!(end.error.is_none());
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.transaction_completed("app").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "markers still held: PrepareAbort");
        assert_eq!(sink.complete_held(MarkerOutcome::Completed).await, 1);
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, Ok(TxnState::CompleteAbort));
        assert_eq!(
            c.transaction_completed("nobody").await,
            Err(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
        );
        c.shutdown().await;
    }
}
