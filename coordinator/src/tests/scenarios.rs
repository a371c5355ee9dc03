//! The applicable scenarios, one test per S-number (each doc comment states the scenario; most
//! follow a case of Kafka's `TransactionCoordinatorTest`), with
//! Kafka's fixtures (txnId "known", pid 10, epoch 1, timeout 1, partitions {topic1-0};
//! the pid generator yields 0, 1, 2, ...; coordinator epoch 0).

use txn_log::{LogError, ProducerEpoch, ProducerId, TxnRecord, TxnResult, TxnState};

use super::fixture::*;
use crate::*;

/// Kafka's fixture transaction: "known", Ongoing at pid 10, epoch 1, with topic1-0.
fn known_ongoing() -> Fx {
    Fx::known(rec(10, 1, TxnState::Ongoing, &t1()))
}

/// A record written under TV2 (`client_txn_version` 2), as the fixtures of Kafka's TV2 tests.
fn rec2(pid: i64, epoch: i16, state: TxnState, parts: &[txn_log::TopicPartition]) -> TxnRecord {
    let mut r = rec(pid, epoch, state, parts);
    r.client_txn_version = txn_log::TxnVersion::V2;
    r
}

fn tv0() -> Config {
    Config {
        transaction_version: txn_log::TxnVersion::V0,
        ..config()
    }
}

/// Runs EndTxn and returns (reply, appended records) after acking the Prepare append.
fn end_and_ack(
    fx: &mut Fx,
    v: i16,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> ((ErrorCode, i64, i16), Vec<Ev>) {
    let to = fx.end(v, "known", pid, epoch, commit);
    let evs = fx.effects();
    let mut all = evs.clone();
    all.extend(fx.ack(&evs));
    (end_reply(&all, to), all)
}

// ===== 6.1 InitProducerId =====

#[test]
fn s01_null_transactional_id_gets_fresh_pids_and_persists_nothing() {
    let mut fx = Fx::new(vec![]);
    let a = fx.init(None, 1000, None);
    let b = fx.init(None, 1000, None);
    let evs = fx.effects();
    assert_eq!(init_reply(&evs, a), (ErrorCode::NONE, 0, 0));
    assert_eq!(init_reply(&evs, b), (ErrorCode::NONE, 1, 0));
    assert!(appended(&evs).is_empty());
}

#[test]
fn s02_empty_transactional_id_is_invalid_request() {
    let mut fx = Fx::new(vec![]);
    for _ in 0..2 {
        let to = fx.init(Some(""), 1000, None);
        assert_eq!(
            init_reply(&fx.effects(), to),
            (ErrorCode::INVALID_REQUEST, -1, -1)
        );
    }
    assert_eq!(fx.eng().records().count(), 0);
}

#[test]
fn s03_new_transactional_id_gets_epoch_zero_after_empty_record() {
    let mut fx = Fx::new(vec![]);
    let to = fx.init(Some("known"), 1, None);
    let evs = fx.effects();
    let a = appended(&evs);
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].1
            .as_ref()
            .map(|r| (r.state, r.producer_id.0, r.producer_epoch.0)),
        Some((TxnState::Empty, 0, 0))
    );
    assert_eq!(init_reply(&fx.ack(&evs), to), (ErrorCode::NONE, 0, 0));
}

#[test]
fn s04_new_transactional_id_accepts_stale_expectation() {
    let mut fx = Fx::new(vec![]);
    assert_eq!(
        fx.init_acked("known", 1, Some((10, 1))),
        (ErrorCode::NONE, 0, 0)
    );
}

#[test]
fn s05_exhausted_epoch_rotates_to_new_producer_id() {
    let mut fx = Fx::known(empty_at_last_epoch(10));
    assert_eq!(fx.init_acked("known", 1, None), (ErrorCode::NONE, 0, 0));
    let r = fx.record("known").expect("present");
    assert_eq!(
        (
            r.producer_id.0,
            r.prev_producer_id.0,
            r.last_producer_epoch.0
        ),
        (0, 10, -1)
    );
}

