//! Model 5, a crash between a durable append and its in-memory apply, then reload.
//!
//! The log is a `MemTxnLog` in manual-durability mode: an append is applied to the log's
//! live state at once but becomes durable only when the fsync thread calls `make_durable`;
//! the call resolves only then. Concurrently: a client sends `InitProducerId` and then
//! `AddPartitionsToTxn` (each: request + append issued, then the driver reports the resolved
//! append); an fsync thread makes what is pending durable, twice; and the process crashes
//! (`MemTxnLog::crash`, the old engine never takes another step). Every window is explored,
//! including "durable but not yet applied or answered" at the crash. Then a new engine claims
//! the partition at a new coordinator epoch and loads it.
//!
//! Invariant:
//! - state after reload equals the durable log: what `load` returns equals the durable
//!   snapshot, and the reloaded engine's records equal what it loaded;
//! - no reply was sent for a record that was not durable: when a success reply was released
//!   its record was already durable, and it is in the reloaded state.
#![cfg(txn_loom)]

use coordinator::{ErrorCode, Millis, RequestId, Response};
use loom_tests::{
    Markers, Node, PARTITION, add_partitions, allocator, init_producer_id, loaded_node, record_of,
    tid, tp,
};
use txn_log::mem::Durability;
use txn_log::sync::{Arc, Mutex};
use txn_log::{CoordinatorEpoch, MemTxnLog, TxnState};

const ID: &str = "app";

#[test]
fn crash_reload() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let mut n = loaded_node(&log, Markers::AckAtOnce);
        n.snapshot_replies = true;
        log.set_durability(Durability::Manual);
        let node = Arc::new(Mutex::new(n));
        let p = tp("t", 0);

        let client = {
            let (node, p) = (node.clone(), p.clone());
            loom::thread::spawn(move || {
                node.lock()
                    .request(Millis(1), RequestId(1), init_producer_id(ID, 60_000));
                let init = {
                    let mut n = node.lock();
                    n.pump();
                    n.reply(RequestId(1)).map(|r| r.response.clone())
                };
                let Some(Response::InitProducerId(init)) = init else {
                    return;
                };
                if init.error != ErrorCode::NONE {
                    return;
                }
                let req = add_partitions(ID, init.producer_id, init.producer_epoch, &[p]);
                node.lock().request(Millis(2), RequestId(2), req);
                node.lock().pump();
            })
        };
        let fsync = {
            let log = log.clone();
            loom::thread::spawn(move || {
                log.make_durable();
                log.make_durable();
            })
        };
        let crash = {
            let node = node.clone();
            loom::thread::spawn(move || node.lock().crash())
        };
        client.join().expect("client");
        fsync.join().expect("fsync");
        crash.join().expect("crash");

        // What survived the crash.
        let durable = log.durable_snapshot(PARTITION);
        let old = node.lock();
        assert!(old.is_dead());

        // Restart: a new engine claims the partition at a new epoch and loads it.
        log.set_durability(Durability::Immediate);
        let loaded = Node::claim_and_read(&log, CoordinatorEpoch(2)).expect("claim after restart");
        assert_eq!(
            loaded.records, durable.records,
            "load after the crash differs from the durable log"
        );
        let mut fresh = Node::new(log.clone(), allocator(), Markers::AckAtOnce);
        fresh.loaded(Millis(3), CoordinatorEpoch(2), loaded.clone());
        let replayed: Vec<_> = fresh
            .engine
            .records()
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        assert_eq!(replayed, loaded.records, "engine state after reload differs from the log");

        for reply in &old.replies {
            let at_reply = reply.durable.as_ref().expect("snapshot taken");
            match &reply.response {
                Response::InitProducerId(r) if r.error == ErrorCode::NONE => {
                    for (when, state) in [("when it was sent", at_reply), ("after reload", &loaded)] {
                        let rec = record_of(state, &tid(ID));
                        assert!(
                            rec.is_some_and(|rec| rec.producer_id == r.producer_id
                                && rec.producer_epoch == r.producer_epoch),
                            "InitProducerId answered {r:?} but the durable record {when} is {rec:?}"
                        );
                    }
                }
                Response::AddPartitionsToTxn(r) if r.results[0].partitions[0].1 == ErrorCode::NONE => {
                    for (when, state) in [("when it was sent", at_reply), ("after reload", &loaded)] {
                        let rec = record_of(state, &tid(ID));
                        assert!(
                            rec.is_some_and(|rec| rec.state == TxnState::Ongoing
                                && rec.partitions.contains(&p)),
                            "AddPartitionsToTxn answered NONE but the durable record {when} is {rec:?}"
                        );
                    }
                }
                _ => {}
            }
        }
    });
}
