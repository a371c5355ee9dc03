//! The state half of KIP-890 part 1 (transaction verification) on a participant partition.
//!
//! Before a producer's first transactional append to a partition (no transaction of that
//! producer at that epoch open here), the broker asks the transaction coordinator whether the
//! partition is in the producer's ongoing transaction (AddPartitionsToTxn v4+ with
//! `verify_only`). [`PartitionState::start_verification`](super::PartitionState::start_verification)
//! says whether a batch needs that question and hands out a [`VerificationGuard`]; the append
//! must then present the same guard
//! ([`PartitionState::check_batch_verified`](super::PartitionState::check_batch_verified)).
//! A marker or a transactional append of the producer clears the guard, and a verification at
//! a newer epoch replaces it, so an answer that went stale while the question was on the wire
//! (the transaction ended and a marker was written meanwhile) cannot open a transaction
//! nobody will close.
//!
//! Kafka keeps the same entry per producer (`VerificationStateEntry` in
//! [`ProducerStateManager`](https://github.com/apache/kafka/blob/4.1/storage/src/main/java/org/apache/kafka/storage/internals/log/ProducerStateManager.java)
//! and the checks in `UnifiedLog.analyzeAndValidateProducerState`).

use std::fmt;

use txn_log::{ProducerEpoch, ProducerId};

/// One pending verification of a producer's first transactional append to a partition
/// (Kafka's `VerificationGuard`): returned by
/// [`PartitionState::start_verification`](super::PartitionState::start_verification) and
/// required by [`PartitionState::check_batch_verified`](super::PartitionState::check_batch_verified).
///
/// Two guards are equal only if they come from the same start of a verification on the same
/// partition state; a guard whose verification was cleared (marker, transactional append) or
/// replaced (a newer epoch) is stale and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerificationGuard {
    id: u64,
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
}

impl VerificationGuard {
    /// The producer being verified.
    pub fn producer_id(&self) -> ProducerId {
        self.producer_id
    }

    /// The epoch being verified.
    pub fn producer_epoch(&self) -> ProducerEpoch {
        self.producer_epoch
    }
}

impl fmt::Display for VerificationGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verification #{} of producer {} epoch {}",
            self.id, self.producer_id.0, self.producer_epoch.0
        )
    }
}

/// What a partition remembers about a producer's verification in progress (Kafka's
/// `VerificationStateEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VerificationEntry {
    pub(crate) guard: VerificationGuard,
    /// The lowest first sequence seen among the batches waiting for this verification: a
    /// batch with a higher one may not be appended before it (KAFKA-14904's
    /// OutOfOrderSequence loop; Kafka's `lowestSequence`).
    pub(crate) lowest_sequence: i32,
    /// When the verification started (ms), for expiry with the producers.
    pub(crate) started_ms: i64,
}