#[test]
fn s06_not_coordinator_and_loading() {
    // Not the owner of the id's partition (50 partitions: "known" -> 27, engine owns 0).
    let mut fx = Fx::with_config(Config::default(), vec![]);
    let to = fx.init(Some("known"), 1, None);
    assert_eq!(
        init_reply(&fx.effects(), to),
        (ErrorCode::NOT_COORDINATOR, -1, -1)
    );
    fx.begin_load();
    let _ = fx.effects();
    let to = fx.init(Some("polygenelubricants"), 1, None);
    assert_eq!(
        init_reply(&fx.effects(), to),
        (ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
    );
}

#[test]
fn s07_transaction_timeout_validation() {
    let mut fx = Fx::new(vec![]);
    for (timeout, ok) in [
        (1, true),
        (0, false),
        (-1, false),
        (900_000, true),
        (900_001, false),
    ] {
        let to = fx.init(Some("known"), timeout, None);
        let evs = fx.effects();
        if ok {
            assert_eq!(appended(&evs).len(), 1, "{timeout}");
            let _ = fx.fail(&evs, io_error());
        } else {
            assert_eq!(
                init_reply(&evs, to).0,
                ErrorCode::INVALID_TRANSACTION_TIMEOUT,
                "{timeout}"
            );
        }
    }
}

#[test]
fn s08_init_producer_id_bumps_epoch_from_empty_and_complete() {
    for state in [
        TxnState::Empty,
        TxnState::CompleteAbort,
        TxnState::CompleteCommit,
    ] {
        let mut fx = Fx::known(rec(10, 1, state, &[]));
        fx.set_now(42);
        let to = fx.init(Some("known"), 10, None);
        let evs = fx.effects();
        assert_eq!(
            init_reply(&fx.ack(&evs), to),
            (ErrorCode::NONE, 10, 2),
            "{state}"
        );
        let r = fx.record("known").expect("present");
        assert_eq!(
            (
                r.timeout_ms,
                r.txn_last_update_ms,
                r.producer_epoch.0,
                r.state
            ),
            (10, 42, 2, TxnState::Empty)
        );
    }
}

#[test]
fn s09_prepare_states_block_init_producer_id() {
    for state in [TxnState::PrepareCommit, TxnState::PrepareAbort] {
        let mut fx = Fx::known(rec(0, 0, state, &t1()));
        let to = fx.init(Some("known"), 10, None);
        let evs = fx.effects_without_write();
        assert_eq!(
            init_reply(&evs, to),
            (ErrorCode::CONCURRENT_TRANSACTIONS, -1, -1)
        );
    }
}

#[test]
fn s10_pending_transition_blocks_before_pid_validation() {
    let mut fx = known_ongoing();
    let _ = fx.end(3, "known", 10, 1, true);
    let _pending = fx.effects();
    let to = fx.init(Some("known"), 10, Some((10, 10)));
    assert_eq!(
        init_reply(&fx.effects(), to).0,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
}

#[test]
fn s11_ongoing_is_fenced_and_aborted() {
    let mut r = rec(10, 1, TxnState::Ongoing, &t1());
    r.last_producer_epoch = ProducerEpoch(0);
    let mut fx = Fx::with_config(tv0(), vec![("known", r)]);
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    let a = appended(&evs);
    let w = a[0].1.clone().expect("upsert");
    assert_eq!(
        (w.state, w.producer_epoch.0, w.last_producer_epoch.0),
        (TxnState::PrepareAbort, 2, -1)
    );
    assert_eq!(w.partitions.iter().cloned().collect::<Vec<_>>(), t1());
    let evs = fx.ack(&evs);
    assert_eq!(
        init_reply(&evs, to),
        (ErrorCode::CONCURRENT_TRANSACTIONS, -1, -1)
    );
    assert!(evs.contains(&known_markers(2, 0, TxnResult::Abort)));
    assert_eq!(fx.eng().metrics().producers_fenced, 1);
}

#[test]
fn s13_failed_fence_is_not_rebumped() {
    let mut fx = Fx::with_config(tv0(), vec![("known", rec(10, 1, TxnState::Ongoing, &t1()))]);
    for (i, fail) in [true, true, false].into_iter().enumerate() {
        let to = fx.init(Some("known"), 10, None);
        let evs = fx.effects();
        let a = appended(&evs);
        assert_eq!(
            a[0].1.as_ref().map(|r| r.producer_epoch.0),
            Some(2),
            "attempt {i}"
        );
        let out = if fail {
            fx.fail(&evs, io_error())
        } else {
            fx.ack(&evs)
        };
        let want = if fail {
            ErrorCode::COORDINATOR_NOT_AVAILABLE
        } else {
            ErrorCode::CONCURRENT_TRANSACTIONS
        };
        assert_eq!(init_reply(&out, to).0, want, "attempt {i}");
    }
}

#[test]
fn s14_fence_at_exhaustion_uses_last_epoch_then_rotates() {
    let mut r = rec(10, 32766, TxnState::Ongoing, &t1());
    r.last_producer_epoch = ProducerEpoch(32765);
    let mut fx = Fx::with_config(tv0(), vec![("known", r)]);
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    let w = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (w.state, w.producer_epoch.0, w.last_producer_epoch.0),
        (TxnState::PrepareAbort, 32767, -1)
    );
    let all = fx.settle(evs);
    assert_eq!(init_reply(&all, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_eq!(
        fx.record("known").map(|r| (r.state, r.producer_epoch.0)),
        Some((TxnState::CompleteAbort, 32767))
    );
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    assert_eq!(
        init_reply(&fx.ack(&evs), to),
        (ErrorCode::NONE, 0, 0),
        "exhausted: new pid, epoch 0"
    );
}

#[test]
fn s15_retry_without_last_epoch_is_fenced() {
    let mut fx = Fx::known(rec(10, 2, TxnState::Empty, &[]));
    let to = fx.init(Some("known"), 10, Some((10, 1)));
    assert_eq!(
        init_reply(&fx.effects(), to),
        (ErrorCode::PRODUCER_FENCED, -1, -1)
    );
    // v3 (before KIP-588) sees INVALID_PRODUCER_EPOCH.
    let to = fx.init_v(3, Some("known"), 10, Some((10, 1)));
    assert_eq!(
        init_reply(&fx.effects(), to).0,
        ErrorCode::INVALID_PRODUCER_EPOCH
    );
}

#[test]
fn s16_old_pid_after_remap_is_fenced() {
    let mut r = rec(11, 1, TxnState::Empty, &[]);
    r.prev_producer_id = ProducerId(10);
    r.last_producer_epoch = ProducerEpoch(0);
    let mut fx = Fx::known(r);
    let to = fx.init(Some("known"), 10, Some((10, 1)));
    assert_eq!(init_reply(&fx.effects(), to).0, ErrorCode::PRODUCER_FENCED);
}

/// An Empty record of `pid` at epoch 32766 (the last), reached by a bump from 32765: the next
/// InitProducerId rotates to a new producer id.
fn empty_at_last_epoch(pid: i64) -> TxnRecord {
    let mut r = rec(pid, 32766, TxnState::Empty, &[]);
    r.last_producer_epoch = ProducerEpoch(32765);
    r
}

fn empty_10_10_9() -> TxnRecord {
    let mut r = rec(10, 10, TxnState::Empty, &[]);
    r.last_producer_epoch = ProducerEpoch(9);
    r
}

#[test]
fn s17_kip360_resume_and_retry() {
    let mut fx = Fx::known(empty_10_10_9());
    for _ in 0..2 {
        assert_eq!(
            fx.init_acked("known", 10, Some((10, 10))),
            (ErrorCode::NONE, 10, 11)
        );
        assert_eq!(
            fx.record("known").map(|r| r.last_producer_epoch.0),
            Some(10)
        );
    }
}

/// KAFKA-20357 fixed: the last epoch is persisted, so the KIP-360 retry also succeeds on a
/// new coordinator that loaded the partition from the log.
#[test]
fn s17_kip360_retry_succeeds_across_failover() {
    let mut fx = Fx::known(empty_10_10_9());
    assert_eq!(
        fx.init_acked("known", 10, Some((10, 10))),
        (ErrorCode::NONE, 10, 11)
    );
    let _ = fx.reload(1);
    assert_eq!(
        fx.init_acked("known", 10, Some((10, 10))),
        (ErrorCode::NONE, 10, 11)
    );
}

/// The KAFKA-20357 report: pid 100 at epoch 32766 rotates to a new pid; after a failover the
/// retry of the rotating call still returns the rotated identity.
#[test]
fn s19_rotation_retry_succeeds_across_failover() {
    let mut fx = Fx::known(empty_at_last_epoch(100));
    let first = fx.init_acked("known", 10, Some((100, 32766)));
    assert_eq!(first, (ErrorCode::NONE, 0, 0));
    let _ = fx.reload(1);
    assert_eq!(fx.init_acked("known", 10, Some((100, 32766))), first);
}

#[test]
fn s18_zombie_after_new_producer_is_fenced() {
    let mut fx = Fx::known(empty_10_10_9());
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 10, 11));
    assert_eq!(
        fx.record("known").map(|r| r.last_producer_epoch.0),
        Some(-1)
    );
    let to = fx.init(Some("known"), 10, Some((10, 10)));
    assert_eq!(
        init_reply(&fx.effects(), to),
        (ErrorCode::PRODUCER_FENCED, -1, -1)
    );
}

#[test]
fn s19_rotation_then_retry_returns_same_identity() {
    let mut fx = Fx::known(empty_at_last_epoch(10));
    for _ in 0..2 {
        assert_eq!(
            fx.init_acked("known", 10, Some((10, 32766))),
            (ErrorCode::NONE, 0, 0)
        );
        let r = fx.record("known").expect("present");
        assert_eq!((r.prev_producer_id.0, r.last_producer_epoch.0), (10, 32766));
    }
}

#[test]
fn s20_rotation_then_stale_epoch_is_fenced() {
    let mut fx = Fx::known(empty_at_last_epoch(10));
    let to = fx.init(Some("known"), 10, Some((10, 32766)));
    let evs = fx.effects();
    let _ = fx.ack(&evs);
    let _ = to;
    let to = fx.init(Some("known"), 10, Some((10, 32765)));
    assert_eq!(init_reply(&fx.effects(), to).0, ErrorCode::PRODUCER_FENCED);
}

/// A KIP-360 bump, its retry and a new producer for the same id, serialized (the engine is
/// single-owner, so "concurrent" means back to back).
#[test]
fn s22_s24_bump_retry_and_new_producer_serialize() {
    let mut fx = Fx::new(vec![]);
    let (_, p, e) = fx.init_acked("known", 10, None);
    assert_eq!(
        fx.init_acked("known", 10, Some((p, e))),
        (ErrorCode::NONE, p, e + 1)
    );
    let to = fx.init(Some("known"), 10, Some((p, e)));
    let evs = fx.effects();
    assert_eq!(
        init_reply(&fx.ack(&evs), to),
        (ErrorCode::NONE, p, e + 1),
        "retry"
    );
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    assert_eq!(
        init_reply(&fx.ack(&evs), to),
        (ErrorCode::NONE, p, e + 2),
        "new producer"
    );
}

/// Serialized: two InitProducerId for a new id before the first is durable — the
/// first wins with epoch 0, the second waits (CONCURRENT_TRANSACTIONS).
#[test]
fn s21_s23_second_init_for_new_id_waits() {
    let mut fx = Fx::new(vec![]);
    let a = fx.init(Some("known"), 10, Some((11, 10)));
    let b = fx.init(Some("known"), 10, Some((11, 10)));
    let evs = fx.effects();
    assert_eq!(init_reply(&evs, b).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_eq!(init_reply(&fx.ack(&evs), a), (ErrorCode::NONE, 0, 0));
}

/// A failed InitProducerId does not leak an epoch bump: the next one bumps exactly once.
#[test]
fn s26_failed_init_does_not_leak_a_bump() {
    let mut fx = Fx::known(rec(10, 4, TxnState::CompleteCommit, &[]));
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    assert_eq!(
        init_reply(&fx.fail(&evs, io_error()), to).0,
        ErrorCode::COORDINATOR_NOT_AVAILABLE
    );
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 10, 5));
}

