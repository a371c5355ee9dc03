//! KIP-939 two-phase commit: `Enable2Pc` and `KeepPreparedTxn` on InitProducerId v6, behind
//! `transaction.two.phase.commit.enable`. docs/state-machine.md ("Two-phase commit") describes
//! the rules these scenarios check.
//!
//! Pids are handed out from 0; "tpc" is a fresh id unless a test loads a record.

use txn_log::{TxnRecord, TxnResult, TxnState, codec};

use super::fixture::*;
use crate::*;

fn t0() -> Vec<txn_log::TopicPartition> {
    vec![tp("t", 0)]
}

/// The default test configuration with two-phase commit allowed.
fn enabled() -> Config {
    Config {
        transaction_two_phase_commit_enable: true,
        ..config()
    }
}

/// A loaded two-phase-commit record: Kafka's timeout `Int.MaxValue` and the flag.
fn rec_2pc(pid: i64, epoch: i16, state: TxnState, parts: &[txn_log::TopicPartition]) -> TxnRecord {
    TxnRecord {
        two_phase_commit: true,
        timeout_ms: i32::MAX,
        ..rec(pid, epoch, state, parts)
    }
}

/// "tpc" initialized with `Enable2Pc` as (0, 0), with {t-0} in an open transaction.
fn open_2pc_txn(fx: &mut Fx) {
    let to = fx.init_2pc("tpc", false);
    let evs = fx.effects();
    assert_eq!(init_reply(&fx.ack(&evs), to), (ErrorCode::NONE, 0, 0));
    let to = fx.add("tpc", 0, 0, &t0());
    let evs = fx.effects();
    assert_eq!(
        add_reply(&fx.ack(&evs), to),
        vec![(tp("t", 0), ErrorCode::NONE)]
    );
}

/// A new session keeps the open transaction of "tpc": answered `(0, 1)`, ongoing `(0, 0)`.
fn keep(fx: &mut Fx) {
    let to = fx.init_2pc("tpc", true);
    let evs = fx.effects();
    let done = fx.ack(&evs);
    assert_eq!(init_reply(&done, to), (ErrorCode::NONE, 0, 1));
    assert_eq!(init_ongoing(&done, to), (0, 0));
}

/// Kafka answers `Enable2Pc` on a cluster without `transaction.two.phase.commit.enable`
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), and writes nothing; `KeepPreparedTxn` without
/// `Enable2Pc` is INVALID_REQUEST.
/// The markers of `tpc`'s transaction on `t-0` at (pid, epoch), coordinator epoch 0.
fn tpc_markers(pid: i64, epoch: i16, result: TxnResult) -> Ev {
    Ev::Markers {
        id: "tpc".into(),
        pid,
        epoch,
        ce: 0,
        result,
        parts: t0(),
    }
}

