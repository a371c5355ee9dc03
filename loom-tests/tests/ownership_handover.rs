//! Model 7, ownership handover: a stale owner's request racing the new owner's claim.
//!
//! Several daemons share the log (etcd); each log partition has one owner, and a new owner
//! claims the partition with a higher coordinator epoch (fencing the old one in the log),
//! loads it and serves. The old owner may still have a request in flight. `failover.rs`
//! covers a PREPARED transaction's markers across a handover; this file covers an ONGOING
//! transaction whose AddPartitionsToTxn is in flight at the old owner.
//!
//! # `stale_append_vs_claim`
//!
//! Owner A (coordinator epoch 1) has transaction `app` Ongoing with partition t-0. Concurrently:
//! - the client's AddPartitionsToTxn(t-1) is handled by A: A's engine issues the append, then
//!   (a separate step) A's driver reports its result and A answers;
//! - a stale retry of the client's AddPartitionsToTxn(t-0) (already in the transaction, so
//!   answered from memory, without an append) reaches A;
//! - owner B claims epoch 2 (the claim and the read are separate log calls) and loads.
//!
//! Then, sequentially, the client goes on at B (after NOT_COORDINATOR it looks the coordinator
//! up and retries the add there) and commits with EndTxn v5; a last stale EndTxn reaches A.
//!
//! Invariant, in every interleaving:
//! - an acknowledged write is never lost: if A answered the add NONE, B's loaded record holds
//!   t-1, and B's commit writes COMMIT markers for t-0 and t-1 (exactly those);
//! - if A's append lost the race, A answers NOT_COORDINATOR (retriable: the client finds B)
//!   and nothing of it is visible to B; A never answers anything else;
//! - once B's claim resolved, no append of A lands (the log's epoch never goes down: it is 2
//!   at the end, whatever A tried);
//! - A, once fenced (an append of A came back `Fenced`), is unloaded and completes no request
//!   from its stale state: the stale add and the stale EndTxn get NOT_COORDINATOR and issue
//!   no append.
//!
//! Mutants that kill it (`loom-tests/mutants.sh 7a 7b`, table in `docs/testing.md`): 7a drops
//! the epoch check of `MemTxnLog::append`: A's append lands after B's claim, acknowledged but
//! not in B's load ("A acknowledged AddPartitionsToTxn(t-1) but B loaded ..."), and the stale
//! EndTxn of the sequential tail lands too (loom's first failure, "stale EndTxn at A"). 7b
//! keeps the engine loaded after a `Fenced` append (`handle_append_failed`): the fenced A
//! answers the stale add NONE from its stale state ("A answered a request from its stale
//! state after its append was fenced"), and still serves after the stale EndTxn.
//!
//! # `reclaim_vs_claim`
//!
//! The same partition, but A, after a pause, re-claims its own epoch 1 (an exact-epoch claim
//! retried, as after an `Unavailable` claim) and reloads, while B claims epoch 2; then A serves
//! AddPartitionsToTxn(t-1). The claim order decides: A's re-claim succeeds only before B's
//! claim, B's claim always succeeds, the stored epoch ends at 2, no append of A lands after
//! B's claim resolved, and an add A acknowledged is in B's load.
//!
//! Mutant 7c (`MemTxnLog::claim` accepts a lower epoch) kills it: A's late re-claim moves the
//! stored epoch back to 1 ("the log's epoch went down"), and A's append then lands after B's
//! claim. 7a and 7b kill it too.
//!
//! # `next_epoch_claims_race`
//!
//! A (back after a pause) and B both take the partition the way the multi-daemon membership
//! does, `load_partition_next_epoch` (mirrored by `Node::claim_next_and_read`). Invariant: two
//! claims that both succeed have distinct epochs, so the later one fences the other.
//!
//! This model found a bug: the shell used to read the stored epoch and `claim` one above it
//! in two log calls, and `claim` accepts an equal epoch (an owner repeating its own claim).
//! When A and B both read epoch 1 before either claimed, both claimed epoch 2; both engines
//! then owned epoch 2 and could append, and A acknowledged an add that B, loaded before it,
//! never saw (B's commit wrote no marker for it). The fix is `TxnLog::claim_next`, which picks
//! and claims the next epoch in one atomic step in every backend (a compare-and-swap in etcd).
//! Mutant 7d (`MemTxnLog::claim_next` re-claims the stored epoch instead of the next one, so
//! two callers share it) fails it.
#![cfg(txn_loom)]