#[test]
fn s25_pid_boundary_rotation_then_new_producer() {
    let mut fx = Fx::known(rec(11, 32766, TxnState::Empty, &[]));
    assert_eq!(
        fx.init_acked("known", 10, Some((11, 32766))),
        (ErrorCode::NONE, 0, 0)
    );
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 0, 1));
}

#[test]
fn s27_tv2_rebump_after_failed_write() {
    let mut fx = known_ongoing();
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    assert_eq!(
        init_reply(&fx.fail(&evs, io_error()), to),
        (ErrorCode::COORDINATOR_NOT_AVAILABLE, -1, -1)
    );
    assert_eq!(fx.record("known").map(|r| r.producer_epoch.0), Some(1));
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    let all = fx.settle(evs);
    assert_eq!(init_reply(&all, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 10, 3));
}

// ===== 6.2 AddPartitionsToTxn / verification =====

/// Asserts the answer of an AddPartitionsToTxn of `t1()` by (`id`, `pid`, `epoch`), made
/// without a write: `want` for its one partition.
fn assert_add_t1(fx: &mut Fx, id: &str, pid: i64, epoch: i16, want: ErrorCode) {
    let to = fx.add(id, pid, epoch, &t1());
    assert_eq!(add_reply(&fx.effects(), to), vec![(tp("topic1", 0), want)]);
}

#[test]
fn s28_add_partitions_unknown_id_is_invalid_pid_mapping() {
    let mut fx = Fx::new(vec![]);
    assert_add_t1(
        &mut fx,
        "known",
        0,
        1,
        ErrorCode::INVALID_PRODUCER_ID_MAPPING,
    );
}

#[test]
fn s29_add_partitions_empty_id_is_invalid_request() {
    let mut fx = Fx::new(vec![]);
    assert_add_t1(&mut fx, "", 0, 1, ErrorCode::INVALID_REQUEST);
}

#[test]
fn s30_add_partitions_ownership() {
    let mut fx = Fx::with_config(Config::default(), vec![]);
    assert_add_t1(&mut fx, "known", 10, 1, ErrorCode::NOT_COORDINATOR);
    fx.begin_load();
    let _ = fx.effects();
    assert_add_t1(
        &mut fx,
        "polygenelubricants",
        10,
        1,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
    );
}

#[test]
fn s31_add_partitions_in_prepare_states_is_concurrent() {
    for state in [TxnState::PrepareCommit, TxnState::PrepareAbort] {
        let mut fx = Fx::known(rec(0, 0, state, &t1()));
        let to = fx.add("known", 0, 0, &[tp("topic2", 0)]);
        assert_eq!(
            add_reply(&fx.effects(), to)[0].1,
            ErrorCode::CONCURRENT_TRANSACTIONS
        );
    }
}

#[test]
fn s32_add_partitions_epoch_check_precedes_state_check() {
    let mut r = rec(0, 10, TxnState::PrepareCommit, &t1());
    r.last_producer_epoch = ProducerEpoch(9);
    let mut fx = Fx::known(r);
    let to = fx.add("known", 0, 0, &t1());
    assert_eq!(
        add_reply(&fx.effects(), to)[0].1,
        ErrorCode::PRODUCER_FENCED
    );
}

#[test]
fn s33_successful_add_writes_ongoing() {
    for state in [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ] {
        let parts = if state == TxnState::Ongoing {
            vec![tp("topic2", 0)]
        } else {
            vec![]
        };
        let mut fx = Fx::known(rec(10, 1, state, &parts));
        let to = fx.add("known", 10, 1, &t1());
        let evs = fx.effects();
        let a = appended(&evs);
        assert_eq!(a.len(), 1, "{state}");
        assert_eq!(a[0].1.as_ref().map(|r| r.state), Some(TxnState::Ongoing));
        assert_eq!(add_reply(&fx.ack(&evs), to), t1_result(ErrorCode::NONE));
    }
}

#[test]
fn s34_already_added_partitions_cost_no_write() {
    let mut fx = known_ongoing();
    let to = fx.add("known", 10, 1, &t1());
    let evs = fx.effects();
    assert_eq!(
        evs,
        vec![Ev::Respond(
            to,
            Response::AddPartitionsToTxn(AddPartitionsToTxnResponse {
                error: ErrorCode::NONE,
                results: vec![AddPartitionsTxnResult {
                    transactional_id: "known".into(),
                    partitions: t1_result(ErrorCode::NONE)
                }],
            })
        )]
    );
}

