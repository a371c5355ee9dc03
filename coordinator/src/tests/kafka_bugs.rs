//! Apache Kafka's transaction-coordinator bugs as regression scenarios: each test names the
//! Kafka JIRA, drives the engine through the situation that went wrong in Kafka, and fails if
//! the engine goes wrong the same way. docs/compatibility.md ("Kafka coordinator bugs we test
//! against") lists them, with the older tests that cover the same bugs elsewhere.
//!
//! Records come from Kafka's fixtures (pid 10, partitions {topic1-0}, timeout 1 ms, pids
//! handed out from 0) on the default configuration, which is transaction version 2.

use txn_log::{TxnResult, TxnState};

use super::fixture::*;
use crate::*;

/// The epoch of every record appended in `evs`, which must all be valid epochs (0..=32767).
fn appended_epochs(evs: &[Ev]) -> Vec<i16> {
    appended(evs)
        .into_iter()
        .filter_map(|(_, r)| r.map(|r| r.producer_epoch.0))
        .inspect(|e| assert!(*e >= 0, "epoch {e} overflowed"))
        .collect()
}

// ===== KAFKA-19367: double epoch bump =====

/// KAFKA-19367: under TV2, an InitProducerId that meets an open transaction fences it and
/// aborts it. Kafka bumped the epoch for the fence and again for the TV2 abort (5 -> 7; at
/// 32766 the second bump overflowed). Here the fence and the abort are one bump: the
/// PrepareAbort and its markers carry 6, the CompleteAbort keeps 6, and the client's retried
/// InitProducerId is the only further bump (7).
#[test]
fn kafka_19367_fence_of_an_open_tv2_transaction_bumps_the_epoch_once() {
    let mut fx = Fx::known(rec(10, 5, TxnState::Ongoing, &t1()));
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (
            prep.state,
            prep.producer_epoch.0,
            prep.last_producer_epoch.0
        ),
        (TxnState::PrepareAbort, 6, -1)
    );
    let all = fx.settle(evs);
    assert_eq!(init_reply(&all, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert!(all.contains(&known_markers(6, 0, TxnResult::Abort)));
    assert_eq!(
        appended_epochs(&all),
        vec![6, 6],
        "PrepareAbort, CompleteAbort"
    );
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 10, 7));
}

/// KAFKA-19367, the fence racing the client: the reaper's abort of a timed-out TV2
/// transaction bumps 5 -> 6. The producer's own EndTxn(ABORT) at 5 then arrives: while the
/// abort completes it waits (CONCURRENT_TRANSACTIONS), and afterwards it is a retry of an abort
/// that already happened, answered with the stored (10, 6) and no write. It must not bump the
/// epoch a second time.
#[test]
fn kafka_19367_client_abort_after_a_timeout_abort_does_not_bump_again() {
    let mut fx = Fx::known(rec(10, 5, TxnState::Ongoing, &t1()));
    let evs = fx.tick(10_000);
    assert_eq!(appended_epochs(&evs), vec![6]);
    assert_eq!(
        fx.end_error(5, "known", (10, 5), false),
        ErrorCode::CONCURRENT_TRANSACTIONS
    );
    let _ = fx.settle(evs);
    let to = fx.end(5, "known", 10, 5, false);
    let evs = fx.effects();
    assert_eq!(end_reply(&evs, to), (ErrorCode::NONE, 10, 6));
    assert!(appended(&evs).is_empty(), "a retry writes nothing");
    assert_eq!(
        fx.record("known").map(|r| (r.state, r.producer_epoch.0)),
        Some((TxnState::CompleteAbort, 6))
    );
}

// ===== KAFKA-20090 (and KAFKA-18660): the last epoch =====

/// Checks the record a coordinator-side abort at epoch 32766 leaves: the PrepareAbort at
/// (10, 32767) names the next pid (0) and keeps last epoch -1; its markers go out at (10, 32767);
/// the CompleteAbort moves to (0, 0) with previous pid 10, still with last epoch -1.
fn assert_fence_rotated(fx: &mut Fx, evs: Vec<Ev>) -> Vec<Ev> {
    let prep = appended(&evs)[0].1.clone().expect("upsert");
    assert_eq!(
        (
            prep.state,
            prep.producer_id.0,
            prep.producer_epoch.0,
            prep.next_producer_id.0,
            prep.last_producer_epoch.0
        ),
        (TxnState::PrepareAbort, 10, 32767, 0, -1)
    );
    let all = fx.settle(evs);
    assert!(all.contains(&known_markers(32767, 0, TxnResult::Abort)));
    assert_eq!(appended_epochs(&all), vec![32767, 0]);
    let r = fx.record("known").expect("present");
    assert_eq!(
        (
            r.state,
            r.producer_id.0,
            r.producer_epoch.0,
            r.prev_producer_id.0,
            r.next_producer_id.0,
            r.last_producer_epoch.0
        ),
        (TxnState::CompleteAbort, 0, 0, 10, -1, -1)
    );
    all
}