#[test]
fn enable_2pc_with_the_feature_off_is_transactional_id_authorization_failed() {
    let mut fx = Fx::new(Vec::new());
    for keep in [false, true] {
        let to = fx.init_2pc("tpc", keep);
        let evs = fx.effects();
        assert_eq!(
            init_reply(&evs, to),
            (ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        );
        assert_eq!(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0, 53);
        assert!(appended(&evs).is_empty());
    }
    let mut fx = Fx::with_config(enabled(), Vec::new());
    let to = fx.send(Request::InitProducerId(InitProducerIdRequest {
        keep_prepared_txn: true,
        ..InitProducerIdRequest::new_producer(6, "tpc", 60_000)
    }));
    assert_eq!(
        init_reply(&fx.effects(), to),
        (ErrorCode::INVALID_REQUEST, -1, -1)
    );
}

/// A 2PC id stores Kafka's "no timeout" (`Int.MaxValue`, what DescribeTransactions shows) and
/// the flag, and its open transaction is never aborted by the reaper, however long it waits;
/// a transaction without 2PC in the same partition is.
#[test]
fn a_two_phase_commit_transaction_is_never_timed_out() {
    let mut fx = Fx::with_config(
        enabled(),
        vec![
            ("classic", rec(10, 5, TxnState::Ongoing, &t0())),
            ("loaded-2pc", rec_2pc(11, 5, TxnState::Ongoing, &t0())),
        ],
    );
    open_2pc_txn(&mut fx);
    let r = fx.record("tpc").expect("present");
    assert_eq!((r.two_phase_commit, r.timeout_ms), (true, i32::MAX));
    // A hundred days: past any timeout, including i32::MAX milliseconds.
    let evs = fx.tick(100 * 24 * 3600 * 1000);
    let fenced: Vec<String> = appended(&evs).into_iter().map(|(id, _)| id).collect();
    assert_eq!(fenced, vec!["classic".to_owned()]);
    for id in ["tpc", "loaded-2pc"] {
        assert_eq!(
            fx.record(id).map(|r| r.state),
            Some(TxnState::Ongoing),
            "{id}"
        );
    }
}

/// `Enable2Pc` skips Kafka's timeout check (`validateTransactionTimeoutMs`): a 2PC id has no
/// timeout, so a timeout above `transaction.max.timeout.ms` is no error.
#[test]
fn enable_2pc_does_not_check_the_transaction_timeout() {
    let mut fx = Fx::with_config(enabled(), Vec::new());
    let to = fx.send(Request::InitProducerId(InitProducerIdRequest {
        enable_2pc: true,
        ..InitProducerIdRequest::new_producer(6, "tpc", i32::MAX)
    }));
    let evs = fx.effects();
    assert_eq!(init_reply(&fx.ack(&evs), to), (ErrorCode::NONE, 0, 0));
}

/// `KeepPreparedTxn`: the open transaction stays open with its pair (0, 0), answered as the
/// ongoing pair; the new session gets (0, 1). The producer that began the transaction is
/// fenced; the session may not add to it. The session's EndTxn(COMMIT) (TV2, v5) commits it:
/// markers at the next epoch (0, 2), which the answer hands out.
#[test]
fn keep_prepared_txn_returns_the_ongoing_pair_and_the_next_end_txn_commits_it() {
    let mut fx = Fx::with_config(enabled(), Vec::new());
    open_2pc_txn(&mut fx);
    keep(&mut fx);
    let r = fx.record("tpc").expect("present");
    assert_eq!(
        (r.state, r.producer_id.0, r.producer_epoch.0, r.session()),
        (
            TxnState::Ongoing,
            0,
            0,
            Some((txn_log::ProducerId(0), txn_log::ProducerEpoch(1)))
        )
    );
    // The old producer: fenced, whatever it tries.
    let to = fx.add("tpc", 0, 0, &[tp("t", 1)]);
    assert_eq!(
        add_reply(&fx.effects(), to),
        vec![(tp("t", 1), ErrorCode::PRODUCER_FENCED)]
    );
    let to = fx.verify("tpc", 0, 0, &t0());
    assert_eq!(
        add_reply(&fx.effects(), to),
        vec![(tp("t", 0), ErrorCode::PRODUCER_FENCED)]
    );
    assert_eq!(
        fx.end_error(5, "tpc", (0, 0), true),
        ErrorCode::PRODUCER_FENCED
    );
    // The session only ends it.
    let to = fx.add("tpc", 0, 1, &[tp("t", 1)]);
    assert_eq!(
        add_reply(&fx.effects(), to),
        vec![(tp("t", 1), ErrorCode::INVALID_TXN_STATE)]
    );
    let to = fx.end(5, "tpc", 0, 1, true);
    let evs = fx.effects();
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (prep.state, prep.producer_epoch.0, prep.session()),
        (TxnState::PrepareCommit, 2, None)
    );
    let all = fx.settle(evs);
    assert_eq!(end_reply(&all, to), (ErrorCode::NONE, 0, 2));
    assert!(all.contains(&tpc_markers(0, 2, TxnResult::Commit)));
    assert_eq!(
        fx.record("tpc").map(|r| (r.state, r.producer_epoch.0)),
        Some((TxnState::CompleteCommit, 2))
    );
    // The session goes on with what EndTxn handed out.
    let to = fx.add("tpc", 0, 2, &t0());
    let evs = fx.effects();
    assert_eq!(
        add_reply(&fx.ack(&evs), to),
        vec![(tp("t", 0), ErrorCode::NONE)]
    );
}