#[test]
fn s35_start_timestamp_is_first_add() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    fx.set_now(99);
    let _ = fx.add("known", 10, 1, &t1());
    let evs = fx.effects();
    let _ = fx.ack(&evs);
    fx.set_now(98);
    let _ = fx.add("known", 10, 1, &[tp("topic2", 0)]);
    let evs = fx.effects();
    let _ = fx.ack(&evs);
    let r = fx.record("known").expect("present");
    assert_eq!(
        (r.txn_start_ms, r.txn_last_update_ms, r.partitions.len()),
        (99, 98, 2)
    );
}

#[test]
fn s36_verify_only_matrix() {
    // (a) pid mismatch, (b) epoch mismatch, (c) PrepareCommit.
    let mut fx = Fx::known(rec(1, 0, TxnState::Ongoing, &t1()));
    let to = fx.verify("known", 0, 0, &t1());
    assert_eq!(
        add_reply(&fx.effects(), to)[0].1,
        ErrorCode::INVALID_PRODUCER_ID_MAPPING
    );
    let to = fx.verify("known", 1, 1, &t1());
    assert_eq!(
        add_reply(&fx.effects(), to)[0].1,
        ErrorCode::PRODUCER_FENCED
    );
    let mut fx2 = Fx::known(rec(1, 0, TxnState::PrepareCommit, &t1()));
    let to = fx2.verify("known", 1, 0, &t1());
    assert_eq!(
        add_reply(&fx2.effects(), to)[0].1,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    // (d) a pending transition is ignored; a missing partition is TRANSACTION_ABORTABLE.
    let mut fx3 = Fx::known(rec(1, 0, TxnState::Ongoing, &[tp("topic2", 0)]));
    let _ = fx3.end(3, "known", 1, 0, true);
    let _pending = fx3.effects();
    let to = fx3.verify("known", 1, 0, &t1());
    let evs = fx3.effects_without_write();
    assert_eq!(
        add_reply(&evs, to),
        t1_result(ErrorCode::TRANSACTION_ABORTABLE)
    );
}

#[test]
fn s37_verify_only_present_is_none_without_write() {
    let mut fx = known_ongoing();
    let to = fx.verify("known", 10, 1, &t1());
    let evs = fx.effects_without_write();
    assert_eq!(add_reply(&evs, to), t1_result(ErrorCode::NONE));
}

#[test]
fn s38_verify_only_partial() {
    let mut fx = known_ongoing();
    let to = fx.verify("known", 10, 1, &[tp("topic1", 0), tp("topic2", 0)]);
    assert_eq!(
        add_reply(&fx.effects(), to),
        vec![
            (tp("topic1", 0), ErrorCode::NONE),
            (tp("topic2", 0), ErrorCode::TRANSACTION_ABORTABLE)
        ]
    );
}

#[test]
fn s39_tv2_overflow_add_waits_for_completion() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    let (reply, evs) = end_and_ack(&mut fx, 5, 10, 32766, true);
    assert_eq!(
        reply,
        (ErrorCode::NONE, 0, 0),
        "client continues with the next pid"
    );
    let to = fx.add("known", 0, 0, &[tp("topic2", 0)]);
    assert_eq!(
        add_reply(&fx.effects(), to)[0].1,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    let _ = fx.settle(evs);
    assert_committed_after_rotation(&fx);
    let to = fx.add("known", 0, 0, &[tp("topic2", 0)]);
    let evs = fx.effects();
    assert_eq!(add_reply(&fx.ack(&evs), to)[0].1, ErrorCode::NONE);
}

// ===== 6.3 EndTxn =====

#[test]
fn s43_end_txn_unknown_or_pid_mismatch() {
    for v in [3, 5] {
        let mut fx = Fx::new(vec![]);
        assert_eq!(
            fx.end_error(v, "known", (0, 0), true),
            ErrorCode::INVALID_PRODUCER_ID_MAPPING
        );
        let mut fx = known_ongoing();
        assert_eq!(
            fx.end_error(v, "known", (0, 0), true),
            ErrorCode::INVALID_PRODUCER_ID_MAPPING
        );
    }
}

#[test]
fn s44_end_txn_epoch_mismatch_on_ongoing() {
    for (v, want) in [
        (3, ErrorCode::PRODUCER_FENCED),
        (5, ErrorCode::PRODUCER_FENCED),
        (1, ErrorCode::INVALID_PRODUCER_EPOCH),
    ] {
        let mut fx = known_ongoing();
        assert_eq!(fx.end_error(v, "known", (10, 0), true), want, "v{v}");
    }
}

#[test]
fn s45_end_txn_empty_id_and_ownership() {
    let mut fx = Fx::with_config(Config::default(), vec![]);
    assert_eq!(
        fx.end_error(3, "", (10, 1), true),
        ErrorCode::INVALID_REQUEST
    );
    assert_eq!(
        fx.end_error(3, "known", (10, 1), true),
        ErrorCode::NOT_COORDINATOR
    );
    fx.begin_load();
    assert_eq!(
        fx.end_error(3, "polygenelubricants", (10, 1), true),
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
}

#[test]
fn s46_s47_end_txn_happy_paths() {
    for (v, commit, epoch) in [(3, true, 1), (3, false, 1), (5, true, 2), (5, false, 2)] {
        let mut fx = known_ongoing();
        let (reply, evs) = end_and_ack(&mut fx, v, 10, 1, commit);
        assert_eq!(reply, (ErrorCode::NONE, 10, epoch));
        let prep = appended(&evs)[0].1.clone().expect("upsert");
        let want = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        assert_eq!((prep.state, prep.producer_epoch.0), (want, epoch));
        let result = if commit {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        };
        assert!(evs.contains(&known_markers(epoch, 0, result)));
        let _ = fx.settle(evs);
        let done = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        assert_eq!(
            fx.record("known").map(|r| (r.state, r.producer_epoch.0)),
            Some((done, epoch))
        );
    }
}

#[test]
fn s48_s49_idempotent_retry_after_complete() {
    for (state, commit) in [
        (TxnState::CompleteCommit, true),
        (TxnState::CompleteAbort, false),
    ] {
        for (v, epoch) in [(3, 1), (5, 0)] {
            let r = if v >= 5 {
                rec2(10, 1, state, &[])
            } else {
                rec(10, 1, state, &[])
            };
            let mut fx = Fx::known(r);
            let to = fx.end(v, "known", 10, epoch, commit);
            let evs = fx.effects_without_write();
            assert_eq!(
                end_reply(&evs, to),
                (ErrorCode::NONE, 10, 1),
                "{state} v{v}"
            );
        }
    }
}

#[test]
fn s50_wrong_result_after_complete() {
    for (state, commit) in [
        (TxnState::CompleteAbort, true),
        (TxnState::CompleteCommit, false),
    ] {
        let mut fx = Fx::known(rec(10, 1, state, &[]));
        assert_eq!(
            fx.end_error(3, "known", (10, 1), commit),
            ErrorCode::INVALID_TXN_STATE,
            "TV0 {state}"
        );
    }
    // TV2 (CTn): CompleteCommit + ABORT at the current epoch starts an (empty) abort.
    let mut fx = Fx::known(rec2(10, 1, TxnState::CompleteCommit, &[]));
    fx.set_now(77);
    let (reply, evs) = end_and_ack(&mut fx, 5, 10, 1, false);
    assert_eq!(reply, (ErrorCode::NONE, 10, 2));
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (prep.state, prep.producer_epoch.0, prep.txn_start_ms),
        (TxnState::PrepareAbort, 2, 77)
    );
    let mut fx = Fx::known(rec2(10, 1, TxnState::CompleteCommit, &[]));
    assert_eq!(
        fx.end_error(5, "known", (10, 0), false),
        ErrorCode::INVALID_TXN_STATE
    );
}

#[test]
fn s51_still_completing_is_concurrent() {
    for (v, epoch) in [(3, 1), (5, 0)] {
        let r = if v >= 5 {
            rec2(10, 1, TxnState::PrepareCommit, &t1())
        } else {
            rec(10, 1, TxnState::PrepareCommit, &t1())
        };
        let mut fx = Fx::known(r);
        assert_eq!(
            fx.end_error(v, "known", (10, epoch), true),
            ErrorCode::CONCURRENT_TRANSACTIONS,
            "v{v}"
        );
    }
}

#[test]
fn s52_mismatched_result_while_preparing() {
    let mut fx = Fx::known(rec(10, 1, TxnState::PrepareAbort, &t1()));
    assert_eq!(
        fx.end_error(3, "known", (10, 1), true),
        ErrorCode::INVALID_TXN_STATE
    );
    let mut fx = Fx::known(rec2(10, 1, TxnState::PrepareAbort, &t1()));
    assert_eq!(
        fx.end_error(5, "known", (10, 0), true),
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
}

#[test]
fn s53_epoch_too_large_or_too_small() {
    let mut fx = Fx::known(rec(10, 1, TxnState::CompleteCommit, &[]));
    for v in [3, 5] {
        assert_eq!(
            fx.end_error(v, "known", (10, 2), true),
            ErrorCode::PRODUCER_FENCED,
            "v{v}"
        );
    }
    let mut fx = Fx::known(rec(10, 2, TxnState::CompleteCommit, &[]));
    for (v, epoch) in [(3, 1), (5, 0)] {
        assert_eq!(
            fx.end_error(v, "known", (10, epoch), true),
            ErrorCode::PRODUCER_FENCED,
            "v{v} epoch {epoch}"
        );
    }
}

/// The producer (pid 10, epoch 1) retries its commit, decided in `record` (PrepareCommit), with
/// an EndTxn at `version`: while the markers are in flight (CONCURRENT_TRANSACTIONS) and after
/// the decision completed (success, answered with `answered_epoch`).
fn retry_commit_across_completion(record: TxnRecord, version: i16, answered_epoch: i16) {
    let mut fx = Fx::known(record);
    let loaded = fx.loaded.clone();
    let to = fx.end(version, "known", 10, 1, true);
    assert_eq!(
        end_reply(&fx.effects(), to),
        (ErrorCode::CONCURRENT_TRANSACTIONS, -1, -1)
    );
    let _ = fx.settle(loaded);
    let to = fx.end(version, "known", 10, 1, true);
    assert_eq!(
        end_reply(&fx.effects(), to),
        (ErrorCode::NONE, 10, answered_epoch)
    );
}

/// A TV2 decision in flight, retried by a TV0 client, is judged by TV2 rules.
#[test]
fn s54_tv_downgrade_mid_flight() {
    let mut r = rec2(10, 2, TxnState::PrepareCommit, &t1());
    r.last_producer_epoch = ProducerEpoch(1);
    retry_commit_across_completion(r, 3, 2);
}

/// A TV0 decision in flight, retried by a TV2 client, is judged by TV0 rules (no bump).
#[test]
fn s55_tv_upgrade_mid_flight() {
    retry_commit_across_completion(rec(10, 1, TxnState::PrepareCommit, &t1()), 5, 1);
}

#[test]
fn s56_tv2_same_epoch_is_next_transaction_not_retry() {
    let mut fx = Fx::known(rec2(10, 1, TxnState::PrepareCommit, &t1()));
    assert_eq!(
        fx.end_error(5, "known", (10, 1), true),
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    let mut fx = Fx::known(rec2(10, 1, TxnState::CompleteCommit, &[]));
    assert_eq!(
        fx.end_error(5, "known", (10, 1), true),
        ErrorCode::INVALID_TXN_STATE
    );
}

#[test]
fn s57_tv2_overflow_retry() {
    let mut r = rec(10, 32767, TxnState::PrepareCommit, &t1());
    r.prev_producer_id = ProducerId(10);
    r.next_producer_id = ProducerId(11);
    r.last_producer_epoch = ProducerEpoch(32766);
    r.client_txn_version = txn_log::TxnVersion::V2;
    let mut fx = Fx::known(r);
    let loaded = fx.loaded.clone();
    assert_eq!(
        fx.end_error(5, "known", (10, 32766), true),
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    let _ = fx.settle(loaded);
    let r = fx.record("known").expect("present");
    assert_eq!(
        (r.producer_id.0, r.prev_producer_id.0, r.producer_epoch.0),
        (11, 10, 0)
    );
    let to = fx.end(5, "known", 10, 32766, true);
    assert_eq!(end_reply(&fx.effects(), to), (ErrorCode::NONE, 11, 0));
}

#[test]
fn s58_tv2_epoch_bump_arithmetic() {
    let mut fx = Fx::known(rec(23423, 10, TxnState::Ongoing, &t1()));
    let to = fx.end(5, "known", 23423, 10, true);
    let evs = fx.effects();
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (prep.producer_epoch.0, prep.client_txn_version),
        (11, txn_log::TxnVersion::V2)
    );
    let all = fx.settle(evs);
    assert_eq!(end_reply(&all, to), (ErrorCode::NONE, 23423, 11));
    assert_eq!(fx.record("known").map(|r| r.producer_epoch.0), Some(11));
}

#[test]
fn s59_tv2_overflow_arithmetic() {
    let mut fx = Fx::known(rec(23423, 32766, TxnState::Ongoing, &t1()));
    let to = fx.end(5, "known", 23423, 32766, true);
    let evs = fx.effects();
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (
            prep.producer_id.0,
            prep.producer_epoch.0,
            prep.next_producer_id.0
        ),
        (23423, 32767, 0)
    );
    let all = fx.settle(evs);
    assert_eq!(end_reply(&all, to), (ErrorCode::NONE, 0, 0));
    let r = fx.record("known").expect("present");
    assert_eq!(
        (r.producer_id.0, r.producer_epoch.0, r.next_producer_id.0),
        (0, 0, -1)
    );
}

#[test]
fn s60_tv2_abort_from_empty() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    fx.set_now(5);
    let (reply, evs) = end_and_ack(&mut fx, 5, 10, 1, false);
    assert_eq!(reply, (ErrorCode::NONE, 10, 2));
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (prep.state, prep.producer_epoch.0, prep.txn_start_ms),
        (TxnState::PrepareAbort, 2, 5)
    );
    // No partitions: CompleteAbort is written at once, without markers.
    assert!(!evs.iter().any(|e| matches!(e, Ev::Markers { .. })));
    let complete: Vec<_> = appended(&evs).into_iter().skip(1).collect();
    assert_eq!(
        complete[0].1.as_ref().map(|r| r.state),
        Some(TxnState::CompleteAbort)
    );
    for (epoch, commit, want) in [
        (0, false, ErrorCode::PRODUCER_FENCED),
        (1, true, ErrorCode::INVALID_TXN_STATE),
        (0, true, ErrorCode::PRODUCER_FENCED),
    ] {
        let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
        assert_eq!(fx.end_error(5, "known", (10, epoch), commit), want);
    }
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    assert_eq!(
        fx.end_error(3, "known", (10, 1), false),
        ErrorCode::INVALID_TXN_STATE,
        "TV1"
    );
}