impl VerificationEntry {
    pub(crate) fn new(
        id: u64,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        sequence: i32,
        now_ms: i64,
    ) -> Self {
        Self {
            guard: VerificationGuard {
                id,
                producer_id,
                producer_epoch,
            },
            lowest_sequence: sequence,
            started_ms: now_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use txn_log::{CoordinatorEpoch, ErrorCode, TxnResult};

    use super::super::*;
    use super::*;

    const PID: ProducerId = ProducerId(7);

    fn verifying() -> PartitionState {
        PartitionState::new(
            ParticipantConfig {
                transaction_verification: true,
                ..ParticipantConfig::default()
            },
            0,
        )
    }

    fn txn(epoch: i16, seq: i32) -> BatchHeader {
        BatchHeader::transactional(PID, ProducerEpoch(epoch), seq, 2)
    }

    fn append(p: &mut PartitionState, b: &BatchHeader, g: Option<VerificationGuard>) {
        let ProduceDecision::Append(pending) = p.check_batch_verified(b, g).expect("accepted")
        else {
            panic!("duplicate")
        };
        let at = p.next_offset();
        p.complete_append(pending, at).expect("recorded");
        p.advance_high_watermark(p.next_offset());
    }

    fn marker(p: &mut PartitionState, epoch: i16, result: TxnResult) -> MarkerApplied {
        marker_of(p, epoch, result, TxnVersion::V1)
    }

    fn marker_of(
        p: &mut PartitionState,
        epoch: i16,
        result: TxnResult,
        txn_version: TxnVersion,
    ) -> MarkerApplied {
        let pending = p
            .check_marker(&Marker {
                producer_id: PID,
                producer_epoch: ProducerEpoch(epoch),
                coordinator_epoch: CoordinatorEpoch(1),
                result,
                txn_version,
            })
            .expect("marker accepted");
        let at = p.next_offset();
        let applied = p.complete_marker(pending, at, 0).expect("recorded");
        p.advance_high_watermark(p.next_offset());
        applied
    }

    #[test]
    fn off_by_default_nothing_to_verify_and_appends_as_before() {
        let mut p = PartitionState::new(ParticipantConfig::default(), 0);
        assert_eq!(p.start_verification(&txn(0, 0), 0), Ok(None));
        append(&mut p, &txn(0, 0), None);
        assert_eq!(p.open_transaction_count(), 1);
        assert_eq!(p.metrics().verifications_started, 0);
    }

    #[test]
    fn a_first_transactional_append_needs_the_guard_later_ones_do_not() {
        let mut p = verifying();
        // Never verified: refused with INVALID_TXN_STATE, nothing opened.
        let e = p.check_batch(&txn(0, 0)).expect_err("unverified");
        assert_eq!(e.code(), 48);
        assert!(matches!(e, ProduceError::NotVerified { stale: false, .. }));
        assert_eq!(p.open_transaction_count(), 0);
        // Idempotent and plain batches never need it.
        let idem = BatchHeader::idempotent(ProducerId(8), ProducerEpoch(0), 0, 1);
        assert_eq!(p.start_verification(&idem, 0), Ok(None));
        append(&mut p, &idem, None);

        let g = p
            .start_verification(&txn(0, 0), 10)
            .unwrap()
            .expect("verify");
        assert_eq!(
            (g.producer_id(), g.producer_epoch()),
            (PID, ProducerEpoch(0))
        );
        assert_eq!(p.verification_guard(PID), Some(g));
        append(&mut p, &txn(0, 0), Some(g));
        // The append cleared the entry; the transaction is open, so the next batch of the
        // same epoch asks nothing and needs no guard.
        assert_eq!(p.verification_guard(PID), None);
        assert_eq!(p.start_verification(&txn(0, 2), 11), Ok(None));
        append(&mut p, &txn(0, 2), None);
        assert_eq!(p.metrics().verifications_started, 1);
        assert_eq!(p.metrics().not_verified, 1);

        // After the COMMIT marker the next transaction (same epoch under TV1) is verified again.
        marker(&mut p, 0, TxnResult::Commit);
        assert!(!p.has_ongoing_transaction(PID, ProducerEpoch(0)));
        assert_eq!(err(&mut p, &txn(0, 4), None), 48);
        let g2 = p
            .start_verification(&txn(0, 4), 12)
            .unwrap()
            .expect("verify");
        assert_ne!(g, g2);
        // The first guard is spent.
        assert_eq!(err(&mut p, &txn(0, 4), Some(g)), 48);
        append(&mut p, &txn(0, 4), Some(g2));
    }

    fn err(p: &mut PartitionState, b: &BatchHeader, g: Option<VerificationGuard>) -> ErrorCode {
        p.check_batch_verified(b, g).expect_err("refused").code()
    }

    /// The hanging transaction of KIP-890: the verification was answered while the
    /// transaction was still open, then its ABORT marker was written here before the
    /// (delayed) batch came to be appended. The guard is stale; nothing opens; the LSO moves.
    #[test]
    fn a_marker_between_verification_and_append_makes_the_guard_stale() {
        let mut p = verifying();
        let g = p
            .start_verification(&txn(0, 0), 0)
            .unwrap()
            .expect("verify");
        let applied = marker(&mut p, 0, TxnResult::Abort);
        assert_eq!(applied.completed, None);
        let e = p
            .check_batch_verified(&txn(0, 0), Some(g))
            .expect_err("stale");
        assert!(matches!(e, ProduceError::NotVerified { stale: true, .. }));
        assert_eq!(e.code(), 48);
        assert_eq!(p.open_transaction_count(), 0);
        assert_eq!(p.last_stable_offset(), p.next_offset());
    }

    /// TV2: the producer's next transaction runs at the epoch its last marker carries (the
    /// coordinator bumped it at EndTxn), and its first Produce can be verified before that
    /// marker lands here. The marker does not end the transaction the guard asked about, so
    /// the guard stays current and the batch is appended; a TV2 marker of a newer epoch than
    /// the guard's, or any TV1 marker (test above), clears it.
    #[test]
    fn a_tv2_marker_keeps_the_guard_of_the_next_transaction_at_its_epoch() {
        let mut p = verifying();
        let g0 = p
            .start_verification(&txn(0, 0), 0)
            .unwrap()
            .expect("verify");
        append(&mut p, &txn(0, 0), Some(g0));
        // The next transaction's first batch, epoch 1, asks before the commit marker lands.
        let g1 = p
            .start_verification(&txn(1, 0), 5)
            .unwrap()
            .expect("verify");
        let applied = marker_of(&mut p, 1, TxnResult::Commit, TxnVersion::V2);
        assert!(
            applied.completed.is_some(),
            "the epoch-0 transaction is committed"
        );
        assert_eq!(p.verification_guard(PID), Some(g1));
        append(&mut p, &txn(1, 0), Some(g1));
        assert_eq!(p.open_transaction_count(), 1);

        // A guard of an older epoch than a TV2 marker's asked about what the marker ended.
        let mut q = verifying();
        q.start_verification(&txn(0, 0), 0)
            .unwrap()
            .expect("verify");
        marker_of(&mut q, 1, TxnResult::Abort, TxnVersion::V2);
        assert_eq!(q.verification_guard(PID), None);
    }

    #[test]
    fn a_decision_that_went_stale_before_complete_append_is_refused() {
        let mut p = verifying();
        let g = p
            .start_verification(&txn(0, 0), 0)
            .unwrap()
            .expect("verify");
        let ProduceDecision::Append(pending) = p.check_batch_verified(&txn(0, 0), Some(g)).unwrap()
        else {
            panic!("duplicate")
        };
        assert_eq!(pending.guard(), Some(g));
        marker(&mut p, 0, TxnResult::Abort);
        let at = p.next_offset();
        assert!(matches!(
            p.complete_append(pending, at),
            Err(AppendError::StaleBatch(ProduceError::NotVerified {
                stale: true,
                ..
            }))
        ));
        assert_eq!(p.open_transaction_count(), 0);
    }

    #[test]
    fn a_newer_epoch_replaces_the_guard_and_fences_the_older_one() {
        let mut p = verifying();
        let g0 = p
            .start_verification(&txn(0, 0), 0)
            .unwrap()
            .expect("verify");
        let g1 = p
            .start_verification(&txn(1, 0), 0)
            .unwrap()
            .expect("verify");
        assert_ne!(g0, g1);
        // The old epoch's guard is stale, and a new verification at the old epoch is a zombie.
        assert_eq!(err(&mut p, &txn(0, 0), Some(g0)), 48);
        assert_eq!(
            p.start_verification(&txn(0, 0), 0).map_err(|e| e.code()),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        append(&mut p, &txn(1, 0), Some(g1));
        // Older than the producer's epoch here: fenced before any question is asked.
        marker(&mut p, 1, TxnResult::Commit);
        assert_eq!(
            p.start_verification(&txn(0, 2), 0).map_err(|e| e.code()),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
    }

    #[test]
    fn batches_waiting_on_one_verification_share_its_guard_lowest_sequence_first() {
        let mut p = verifying();
        // An unknown producer (any first sequence accepted): two requests in flight.
        let g = p
            .start_verification(&txn(0, 5), 0)
            .unwrap()
            .expect("verify");
        assert_eq!(p.start_verification(&txn(0, 3), 0), Ok(Some(g)));
        assert_eq!(p.metrics().verifications_started, 1);
        // The higher sequence may not go first (Kafka's lowestSequence).
        assert_eq!(err(&mut p, &txn(0, 5), Some(g)), 45);
        append(&mut p, &txn(0, 3), Some(g));
        append(&mut p, &txn(0, 5), None);
        assert_eq!(p.open_transaction_count(), 1);
    }

    #[test]
    fn duplicates_are_still_acknowledged_without_a_guard() {
        let mut p = verifying();
        let g = p
            .start_verification(&txn(0, 0), 0)
            .unwrap()
            .expect("verify");
        append(&mut p, &txn(0, 0), Some(g));
        marker(&mut p, 0, TxnResult::Commit);
        // A retry of the batch already in the log is a duplicate, not a new transaction.
        assert!(matches!(
            p.check_batch(&txn(0, 0)),
            Ok(ProduceDecision::Duplicate(_))
        ));
    }

    #[test]
    fn unanswered_verifications_expire_with_the_producers() {
        let mut p = verifying();
        let g = p
            .start_verification(&txn(0, 0), 1_000)
            .unwrap()
            .expect("verify");
        p.expire_producers(1_000 + 999, 1_000);
        assert_eq!(p.verification_guard(PID), Some(g));
        p.expire_producers(1_000 + 1_000, 1_000);
        assert_eq!(p.verification_guard(PID), None);
        assert_eq!(err(&mut p, &txn(0, 0), Some(g)), 48);
    }
}
