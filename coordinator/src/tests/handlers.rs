//! Exact-effect unit tests per handler: which records, which reply, in which order.

use txn_log::{
    CoordinatorEpoch, LogError, LogPartition, ProducerEpoch, ProducerId, TxnResult, TxnState,
};

use super::fixture::*;
use crate::*;

#[test]
fn init_producer_id_appends_empty_then_replies_after_durable() {
    let mut fx = Fx::new(vec![]);
    fx.set_now(5);
    let to = fx.init(Some("known"), 1000, None);
    let evs = fx.effects();
    let mut want = rec(0, 0, TxnState::Empty, &[]);
    want.timeout_ms = 1000;
    want.txn_last_update_ms = 5;
    assert_eq!(
        evs,
        vec![Ev::Append(
            IoId(1),
            vec![("known".into(), Some(want.clone()))]
        )]
    );
    assert!(fx.record("known").is_none(), "not applied before durable");
    let evs = fx.ack(&evs);
    assert_eq!(
        evs,
        vec![Ev::Respond(
            to,
            Response::InitProducerId(InitProducerIdResponse::ok(ProducerId(0), ProducerEpoch(0)))
        )]
    );
    assert_eq!(fx.record("known"), Some(want));
}

#[test]
fn init_producer_id_failed_append_replies_translated_error_and_forgets_fresh_id() {
    let mut fx = Fx::new(vec![]);
    let to = fx.init(Some("known"), 1000, None);
    let evs = fx.effects();
    let evs = fx.fail(&evs, io_error());
    assert_eq!(
        init_reply(&evs, to),
        (ErrorCode::COORDINATOR_NOT_AVAILABLE, -1, -1)
    );
    assert_eq!(evs.len(), 1);
    assert!(fx.record("known").is_none());
    assert!(!fx.eng().has_pending(&tid("known")));
}

#[test]
fn concurrent_request_while_pending_gets_concurrent_transactions_without_effects() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    let _first = fx.init(Some("known"), 1000, None);
    let a = fx.effects();
    let second = fx.init(Some("known"), 1000, None);
    let add = fx.add("known", 10, 1, &[tp("topic1", 0)]);
    let end = fx.end(3, "known", 10, 1, true);
    let evs = fx.effects();
    assert_eq!(
        init_reply(&evs, second).0,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(
        add_reply(&evs, add),
        t1_result(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(end_reply(&evs, end).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert!(appended(&evs).is_empty());
    let _ = fx.ack(&a);
}

#[test]
fn add_partitions_appends_ongoing_and_replies_after_durable() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    fx.set_now(7);
    let to = fx.add("known", 10, 1, &[tp("topic1", 0)]);
    let evs = fx.effects();
    let mut want = rec(10, 1, TxnState::Ongoing, &[tp("topic1", 0)]);
    want.txn_start_ms = 7;
    want.txn_last_update_ms = 7;
    assert_eq!(
        evs,
        vec![Ev::Append(IoId(1), vec![("known".into(), Some(want))])]
    );
    let evs = fx.ack(&evs);
    assert_eq!(add_reply(&evs, to), t1_result(ErrorCode::NONE));
    assert_eq!(fx.eng().metrics().transactions_begun, 1);
}

#[test]
fn end_txn_tv2_commit_sequence_prepare_reply_markers_complete() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Ongoing, &[tp("topic1", 0)]));
    fx.set_now(9);
    let to = fx.end(5, "known", 10, 1, true);
    let evs = fx.effects();
    let mut prep = rec(10, 2, TxnState::PrepareCommit, &[tp("topic1", 0)]);
    prep.last_producer_epoch = ProducerEpoch(1);
    prep.txn_last_update_ms = 9;
    prep.client_txn_version = txn_log::TxnVersion::V2;
    assert_eq!(
        evs,
        vec![Ev::Append(
            IoId(1),
            vec![("known".into(), Some(prep.clone()))]
        )]
    );
    let evs = fx.ack(&evs);
    assert_eq!(
        evs,
        vec![
            Ev::Respond(
                to,
                Response::EndTxn(EndTxnResponse {
                    error: ErrorCode::NONE,
                    producer_id: ProducerId(10),
                    producer_epoch: ProducerEpoch(2)
                })
            ),
            known_markers(2, 0, TxnResult::Commit),
        ]
    );
    let evs = fx.markers_done(&evs);
    let mut done = prep.clone();
    done.state = TxnState::CompleteCommit;
    done.partitions.clear();
    assert_eq!(
        evs,
        vec![Ev::Append(
            IoId(2),
            vec![("known".into(), Some(done.clone()))]
        )]
    );
    assert!(fx.ack(&evs).is_empty(), "Complete has no reply");
    assert_eq!(fx.record("known"), Some(done));
    assert_eq!(fx.eng().metrics().transactions_committed, 1);
}