#[test]
fn s61_tv2_abort_after_abort() {
    let mut fx = Fx::known(rec2(10, 1, TxnState::CompleteAbort, &[]));
    let to = fx.end(5, "known", 10, 0, false);
    let evs = fx.effects_without_write();
    assert_eq!(end_reply(&evs, to), (ErrorCode::NONE, 10, 1));
    let (reply, evs) = end_and_ack(&mut fx, 5, 10, 1, false);
    assert_eq!(reply, (ErrorCode::NONE, 10, 2));
    assert_eq!(
        appended(&evs)[0].1.as_ref().map(|r| r.state),
        Some(TxnState::PrepareAbort)
    );
    let mut fx = Fx::known(rec(10, 1, TxnState::CompleteAbort, &[]));
    assert_eq!(fx.end_error(3, "known", (10, 1), false), ErrorCode::NONE);
    assert_eq!(
        fx.end_error(3, "known", (10, 0), false),
        ErrorCode::PRODUCER_FENCED
    );
}

#[test]
fn s62_commit_racing_timeout_abort_is_producer_fenced() {
    let mut r = rec(10, 1, TxnState::Ongoing, &t1());
    r.txn_start_ms = 0;
    r.timeout_ms = 1000;
    let mut fx = Fx::known(r);
    let evs = fx.tick(10_000);
    let _ = fx.settle(evs);
    assert_eq!(
        fx.record("known").map(|r| (r.state, r.producer_epoch.0)),
        Some((TxnState::CompleteAbort, 2))
    );
    assert_eq!(
        fx.end_error(5, "known", (10, 1), true),
        ErrorCode::PRODUCER_FENCED
    );
    let to = fx.end(5, "known", 10, 1, false);
    assert_eq!(end_reply(&fx.effects(), to), (ErrorCode::NONE, 10, 2));
}