/// A recovery that retries its commit after the commit completed (the answer was lost) is
/// answered success with the same pair and writes nothing, under TV2 (the retry epoch) and
/// under TV0/1 (EndTxn v4: the session's pair itself, no bump).
#[test]
fn a_recovery_commit_of_a_committed_transaction_is_success() {
    for (version, after) in [(5, 2), (4, 1)] {
        let mut fx = Fx::with_config(enabled(), Vec::new());
        open_2pc_txn(&mut fx);
        keep(&mut fx);
        let to = fx.end(version, "tpc", 0, 1, true);
        let evs = fx.effects();
        let all = fx.settle(evs);
        assert_eq!(
            end_reply(&all, to),
            (ErrorCode::NONE, 0, after),
            "v{version}"
        );
        assert!(all.contains(&tpc_markers(0, after, TxnResult::Commit)));
        let to = fx.end(version, "tpc", 0, 1, true);
        let evs = fx.effects();
        assert_eq!(
            end_reply(&evs, to),
            (ErrorCode::NONE, 0, after),
            "v{version}"
        );
        assert!(appended(&evs).is_empty(), "a retry writes nothing");
    }
}

/// The session may abort the kept transaction too (TV0/1 here: the markers carry the
/// session's epoch, above the one the data was written with).
#[test]
fn the_session_aborts_a_kept_transaction() {
    let mut fx = Fx::with_config(enabled(), Vec::new());
    open_2pc_txn(&mut fx);
    keep(&mut fx);
    let to = fx.end(4, "tpc", 0, 1, false);
    let evs = fx.effects();
    let all = fx.settle(evs);
    assert_eq!(end_reply(&all, to), (ErrorCode::NONE, 0, 1));
    assert!(all.contains(&tpc_markers(0, 1, TxnResult::Abort)));
    assert_eq!(
        fx.record("tpc").map(|r| (r.state, r.session())),
        Some((TxnState::CompleteAbort, None))
    );
}

/// `KeepPreparedTxn` with nothing open is an ordinary epoch bump, answered with no ongoing pair
/// (-1, -1). A second `KeepPreparedTxn` while a transaction is kept fences the first session:
/// the next epoch after the last one handed out.
#[test]
fn keep_prepared_txn_without_an_open_transaction_and_twice() {
    let mut fx = Fx::with_config(enabled(), Vec::new());
    let to = fx.init_2pc("tpc", true);
    let evs = fx.effects();
    let done = fx.ack(&evs);
    assert_eq!(init_reply(&done, to), (ErrorCode::NONE, 0, 0));
    assert_eq!(init_ongoing(&done, to), (-1, -1));
    let to = fx.add("tpc", 0, 0, &t0());
    let evs = fx.effects();
    assert_eq!(
        add_reply(&fx.ack(&evs), to),
        vec![(tp("t", 0), ErrorCode::NONE)]
    );
    keep(&mut fx);
    let to = fx.init_2pc("tpc", true);
    let evs = fx.effects();
    let done = fx.ack(&evs);
    assert_eq!(init_reply(&done, to), (ErrorCode::NONE, 0, 2));
    assert_eq!(init_ongoing(&done, to), (0, 0));
    assert_eq!(
        fx.end_error(5, "tpc", (0, 1), true),
        ErrorCode::PRODUCER_FENCED
    );
}

