//! Model 4, marker fan-in.
//!
//! A committed transaction spans three partitions on two brokers (`t-0` on broker 1, `t-1`
//! and `t-2` on broker 2). The engine's `WriteMarkers` goes to the production
//! `MarkerPlanner`. Concurrently: broker 1 acknowledges; broker 2 first answers
//! NOT_LEADER_OR_FOLLOWER (the planner retries after its backoff) and then acknowledges; and
//! the shell unloads the log partition. Afterwards the partition is loaded again at a new
//! coordinator epoch and the markers are re-driven to the end.
//!
//! Invariant:
//! - `CompleteCommit` is never appended before the last acknowledgement: when it reaches the
//!   log, every participant has applied the COMMIT marker;
//! - it is appended at most once while the threads run (not at all after the unload), and
//!   exactly once in total after the reload;
//! - every participant commits once and nothing stays open.
#![cfg(txn_loom)]

use coordinator::Millis;
use loom_tests::{
    Broker, Markers, Node, PARTITION, commit_txn, deliver_all, deliver_one, is_complete,
    loaded_node, open_txn, state_of, tid, tp,
};
use markers::writer::codes;
use txn_log::sync::{Arc, Mutex};
use txn_log::{CoordinatorEpoch, MemTxnLog, TxnResult, TxnState};

const ID: &str = "app";

#[test]
fn marker_fan_in() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let (tp0, tp1, tp2) = (tp("t", 0), tp("t", 1), tp("t", 2));
        let b1 = Broker::new(1, std::slice::from_ref(&tp0));
        let b2 = Broker::new(2, &[tp1.clone(), tp2.clone()]);
        let markers =
            Markers::planner(&[(tp0.clone(), &b1), (tp1.clone(), &b2), (tp2.clone(), &b2)]);
        let (b1, b2) = (Arc::new(Mutex::new(b1)), Arc::new(Mutex::new(b2)));
        let node = Arc::new(Mutex::new(loaded_node(&log, markers)));
        let parts = [tp0.clone(), tp1.clone(), tp2.clone()];
        let (pid, epoch) = open_txn(&node, ID, &parts);
        b1.lock().produce(&tp0, pid, epoch);
        b2.lock().produce(&tp1, pid, epoch);
        b2.lock().produce(&tp2, pid, epoch);
        b2.lock().fail_next = Some(codes::NOT_LEADER_OR_FOLLOWER);
        commit_txn(&node, ID, pid, epoch);

        // At the moment a Complete* reaches the log, every participant has the marker.
        {
            let (b1, b2, parts) = (b1.clone(), b2.clone(), parts.clone());
            node.lock().before_append = Some(Box::new(move |_, entries| {
                if !is_complete(entries) {
                    return false;
                }
                for p in &parts {
                    let b = if *p == parts[0] { b1.lock() } else { b2.lock() };
                    assert!(
                        b.closed(p, TxnResult::Commit) == 1 && b.open_transactions(p) == 0,
                        "CompleteCommit appended before {p} applied its marker: {:?}",
                        b.applied
                    );
                }
                true
            }));
        }

        let t1 = {
            let (node, b1) = (node.clone(), b1.clone());
            loom::thread::spawn(move || {
                deliver_one(&node, &b1, 1);
            })
        };
        let t2 = {
            let (node, b2) = (node.clone(), b2.clone());
            loom::thread::spawn(move || {
                deliver_one(&node, &b2, 2);
                // The planner's backoff timer fires; the retried request goes out.
                node.lock().marker_timeout(10_000);
                deliver_one(&node, &b2, 2);
            })
        };
        let t3 = {
            let node = node.clone();
            loom::thread::spawn(move || node.lock().unload())
        };
        t1.join().expect("broker 1");
        t2.join().expect("broker 2");
        t3.join().expect("unload");

        let before_reload = {
            let mut n = node.lock();
            n.pump();
            let tried = n
                .attempts
                .iter()
                .filter(|a| is_complete(&a.entries))
                .count();
            assert!(tried <= 1, "CompleteCommit appended {tried} times");
            n.completes_landed()
        };

        // Reload at a new epoch; the new owner finishes what is left.
        node.lock().engine.handle_begin_load();
        let loaded = Node::claim_and_read(&log, CoordinatorEpoch(2)).expect("claim 2");
        node.lock()
            .loaded(Millis(20_000), CoordinatorEpoch(2), loaded);
        deliver_all(&node, &[&*b1, &*b2]);

        let n = node.lock();
        let total = n.completes_landed();
        assert_eq!(
            total, 1,
            "CompleteCommit landed {total} times ({before_reload} before the reload)"
        );
        assert_eq!(
            state_of(&log.durable_snapshot(PARTITION), &tid(ID)),
            Some(TxnState::CompleteCommit)
        );
        for (b, p) in [(&b1, &tp0), (&b2, &tp1), (&b2, &tp2)] {
            let b = b.lock();
            assert_eq!(b.closed(p, TxnResult::Commit), 1, "{p}: {:?}", b.applied);
            assert_eq!(b.closed(p, TxnResult::Abort), 0);
            assert_eq!(b.open_transactions(p), 0);
        }
    });
}