// ===== 6.4 reaper =====

#[test]
fn s63_ongoing_times_out_and_is_aborted_with_bumped_epoch() {
    let mut r = rec(10, 1, TxnState::Ongoing, &t1());
    r.txn_start_ms = 0;
    let mut fx = Fx::with_config(tv0(), vec![("known", r.clone())]);
    assert_eq!(fx.eng().poll_timeout(), Some(Millis(10_000)));
    let evs = fx.tick(10_000);
    let mut want = r;
    want.state = TxnState::PrepareAbort;
    want.producer_epoch = ProducerEpoch(2);
    want.last_producer_epoch = ProducerEpoch(-1);
    want.txn_last_update_ms = 10_000;
    assert_eq!(
        evs,
        vec![Ev::Append(IoId(1), vec![("known".into(), Some(want))])]
    );
    let evs = fx.ack(&evs);
    assert!(evs.contains(&known_markers(2, 0, TxnResult::Abort)));
    assert_eq!(fx.eng().metrics().transactions_timed_out, 1);
}

#[test]
fn s64_only_ongoing_past_deadline_is_reaped() {
    let mut ongoing = rec(0, 0, TxnState::Ongoing, &t1());
    ongoing.timeout_ms = 1000;
    ongoing.txn_start_ms = 7000;
    let mut not_expiring = ongoing.clone();
    not_expiring.producer_id = ProducerId(1);
    not_expiring.timeout_ms = 10_000;
    let mut fx = Fx::new(vec![
        ("ongoing", ongoing),
        ("not-expiring", not_expiring),
        ("prepare-commit", rec(2, 0, TxnState::PrepareCommit, &t1())),
        ("prepare-abort", rec(3, 0, TxnState::PrepareAbort, &t1())),
        ("complete-commit", rec(4, 0, TxnState::CompleteCommit, &[])),
        ("complete-abort", rec(5, 0, TxnState::CompleteAbort, &[])),
    ]);
    let a = appended(&fx.tick(10_000));
    assert_eq!(
        a.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        vec!["ongoing"]
    );
}

#[test]
fn s65_pending_transition_is_not_reaped() {
    let mut fx = known_ongoing();
    let _ = fx.end(3, "known", 10, 1, true);
    let _pending = fx.effects();
    assert!(appended(&fx.tick(10_000)).is_empty());
}

#[test]
fn s66_failed_timeout_abort_reuses_the_fenced_epoch() {
    let mut fx = known_ongoing();
    let evs = fx.tick(10_000);
    assert_eq!(
        appended(&evs)[0].1.as_ref().map(|r| r.producer_epoch.0),
        Some(2)
    );
    let _ = fx.fail(&evs, io_error());
    let evs = fx.tick(20_000);
    assert_eq!(
        appended(&evs)[0].1.as_ref().map(|r| r.producer_epoch.0),
        Some(2)
    );
}

#[test]
fn s68_fence_epoch_arithmetic_at_exhaustion() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    let evs = fx.tick(10_000);
    let w = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (w.producer_id.0, w.producer_epoch.0, w.last_producer_epoch.0),
        (10, 32767, -1)
    );
}

// ===== 6.5 expiration =====

#[test]
fn s69_expire_allowed_states() {
    for state in [
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Empty,
    ] {
        let mut fresh = rec(2, 0, TxnState::Empty, &[]);
        fresh.txn_last_update_ms = 3_600_000;
        let mut fx = Fx::new(vec![("one", rec(1, 0, state, &[])), ("two", fresh)]);
        let evs = fx.tick(604_800_000);
        assert_eq!(appended(&evs), vec![("one".to_owned(), None)]);
        let _ = fx.ack(&evs);
        assert!(fx.record("one").is_none());
        assert!(fx.record("two").is_some());
        assert!(!fx.eng().has_pending(&tid("two")));
        assert_eq!(
            fx.eng().describe("one").error,
            ErrorCode::TRANSACTIONAL_ID_NOT_FOUND
        );
    }
}