/// `KeepPreparedTxn=false` (a new producer, or `kafka-transactions.sh force-terminate`, which
/// sends InitProducerId without the flags) aborts the kept transaction, fencing above the
/// session's epoch: the markers carry (0, 2), the retry gets (0, 3) with no ongoing pair.
#[test]
fn an_init_without_keep_prepared_txn_aborts_a_kept_transaction() {
    let mut fx = Fx::with_config(enabled(), Vec::new());
    open_2pc_txn(&mut fx);
    keep(&mut fx);
    let to = fx.init_v(6, Some("tpc"), 60_000, None);
    let evs = fx.effects();
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (prep.state, prep.producer_epoch.0, prep.session()),
        (TxnState::PrepareAbort, 2, None)
    );
    let all = fx.settle(evs);
    assert_eq!(init_reply(&all, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert!(all.contains(&tpc_markers(0, 2, TxnResult::Abort)));
    let to = fx.init_v(6, Some("tpc"), 60_000, None);
    let evs = fx.effects();
    let done = fx.ack(&evs);
    assert_eq!(init_reply(&done, to), (ErrorCode::NONE, 0, 3));
    assert_eq!(init_ongoing(&done, to), (-1, -1));
    assert!(!fx.record("tpc").expect("present").two_phase_commit);
}

/// Only a 2PC transaction can be kept: the coordinator may time any other out.
#[test]
fn keep_prepared_txn_of_a_transaction_without_2pc_is_invalid_txn_state() {
    let mut fx = Fx::with_config(
        enabled(),
        vec![("tpc", rec(10, 5, TxnState::Ongoing, &t0()))],
    );
    let to = fx.init_2pc("tpc", true);
    let evs = fx.effects_without_write();
    assert_eq!(init_reply(&evs, to), (ErrorCode::INVALID_TXN_STATE, -1, -1));
}

/// When the transaction's epochs are exhausted (32766), the session gets a new producer id
/// (0, 0). Its EndTxn (TV2) commits with markers of the old id at 32767; the completion moves
/// the id to the session's, at the epoch the answer handed out (0, 1); a retry is success.
#[test]
fn keep_prepared_txn_at_exhausted_epochs_hands_out_a_new_producer_id() {
    let mut fx = Fx::with_config(
        enabled(),
        vec![("tpc", rec_2pc(10, 32766, TxnState::Ongoing, &t0()))],
    );
    let to = fx.init_2pc("tpc", true);
    let evs = fx.effects();
    let done = fx.ack(&evs);
    assert_eq!(init_reply(&done, to), (ErrorCode::NONE, 0, 0));
    assert_eq!(init_ongoing(&done, to), (10, 32766));
    let to = fx.end(5, "tpc", 0, 0, true);
    let evs = fx.effects();
    let all = fx.settle(evs);
    assert_eq!(end_reply(&all, to), (ErrorCode::NONE, 0, 1));
    assert!(all.contains(&tpc_markers(10, 32767, TxnResult::Commit)));
    let r = fx.record("tpc").expect("present");
    assert_eq!(
        (
            r.state,
            r.producer_id.0,
            r.producer_epoch.0,
            r.prev_producer_id.0,
            r.session()
        ),
        (TxnState::CompleteCommit, 0, 1, 10, None)
    );
    let to = fx.end(5, "tpc", 0, 0, true);
    let evs = fx.effects_without_write();
    assert_eq!(end_reply(&evs, to), (ErrorCode::NONE, 0, 1));
}

/// A coordinator restart or failover (reload through the log's encoding) keeps the flag, the
/// kept transaction's pair and the session's: the reaper still leaves the transaction alone,
/// and the session's EndTxn still commits it.
#[test]
fn a_kept_transaction_survives_a_reload() {
    let mut fx = Fx::with_config(enabled(), Vec::new());
    open_2pc_txn(&mut fx);
    keep(&mut fx);
    let before = fx.record("tpc").expect("present");
    let _ = fx.reload(1);
    assert_eq!(fx.record("tpc"), Some(before));
    assert!(appended(&fx.tick(100 * 24 * 3600 * 1000)).is_empty());
    let to = fx.end(5, "tpc", 0, 1, true);
    let evs = fx.effects();
    let all = fx.settle(evs);
    assert_eq!(end_reply(&all, to), (ErrorCode::NONE, 0, 2));
    assert_eq!(
        fx.record("tpc").map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
}

/// A log written before two-phase commit (record payload version 1) loads into the engine:
/// its ids are not 2PC, and serve as before.
#[test]
fn a_version_1_record_loads_and_serves() {
    let partition = txn_log::LogPartition(0);
    let id = tid("old");
    let key = codec::record_key(partition, &id);
    // Version 1 (bincode, zigzag varints): producer id 10, prev -1, next -1, epoch 5, last -1,
    // next epoch -1, timeout 60000, CompleteCommit, no partitions, start 1, last update 2, TV2.
    let payload = [20, 1, 1, 10, 1, 1, 252, 192, 212, 1, 0, 4, 0, 2, 4, 2];
    let value = codec::seal_value(codec::KIND_RECORD, codec::RECORD_VERSION_1, &key, &payload)
        .expect("seals");
    let loaded =
        codec::decode_partition(partition, None, [Ok::<_, txn_log::LogError>((key, value))])
            .expect("a version-1 record decodes");
    let records = loaded
        .records
        .into_iter()
        .map(|(_, r)| ("old", r))
        .collect();
    let fx = Fx::with_config(enabled(), records);
    let r = fx.record("old").expect("loaded");
    assert_eq!((r.two_phase_commit, r.session()), (false, None));
    assert_eq!((r.producer_id.0, r.producer_epoch.0), (10, 5));
}
