//! Model 2, failover.
//!
//! Coordinator A (coordinator epoch 1) has made `PrepareCommit` durable for a transaction over
//! two participant partitions (on two brokers) and is about to fan its markers out. Meanwhile
//! coordinator B (epoch 2) claims the same log partition of the shared `MemTxnLog`, loads it
//! and re-drives the markers. A and B each use the production marker planner; the brokers
//! answer through the production participant state (`markers::participant`).
//!
//! Invariant:
//! - once B's claim resolved, none of A's appends lands (the log fences epoch 1);
//! - `CompleteCommit` is written exactly once, by B whenever B loaded the transaction still
//!   prepared (A can only complete it if it finished before B's claim);
//! - each participant applies the decision once, as COMMIT (one closed transaction, no
//!   abort, nothing left open);
//! - the coordinator-epoch rule: once a participant accepted B's marker, A's marker is
//!   rejected there (accepted coordinator epochs never go down).
#![cfg(txn_loom)]

use coordinator::{Millis, ProducerIdAllocator};
use loom_tests::{
    Broker, Markers, Node, PARTITION, commit_txn, deliver_all, deliver_one, loaded_node, open_txn,
    state_of, tid, tp,
};
use txn_log::sync::{Arc, AtomicBool, Mutex, Ordering};
use txn_log::{CoordinatorEpoch, LogError, MemTxnLog, TxnResult, TxnState};

const ID: &str = "app";

#[test]
fn failover() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let (tp0, tp1) = (tp("t", 0), tp("t", 1));
        let b1 = Broker::new(1, std::slice::from_ref(&tp0));
        let b2 = Broker::new(2, std::slice::from_ref(&tp1));
        let leaders = [(tp0.clone(), &b1), (tp1.clone(), &b2)];
        let markers_a = Markers::planner(&leaders);
        let markers_b = Markers::planner(&leaders);
        let (b1, b2) = (Arc::new(Mutex::new(b1)), Arc::new(Mutex::new(b2)));

        // Setup, sequential: A owns the partition and prepares a commit.
        let a = Arc::new(Mutex::new(loaded_node(&log, markers_a)));
        let (pid, epoch) = open_txn(&a, ID, &[tp0.clone(), tp1.clone()]);
        b1.lock().produce(&tp0, pid, epoch);
        b2.lock().produce(&tp1, pid, epoch);
        commit_txn(&a, ID, pid, epoch);

        // The fence witness: set once B's claim has resolved.
        let claimed = Arc::new(AtomicBool::new(false));
        {
            let claimed = claimed.clone();
            a.lock().before_append = Some(Box::new(move |_, _| claimed.load(Ordering::SeqCst)));
        }
        // B is another process: its own allocator and planner.
        let b = Arc::new(Mutex::new(Node::new(
            log.clone(),
            ProducerIdAllocator::new(),
            markers_b,
        )));

        let ta = {
            let (a, b1, b2) = (a.clone(), b1.clone(), b2.clone());
            loom::thread::spawn(move || {
                deliver_one(&a, &b1, 1);
                deliver_one(&a, &b2, 2);
            })
        };
        let tb = {
            let (b, b1, b2, log, claimed) = (
                b.clone(),
                b1.clone(),
                b2.clone(),
                log.clone(),
                claimed.clone(),
            );
            loom::thread::spawn(move || {
                let loaded = Node::claim_and_read(&log, CoordinatorEpoch(2)).expect("B claims");
                claimed.store(true, Ordering::SeqCst);
                let state = state_of(&loaded, &tid(ID));
                b.lock().loaded(Millis(4), CoordinatorEpoch(2), loaded);
                deliver_one(&b, &b1, 1);
                deliver_one(&b, &b2, 2);
                state
            })
        };
        ta.join().expect("A");
        let b_loaded = tb.join().expect("B");
        // The drivers report appends that resolved after their threads' last step; B
        // delivers anything still queued (nothing, unless a lookup raced).
        a.lock().pump();
        deliver_all(&b, &[&*b1, &*b2]);

        let (a, b) = (a.lock(), b.lock());
        for at in &a.attempts {
            if at.flagged {
                assert!(
                    matches!(at.result, Some(Err(LogError::Fenced { .. }))),
                    "A appended at epoch 1 after B's claim(2) resolved: {at:?}"
                );
            }
        }
        let (by_a, by_b) = (a.completes_landed(), b.completes_landed());
        assert_eq!(
            by_a + by_b,
            1,
            "CompleteCommit written {by_a} times by A and {by_b} times by B"
        );
        if b_loaded == Some(TxnState::PrepareCommit) {
            assert_eq!(by_b, 1, "B loaded PrepareCommit but did not complete it");
        }
        assert_eq!(
            state_of(&log.durable_snapshot(PARTITION), &tid(ID)),
            Some(TxnState::CompleteCommit)
        );
        for (broker, p) in [(&b1, &tp0), (&b2, &tp1)] {
            let br = broker.lock();
            assert_eq!(
                br.closed(p, TxnResult::Commit),
                1,
                "{p} commits: {:?}",
                br.applied
            );
            assert_eq!(br.closed(p, TxnResult::Abort), 0, "{p} aborted");
            assert_eq!(br.open_transactions(p), 0, "{p} still open");
            let epochs: Vec<_> = br
                .applied
                .iter()
                .filter(|m| &m.partition == p)
                .map(|m| m.marker.coordinator_epoch)
                .collect();
            assert!(
                epochs.windows(2).all(|w| w[0] <= w[1]),
                "{p} accepted a marker of coordinator epoch {epochs:?} (A's after B's)"
            );
        }
    });
}