/// Checks that the old producer, (10, 32766), can no longer commit after a coordinator-side
/// abort rotated its id: a late EndTxn(COMMIT) is PRODUCER_FENCED (as Kafka answers since
/// KAFKA-20785) and writes nothing, a late EndTxn(ABORT) is a retry answered with the new
/// identity (0, 0).
fn assert_old_producer_cannot_commit(fx: &mut Fx) {
    let to = fx.end(5, "known", 10, 32766, true);
    let evs = fx.effects_without_write();
    assert_eq!(end_reply(&evs, to).0, ErrorCode::PRODUCER_FENCED);
    let to = fx.end(5, "known", 10, 32766, false);
    let evs = fx.effects_without_write();
    assert_eq!(end_reply(&evs, to), (ErrorCode::NONE, 0, 0));
    assert_eq!(
        fx.record("known").map(|r| (r.state, r.producer_id.0)),
        Some((TxnState::CompleteAbort, 0))
    );
}

/// KAFKA-20090: a TV2 transaction at the last usable epoch (32766) times out. The abort bumps
/// to 32767 (Short.MAX_VALUE), which no client may use; Kafka completed the abort there without
/// a next producer id, so the id was left at 32767 with nowhere to go (the next TV2 bump
/// overflows). The abort must rotate to a new producer id and complete at (0, 0), and the old
/// producer's late commit must be fenced, never committed.
#[test]
fn kafka_20090_timeout_abort_at_the_last_epoch_rotates_the_producer_id() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    let evs = fx.tick(10_000);
    let _ = assert_fence_rotated(&mut fx, evs);
    assert_old_producer_cannot_commit(&mut fx);
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 0, 1));
}

/// KAFKA-20090 through the other fence: a new producer's InitProducerId meets the open TV2
/// transaction at 32766. The fence-abort rotates as the timeout does and the old producer's
/// late commit is fenced; the new producer's retry gets the new id (0, 1), after which the old
/// producer's commit is refused as an unknown pid.
#[test]
fn kafka_20090_init_producer_id_fence_at_the_last_epoch_rotates_the_producer_id() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects();
    let all = assert_fence_rotated(&mut fx, evs);
    assert_eq!(init_reply(&all, to).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_old_producer_cannot_commit(&mut fx);
    assert_eq!(fx.init_acked("known", 10, None), (ErrorCode::NONE, 0, 1));
    let to = fx.end(5, "known", 10, 32766, true);
    let evs = fx.effects_without_write();
    assert_eq!(
        end_reply(&evs, to).0,
        ErrorCode::INVALID_PRODUCER_ID_MAPPING
    );
}

/// KAFKA-20090, allocator empty: the fence at 32766 needs a new producer id. Without one the
/// reaper writes nothing (it tries again at its next round) instead of aborting at 32767
/// without a next id, and an InitProducerId gets COORDINATOR_LOAD_IN_PROGRESS, as a rotation in
/// InitProducerId does.
#[test]
fn kafka_20090_fence_at_the_last_epoch_waits_for_a_producer_id() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    while fx.alloc().next_id().is_some() {}
    let evs = fx.tick(10_000);
    assert!(appended(&evs).is_empty(), "{evs:?}");
    let to = fx.init(Some("known"), 10, None);
    let evs = fx.effects_without_write();
    assert_eq!(
        init_reply(&evs, to).0,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
    assert_eq!(
        fx.record("known").map(|r| (r.state, r.producer_epoch.0)),
        Some((TxnState::Ongoing, 32766))
    );
}

