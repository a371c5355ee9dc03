//! Model 3, the reaper against `EndTxn(commit)` at the timeout boundary.
//!
//! An ongoing transaction (one participant partition, data written) reaches its timeout. At
//! the same clock value the client sends `EndTxn(commit)` and the engine's timer fires (the
//! reaper). Both go through the one engine behind the facade `Mutex`, each as two steps
//! (input + append issued; append resolved + applied). The client retries
//! CONCURRENT_TRANSACTIONS, and once more after the markers were delivered. Run for TV2
//! (`EndTxn` v5) and for TV0/1 (`EndTxn` v3).
//!
//! Invariant:
//! - exactly one decision: exactly one `PrepareCommit` or `PrepareAbort` lands in the log;
//! - a success reply to the client implies `PrepareCommit` was durable when it was sent, and
//!   in the end the log holds `CompleteCommit` and the participant committed;
//! - if the reaper won, the client is fenced (PRODUCER_FENCED), never told success, and the
//!   participant aborted.
#![cfg(txn_loom)]

use coordinator::{ErrorCode, Millis, RequestId, Response};
use loom_tests::{
    Broker, Markers, PARTITION, add_partitions, call, deliver_all, end_txn, has_state,
    init_producer_id, loaded_node, state_of, tid, tp,
};
use txn_log::sync::{Arc, Mutex};
use txn_log::{MemTxnLog, ProducerEpoch, ProducerId, TxnResult, TxnState};

const ID: &str = "app";
const TIMEOUT_MS: i32 = 60_000;
/// The first clock value at which the transaction (started at 0) has timed out.
const BOUNDARY: Millis = Millis(TIMEOUT_MS as i64 + 1);

fn end_code(r: &Response) -> ErrorCode {
    match r {
        Response::EndTxn(r) => r.error,
        other => panic!("unexpected response {other:?}"),
    }
}

fn model(version: i16) {
    loom_tests::builder().check(move || {
        let log = MemTxnLog::new();
        let p = tp("t", 0);
        let broker = Broker::new(1, std::slice::from_ref(&p));
        let markers = Markers::planner(&[(p.clone(), &broker)]);
        let broker = Arc::new(Mutex::new(broker));
        let mut n = loaded_node(&log, markers);
        n.snapshot_replies = true;
        let node = Arc::new(Mutex::new(n));
        let Response::InitProducerId(init) = call(
            &node,
            Millis(0),
            RequestId(1),
            init_producer_id(ID, TIMEOUT_MS),
        ) else {
            panic!("wrong response kind");
        };
        let (pid, epoch): (ProducerId, ProducerEpoch) = (init.producer_id, init.producer_epoch);
        call(
            &node,
            Millis(0),
            RequestId(2),
            add_partitions(ID, pid, epoch, std::slice::from_ref(&p)),
        );
        broker.lock().produce(&p, pid, epoch);

        let client = {
            let node = node.clone();
            loom::thread::spawn(move || {
                let mut asked = Vec::new();
                for i in 0..3 {
                    let to = RequestId(10 + i);
                    asked.push(to);
                    let r = call(&node, BOUNDARY, to, end_txn(version, ID, pid, epoch, true));
                    if end_code(&r) != ErrorCode::CONCURRENT_TRANSACTIONS {
                        break;
                    }
                }
                asked
            })
        };
        let reaper = {
            let node = node.clone();
            loom::thread::spawn(move || {
                node.lock().timeout(BOUNDARY);
                node.lock().pump();
            })
        };
        let mut asked = client.join().expect("client");
        reaper.join().expect("reaper");
        deliver_all(&node, &[&*broker]);
        let last = *asked.last().expect("asked once");
        let still_busy = {
            let n = node.lock();
            end_code(&n.reply(last).expect("answered").response)
                == ErrorCode::CONCURRENT_TRANSACTIONS
        };
        if still_busy {
            // The decision is complete now; the client's retry learns the outcome.
            let to = RequestId(20);
            asked.push(to);
            call(&node, BOUNDARY, to, end_txn(version, ID, pid, epoch, true));
        }

        let n = node.lock();
        let prepares: Vec<TxnState> = n
            .attempts
            .iter()
            .filter(|a| matches!(a.result, Some(Ok(()))))
            .flat_map(|a| {
                [TxnState::PrepareCommit, TxnState::PrepareAbort]
                    .into_iter()
                    .filter(|s| has_state(&a.entries, *s))
            })
            .collect();
        assert_eq!(prepares.len(), 1, "decisions in the log: {prepares:?}");
        let reaper_won = prepares[0] == TxnState::PrepareAbort;
        let b = broker.lock();
        let final_state = state_of(&log.durable_snapshot(PARTITION), &tid(ID));
        for to in &asked {
            let reply = n.reply(*to).expect("every request answered");
            let code = end_code(&reply.response);
            if code == ErrorCode::NONE {
                assert!(
                    !reaper_won,
                    "client told success although the reaper aborted"
                );
                let durable = reply.durable.as_ref().expect("snapshot taken");
                assert!(
                    matches!(
                        state_of(durable, &tid(ID)),
                        Some(TxnState::PrepareCommit | TxnState::CompleteCommit)
                    ),
                    "success sent while the durable log held {:?}",
                    state_of(durable, &tid(ID))
                );
            }
        }
        let final_code = end_code(
            &n.reply(*asked.last().expect("one"))
                .expect("answered")
                .response,
        );
        if reaper_won {
            assert_eq!(
                final_code,
                ErrorCode::PRODUCER_FENCED,
                "the reaper aborted; the client must be fenced; replies {:#?}",
                n.replies
            );
            assert_eq!(final_state, Some(TxnState::CompleteAbort));
            assert_eq!(
                (
                    b.closed(&p, TxnResult::Abort),
                    b.closed(&p, TxnResult::Commit)
                ),
                (1, 0)
            );
        } else {
            assert_eq!(final_code, ErrorCode::NONE, "replies {:#?}", n.replies);
            assert_eq!(final_state, Some(TxnState::CompleteCommit));
            assert_eq!(
                (
                    b.closed(&p, TxnResult::Commit),
                    b.closed(&p, TxnResult::Abort)
                ),
                (1, 0)
            );
        }
        assert_eq!(b.open_transactions(&p), 0);
    });
}

#[test]
fn reaper_vs_end_txn_tv2() {
    model(5);
}

#[test]
fn reaper_vs_end_txn_tv0() {
    model(3);
}
