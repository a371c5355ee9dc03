//! Parking (`Config::park_max_ms`): a request that meets its id's previous transaction
//! completing is answered when the Complete* is durable, or CONCURRENT_TRANSACTIONS after the
//! bounded wait; never earlier than Kafka could answer it, never with another code.

use txn_log::{ProducerEpoch, ProducerId, TxnState};

use super::fixture::*;
use crate::*;

const PARK_MS: i64 = 1000;

fn parking() -> Fx {
    let config = Config {
        park_max_ms: PARK_MS,
        ..config()
    };
    Fx::with_config(config, vec![("t", rec(10, 1, TxnState::Empty, &[]))])
}

fn responses(evs: &[Ev]) -> Vec<RequestId> {
    evs.iter()
        .filter_map(|e| match e {
            Ev::Respond(to, _) => Some(*to),
            _ => None,
        })
        .collect()
}

/// Runs one TV1 transaction on `t` (10, 1) up to PrepareCommit durable; returns the
/// WriteMarkers effects.
fn prepared(fx: &mut Fx) -> Vec<Ev> {
    fx.add("t", 10, 1, &[tp("topic1", 0)]);
    let evs = fx.effects();
    fx.ack(&evs);
    fx.end(3, "t", 10, 1, true);
    let evs = fx.effects();
    let evs = fx.ack(&evs);
    assert!(
        evs.iter().any(|e| matches!(e, Ev::Markers { .. })),
        "{evs:?}"
    );
    evs
}

#[test]
fn add_partitions_after_end_txn_is_answered_when_the_commit_completes() {
    let mut fx = parking();
    let markers = prepared(&mut fx);
    let add = fx.add("t", 10, 1, &[tp("topic1", 1)]);
    assert_eq!(fx.effects(), vec![], "parked: no answer, no write");
    assert_eq!(fx.eng().poll_timeout(), Some(Millis(fx.now() + PARK_MS)));

    // Markers written: CompleteCommit and, in the same append, the parked add's Ongoing.
    let complete = fx.markers_done(&markers);
    assert!(responses(&complete).is_empty(), "{complete:?}");
    let written: Vec<_> = appended(&complete)
        .into_iter()
        .map(|(id, r)| (id, r.expect("upsert").state))
        .collect();
    assert_eq!(
        written,
        vec![
            ("t".to_owned(), TxnState::CompleteCommit),
            ("t".to_owned(), TxnState::Ongoing)
        ]
    );
    // Answered only once that append is durable.
    let evs = fx.ack(&complete);
    assert_eq!(
        add_reply(&evs, add),
        vec![(tp("topic1", 1), ErrorCode::NONE)]
    );
    assert_eq!(fx.eng().metrics().requests_parked, 1);
    assert_eq!(fx.eng().metrics().parked_requests_timed_out, 0);
}

#[test]
fn a_parked_request_gets_concurrent_transactions_after_the_bounded_wait() {
    let mut fx = parking();
    let _markers = prepared(&mut fx);
    let add = fx.add("t", 10, 1, &[tp("topic1", 1)]);
    assert_eq!(fx.effects(), vec![]);
    assert_eq!(fx.tick(fx.now() + PARK_MS - 1), vec![]);
    let evs = fx.tick(fx.now() + 1);
    assert_eq!(
        add_reply(&evs, add),
        vec![(tp("topic1", 1), ErrorCode::CONCURRENT_TRANSACTIONS)]
    );
    assert_eq!(fx.eng().metrics().parked_requests_timed_out, 1);
    assert!(
        fx.eng().poll_timeout() > Some(Millis(fx.now())),
        "no deadline left behind"
    );
}

#[test]
fn init_producer_id_during_prepare_abort_bumps_after_the_abort_completes() {
    let mut fx = parking();
    fx.add("t", 10, 1, &[tp("topic1", 0)]);
    let evs = fx.effects();
    fx.ack(&evs);
    fx.end(3, "t", 10, 1, false);
    let evs = fx.effects();
    let markers = fx.ack(&evs);
    let init = fx.init(Some("t"), 1000, None);
    assert_eq!(fx.effects(), vec![]);
    let complete = fx.markers_done(&markers);
    let bump = fx.ack(&complete);
    assert!(responses(&bump).is_empty());
    let evs = fx.ack(&bump);
    assert_eq!(init_reply(&evs, init), (ErrorCode::NONE, 10, 2));
    assert_eq!(fx.record("t").map(|r| r.state), Some(TxnState::Empty));
}