#[test]
fn s70_active_ids_never_expire() {
    for state in [
        TxnState::Ongoing,
        TxnState::PrepareAbort,
        TxnState::PrepareCommit,
    ] {
        let mut fx = Fx::new(vec![("one", rec(1, 0, state, &t1()))]);
        let _ = fx.loaded.clone();
        let evs = fx.tick(3_600_000);
        assert!(!appended(&evs).iter().any(|(_, r)| r.is_none()), "{state}");
    }
}

#[test]
fn s71_failed_tombstone_keeps_ids() {
    let mut fx = Fx::new(vec![
        ("one", rec(1, 0, TxnState::Empty, &[])),
        ("two", rec(2, 0, TxnState::Empty, &[])),
    ]);
    let evs = fx.tick(604_800_000);
    assert_eq!(appended(&evs).len(), 2);
    let _ = fx.fail(&evs, io_error());
    assert!(fx.record("one").is_some() && fx.record("two").is_some());
    assert!(!fx.eng().has_pending(&tid("one")));
}

#[test]
fn s72_expiry_batches_are_bounded() {
    let cfg = Config {
        expiry_batch_max: 100,
        ..config()
    };
    let ids: Vec<String> = (0..1001).map(|i| format!("id{i:04}")).collect();
    let recs = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), rec(i as i64, 0, TxnState::Empty, &[])))
        .collect();
    let mut fx = Fx::with_config(cfg, recs);
    let mut appends = 0;
    let mut now = 604_800_000;
    while fx.eng().records().count() > 0 {
        let evs = fx.tick(now);
        let n = appended(&evs).len();
        assert!(n <= 100);
        appends += usize::from(n > 0);
        let _ = fx.ack(&evs);
        now = fx.eng().poll_timeout().map_or(now, |t| t.0);
    }
    assert!(appends > 1);
}

// ===== 6.6 load and failover =====

#[test]
fn s81_s82_load_redrives_markers_with_the_new_epoch() {
    let parts = vec![
        tp("t1", 0),
        tp("t1", 1),
        tp("t2", 0),
        tp("t2", 1),
        tp("t2", 2),
    ];
    let mut fx = Fx::new(vec![
        ("one", rec(1, 0, TxnState::PrepareCommit, &parts)),
        ("two", rec(2, 0, TxnState::Empty, &[])),
        ("three", rec(3, 0, TxnState::PrepareAbort, &t1())),
    ]);
    let evs = fx.reload(3);
    assert_eq!(
        evs,
        vec![
            Ev::Markers {
                id: "one".into(),
                pid: 1,
                epoch: 0,
                ce: 3,
                result: TxnResult::Commit,
                parts
            },
            Ev::Markers {
                id: "three".into(),
                pid: 3,
                epoch: 0,
                ce: 3,
                result: TxnResult::Abort,
                parts: t1()
            },
        ]
    );
    fx.unload();
    let _ = fx.effects();
    assert_eq!(
        fx.end_error(3, "two", (2, 0), true),
        ErrorCode::NOT_COORDINATOR
    );
}

/// An engine holding "one" (Empty, pid 1, epoch 0) and an InitProducerId for it whose append
/// is held: the engine, the request and the effects holding that append.
fn one_with_held_init() -> (Fx, RequestId, Vec<Ev>) {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::Empty, &[]))]);
    let to = fx.init(Some("one"), 10, None);
    let pending = fx.effects();
    (fx, to, pending)
}

#[test]
fn s84_reimmigration_at_a_higher_epoch() {
    let (mut fx, to, pending) = one_with_held_init();
    let evs = fx.load_again(1);
    assert_eq!(
        init_reply(&evs, to).0,
        ErrorCode::NOT_COORDINATOR,
        "in-flight work of the old epoch"
    );
    assert_eq!(
        fx.eng().coordinator_epoch(),
        Some(txn_log::CoordinatorEpoch(1))
    );
    assert!(fx.ack(&pending).is_empty(), "stale completion ignored");
}

#[test]
fn s87_append_error_mapping() {
    let cases = [
        (io_error(), ErrorCode::COORDINATOR_NOT_AVAILABLE, true),
        (
            LogError::InvalidArgument("too large".into()),
            ErrorCode::UNKNOWN_SERVER_ERROR,
            true,
        ),
        (
            LogError::Poisoned {
                reason: "fsync".into(),
            },
            ErrorCode::NOT_COORDINATOR,
            false,
        ),
        (LogError::Closed, ErrorCode::NOT_COORDINATOR, false),
    ];
    for (err, want, still_loaded) in cases {
        let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
        let to = fx.init(Some("known"), 10, None);
        let evs = fx.effects();
        let out = fx.fail(&evs, err.clone());
        assert_eq!(init_reply(&out, to).0, want, "{err}");
        assert_eq!(fx.eng().is_loaded(), still_loaded, "{err}");
        assert!(!fx.eng().has_pending(&tid("known")));
    }
}

#[test]
fn s83_load_completing_after_unload_installs_nothing() {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::Empty, &[]))]);
    fx.begin_load();
    fx.unload();
    let _ = fx.effects();
    assert!(fx.load_again(1).is_empty());
    assert!(!fx.eng().is_loaded());
    assert_eq!(fx.eng().records().count(), 0);
    assert_eq!(
        fx.end_error(3, "one", (1, 0), true),
        ErrorCode::NOT_COORDINATOR
    );
}

#[test]
fn s88_reload_starting_during_an_append_answers_load_in_progress() {
    let (mut fx, to, pending) = one_with_held_init();
    fx.begin_load();
    let evs = fx.effects();
    assert_eq!(
        init_reply(&evs, to).0,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
    assert!(
        fx.ack(&pending).is_empty(),
        "the old append's completion is ignored"
    );
}

/// A failed Complete append keeps the transaction pending-to-complete and is retried;
/// requests meanwhile get CONCURRENT_TRANSACTIONS.
#[test]
fn s89_s98_failed_complete_is_retried_not_dropped() {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::PrepareCommit, &t1()))]);
    let m = fx.loaded.clone();
    let evs = fx.markers_done(&m);
    assert!(fx.fail(&evs, io_error()).is_empty());
    let to = fx.init(Some("one"), 10, None);
    assert_eq!(
        init_reply(&fx.effects(), to).0,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    let evs = fx.tick(50);
    assert_eq!(appended(&evs).len(), 1);
    let _ = fx.ack(&evs);
    assert_eq!(
        fx.record("one").map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
}

/// NOT_COORDINATOR on the Complete write (our `Fenced`): the engine unloads and the new
/// owner re-drives the markers from the durable PrepareCommit.
#[test]
fn s97_fenced_complete_unloads_and_new_owner_completes() {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::PrepareCommit, &t1()))]);
    let m = fx.loaded.clone();
    let evs = fx.markers_done(&m);
    let err = LogError::Fenced {
        partition: txn_log::LogPartition(0),
        current: txn_log::CoordinatorEpoch(1),
    };
    assert_eq!(fx.fail(&evs, err), vec![Ev::Unloaded]);
    let fx2 = Fx::new(vec![("one", rec(1, 0, TxnState::PrepareCommit, &t1()))]);
    assert_eq!(fx2.loaded.len(), 1, "markers re-driven by the new owner");
}

