//! Waiting for a transaction to end: [`Coordinator::transaction_completed`].

use tokio::sync::oneshot;
use txn_log::{TransactionalId, TxnState};

use super::Coordinator;
use super::driver::Msg;
use crate::ErrorCode;

impl Coordinator {
    /// Resolves when the transaction of `transactional_id` in flight now has ended: with
    /// `CompleteCommit` or `CompleteAbort` once that state's record is durable (so the markers
    /// of the transaction are on every participant), and at once when nothing is in flight.
    ///
    /// Precisely, by the id's durable record when the call reaches the driver of its log
    /// partition (as DescribeTransactions would show it):
    /// - `Empty`, `CompleteCommit`, `CompleteAbort`: that state, at once;
    /// - `Ongoing`, `PrepareCommit`, `PrepareAbort` (or `PrepareEpochFence`): the state of the
    ///   *first* `Complete*` record of the id made durable after that, i.e. the end of that very
    ///   transaction, whether the client ends it or the coordinator aborts it at its timeout.
    ///   A next transaction started right after (even in the same append, as a parked
    ///   AddPartitionsToTxn is) is not waited for.
    ///
    /// No polling: the driver that applies the `Complete*` append wakes the caller. Looking at
    /// the state and registering the wait are one step of that driver, so a completion cannot
    /// slip in between. Errors:
    /// - `TRANSACTIONAL_ID_NOT_FOUND`: no record for the id; `INVALID_REQUEST`: not a valid id;
    /// - `NOT_COORDINATOR`: the id's log partition is not loaded here, or is unloaded while
    ///   waiting (asked, fenced, log failed): the wait ends, it never hangs;
    /// - `COORDINATOR_LOAD_IN_PROGRESS`: the partition was reloaded while waiting (the state
    ///   read again may already be a later transaction's); call again. A call made while the
    ///   partition loads waits for the load and is then answered as above;
    /// - `COORDINATOR_NOT_AVAILABLE`: the coordinator is shutting down.
    ///
    /// Bound the wait with `tokio::time::timeout` if the client may never end its transaction
    /// (the coordinator aborts it at `transaction.timeout.ms`).
    pub async fn transaction_completed(
        &self,
        transactional_id: &str,
    ) -> Result<TxnState, ErrorCode> {
        let Ok(id) = TransactionalId::new(transactional_id) else {
            return Err(ErrorCode::INVALID_REQUEST);
        };
        let partition = self.shared.config.partition_for(&id);
        let Some(driver) = self.existing_driver(partition) else {
            return Err(ErrorCode::NOT_COORDINATOR);
        };
        // Sent before the first await: the driver sees the call in its order of inputs.
        let (reply, answer) = oneshot::channel();
        if driver.send(Msg::AwaitCompletion { id, reply }).is_err() {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        answer
            .await
            .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::{Pin, pin};
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use markers::writer::MarkerOutcome;
    use txn_log::{CoordinatorEpoch, LogPartition, MemTxnLog};
    use txn_log::{TopicPartition, TxnLog};

    use super::*;
    use crate::shell::RecordingMarkerSink;
    use crate::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, Config, DescribeTransactionsRequest,
        EndTxnRequest, InitProducerIdRequest, InitProducerIdResponse,
    };

    const P: LogPartition = LogPartition(0);

    /// A coordinator of one log partition whose markers are held until told.
    struct Held {
        c: Coordinator,
        sink: Arc<RecordingMarkerSink>,
        log: Arc<MemTxnLog>,
    }

    async fn held() -> Held {
        let slot = Arc::new(txn_log::sync::Mutex::new(None));
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let log = Arc::new(MemTxnLog::new());
        let c = Coordinator::builder(config, log.clone())
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
        Held { c, sink, log }
    }

    async fn init(c: &Coordinator) -> InitProducerIdResponse {
        for _ in 0..1000 {
            let r = c
                .init_producer_id(InitProducerIdRequest::new_producer(4, "app", 60_000))
                .await;
            if r.error != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS {
                assert!(r.error.is_none(), "{r:?}");
                return r;
            }
            tokio::task::yield_now().await;
        }
        panic!("no producer id");
    }

    fn add(init: &InitProducerIdResponse, topic: &str) -> AddPartitionsToTxnRequest {
        AddPartitionsToTxnRequest::add(
            3,
            "app",
            init.producer_id,
            init.producer_epoch,
            &[TopicPartition::new(topic, 0)],
        )
    }

    fn added(r: &AddPartitionsToTxnResponse) -> bool {
        r.error.is_none() && r.results[0].partitions.iter().all(|(_, e)| e.is_none())
    }

    /// A transaction of "app" in PrepareCommit (or PrepareAbort), its markers held.
    async fn prepared(c: &Coordinator, commit: bool) -> InitProducerIdResponse {
        let init = init(c).await;
        assert!(added(&c.add_partitions_to_txn(add(&init, "t")).await));
        let end = c
            .end_txn(EndTxnRequest {
                version: 4,
                transactional_id: "app".into(),
                producer_id: init.producer_id,
                producer_epoch: init.producer_epoch,
                committed: commit,
            })
            .await;
        assert!(end.error.is_none(), "{end:?}");
        init
    }

    async fn state(c: &Coordinator) -> Option<TxnState> {
        c.describe_transactions(DescribeTransactionsRequest {
            transactional_ids: vec!["app".into()],
        })
        .await[0]
            .state
    }

    /// Polls `f` once, without a runtime wake-up: whatever it sends before its first await is
    /// sent, in this order relative to the other calls of the test.
    fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    async fn within<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("resolved in time")
    }