use coordinator::{ErrorCode, Millis, ProducerIdAllocator, Request, RequestId, Response};
use loom_tests::{
    Markers, Node, PARTITION, add_partitions, call, end_txn, loaded_node, open_txn, record_of, tid,
    tp,
};
use txn_log::mem::poll_once;
use txn_log::sync::{Arc, AtomicBool, Mutex, Ordering};
use txn_log::{
    CoordinatorEpoch, LoadedPartition, LogError, MemTxnLog, ProducerEpoch, ProducerId,
    TopicPartition, TxnLog, TxnResult, TxnState,
};

const ID: &str = "app";

fn error_of(r: &Response) -> ErrorCode {
    match r {
        Response::AddPartitionsToTxn(r) => r.results[0].partitions[0].1,
        Response::EndTxn(r) => r.error,
        other => panic!("unexpected response {other:?}"),
    }
}

fn is_fenced(at: &loom_tests::Attempt) -> bool {
    matches!(at.result, Some(Err(LogError::Fenced { .. })))
}

/// Owner A at epoch 1 with `app` Ongoing over t-0; returns A and the producer's id and epoch.
fn setup(log: &MemTxnLog) -> (Arc<Mutex<Node>>, ProducerId, ProducerEpoch) {
    let a = Arc::new(Mutex::new(loaded_node(log, Markers::AckAtOnce)));
    let (pid, epoch) = open_txn(&a, ID, &[tp("t", 0)]);
    (a, pid, epoch)
}

/// Sets `flag` on `node` as its append hook: each attempt records whether the flag was
/// already set when it reached the log.
fn witness(node: &Mutex<Node>, flag: &Arc<AtomicBool>) {
    let flag = flag.clone();
    node.lock().before_append = Some(Box::new(move |_, _| flag.load(Ordering::SeqCst)));
}

/// B's load task, with `claimed` set the moment the claim resolved (before the read).
fn claim_then_read(
    log: &MemTxnLog,
    epoch: CoordinatorEpoch,
    claimed: &AtomicBool,
) -> Result<LoadedPartition, LogError> {
    let mut claim = log.claim(PARTITION, epoch);
    poll_once(&mut claim).expect("claim resolves at once in Immediate mode")?;
    claimed.store(true, Ordering::SeqCst);
    let mut load = log.load(PARTITION);
    poll_once(&mut load).expect("load never waits")
}

/// No append of `node` that started after the fence witness was set may have landed.
fn assert_fenced_after_claim(node: &Node, who: &str) {
    for at in &node.attempts {
        if at.flagged {
            assert!(
                is_fenced(at),
                "{who} appended at {:?} after B's claim(2) resolved: {at:?}",
                at.epoch
            );
        }
    }
}

/// What A's answer to the add of t-1 implies for B's load (the first two invariants).
fn assert_add_outcome(code: ErrorCode, loaded: &LoadedPartition, t1: &TopicPartition) {
    let rec = record_of(loaded, &tid(ID));
    let has_t1 = rec.is_some_and(|r| r.partitions.contains(t1));
    if code == ErrorCode::NONE {
        assert!(
            has_t1,
            "A acknowledged AddPartitionsToTxn({t1}) but B loaded {rec:?}"
        );
    } else {
        assert_eq!(
            code,
            ErrorCode::NOT_COORDINATOR,
            "A answered the add with a code the client does not retry at the new coordinator"
        );
        assert!(
            !has_t1,
            "A answered NOT_COORDINATOR but its write is visible to B: {rec:?}"
        );
    }
}