/// KAFKA-20785, the producer's own abort: a TV2 EndTxn(ABORT) ends the transaction a bump
/// later (or, from the last epoch 32766, at the next producer id). A late EndTxn(COMMIT) of the
/// same producer at the old epoch is a retry epoch of an aborted transaction: PRODUCER_FENCED,
/// as Kafka answers whoever aborted, never the fatal INVALID_TXN_STATE; nothing is written.
#[test]
fn kafka_20785_late_commit_after_the_producers_own_abort_is_fenced() {
    for (epoch, completes_at) in [(5, (10, 6)), (32766, (0, 0))] {
        let mut fx = Fx::known(rec(10, epoch, TxnState::Ongoing, &t1()));
        let to = fx.end(5, "known", 10, epoch, false);
        let evs = fx.effects();
        let all = fx.settle(evs);
        assert_eq!(end_reply(&all, to).0, ErrorCode::NONE);
        assert_eq!(
            fx.record("known")
                .map(|r| (r.state, r.producer_id.0, r.producer_epoch.0)),
            Some((TxnState::CompleteAbort, completes_at.0, completes_at.1))
        );
        let to = fx.end(5, "known", 10, epoch, true);
        let evs = fx.effects_without_write();
        assert_eq!(
            end_reply(&evs, to).0,
            ErrorCode::PRODUCER_FENCED,
            "epoch {epoch}"
        );
    }
}

// ===== KAFKA-20310 / KAFKA-20357: rotation state over a failover =====

/// KAFKA-20310: Kafka's log encoding dropped the next and previous producer ids. A TV2 commit
/// at 32766 rotates to pid 0; the coordinator fails over between PrepareCommit and
/// CompleteCommit, and again after it. The first new owner must still complete to (0, 0) (the
/// next pid survived), the second must still take the client's retried EndTxn from (10, 32766)
/// as the overflow retry (the previous pid survived), and the client's next transaction under
/// (0, 0) must be accepted. Both reloads go through the log's encoding.
#[test]
fn kafka_20310_rotation_survives_failovers_before_and_after_completion() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    let to = fx.end(5, "known", 10, 32766, true);
    let evs = fx.effects();
    assert_eq!(end_reply(&fx.ack(&evs), to), (ErrorCode::NONE, 0, 0));
    let redriven = fx.reload(1);
    assert_eq!(redriven, vec![known_markers(32767, 1, TxnResult::Commit)]);
    let _ = fx.settle(redriven);
    assert_committed_after_rotation(&fx);
    assert!(fx.reload(2).is_empty());
    let to = fx.end(5, "known", 10, 32766, true);
    let evs = fx.effects_without_write();
    assert_eq!(end_reply(&evs, to), (ErrorCode::NONE, 0, 0));
    let to = fx.add("known", 0, 0, &[tp("topic2", 0)]);
    let evs = fx.effects();
    assert_eq!(add_reply(&fx.ack(&evs), to)[0].1, ErrorCode::NONE);
}

/// KAFKA-20090 and KAFKA-20357 together: the rotation of a timeout abort at 32766, with a
/// failover while the abort's markers are out. The new owner completes to the next pid, and the
/// old producer's late commit is still fenced: the last epoch -1 of the coordinator-side abort
/// came back from the log.
#[test]
fn kafka_20090_rotation_of_a_timeout_abort_survives_a_failover() {
    let mut fx = Fx::known(rec(10, 32766, TxnState::Ongoing, &t1()));
    let evs = fx.tick(10_000);
    let _ = fx.ack(&evs);
    let redriven = fx.reload(1);
    assert_eq!(redriven.len(), 1, "{redriven:?}");
    let _ = fx.settle(redriven);
    assert_eq!(
        fx.record("known")
            .map(|r| (r.producer_id.0, r.producer_epoch.0, r.prev_producer_id.0)),
        Some((0, 0, 10))
    );
    assert_old_producer_cannot_commit(&mut fx);
}

// ===== KAFKA-19999: markers resent after a failover =====