    #[tokio::test]
    async fn resolves_when_the_markers_are_done_and_the_complete_record_durable() {
        let h = held().await;
        let c = &h.c;
        init(c).await;
        assert_eq!(c.transaction_completed("app").await, Ok(TxnState::Empty));
        prepared(c, false).await;
        let mut waiter = pin!(c.transaction_completed("app"));
        assert!(poll_once(waiter.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            poll_once(waiter.as_mut()).is_pending(),
            "markers still held: PrepareAbort"
        );
        assert_eq!(h.sink.complete_held(MarkerOutcome::Completed).await, 1);
        assert_eq!(within(waiter).await, Ok(TxnState::CompleteAbort));
        // Complete now: answered at once.
        assert_eq!(
            c.transaction_completed("app").await,
            Ok(TxnState::CompleteAbort)
        );
        assert_eq!(
            c.transaction_completed("nobody").await,
            Err(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
        );
        assert_eq!(
            c.transaction_completed("").await,
            Err(ErrorCode::INVALID_REQUEST)
        );
        c.shutdown().await;
    }

    /// The producer's next AddPartitionsToTxn meets the commit completing and is parked; the
    /// engine writes CompleteCommit and the next transaction's Ongoing in one append, so the
    /// state never reads CompleteCommit. A waiter that looked at the state (PrepareCommit) and
    /// looked again would find Ongoing and wait for the next transaction instead.
    #[tokio::test]
    async fn the_end_is_seen_when_the_same_append_starts_the_next_transaction() {
        let h = held().await;
        let c = &h.c;
        let init = prepared(c, true).await;
        let mut waiter = pin!(c.transaction_completed("app"));
        assert!(poll_once(waiter.as_mut()).is_pending());
        // The next transaction's first add, sent now: it reaches the engine before the
        // markers' completion and parks.
        let mut next = pin!(c.add_partitions_to_txn(add(&init, "u")));
        assert!(poll_once(next.as_mut()).is_pending());
        assert_eq!(h.sink.complete_held(MarkerOutcome::Completed).await, 1);
        assert!(added(&within(next).await));
        assert_eq!(within(waiter).await, Ok(TxnState::CompleteCommit));
        assert_eq!(state(c).await, Some(TxnState::Ongoing));
        assert_eq!(c.metrics().transactions_committed.get(), 1);
        c.shutdown().await;
    }

    /// Unloaded while waiting: the waiter gets NOT_COORDINATOR at once, even though the
    /// partition is loaded again (and the transaction, re-driven, still completing) before it
    /// looks.
    #[tokio::test]
    async fn unloading_wakes_the_waiters_with_not_coordinator() {
        let h = held().await;
        let c = &h.c;
        prepared(c, true).await;
        let mut waiter = pin!(c.transaction_completed("app"));
        assert!(poll_once(waiter.as_mut()).is_pending());
        c.unload_partition(P).await;
        c.load_partition_next_epoch(P).await.unwrap();
        assert_eq!(state(c).await, Some(TxnState::PrepareCommit));
        assert_eq!(within(waiter).await, Err(ErrorCode::NOT_COORDINATOR));
        // Not loaded: answered at once.
        c.unload_partition(P).await;
        assert_eq!(
            c.transaction_completed("app").await,
            Err(ErrorCode::NOT_COORDINATOR)
        );
        c.shutdown().await;
    }

    /// A refused decision is held, not completed: the waiter keeps waiting (the transaction has
    /// not ended), and an unload still ends the wait.
    #[tokio::test]
    async fn a_refused_decision_keeps_the_waiters_waiting() {
        let h = held().await;
        let c = &h.c;
        prepared(c, true).await;
        let mut waiter = pin!(c.transaction_completed("app"));
        assert!(poll_once(waiter.as_mut()).is_pending());
        assert_eq!(h.sink.complete_held(MarkerOutcome::Refused).await, 1);
        // The driver handled the refusal before it answers this.
        assert_eq!(state(c).await, Some(TxnState::PrepareCommit));
        assert!(poll_once(waiter.as_mut()).is_pending());
        c.unload_partition(P).await;
        assert_eq!(within(waiter).await, Err(ErrorCode::NOT_COORDINATOR));
        c.shutdown().await;
    }

    /// A reload under a wait ends it (COORDINATOR_LOAD_IN_PROGRESS); a call made while the
    /// partition loads is answered from the state loaded, and then follows that transaction.
    #[tokio::test]
    async fn a_reload_ends_the_wait_and_a_call_during_the_load_waits_for_it() {
        let h = held().await;
        let c = &h.c;
        prepared(c, true).await;
        let epoch = h.sink.jobs()[0].coordinator_epoch;
        let mut before = pin!(c.transaction_completed("app"));
        assert!(poll_once(before.as_mut()).is_pending());
        let mut reload = pin!(c.load_partition(P, CoordinatorEpoch(epoch.0 + 1)));
        assert!(poll_once(reload.as_mut()).is_pending());
        let mut during = pin!(c.transaction_completed("app"));
        assert!(poll_once(during.as_mut()).is_pending());
        assert_eq!(
            within(before).await,
            Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        );
        assert_eq!(within(reload).await.unwrap(), CoordinatorEpoch(epoch.0 + 1));
        // Re-driven at the new epoch, held again: the call made during the load waits.
        assert_eq!(state(c).await, Some(TxnState::PrepareCommit));
        assert!(poll_once(during.as_mut()).is_pending());
        // The old epoch's decision (a reload cancels nothing in the sink) and the new one's:
        // the engine takes only the new one's.
        assert_eq!(h.sink.complete_held(MarkerOutcome::Completed).await, 2);
        assert_eq!(within(during).await, Ok(TxnState::CompleteCommit));
        assert!(h.log.claim_next(P).await.unwrap() > CoordinatorEpoch(epoch.0 + 1));
        c.shutdown().await;
    }

    #[tokio::test]
    async fn shutting_down_wakes_the_waiters() {
        let h = held().await;
        let c = &h.c;
        prepared(c, true).await;
        let mut waiter = pin!(c.transaction_completed("app"));
        assert!(poll_once(waiter.as_mut()).is_pending());
        within(c.shutdown()).await;
        assert_eq!(
            within(waiter).await,
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        );
    }
}