/// The client goes on at B: after NOT_COORDINATOR it retries the add there, then commits.
/// B must write COMMIT markers for exactly t-0 and t-1, at epoch 2.
fn commit_at_b(
    b: &Mutex<Node>,
    code: ErrorCode,
    pid: ProducerId,
    epoch: ProducerEpoch,
    t1: &TopicPartition,
) {
    if code != ErrorCode::NONE {
        let retry = call(
            b,
            Millis(4),
            RequestId(20),
            add_partitions(ID, pid, epoch, std::slice::from_ref(t1)),
        );
        assert_eq!(error_of(&retry), ErrorCode::NONE, "retried add at B");
    }
    let end = call(
        b,
        Millis(5),
        RequestId(21),
        end_txn(5, ID, pid, epoch, true),
    );
    assert_eq!(error_of(&end), ErrorCode::NONE, "EndTxn(commit) at B");
    let b = b.lock();
    let [mw] = b.marker_writes.as_slice() else {
        panic!("B wrote markers {:?}", b.marker_writes);
    };
    assert_eq!(mw.result, TxnResult::Commit);
    assert_eq!(mw.coordinator_epoch, CoordinatorEpoch(2));
    assert_eq!(
        mw.partitions.iter().collect::<Vec<_>>(),
        vec![&tp("t", 0), t1],
        "B's commit markers"
    );
    assert_eq!(b.completes_landed(), 1, "B's CompleteCommit");
}

/// A stale request to `a` in one step: was A fenced before, did it issue an append, the reply.
fn stale_request(a: &Mutex<Node>, to: RequestId, req: Request) -> (bool, bool, Option<Response>) {
    let mut n = a.lock();
    let fenced_before = n.attempts.iter().any(is_fenced);
    let before = n.attempts.len();
    n.request(Millis(2), to, req);
    let appended = n.attempts.len() > before;
    (
        fenced_before,
        appended,
        n.reply(to).map(|r| r.response.clone()),
    )
}

#[test]
fn stale_append_vs_claim() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let (t0, t1) = (tp("t", 0), tp("t", 1));
        let (a, pid, epoch) = setup(&log);
        let claimed = Arc::new(AtomicBool::new(false));
        witness(&a, &claimed);

        let client = {
            let (a, t1) = (a.clone(), t1.clone());
            loom::thread::spawn(move || {
                let r = call(
                    &a,
                    Millis(2),
                    RequestId(3),
                    add_partitions(ID, pid, epoch, &[t1]),
                );
                error_of(&r)
            })
        };
        let stale = {
            let (a, t0) = (a.clone(), t0.clone());
            loom::thread::spawn(move || {
                stale_request(&a, RequestId(4), add_partitions(ID, pid, epoch, &[t0]))
            })
        };
        let new_owner = {
            let (log, claimed) = (log.clone(), claimed.clone());
            loom::thread::spawn(move || {
                claim_then_read(&log, CoordinatorEpoch(2), &claimed).expect("B claims epoch 2")
            })
        };
        let code = client.join().expect("client");
        let (fenced_before, stale_appended, stale_reply) = stale.join().expect("stale retry");
        let loaded = new_owner.join().expect("B");

        assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(2)));
        assert_add_outcome(code, &loaded, &t1);
        {
            let a = a.lock();
            assert_fenced_after_claim(&a, "A");
            assert!(
                !stale_appended,
                "the stale add (t-0 already added) issued an append"
            );
            let stale_code = error_of(&stale_reply.expect("the stale add is answered at once"));
            if fenced_before {
                assert_eq!(
                    stale_code,
                    ErrorCode::NOT_COORDINATOR,
                    "A answered a request from its stale state after its append was fenced; \
                     A's attempts: {:?}",
                    a.attempts
                );
            }
            if a.attempts.iter().any(is_fenced) {
                assert!(
                    !a.engine.is_loaded(),
                    "A still serves after a fenced append"
                );
            }
        }

        // The client goes on at B.
        let mut b = Node::new(log.clone(), ProducerIdAllocator::new(), Markers::AckAtOnce);
        b.loaded(Millis(3), CoordinatorEpoch(2), loaded);
        let b = Mutex::new(b);
        commit_at_b(&b, code, pid, epoch, &t1);

        // A last stale request reaches A: an EndTxn from its stale state. Nothing lands.
        let (_, _, reply) = stale_request(&a, RequestId(5), end_txn(5, ID, pid, epoch, true));
        let reply = match reply {
            Some(r) => r,
            None => {
                let mut n = a.lock();
                n.pump();
                n.reply(RequestId(5)).expect("answered").response.clone()
            }
        };
        assert_eq!(
            error_of(&reply),
            ErrorCode::NOT_COORDINATOR,
            "stale EndTxn at A"
        );
        let a = a.lock();
        assert!(
            !a.engine.is_loaded(),
            "A still serves after the stale EndTxn"
        );
        assert_fenced_after_claim(&a, "A");
        let durable = log.durable_snapshot(PARTITION);
        assert_eq!(
            durable.coordinator_epoch,
            Some(CoordinatorEpoch(2)),
            "the log's epoch went down"
        );
        assert_eq!(
            record_of(&durable, &tid(ID)).map(|r| r.state),
            Some(TxnState::CompleteCommit)
        );
    });
}