#[test]
fn add_offsets_parks_too() {
    let mut fx = parking();
    let markers = prepared(&mut fx);
    let to = fx.send(Request::AddOffsetsToTxn(AddOffsetsToTxnRequest {
        version: 3,
        transactional_id: "t".into(),
        producer_id: ProducerId(10),
        producer_epoch: ProducerEpoch(1),
        group_id: "g".into(),
    }));
    assert_eq!(fx.effects(), vec![]);
    let complete = fx.markers_done(&markers);
    assert_eq!(
        appended(&complete).len(),
        2,
        "Complete* and the add in one append"
    );
    let evs = fx.ack(&complete);
    assert!(evs.contains(&Ev::Respond(to, Response::AddOffsetsToTxn(ErrorCode::NONE))));
    assert_eq!(fx.eng().metrics().transactions_committed, 1);
    assert_eq!(fx.eng().metrics().transactions_begun, 2);
}

#[test]
fn a_stale_producer_gets_kafkas_answer_at_once_or_after_the_wait() {
    let mut fx = parking();
    let markers = prepared(&mut fx);
    // A zombie with an old epoch: Kafka checks the epoch before the state, so nothing waits.
    let early = fx.add("t", 10, 0, &[tp("topic1", 1)]);
    let evs = fx.effects();
    assert_eq!(
        add_reply(&evs, early),
        vec![(tp("topic1", 1), ErrorCode::PRODUCER_FENCED)]
    );
    // While the CompleteCommit append is in flight Kafka checks pending first: it waits, and
    // the re-run answers what Kafka answers then.
    let complete = fx.markers_done(&markers);
    let late = fx.add("t", 10, 0, &[tp("topic1", 1)]);
    assert_eq!(fx.effects(), vec![]);
    let evs = fx.ack(&complete);
    assert_eq!(
        add_reply(&evs, late),
        vec![(tp("topic1", 1), ErrorCode::PRODUCER_FENCED)]
    );
}

#[test]
fn unloading_answers_parked_requests_not_coordinator() {
    let mut fx = parking();
    let _markers = prepared(&mut fx);
    let init = fx.init(Some("t"), 1000, None);
    fx.unload();
    let evs = fx.effects();
    assert_eq!(init_reply(&evs, init).0, ErrorCode::NOT_COORDINATOR);
}

#[test]
fn a_brokers_batch_is_answered_at_once() {
    let mut fx = parking();
    let _markers = prepared(&mut fx);
    let to = fx.send(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
        version: 4,
        transactions: ["t", "u"]
            .into_iter()
            .map(|id| AddPartitionsTxn {
                transactional_id: id.into(),
                producer_id: ProducerId(10),
                producer_epoch: ProducerEpoch(1),
                verify_only: false,
                partitions: vec![tp("topic1", 1)],
            })
            .collect(),
    }));
    let evs = fx.effects();
    assert_eq!(responses(&evs), vec![to]);
    let Some(Ev::Respond(_, Response::AddPartitionsToTxn(r))) = evs.first() else {
        panic!("{evs:?}");
    };
    assert_eq!(
        r.results[0].partitions,
        vec![(tp("topic1", 1), ErrorCode::CONCURRENT_TRANSACTIONS)]
    );
}