#[test]
fn failed_complete_append_is_retried_after_backoff() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Ongoing, &[tp("topic1", 0)]));
    let _ = fx.end(3, "known", 10, 1, false);
    let evs = fx.effects();
    let evs = fx.ack(&evs);
    let evs = fx.markers_done(&evs);
    assert_eq!(appended(&evs).len(), 1);
    assert!(fx.fail(&evs, io_error()).is_empty());
    assert_eq!(
        fx.record("known").map(|r| r.state),
        Some(TxnState::PrepareAbort)
    );
    assert_eq!(fx.eng().poll_timeout(), Some(Millis(50)));
    assert!(fx.tick(49).is_empty());
    let evs = fx.tick(50);
    let a = appended(&evs);
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].1.as_ref().map(|r| r.state),
        Some(TxnState::CompleteAbort)
    );
    let _ = fx.ack(&evs);
    assert_eq!(
        fx.record("known").map(|r| r.state),
        Some(TxnState::CompleteAbort)
    );
}

#[test]
fn fenced_append_unloads_and_answers_not_coordinator() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    let to = fx.add("known", 10, 1, &[tp("topic1", 0)]);
    let evs = fx.effects();
    let err = LogError::Fenced {
        partition: LogPartition(0),
        current: CoordinatorEpoch(1),
    };
    let evs = fx.fail(&evs, err);
    assert_eq!(add_reply(&evs, to), t1_result(ErrorCode::NOT_COORDINATOR));
    assert_eq!(evs.last(), Some(&Ev::Unloaded));
    assert!(!fx.eng().is_loaded());
    let to = fx.init(Some("known"), 10, None);
    assert_eq!(init_reply(&fx.effects(), to).0, ErrorCode::NOT_COORDINATOR);
}

#[test]
fn unload_answers_waiting_requests_and_ignores_late_completions() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    fx.unload();
    let after = fx.effects();
    assert_eq!(init_reply(&after, to).0, ErrorCode::NOT_COORDINATOR);
    assert_eq!(after.last(), Some(&Ev::Unloaded));
    assert!(
        fx.ack(&evs).is_empty(),
        "late ack of a dropped append is ignored"
    );
    assert_eq!(fx.eng().poll_timeout(), None);
}

