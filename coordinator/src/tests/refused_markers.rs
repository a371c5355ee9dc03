//! A participant that refuses a decision's marker for good (INVALID_PRODUCER_EPOCH,
//! TRANSACTION_COORDINATOR_FENCED): the transaction is held decided and reported, the log
//! partition stays served, and only the log decides who owns it.

use txn_log::{
    CoordinatorEpoch, LogError, LogPartition, RefusedMarker, TopicPartition, TxnResult, TxnState,
};

use super::fixture::*;
use crate::*;

fn two_parts() -> Vec<TopicPartition> {
    vec![tp("topic1", 0), tp("topic1", 1)]
}

fn refused_at_1(error: ErrorCode) -> Vec<RefusedMarker> {
    vec![RefusedMarker {
        partition: tp("topic1", 1),
        error,
    }]
}

/// A PrepareCommit on {topic1-0, topic1-1} whose markers were refused at topic1-1.
fn refused(error: ErrorCode) -> (Fx, Vec<Ev>) {
    let mut fx = Fx::new(vec![(
        "one",
        rec(1, 0, TxnState::PrepareCommit, &two_parts()),
    )]);
    let markers = fx.loaded.clone();
    assert_eq!(markers.len(), 1);
    let evs = fx.markers_refused(&markers, &refused_at_1(error));
    (fx, evs)
}

#[test]
fn a_refused_decision_is_held_and_every_other_id_is_served() {
    let (mut fx, evs) = refused(ErrorCode::INVALID_PRODUCER_EPOCH);
    assert!(evs.is_empty(), "no Complete*, no unload: {evs:?}");
    assert!(fx.eng().is_loaded());
    assert_eq!(
        fx.record("one").map(|r| r.state),
        Some(TxnState::PrepareCommit)
    );
    assert_eq!(fx.eng().metrics().markers_refused, 1);
    assert_eq!(fx.eng().transactions_awaiting_markers().count(), 0);
    let held: Vec<_> = fx
        .eng()
        .refused()
        .map(|(id, r)| (id.to_string(), r.to_vec()))
        .collect();
    assert_eq!(
        held,
        vec![(
            "one".to_owned(),
            refused_at_1(ErrorCode::INVALID_PRODUCER_EPOCH)
        )]
    );
    // DescribeTransactions lists what still lacks its marker.
    let d = fx.eng().describe("one");
    assert_eq!(d.error, ErrorCode::NONE);
    assert_eq!(d.state, Some(TxnState::PrepareCommit));
    assert_eq!(d.partitions, vec![tp("topic1", 1)]);
    // Another id of the same log partition runs a whole transaction.
    let (_, pid, epoch) = fx.init_acked("two", 60_000, None);
    let to = fx.add("two", pid, epoch, &t1());
    let evs = fx.effects();
    assert_eq!(add_reply(&fx.ack(&evs), to), t1_result(ErrorCode::NONE));
    let to = fx.end(3, "two", pid, epoch, true);
    let evs = fx.effects();
    let evs = fx.ack(&evs);
    assert_eq!(end_reply(&evs, to).0, ErrorCode::NONE);
    let _ = fx.settle(evs);
    assert_eq!(
        fx.record("two").map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
}

/// InitProducerId for the id (the producer restarting, or force-terminate) delivers the
/// refused decision again, at most once per REDRIVE_MIN_INTERVAL_MS; once the participant
/// takes the marker the transaction completes as any other.
#[test]
fn init_producer_id_delivers_a_refused_decision_again() {
    let (mut fx, _) = refused(ErrorCode::INVALID_PRODUCER_EPOCH);
    let t0 = fx.now();
    let to = fx.init(Some("one"), 60_000, None);
    let evs = fx.effects();
    assert_eq!(
        evs.len(),
        1,
        "answered at once, not delivered again yet: {evs:?}"
    );
    assert_eq!(init_reply(&evs, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);

    fx.set_now(t0 + 1_000);
    let to = fx.init(Some("one"), 60_000, None);
    let evs = fx.effects();
    assert_eq!(init_reply(&evs, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    let markers: Vec<Ev> = evs
        .into_iter()
        .filter(|e| matches!(e, Ev::Markers { .. }))
        .collect();
    assert_eq!(
        markers,
        vec![Ev::Markers {
            id: "one".into(),
            pid: 1,
            epoch: 0,
            ce: 0,
            result: TxnResult::Commit,
            parts: two_parts(),
        }]
    );
    assert_eq!(fx.eng().refused().count(), 0);
    let evs = fx.markers_done(&markers);
    let _ = fx.ack(&evs);
    assert_eq!(
        fx.record("one").map(|r| r.state),
        Some(TxnState::CompleteCommit)
    );
}

/// A request parked behind the completing transaction is answered CONCURRENT_TRANSACTIONS when
/// the decision is refused (it would wait for a Complete* that is not coming).
#[test]
fn parked_requests_are_answered_when_the_decision_is_refused() {
    let mut fx = Fx::with_config(
        Config {
            park_max_ms: 5_000,
            ..config()
        },
        vec![("one", rec(1, 0, TxnState::PrepareCommit, &two_parts()))],
    );
    let markers = fx.loaded.clone();
    let to = fx.init(Some("one"), 60_000, None);
    assert!(fx.effects().is_empty(), "parked");
    let evs = fx.markers_refused(&markers, &refused_at_1(ErrorCode::INVALID_PRODUCER_EPOCH));
    assert_eq!(init_reply(&evs, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
}

/// TRANSACTION_COORDINATOR_FENCED is the participant's word only: an empty append at our
/// coordinator epoch asks the log, and the partition stays loaded when the log says it is ours.
#[test]
fn coordinator_fenced_asks_the_log_and_stays_when_it_is_ours() {
    let (mut fx, evs) = refused(ErrorCode::TRANSACTION_COORDINATOR_FENCED);
    assert!(
        matches!(evs.as_slice(), [Ev::Append(_, entries)] if entries.is_empty()),
        "{evs:?}"
    );
    assert!(fx.ack(&evs).is_empty());
    assert!(fx.eng().is_loaded());
    assert_eq!(fx.eng().refused().count(), 1);
}

/// ...and unloads when the log says a newer coordinator epoch claimed the partition.
#[test]
fn coordinator_fenced_unloads_when_the_log_has_a_newer_owner() {
    let (mut fx, evs) = refused(ErrorCode::TRANSACTION_COORDINATOR_FENCED);
    let err = LogError::Fenced {
        partition: LogPartition(0),
        current: CoordinatorEpoch(1),
    };
    assert_eq!(fx.fail(&evs, err), vec![Ev::Unloaded]);
    assert!(!fx.eng().is_loaded());
}

/// A reload forgets the refusal and delivers the decision again (the load re-drives every
/// Prepare*).
#[test]
fn a_reload_delivers_a_refused_decision_again() {
    let (mut fx, _) = refused(ErrorCode::INVALID_PRODUCER_EPOCH);
    let evs = fx.reload(1);
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert!(matches!(&evs[0], Ev::Markers { id, .. } if id == "one"));
    assert_eq!(fx.eng().refused().count(), 0);
}