#[test]
fn an_id_with_no_transaction_completing_is_not_parked() {
    let mut fx = parking();
    // A transition in flight that is not a completion: Kafka's answer at once.
    let _first = fx.init(Some("t"), 1000, None);
    let _ = fx.effects();
    let second = fx.init(Some("t"), 1000, None);
    let evs = fx.effects();
    assert_eq!(
        init_reply(&evs, second).0,
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
}

#[test]
fn tv2_next_transaction_at_the_bumped_epoch_waits_for_the_commit() {
    let mut fx = parking();
    fx.add("t", 10, 1, &[tp("topic1", 0)]);
    let evs = fx.effects();
    fx.ack(&evs);
    let end = fx.end(5, "t", 10, 1, true);
    let evs = fx.effects();
    let markers = fx.ack(&evs);
    assert_eq!(end_reply(&markers, end), (ErrorCode::NONE, 10, 2));
    let add = fx.add("t", 10, 2, &[tp("topic1", 0)]);
    assert_eq!(fx.effects(), vec![]);
    let complete = fx.markers_done(&markers);
    let evs = fx.ack(&complete);
    assert_eq!(add_reply(&evs, add), t1_result(ErrorCode::NONE));
    let r = fx.record("t").expect("record");
    assert_eq!(
        (r.state, r.producer_epoch),
        (TxnState::Ongoing, ProducerEpoch(2))
    );
}

/// The Complete* and the parked add share an append; if it fails the Complete* is retried and
/// the add gets Kafka's answer for a failed append (the client retries it).
#[test]
fn a_failed_shared_append_retries_the_complete_and_answers_the_add() {
    let mut fx = parking();
    let markers = prepared(&mut fx);
    let add = fx.add("t", 10, 1, &[tp("topic1", 1)]);
    let complete = fx.markers_done(&markers);
    assert_eq!(appended(&complete).len(), 2);
    let evs = fx.fail(&complete, io_error());
    assert_eq!(
        add_reply(&evs, add),
        vec![(tp("topic1", 1), ErrorCode::COORDINATOR_NOT_AVAILABLE)]
    );
    assert_eq!(
        fx.record("t").map(|r| r.state),
        Some(TxnState::PrepareCommit)
    );
    let retried = fx.tick(fx.now() + Config::default().complete_retry_backoff_ms);
    let written: Vec<_> = appended(&retried)
        .into_iter()
        .map(|(_, r)| r.expect("upsert").state)
        .collect();
    assert_eq!(written, vec![TxnState::CompleteCommit]);
    fx.ack(&retried);
    assert_eq!(
        fx.record("t").map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
}

/// Zombie fencing as kafka-python drives it: B's InitProducerId fences A's open transaction
/// (CONCURRENT_TRANSACTIONS, then B asks again); A, refused by a broker, asks for an epoch bump
/// (KIP-360) with its old epoch, before B's retry or after B got its epoch; B's next
/// AddPartitionsToTxn must still be accepted.
#[test]
fn a_fenced_producers_bump_does_not_fence_the_new_one() {
    for a_bumps_before_b_retries in [false, true] {
        let mut fx = parking();
        fx.add("t", 10, 1, &[tp("topic1", 0)]);
        let evs = fx.effects();
        fx.ack(&evs);
        let mut all = Vec::new();
        let mut b_epoch = None;
        let mut a = None;
        for _ in 0..5 {
            if a_bumps_before_b_retries && a.is_none() && !all.is_empty() {
                a = Some(fx.init_v(3, Some("t"), 1000, Some((10, 1))));
                let evs = fx.effects();
                all.extend(fx.settle(evs));
            }
            let b = fx.init_v(3, Some("t"), 1000, None);
            let evs = fx.effects();
            all.extend(fx.settle(evs));
            let (code, pid, epoch) = init_reply(&all, b);
            if code == ErrorCode::NONE {
                assert_eq!(pid, 10);
                b_epoch = Some(epoch);
                break;
            }
            assert_eq!(code, ErrorCode::CONCURRENT_TRANSACTIONS, "{all:?}");
        }
        let b_epoch = b_epoch.expect("B initialized");
        let a = a.unwrap_or_else(|| fx.init_v(3, Some("t"), 1000, Some((10, 1))));
        let evs = fx.effects();
        all.extend(fx.settle(evs));
        // PRODUCER_FENCED from v4 on; v3 gets INVALID_PRODUCER_EPOCH, as Kafka.
        assert_eq!(
            init_reply(&all, a).0,
            ErrorCode::INVALID_PRODUCER_EPOCH,
            "A bumps before B retries: {a_bumps_before_b_retries}: {all:?}"
        );
        assert_eq!(fx.record("t").map(|r| r.producer_epoch.0), Some(b_epoch));
        let add = fx.add("t", 10, b_epoch, &[tp("topic1", 1)]);
        let evs = fx.effects();
        let evs = fx.ack(&evs);
        assert_eq!(
            add_reply(&evs, add),
            vec![(tp("topic1", 1), ErrorCode::NONE)],
            "A bumps before B retries: {a_bumps_before_b_retries}"
        );
    }
}