#[test]
fn loading_engine_answers_load_in_progress_and_list_reports_it() {
    let mut fx = Fx::unloaded(ProducerIdAllocator::new());
    let to = fx.end(3, "known", 10, 1, true);
    let evs = fx.effects();
    assert_eq!(
        end_reply(&evs, to).0,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
    // A loading partition makes ListTransactions COORDINATOR_LOAD_IN_PROGRESS.
    let l = fx
        .eng()
        .list_transactions(Millis(0), &ListTransactionsRequest::default());
    assert_eq!(l.error, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    let merged = merge_list_responses(&ListTransactionsRequest::default(), [l]);
    assert_eq!(merged.error, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
}

#[test]
fn load_with_newer_stored_epoch_unloads() {
    let mut fx = Fx::unloaded(ProducerIdAllocator::new());
    assert_eq!(fx.load_again_overtaken(4, 5), vec![Ev::Unloaded]);
    assert!(!fx.eng().is_loaded());
}

#[test]
fn empty_allocator_answers_load_in_progress_and_asks_for_a_block() {
    let mut fx = Fx::unloaded(ProducerIdAllocator::new());
    assert!(fx.load_again(0).is_empty());
    let known = fx.init_v(4, Some("known"), 100, None);
    let anonymous = fx.init_v(4, None, 100, None);
    let evs = fx.effects();
    assert_eq!(evs[0], Ev::NeedPids, "exactly one block request");
    assert_eq!(
        init_reply(&evs, known).0,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
    assert_eq!(
        init_reply(&evs, anonymous).0,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
    assert_eq!(evs.iter().filter(|e| **e == Ev::NeedPids).count(), 1);
    fx.alloc()
        .add_block(txn_log::ProducerIdBlock {
            first: ProducerId(4000),
            len: 1000,
        })
        .expect("valid");
    let to = fx.init_v(4, None, 100, None);
    assert_eq!(init_reply(&fx.effects(), to), (ErrorCode::NONE, 4000, 0));
}

#[test]
fn handle_unrouted_answers_partitionless_requests() {
    let alloc = ProducerIdAllocator::with_block(txn_log::ProducerIdBlock {
        first: ProducerId(7),
        len: 10,
    })
    .expect("valid");
    let c = Config::default();
    let init = |id, timeout| init_request(4, id, timeout, None);
    let r = handle_unrouted(&c, &alloc, &init(None, 100));
    assert_eq!(
        r,
        Some(Response::InitProducerId(InitProducerIdResponse::ok(
            ProducerId(7),
            ProducerEpoch(0)
        )))
    );
    let r = handle_unrouted(&c, &alloc, &init(Some(""), 100));
    assert_eq!(
        r,
        Some(Response::InitProducerId(InitProducerIdResponse::error(
            ErrorCode::INVALID_REQUEST
        )))
    );
    let r = handle_unrouted(&c, &alloc, &init(Some("x"), 900_001));
    assert_eq!(
        r,
        Some(Response::InitProducerId(InitProducerIdResponse::error(
            ErrorCode::INVALID_TRANSACTION_TIMEOUT
        )))
    );
    assert_eq!(handle_unrouted(&c, &alloc, &init(Some("x"), 900_000)), None);
}

#[test]
fn batched_add_partitions_waits_for_every_transaction() {
    let mut fx = Fx::new(vec![
        ("a", rec(1, 0, TxnState::Empty, &[])),
        ("b", rec(2, 0, TxnState::Ongoing, &[tp("t", 0)])),
    ]);
    let to = fx.send(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
        version: 4,
        transactions: vec![
            AddPartitionsTxn {
                transactional_id: "a".into(),
                producer_id: ProducerId(1),
                producer_epoch: ProducerEpoch(0),
                verify_only: false,
                partitions: vec![tp("t", 1)],
            },
            AddPartitionsTxn {
                transactional_id: "b".into(),
                producer_id: ProducerId(2),
                producer_epoch: ProducerEpoch(0),
                verify_only: true,
                partitions: vec![tp("t", 0), tp("t", 9)],
            },
            AddPartitionsTxn {
                transactional_id: "zzz".into(),
                producer_id: ProducerId(3),
                producer_epoch: ProducerEpoch(0),
                verify_only: false,
                partitions: vec![tp("t", 2)],
            },
        ],
    }));
    let evs = fx.effects();
    assert_eq!(appended(&evs).len(), 1, "only 'a' writes");
    assert!(
        !evs.iter().any(|e| matches!(e, Ev::Respond(..))),
        "held until a is durable"
    );
    let evs = fx.ack(&evs);
    let Some(Ev::Respond(t, Response::AddPartitionsToTxn(r))) = evs.first() else {
        panic!("{evs:?}")
    };
    assert_eq!(*t, to);
    assert_eq!(r.results[0].partitions, vec![(tp("t", 1), ErrorCode::NONE)]);
    assert_eq!(
        r.results[1].partitions,
        vec![
            (tp("t", 0), ErrorCode::NONE),
            (tp("t", 9), ErrorCode::TRANSACTION_ABORTABLE)
        ]
    );
    assert_eq!(
        r.results[2].partitions,
        vec![(tp("t", 2), ErrorCode::INVALID_PRODUCER_ID_MAPPING)]
    );
}

#[test]
fn add_offsets_adds_the_consumer_offsets_partition() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    let to = fx.send(Request::AddOffsetsToTxn(AddOffsetsToTxnRequest {
        version: 3,
        transactional_id: "known".into(),
        producer_id: ProducerId(10),
        producer_epoch: ProducerEpoch(1),
        group_id: "g".into(),
    }));
    let evs = fx.effects();
    let a = appended(&evs);
    let parts: Vec<_> = a[0]
        .1
        .as_ref()
        .map(|r| r.partitions.iter().cloned().collect())
        .unwrap_or_default();
    assert_eq!(parts, vec![tp("__consumer_offsets", 3)]);
    let evs = fx.ack(&evs);
    assert_eq!(
        evs,
        vec![Ev::Respond(to, Response::AddOffsetsToTxn(ErrorCode::NONE))]
    );
    // v1 maps PRODUCER_FENCED to INVALID_PRODUCER_EPOCH.
    let to = fx.send(Request::AddOffsetsToTxn(AddOffsetsToTxnRequest {
        version: 1,
        transactional_id: "known".into(),
        producer_id: ProducerId(10),
        producer_epoch: ProducerEpoch(0),
        group_id: "g".into(),
    }));
    assert_eq!(
        fx.effects(),
        vec![Ev::Respond(
            to,
            Response::AddOffsetsToTxn(ErrorCode::INVALID_PRODUCER_EPOCH)
        )]
    );
}

#[test]
fn expiry_tombstones_idle_ids_through_the_log() {
    let mut old = rec(1, 0, TxnState::CompleteCommit, &[]);
    old.txn_last_update_ms = 0;
    let mut fresh = rec(2, 0, TxnState::Empty, &[]);
    fresh.txn_last_update_ms = 604_800_000;
    let mut fx = Fx::new(vec![("one", old), ("two", fresh)]);
    let evs = fx.tick(604_800_000);
    assert_eq!(evs, vec![Ev::Append(IoId(1), vec![("one".into(), None)])]);
    assert!(fx.record("one").is_some(), "removed only once durable");
    let _ = fx.ack(&evs);
    assert!(fx.record("one").is_none());
    assert!(fx.record("two").is_some());
    assert_eq!(fx.eng().metrics().transactional_ids_expired, 1);
}

#[test]
fn reaper_scan_is_bounded_per_call() {
    let cfg = Config {
        cleanup_scan_max: 2,
        ..config()
    };
    let recs: Vec<(String, _)> = (0..5)
        .map(|i| {
            (
                format!("id{i}"),
                rec(i, 0, TxnState::Ongoing, &[tp("t", 0)]),
            )
        })
        .collect();
    let mut fx = Fx::with_config(
        cfg,
        recs.iter().map(|(k, r)| (k.as_str(), r.clone())).collect(),
    );
    let evs = fx.tick(10_000);
    assert_eq!(appended(&evs).len(), 2);
    assert_eq!(
        fx.eng().poll_timeout(),
        Some(Millis(10_000)),
        "continues at once"
    );
    assert_eq!(appended(&fx.tick(10_000)).len(), 2);
    assert_eq!(appended(&fx.tick(10_000)).len(), 1);
    assert_eq!(fx.eng().poll_timeout(), Some(Millis(20_000)));
}

#[test]
fn describe_and_list_getters() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Ongoing, &[tp("topic1", 0)]));
    let d = fx.eng().describe("known");
    assert_eq!(
        (d.error, d.state, d.producer_id.0, d.producer_epoch.0),
        (ErrorCode::NONE, Some(TxnState::Ongoing), 10, 1)
    );
    assert_eq!(d.partitions, vec![tp("topic1", 0)]);
    assert_eq!(fx.eng().describe("").error, ErrorCode::INVALID_REQUEST);
    assert_eq!(
        fx.eng().describe("nope").error,
        ErrorCode::TRANSACTIONAL_ID_NOT_FOUND
    );
    let to = fx.send(Request::DescribeTransactions(DescribeTransactionsRequest {
        transactional_ids: vec!["known".into()],
    }));
    let evs = fx.effects();
    assert!(
        matches!(&evs[..], [Ev::Respond(t, Response::DescribeTransactions(v))] if *t == to && v[0] == d)
    );
}

#[test]
fn add_partitions_with_no_partitions_writes_nothing() {
    let mut fx = Fx::known(rec(10, 1, TxnState::Empty, &[]));
    let to = fx.add("known", 10, 1, &[]);
    let evs = fx.effects_without_write();
    assert_eq!(add_reply(&evs, to), vec![]);
    assert_eq!(fx.record("known").map(|r| r.state), Some(TxnState::Empty));
}
