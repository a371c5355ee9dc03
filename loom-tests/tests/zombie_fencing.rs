//! Model 1, zombie fencing.
//!
//! Two clients race `InitProducerId` for one transactional id against one engine, then each
//! tries `AddPartitionsToTxn` + `EndTxn(commit)` (v5, TV2) with what it got. Kafka clients
//! retry CONCURRENT_TRANSACTIONS; so do these (a few times).
//!
//! Invariant:
//! - a (producer id, epoch) is handed out once: the epochs of successful `InitProducerId` and
//!   TV2 `EndTxn` replies strictly increase in the order the engine released them;
//! - only the holder of the highest epoch commits: an `EndTxn(commit)` that succeeds carried
//!   the highest epoch handed out before its reply; an `AddPartitionsToTxn` likewise;
//! - the other is fenced: a request with an older epoch is answered PRODUCER_FENCED (or
//!   CONCURRENT_TRANSACTIONS while the newer client's write is in flight), never NONE.
//!
//! Concurrency lives where production has it: the engine is single-owner, so the two clients
//! share it behind the facade `Mutex` (the shell driver's serialisation) and each request is
//! two steps (request + append issued; append resolved + applied), so the other client can
//! interleave between a durable append and its apply.
#![cfg(txn_loom)]

use coordinator::{ErrorCode, Millis, RequestId, Response};
use loom_tests::{Markers, Node, add_partitions, call, end_txn, init_producer_id, loaded_node, tp};
use txn_log::sync::{Arc, Mutex};
use txn_log::{MemTxnLog, ProducerEpoch, ProducerId};

const ID: &str = "app";

/// What a client sent: request id, kind, the epoch it carried.
type Sent = Vec<(RequestId, &'static str, ProducerEpoch)>;

/// Calls `make(id)` until the answer is not CONCURRENT_TRANSACTIONS (at most 3 tries).
fn retrying(
    node: &Mutex<Node>,
    next: &mut u64,
    sent: &mut Sent,
    kind: &'static str,
    epoch: ProducerEpoch,
    make: impl Fn() -> coordinator::Request,
) -> Response {
    let mut tries = 0;
    loop {
        let id = RequestId(*next);
        *next += 1;
        sent.push((id, kind, epoch));
        let r = call(node, Millis(10), id, make());
        tries += 1;
        let busy = match &r {
            Response::InitProducerId(r) => r.error == ErrorCode::CONCURRENT_TRANSACTIONS,
            Response::AddPartitionsToTxn(r) => {
                r.results[0].partitions[0].1 == ErrorCode::CONCURRENT_TRANSACTIONS
            }
            Response::EndTxn(r) => r.error == ErrorCode::CONCURRENT_TRANSACTIONS,
            _ => false,
        };
        // Retry at once: a yield would cost loom a preemption to come back here.
        if !busy || tries == 3 {
            return r;
        }
    }
}

fn client(node: &Mutex<Node>, first_request: u64) -> Sent {
    let mut next = first_request;
    let mut sent = Sent::new();
    let none = ProducerEpoch::NONE;
    let Response::InitProducerId(init) = retrying(node, &mut next, &mut sent, "init", none, || {
        init_producer_id(ID, 60_000)
    }) else {
        panic!("wrong response kind");
    };
    if init.error != ErrorCode::NONE {
        return sent;
    }
    let (pid, epoch) = (init.producer_id, init.producer_epoch);
    let parts = [tp("t", 0)];
    let Response::AddPartitionsToTxn(add) =
        retrying(node, &mut next, &mut sent, "add", epoch, || {
            add_partitions(ID, pid, epoch, &parts)
        })
    else {
        panic!("wrong response kind");
    };
    if add.results[0].partitions[0].1 != ErrorCode::NONE {
        return sent;
    }
    let _ = retrying(node, &mut next, &mut sent, "end", epoch, || {
        end_txn(5, ID, pid, epoch, true)
    });
    sent
}

fn error_of(r: &Response) -> ErrorCode {
    match r {
        Response::InitProducerId(r) => r.error,
        Response::AddPartitionsToTxn(r) => r.results[0].partitions[0].1,
        Response::EndTxn(r) => r.error,
        other => panic!("unexpected response {other:?}"),
    }
}

#[test]
fn zombie_fencing() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let node = Arc::new(Mutex::new(loaded_node(&log, Markers::AckAtOnce)));

        let a = {
            let node = node.clone();
            loom::thread::spawn(move || client(&node, 100))
        };
        let b = {
            let node = node.clone();
            loom::thread::spawn(move || client(&node, 200))
        };
        let mut sent = a.join().expect("client a");
        sent.extend(b.join().expect("client b"));
        let epoch_of = |id: RequestId| {
            sent.iter()
                .find(|(r, ..)| *r == id)
                .map(|(_, kind, e)| (*kind, *e))
                .expect("a reply to a request that was sent")
        };

        let n = node.lock();
        let mut grants: Vec<(ProducerId, ProducerEpoch)> = Vec::new();
        for reply in &n.replies {
            let (kind, carried) = epoch_of(reply.to);
            let code = error_of(&reply.response);
            let highest = grants.iter().map(|g| g.1).max();
            if kind != "init" && code == ErrorCode::NONE {
                assert_eq!(
                    Some(carried),
                    highest,
                    "{kind} with epoch {carried:?} succeeded although epoch {highest:?} was \
                     already handed out; replies: {:#?}",
                    n.replies
                );
            }
            if kind != "init" && highest.is_some_and(|h| carried < h) {
                assert!(
                    code == ErrorCode::PRODUCER_FENCED
                        || code == ErrorCode::CONCURRENT_TRANSACTIONS,
                    "{kind} with stale epoch {carried:?} (highest {highest:?}) answered {code:?}"
                );
            }
            let granted = match &reply.response {
                Response::InitProducerId(r) if r.error == ErrorCode::NONE => {
                    Some((r.producer_id, r.producer_epoch))
                }
                Response::EndTxn(r) if r.error == ErrorCode::NONE => {
                    Some((r.producer_id, r.producer_epoch))
                }
                _ => None,
            };
            if let Some(g) = granted {
                if let Some(last) = grants.last() {
                    assert!(
                        g.1 > last.1,
                        "epoch did not increase: {last:?} then {g:?}; replies: {:#?}",
                        n.replies
                    );
                }
                assert!(!grants.contains(&g), "{g:?} handed out twice");
                grants.push(g);
            }
        }
        assert!(!grants.is_empty(), "nobody got a producer id");
        // The durable record carries at least the highest epoch handed out.
        let stored = log.durable_snapshot(loom_tests::PARTITION);
        let rec = &stored.records[0].1;
        assert!(rec.producer_epoch >= grants.last().expect("non-empty").1);
    });
}