#[test]
fn reclaim_vs_claim() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let t1 = tp("t", 1);
        let (a, pid, epoch) = setup(&log);
        let claimed = Arc::new(AtomicBool::new(false));
        witness(&a, &claimed);

        let old_owner = {
            let (a, log, t1) = (a.clone(), log.clone(), t1.clone());
            loom::thread::spawn(move || {
                let reclaim = Node::claim_and_read(&log, CoordinatorEpoch(1));
                let Ok(loaded) = reclaim else {
                    return (false, None);
                };
                a.lock().loaded(Millis(2), CoordinatorEpoch(1), loaded);
                let r = call(
                    &a,
                    Millis(2),
                    RequestId(3),
                    add_partitions(ID, pid, epoch, &[t1]),
                );
                (true, Some(error_of(&r)))
            })
        };
        let new_owner = {
            let (log, claimed) = (log.clone(), claimed.clone());
            loom::thread::spawn(move || claim_then_read(&log, CoordinatorEpoch(2), &claimed))
        };
        let (reclaimed, code) = old_owner.join().expect("A");
        let loaded = new_owner
            .join()
            .expect("B")
            .expect("B's claim of epoch 2 succeeds");

        assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(2)));
        let durable = log.durable_snapshot(PARTITION);
        assert_eq!(
            durable.coordinator_epoch,
            Some(CoordinatorEpoch(2)),
            "the log's epoch went down (A re-claimed: {reclaimed})"
        );
        let a = a.lock();
        assert_fenced_after_claim(&a, "A");
        if let Some(code) = code {
            assert_add_outcome(code, &loaded, &t1);
        }
        if a.attempts.iter().any(is_fenced) {
            assert!(
                !a.engine.is_loaded(),
                "A still serves after a fenced append"
            );
        }
    });
}

#[test]
fn next_epoch_claims_race() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::new();
        let t1 = tp("t", 1);
        let (_a, pid, epoch) = setup(&log);

        let claim = |log: &MemTxnLog| {
            let log = log.clone();
            loom::thread::spawn(move || Node::claim_next_and_read(&log))
        };
        let (ta, tb) = (claim(&log), claim(&log));
        let (a_claim, b_claim) = (ta.join().expect("A"), tb.join().expect("B"));
        // A claim that failed (Fenced: the other claimed first and this one read after it)
        // lost cleanly.
        let (Ok((ea, la)), Ok((eb, lb))) = (a_claim, b_claim) else {
            return;
        };
        // Both resolved: the lower epoch (A's, if equal) lost, so its appends must fail.
        let (lost, lost_load, won_load) = if ea <= eb { (ea, la, lb) } else { (eb, lb, la) };
        let mut loser = Node::new(log.clone(), ProducerIdAllocator::new(), Markers::AckAtOnce);
        loser.loaded(Millis(3), lost, lost_load);
        let loser = Mutex::new(loser);
        let add = call(
            &loser,
            Millis(3),
            RequestId(3),
            add_partitions(ID, pid, epoch, &[t1]),
        );
        assert_eq!(
            error_of(&add),
            ErrorCode::NOT_COORDINATOR,
            "both claims won: A claimed {ea:?}, B claimed {eb:?}; the owner of epoch {lost:?} \
             acknowledged AddPartitionsToTxn(t-1), which the other owner, loaded before it, \
             does not have: {:?}",
            record_of(&won_load, &tid(ID))
        );
    });
}