#[test]
fn s91_emigration_drops_state_and_markers() {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::PrepareCommit, &t1()))]);
    assert_eq!(fx.loaded.len(), 1);
    fx.unload();
    assert_eq!(fx.effects(), vec![Ev::Unloaded]);
    assert_eq!(fx.eng().transactions_awaiting_markers().count(), 0);
    assert_eq!(fx.eng().records().count(), 0);
}

#[test]
fn s99_stale_marker_completion_after_reload_is_ignored() {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::PrepareCommit, &t1()))]);
    let old = fx.loaded.clone();
    let new = fx.reload(1);
    assert!(
        fx.markers_done(&old).is_empty(),
        "epoch-0 completion ignored"
    );
    let evs = fx.markers_done(&new);
    assert_eq!(appended(&evs).len(), 1);
    assert!(matches!(&evs[0], Ev::Append(..)));
}

#[test]
fn s100_completion_is_written_once() {
    let mut fx = Fx::new(vec![("one", rec(1, 0, TxnState::PrepareCommit, &t1()))]);
    let m = fx.loaded.clone();
    let first = fx.markers_done(&m);
    let second = fx.markers_done(&m);
    assert_eq!(appended(&first).len(), 1);
    assert!(second.is_empty());
    let _ = fx.ack(&first);
    assert!(fx.markers_done(&m).is_empty());
}

// ===== 6.8 describe / list =====

#[test]
fn s103_describe() {
    let mut r = rec(10, 1, TxnState::Ongoing, &t1());
    r.txn_start_ms = 5;
    let fx = Fx::known(r);
    let d = fx.eng().describe("known");
    assert_eq!(
        d,
        DescribedTxn {
            error: ErrorCode::NONE,
            transactional_id: "known".into(),
            state: Some(TxnState::Ongoing),
            timeout_ms: 1,
            start_time_ms: 5,
            producer_id: ProducerId(10),
            producer_epoch: ProducerEpoch(1),
            partitions: t1(),
        }
    );
    assert_eq!(fx.eng().describe("").error, ErrorCode::INVALID_REQUEST);
    let loading = Fx::unloaded(ProducerIdAllocator::new());
    assert_eq!(
        loading.eng().describe("known").error,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
}

#[test]
fn s104_list_filters() {
    let t = 1_000_000;
    let mk = |i: i64, state, start| {
        let parts = if matches!(state, Ongoing | PrepareCommit | PrepareAbort) {
            t1()
        } else {
            vec![]
        };
        let mut r = rec(i, 0, state, &parts);
        r.txn_start_ms = start;
        r
    };
    use TxnState::*;
    let fx = Fx::new(vec![
        ("t0", mk(0, Ongoing, t)),
        ("t1", mk(1, Ongoing, t)),
        ("t2", mk(2, PrepareCommit, t + 1000)),
        ("t3", mk(3, PrepareAbort, t + 1000)),
        ("t4", mk(4, CompleteCommit, t + 2000)),
        ("t5", mk(5, CompleteAbort, t + 2000)),
        ("t6", mk(6, CompleteAbort, t + 2000)),
    ]);
    let now = Millis(t + 3000);
    let list = |states: &[&str], pids: &[i64], dur: i64| {
        let req = ListTransactionsRequest {
            state_filters: states.iter().map(|s| (*s).to_owned()).collect(),
            producer_id_filters: pids.iter().map(|p| ProducerId(*p)).collect(),
            duration_filter_ms: dur,
            transactional_id_pattern: None,
        };
        let r = merge_list_responses(&req, [fx.eng().list_transactions(now, &req)]);
        (
            r.transactions
                .into_iter()
                .map(|x| x.transactional_id)
                .collect::<Vec<_>>(),
            r.unknown_state_filters,
        )
    };
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let all = names(&["t0", "t1", "t2", "t3", "t4", "t5", "t6"]);
    assert_eq!(list(&[], &[], -1).0, all);
    assert_eq!(list(&[], &[], 0).0, all);
    assert_eq!(list(&[], &[], 1000).0, names(&["t0", "t1", "t2", "t3"]));
    assert_eq!(list(&[], &[], 2000).0, names(&["t0", "t1"]));
    assert!(list(&[], &[], 3000).0.is_empty());
    assert_eq!(list(&["Ongoing"], &[], -1).0, names(&["t0", "t1"]));
    assert_eq!(
        list(&["Ongoing", "UnknownState"], &[], -1),
        (names(&["t0", "t1"]), names(&["UnknownState"]))
    );
    assert_eq!(
        list(&["PrepareCommit", "CompleteCommit"], &[], -1).0,
        names(&["t2", "t4"])
    );
    assert!(list(&["UnknownState"], &[], -1).0.is_empty());
    assert_eq!(list(&[], &[5], -1).0, names(&["t5"]));
    assert_eq!(list(&[], &[5, 6, 8, 9], -1).0, names(&["t5", "t6"]));
    assert_eq!(list(&["CompleteCommit"], &[4, 5], -1).0, names(&["t4"]));
    assert_eq!(
        list(&["CompleteCommit", "CompleteAbort"], &[4, 5], -1).0,
        names(&["t4", "t5"])
    );
    assert!(list(&["Dead"], &[], -1).0.is_empty());

    // ListTransactions v2 (KIP-1152): the pattern matches the whole id, and ANDs with the rest.
    let matching = |pattern: &str, states: &[&str]| {
        let req = ListTransactionsRequest {
            state_filters: states.iter().map(|s| (*s).to_owned()).collect(),
            transactional_id_pattern: Some(TransactionalIdPattern::new(pattern).unwrap()),
            duration_filter_ms: -1,
            ..Default::default()
        };
        let r = merge_list_responses(&req, [fx.eng().list_transactions(now, &req)]);
        r.transactions
            .into_iter()
            .map(|x| x.transactional_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(matching("t[0-2]", &[]), names(&["t0", "t1", "t2"]));
    assert_eq!(matching("t[0-2]", &["Ongoing"]), names(&["t0", "t1"]));
    assert!(matching("t", &[]).is_empty(), "a prefix is not a match");
    assert!(matching("1", &[]).is_empty(), "a substring is not a match");
    assert_eq!(matching("t1|t6", &[]), names(&["t1", "t6"]));
    assert_eq!(matching("", &[]), all, "the empty pattern lists everything");
    assert_eq!(matching(".*", &[]), all);
}