/// KAFKA-19999, end to end with the participant (`markers::participant`, the partition side a
/// broker embeds): a TV2 commit's markers reach the partition (which closes the transaction),
/// but the coordinator fails over before it records the completion. The new owner resends the
/// same decision, at the same producer epoch and its own coordinator epoch. Kafka's partitions
/// required a TV2 marker's epoch to be strictly greater than the producer's and rejected the
/// resend with INVALID_PRODUCER_EPOCH, a refusal for good: the next owner resends and is
/// rejected again, forever, and the transaction stays in PrepareCommit. The resend must be accepted as an idempotent retry and the
/// CompleteCommit appended.
#[cfg(feature = "embed")]
#[test]
fn kafka_19999_markers_resent_after_a_failover_complete_the_transaction() {
    use markers::participant::{
        BatchHeader, Marker, MarkerError, ParticipantConfig, PartitionState, ProduceDecision,
    };
    use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnVersion};

    /// Writes the marker of `m` to `part` as a broker would, and returns what the marker
    /// writer reports to the engine for that answer (its planner takes INVALID_PRODUCER_EPOCH
    /// and TRANSACTION_COORDINATOR_FENCED as a refusal for good).
    fn write_marker(part: &mut PartitionState, m: &Ev) -> MarkerOutcome {
        let Ev::Markers {
            pid,
            epoch,
            ce,
            result,
            ..
        } = m
        else {
            panic!("not markers: {m:?}");
        };
        let marker = Marker {
            producer_id: ProducerId(*pid),
            producer_epoch: ProducerEpoch(*epoch),
            coordinator_epoch: CoordinatorEpoch(*ce),
            result: *result,
            txn_version: TxnVersion::V2,
        };
        match part.check_marker(&marker) {
            Ok(pending) => {
                let at = part.next_offset();
                part.complete_marker(pending, at, 0).expect("appended");
                part.advance_high_watermark(part.next_offset());
                MarkerOutcome::Completed
            }
            Err(
                MarkerError::InvalidProducerEpoch { .. } | MarkerError::CoordinatorFenced { .. },
            ) => MarkerOutcome::Refused,
            Err(e) => panic!("marker refused: {e:?}"),
        }
    }

    let mut fx = Fx::new(vec![]);
    let (_, pid, epoch) = fx.init_acked("app", 60_000, None);
    let to = fx.add("app", pid, epoch, &t1());
    let evs = fx.effects();
    assert_eq!(add_reply(&fx.ack(&evs), to)[0].1, ErrorCode::NONE);

    // The producer writes to topic1-0.
    let mut part = PartitionState::new(ParticipantConfig::default(), 0);
    let batch = BatchHeader::transactional(ProducerId(pid), ProducerEpoch(epoch), 0, 3);
    let ProduceDecision::Append(pending) = part.check_batch(&batch).expect("accepted") else {
        panic!("not appended");
    };
    part.complete_append(pending, 0).expect("appended");
    part.advance_high_watermark(part.next_offset());
    assert_eq!(part.last_stable_offset(), 0, "the transaction is open");

    // EndTxn(COMMIT) under TV2: markers at the bumped epoch reach the partition...
    let to = fx.end(5, "app", pid, epoch, true);
    let evs = fx.effects();
    let after = fx.ack(&evs);
    assert_eq!(end_reply(&after, to), (ErrorCode::NONE, pid, epoch + 1));
    assert_eq!(
        fx.record("app").map(|r| r.client_txn_version),
        Some(TxnVersion::V2)
    );
    let first: Vec<Ev> = after
        .into_iter()
        .filter(|e| matches!(e, Ev::Markers { .. }))
        .collect();
    assert_eq!(write_marker(&mut part, &first[0]), MarkerOutcome::Completed);
    assert_eq!(part.last_stable_offset(), part.next_offset(), "committed");

    // ...but the coordinator fails over before it hears back. The new owner resends them.
    let resent = fx.reload(1);
    assert_eq!(
        resent,
        vec![Ev::Markers {
            id: "app".into(),
            pid,
            epoch: epoch + 1,
            ce: 1,
            result: TxnResult::Commit,
            parts: t1(),
        }]
    );
    let outcome = write_marker(&mut part, &resent[0]);
    assert_eq!(outcome, MarkerOutcome::Completed, "the resend is a retry");
    let evs = fx.markers_finished(&resent, outcome);
    assert_eq!(
        appended(&evs)
            .into_iter()
            .map(|(_, r)| r.map(|r| r.state))
            .collect::<Vec<_>>(),
        vec![Some(TxnState::CompleteCommit)]
    );
    let _ = fx.ack(&evs);
    assert_eq!(fx.eng().transactions_awaiting_markers().count(), 0);

    // The producer's next transaction starts at once.
    let to = fx.add("app", pid, epoch + 1, &t1());
    let evs = fx.effects();
    assert_eq!(add_reply(&fx.ack(&evs), to)[0].1, ErrorCode::NONE);
}
