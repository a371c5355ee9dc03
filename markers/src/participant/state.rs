//! [`PartitionState`]: the producer state of one partition, with its validate-then-commit API.

use std::collections::HashMap;
use std::ops::Range;

use bytes::Bytes;
use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};

use super::batch::{BatchHeader, LogBatch};
use super::control::{ControlBatch, ControlRecord};
use super::error::{AppendError, MarkerError, ProduceError, ReplayError};
use super::metrics::ParticipantMetrics;
use super::producer::{ActiveProducer, BatchMetadata, ProducerEntry, in_sequence, next_sequence};
use super::txn_index::{AbortedTxn, CompletedTxn, TxnIndex};
use super::verification::{VerificationEntry, VerificationGuard};

/// What to do with the first batch of a producer the partition has no state for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnknownProducerPolicy {
    /// Accept any first sequence (Kafka ≥ 2.5, KIP-360): the producer's state may have been
    /// removed by retention or `producer.id.expiration.ms`, and rejecting it would make an
    /// idle idempotent producer fail. Sequences are checked from that batch on.
    #[default]
    AcceptAnySequence,
    /// Require sequence 0; otherwise answer UNKNOWN_PRODUCER_ID (59), as Kafka < 2.5 did. A
    /// KIP-360 client then bumps its epoch and restarts at 0.
    RequireSequenceZero,
}

/// Choices a broker makes once per partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParticipantConfig {
    /// First batch of an unknown producer.
    pub unknown_producer: UnknownProducerPolicy,
    /// KIP-890 part 1, transaction verification: a transactional batch that would open its
    /// producer's transaction on this partition (none open here at the batch's epoch) is
    /// appended only with the [`VerificationGuard`] of a verification the coordinator answered
    /// (see [`PartitionState::start_verification`]); without one it is refused with
    /// INVALID_TXN_STATE. Kafka's broker setting `transaction.partition.verification.enable`
    /// (default true there). Off by default here, because only a broker that asks its
    /// coordinator (`markers::verify`) can hold guards; such a broker turns it on.
    pub transaction_verification: bool,
}

/// The transaction version a marker was written under (WriteTxnMarkers v2
/// `TransactionVersion`; 0 when the request is v0/v1). It selects the producer epoch rule.
/// The workspace's one transaction-version type, defined in `txn_log`.
pub use txn_log::TxnVersion;

/// One marker of a WriteTxnMarkers request, for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Producer whose transaction ends.
    pub producer_id: ProducerId,
    /// The marker's producer epoch (under TV2 the bumped epoch, data epoch + 1).
    pub producer_epoch: ProducerEpoch,
    /// Epoch of the coordinator that decided.
    pub coordinator_epoch: CoordinatorEpoch,
    /// Commit or abort.
    pub result: TxnResult,
    /// Transaction version of the marker.
    pub txn_version: TxnVersion,
}

/// A produce batch that passed [`PartitionState::check_batch`] and must now be appended to
/// the log; then hand it to [`PartitionState::complete_append`] with the offset it got.
#[must_use = "append the batch, then call PartitionState::complete_append"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAppend {
    header: BatchHeader,
    guard: Option<VerificationGuard>,
}

impl PendingAppend {
    /// The batch that was checked.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The verification guard the batch was checked with, if any.
    pub fn guard(&self) -> Option<VerificationGuard> {
        self.guard
    }
}

/// A batch already in the log: acknowledge it with the original offsets, do not append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateBatch {
    /// Offset of the first record of the original copy (the ProduceResponse `base_offset`).
    pub base_offset: i64,
    /// Offset of its last record.
    pub last_offset: i64,
    /// Its max timestamp (ms).
    pub max_timestamp_ms: i64,
}

/// The verdict on a produce batch.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceDecision {
    /// Append the batch, then call [`PartitionState::complete_append`].
    Append(PendingAppend),
    /// A retry of a batch already appended: answer NONE with its original base offset.
    Duplicate(DuplicateBatch),
}

/// Where a recorded batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendedBatch {
    /// First offset.
    pub base_offset: i64,
    /// Last offset.
    pub last_offset: i64,
}

/// A marker that passed [`PartitionState::check_marker`]: write its control batch (see
/// [`PendingMarker::control_batch`]) at the log end, then call [`PartitionState::complete_marker`].
#[must_use = "append the control batch, then call PartitionState::complete_marker"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMarker {
    marker: Marker,
}

impl PendingMarker {
    /// The marker that was checked.
    pub fn marker(&self) -> &Marker {
        &self.marker
    }

    /// The control batch to append at `base_offset` (the log end offset).
    pub fn control_batch(
        &self,
        base_offset: i64,
        partition_leader_epoch: i32,
        timestamp_ms: i64,
    ) -> ControlBatch {
        ControlBatch {
            producer_id: self.marker.producer_id,
            producer_epoch: self.marker.producer_epoch,
            coordinator_epoch: self.marker.coordinator_epoch,
            result: self.marker.result,
            base_offset,
            partition_leader_epoch,
            timestamp_ms,
        }
    }
}

/// What recording a marker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerApplied {
    /// Offset of the control batch.
    pub offset: i64,
    /// The transaction it closed; `None` if the producer had none open here (an empty
    /// transaction, or an idempotent retry): such a marker moves neither the LSO nor the index.
    pub completed: Option<CompletedTxn>,
}

/// What a read_committed Fetch needs from the producer state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCommitted {
    /// Serve no data at or above this offset (the partition's `last_stable_offset`).
    pub last_stable_offset: i64,
    /// Aborted transactions overlapping the served range, for the response's `aborted_transactions`.
    pub aborted: Vec<AbortedTxn>,
}

/// The producer state of one partition (Kafka's `ProducerStateManager` and transaction index).
///
/// Single owner, synchronous, no I/O: the broker holds it under the partition's lock, asks it
/// before every append (`check_*`), appends to its own log, and reports the offsets
/// (`complete_*`). See the [module docs](super) for the call sequences.
///
/// `Clone` is the snapshot: keep a clone with its [`PartitionState::next_offset`], and after a
/// restart continue with [`PartitionState::replay_batch`] from that offset.
#[derive(Debug, Clone)]
pub struct PartitionState {
    config: ParticipantConfig,
    producers: HashMap<ProducerId, ProducerEntry>,
    txns: TxnIndex,
    next_offset: i64,
    log_start_offset: i64,
    metrics: ParticipantMetrics,
    /// KIP-890 verifications in progress, one per producer (Kafka's `verificationStates`).
    verifications: HashMap<ProducerId, VerificationEntry>,
    /// The id of the next [`VerificationGuard`] handed out.
    next_guard: u64,
}

impl PartitionState {
    /// An empty partition whose log starts at `log_start_offset`.
    pub fn new(config: ParticipantConfig, log_start_offset: i64) -> Self {
        let start = log_start_offset.max(0);
        let mut txns = TxnIndex::default();
        txns.set_high_watermark(start);
        Self {
            config,
            producers: HashMap::new(),
            txns,
            next_offset: start,
            log_start_offset: start,
            metrics: ParticipantMetrics::default(),
            verifications: HashMap::new(),
            next_guard: 1,
        }
    }

    // ===== produce =====

    /// Validates a produce batch against the producer's state. Changes nothing but counters.
    ///
    /// Rules, in Kafka's order: shape (INVALID_RECORD); duplicate of one of the last 5
    /// batches of the same epoch (→ [`ProduceDecision::Duplicate`]); epoch older than current
    /// (INVALID_PRODUCER_EPOCH); sequence — a new epoch must start at 0, the same epoch must
    /// continue at last + 1 (wrapping after `i32::MAX`) (OUT_OF_ORDER_SEQUENCE_NUMBER); a
    /// non-transactional batch inside an open transaction (INVALID_TXN_STATE).
    ///
    /// With [`ParticipantConfig::transaction_verification`] on, a transactional batch that
    /// would open its producer's transaction here needs a verification guard: use
    /// [`PartitionState::check_batch_verified`]; this method refuses it (INVALID_TXN_STATE).
    pub fn check_batch(&mut self, batch: &BatchHeader) -> Result<ProduceDecision, ProduceError> {
        self.check_batch_verified(batch, None)
    }

    /// [`PartitionState::check_batch`] with the guard of a verification the coordinator
    /// answered positively (KIP-890 part 1; see [`PartitionState::start_verification`]).
    ///
    /// After the duplicate and epoch checks, a transactional batch that needs verification
    /// (verification on, no transaction of the producer open here at the batch's epoch) is
    /// refused with [`ProduceError::NotVerified`] (INVALID_TXN_STATE) unless `guard` is the
    /// producer's current guard: none was started, it was cleared by a marker or a
    /// transactional append in between, or a verification at a newer epoch replaced it. While
    /// a verification is pending, a batch of its epoch whose first sequence is above the
    /// lowest one waiting is OUT_OF_ORDER_SEQUENCE_NUMBER (the lower one goes first).
    pub fn check_batch_verified(
        &mut self,
        batch: &BatchHeader,
        guard: Option<VerificationGuard>,
    ) -> Result<ProduceDecision, ProduceError> {
        let verdict = self.validate_batch(batch, guard);
        let m = &mut self.metrics;
        match &verdict {
            Ok(ProduceDecision::Duplicate(_)) => m.duplicates += 1,
            Ok(ProduceDecision::Append(_)) => {}
            Err(ProduceError::InvalidRecord { .. }) => m.invalid_records += 1,
            Err(ProduceError::InvalidProducerEpoch { .. }) => m.produce_epoch_fenced += 1,
            Err(ProduceError::OutOfOrderSequence { .. }) => m.out_of_order += 1,
            Err(ProduceError::InvalidTxnState { .. }) => m.invalid_txn_state += 1,
            Err(ProduceError::UnknownProducerId { .. }) => m.unknown_producer += 1,
            Err(ProduceError::NotVerified { .. }) => m.not_verified += 1,
        }
        verdict
    }

    /// Starts (or joins) the verification of a batch before its append (KIP-890 part 1,
    /// Kafka's `UnifiedLog.maybeStartTransactionVerification`). Changes only the
    /// verification entry of the batch's producer and counters.
    ///
    /// - `Ok(None)`: no question to ask the coordinator — verification is off, the batch is
    ///   not transactional (or has no producer id), or the producer already has a transaction
    ///   open here at the batch's epoch. Check the batch with [`PartitionState::check_batch`].
    /// - `Ok(Some(guard))`: ask the coordinator whether this partition is in the producer's
    ///   transaction (AddPartitionsToTxn v4+, `verify_only`); only on a positive answer check
    ///   the batch with [`PartitionState::check_batch_verified`]`(batch, Some(guard))`. Batches
    ///   of the same producer and epoch share one guard until it is cleared; a batch with a
    ///   lower first sequence lowers the sequence the append must start from.
    /// - `Err(InvalidProducerEpoch)`: the batch's epoch is older than the producer's epoch
    ///   here, or than the epoch of a verification already in progress (a zombie).
    ///
    /// The entry is cleared when the producer's next transactional batch or marker is
    /// recorded, replaced by a verification at a newer epoch, and dropped by
    /// [`PartitionState::expire_producers`] once older than the expiration.
    pub fn start_verification(
        &mut self,
        batch: &BatchHeader,
        now_ms: i64,
    ) -> Result<Option<VerificationGuard>, ProduceError> {
        if !self.config.transaction_verification
            || !batch.is_transactional
            || batch.is_control
            || !batch.has_producer_id()
        {
            return Ok(None);
        }
        let pid = batch.producer_id;
        let epoch = batch.producer_epoch;
        let current = self
            .producers
            .get(&pid)
            .map_or(ProducerEpoch::NONE, |e| e.producer_epoch);
        let verifying = self
            .verifications
            .get(&pid)
            .map_or(ProducerEpoch::NONE, |v| v.guard.producer_epoch());
        if (current.is_some() && epoch < current) || (verifying.is_some() && epoch < verifying) {
            self.metrics.produce_epoch_fenced += 1;
            return Err(ProduceError::InvalidProducerEpoch {
                producer_id: pid,
                batch_epoch: epoch,
                current_epoch: current.max(verifying),
            });
        }
        if self.has_ongoing_transaction(pid, epoch) {
            return Ok(None);
        }
        if let Some(v) = self.verifications.get_mut(&pid)
            && v.guard.producer_epoch() == epoch
        {
            v.lowest_sequence = v.lowest_sequence.min(batch.base_sequence);
            return Ok(Some(v.guard));
        }
        let id = self.next_guard;
        self.next_guard += 1;
        let entry = VerificationEntry::new(id, pid, epoch, batch.base_sequence, now_ms);
        let guard = entry.guard;
        self.verifications.insert(pid, entry);
        self.metrics.verifications_started += 1;
        Ok(Some(guard))
    }

    /// The guard of the producer's verification in progress here, if any.
    pub fn verification_guard(&self, producer_id: ProducerId) -> Option<VerificationGuard> {
        self.verifications.get(&producer_id).map(|v| v.guard)
    }

    /// Whether the producer has a transaction open here at `epoch` (Kafka's
    /// `hasOngoingTransaction`): its batches at that epoch need no verification.
    pub fn has_ongoing_transaction(&self, producer_id: ProducerId, epoch: ProducerEpoch) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.producer_epoch == epoch)
    }

    /// The verification rules of [`PartitionState::check_batch_verified`] for a batch with a
    /// producer id.
    fn check_verification(
        &self,
        b: &BatchHeader,
        guard: Option<VerificationGuard>,
    ) -> Result<(), ProduceError> {
        let pid = b.producer_id;
        let entry = self.verifications.get(&pid);
        if self.config.transaction_verification
            && b.is_transactional
            && !self.has_ongoing_transaction(pid, b.producer_epoch)
        {
            let current = entry.map(|v| v.guard);
            if guard.is_none() || guard != current {
                return Err(ProduceError::NotVerified {
                    producer_id: pid,
                    producer_epoch: b.producer_epoch,
                    stale: guard.is_some(),
                });
            }
        }
        if let Some(v) = entry
            && v.guard.producer_epoch() == b.producer_epoch
            && b.base_sequence > v.lowest_sequence
        {
            return Err(ProduceError::OutOfOrderSequence {
                producer_id: pid,
                epoch: b.producer_epoch,
                base_sequence: b.base_sequence,
                expected: v.lowest_sequence,
            });
        }
        Ok(())
    }

    fn validate_batch(
        &self,
        b: &BatchHeader,
        guard: Option<VerificationGuard>,
    ) -> Result<ProduceDecision, ProduceError> {
        let invalid = |reason| Err(ProduceError::InvalidRecord { reason });
        if b.is_control {
            return invalid("clients may not write control batches");
        }
        if b.record_count <= 0 {
            return invalid("a batch must hold at least one record");
        }
        if i64::from(b.last_offset_delta) != i64::from(b.record_count) - 1 {
            return invalid("last offset delta does not match the record count");
        }
        if !b.has_producer_id() {
            if b.is_transactional {
                return invalid("a transactional batch must carry a producer id");
            }
            return Ok(self.append(b, None));
        }
        if !b.producer_epoch.is_some() {
            return invalid("a batch with a producer id must carry a producer epoch");
        }
        if b.base_sequence < 0 {
            return invalid("a batch with a producer id must carry a sequence");
        }
        let pid = b.producer_id;
        let Some(e) = self
            .producers
            .get(&pid)
            .filter(|e| e.producer_epoch.is_some())
        else {
            self.check_verification(b, guard)?;
            if b.base_sequence != 0
                && self.config.unknown_producer == UnknownProducerPolicy::RequireSequenceZero
            {
                return Err(ProduceError::UnknownProducerId {
                    producer_id: pid,
                    base_sequence: b.base_sequence,
                });
            }
            return Ok(self.append(b, guard));
        };
        if b.producer_epoch == e.producer_epoch
            && let Some(d) = e.find_duplicate(b.base_sequence, b.last_sequence())
        {
            return Ok(ProduceDecision::Duplicate(DuplicateBatch {
                base_offset: d.first_offset,
                last_offset: d.last_offset,
                max_timestamp_ms: d.max_timestamp_ms,
            }));
        }
        if b.producer_epoch < e.producer_epoch {
            return Err(ProduceError::InvalidProducerEpoch {
                producer_id: pid,
                batch_epoch: b.producer_epoch,
                current_epoch: e.producer_epoch,
            });
        }
        self.check_verification(b, guard)?;
        let expected = if b.producer_epoch == e.producer_epoch {
            next_sequence(e.last_sequence())
        } else {
            0
        };
        let ok = if b.producer_epoch == e.producer_epoch {
            in_sequence(e.last_sequence(), b.base_sequence)
        } else {
            b.base_sequence == 0
        };
        if !ok {
            return Err(ProduceError::OutOfOrderSequence {
                producer_id: pid,
                epoch: b.producer_epoch,
                base_sequence: b.base_sequence,
                expected,
            });
        }
        if let (false, Some(first)) = (b.is_transactional, e.current_txn_first_offset) {
            return Err(ProduceError::InvalidTxnState {
                producer_id: pid,
                txn_first_offset: first,
            });
        }
        Ok(self.append(b, guard))
    }

    fn append(&self, b: &BatchHeader, guard: Option<VerificationGuard>) -> ProduceDecision {
        ProduceDecision::Append(PendingAppend { header: *b, guard })
    }

    /// Records that the checked batch was appended with its first record at `base_offset`.
    ///
    /// The batch is validated again (it is cheap), so a decision that went stale because
    /// another batch of the producer was recorded in between is refused rather than applied.
    pub fn complete_append(
        &mut self,
        pending: PendingAppend,
        base_offset: i64,
    ) -> Result<AppendedBatch, AppendError> {
        let header = pending.header;
        match self.validate_batch(&header, pending.guard) {
            Ok(ProduceDecision::Append(_)) => {}
            Ok(ProduceDecision::Duplicate(d)) => {
                return Err(AppendError::StaleDuplicate {
                    base_offset: d.base_offset,
                });
            }
            Err(e) => return Err(AppendError::StaleBatch(e)),
        }
        let last_offset = self.check_offsets(base_offset, header.last_offset_delta)?;
        self.apply_data(&header, base_offset, last_offset);
        self.metrics.batches_appended += 1;
        Ok(AppendedBatch {
            base_offset,
            last_offset,
        })
    }

    fn check_offsets(&self, base_offset: i64, last_offset_delta: i32) -> Result<i64, AppendError> {
        let invalid = AppendError::InvalidOffsets {
            base_offset,
            last_offset_delta,
        };
        if base_offset < 0 || last_offset_delta < 0 {
            return Err(invalid);
        }
        let Some(last) = base_offset.checked_add(i64::from(last_offset_delta)) else {
            return Err(invalid);
        };
        if last == i64::MAX {
            return Err(invalid);
        }
        if base_offset < self.next_offset {
            return Err(AppendError::OffsetBehindLog {
                base_offset,
                next_offset: self.next_offset,
            });
        }
        Ok(last)
    }

    /// The one state change for a data batch, shared by live appends and replay.
    fn apply_data(&mut self, b: &BatchHeader, first_offset: i64, last_offset: i64) {
        self.next_offset = last_offset + 1;
        if !b.has_producer_id() {
            return;
        }
        if b.is_transactional {
            // Kafka's `UnifiedLog.updateProducers`: once a transactional batch is written the
            // transaction is open here (or already was), so the verification is done with.
            self.verifications.remove(&b.producer_id);
        }
        let e = self
            .producers
            .entry(b.producer_id)
            .or_insert_with(ProducerEntry::new);
        e.update_epoch(b.producer_epoch);
        if b.base_sequence >= 0 {
            e.push_batch(BatchMetadata {
                first_sequence: b.base_sequence,
                last_sequence: b.last_sequence(),
                first_offset,
                last_offset,
                max_timestamp_ms: b.max_timestamp_ms,
            });
        }
        // Kafka's ProducerStateEntry.addBatch: the last batch's timestamp, not the largest.
        e.last_timestamp_ms = b.max_timestamp_ms;
        if b.is_transactional && e.current_txn_first_offset.is_none() {
            e.current_txn_first_offset = Some(first_offset);
            self.txns.open(first_offset, b.producer_id);
        }
    }

    // ===== markers =====

    /// Validates a transaction marker. Changes nothing but counters.
    ///
    /// - Producer epoch, TV0/TV1: marker epoch ≥ current, else INVALID_PRODUCER_EPOCH.
    /// - Producer epoch, TV2: marker epoch > current; equal is accepted only with no
    ///   transaction open (an idempotent retry, KAFKA-19999), else INVALID_PRODUCER_EPOCH.
    /// - Coordinator epoch: lower than the last marker's → TRANSACTION_COORDINATOR_FENCED.
    pub fn check_marker(&mut self, marker: &Marker) -> Result<PendingMarker, MarkerError> {
        let verdict = self.validate_marker(marker);
        let m = &mut self.metrics;
        match &verdict {
            Ok(_) => {}
            Err(MarkerError::InvalidMarker { .. }) => m.markers_invalid += 1,
            Err(MarkerError::InvalidProducerEpoch { .. }) => m.markers_epoch_fenced += 1,
            Err(MarkerError::CoordinatorFenced { .. }) => m.markers_coordinator_fenced += 1,
        }
        verdict
    }

    fn validate_marker(&self, marker: &Marker) -> Result<PendingMarker, MarkerError> {
        if !marker.producer_id.is_some() {
            return Err(MarkerError::InvalidMarker {
                reason: "marker without a producer id",
            });
        }
        if !marker.producer_epoch.is_some() {
            return Err(MarkerError::InvalidMarker {
                reason: "marker without a producer epoch",
            });
        }
        let (current, txn_open, current_ce) = match self.producers.get(&marker.producer_id) {
            Some(e) => (
                e.producer_epoch,
                e.current_txn_first_offset.is_some(),
                e.coordinator_epoch,
            ),
            None => (ProducerEpoch::NONE, false, CoordinatorEpoch(-1)),
        };
        let epoch_ok = if marker.txn_version.bumps_epoch_per_txn() {
            marker.producer_epoch > current || (marker.producer_epoch == current && !txn_open)
        } else {
            marker.producer_epoch >= current
        };
        if !epoch_ok {
            return Err(MarkerError::InvalidProducerEpoch {
                producer_id: marker.producer_id,
                marker_epoch: marker.producer_epoch,
                current_epoch: current,
                txn_open,
                txn_version: marker.txn_version,
            });
        }
        if current_ce > marker.coordinator_epoch {
            return Err(MarkerError::CoordinatorFenced {
                producer_id: marker.producer_id,
                marker_coordinator_epoch: marker.coordinator_epoch,
                current_coordinator_epoch: current_ce,
            });
        }
        Ok(PendingMarker { marker: *marker })
    }

    /// Records that the checked marker's control batch was appended at `offset`; closes the
    /// producer's open transaction (an ABORT enters the aborted-transaction index).
    pub fn complete_marker(
        &mut self,
        pending: PendingMarker,
        offset: i64,
        timestamp_ms: i64,
    ) -> Result<MarkerApplied, AppendError> {
        let marker = pending.marker;
        let _revalidated = self
            .validate_marker(&marker)
            .map_err(AppendError::StaleMarker)?;
        self.check_offsets(offset, 0)?;
        // The transaction a pending verification asked about may be the one this marker
        // ends: its answer can no longer be trusted (Kafka clears it the same way). Under TV2
        // the marker carries the bumped epoch, the one the producer's next transaction runs
        // at: a verification at that epoch (or a later one) asked about that next transaction,
        // which this marker does not end, so it stays.
        let next_txn_guard = marker.txn_version.bumps_epoch_per_txn()
            && self
                .verifications
                .get(&marker.producer_id)
                .is_some_and(|v| v.guard.producer_epoch() >= marker.producer_epoch);
        if !next_txn_guard {
            self.verifications.remove(&marker.producer_id);
        }
        let completed = self.apply_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.result,
            offset,
            timestamp_ms,
        );
        self.metrics.markers_applied += 1;
        match completed.map(|c| c.result) {
            Some(TxnResult::Commit) => self.metrics.txns_committed += 1,
            Some(TxnResult::Abort) => self.metrics.txns_aborted += 1,
            None => {}
        }
        Ok(MarkerApplied { offset, completed })
    }

    /// The one state change for a marker, shared by live appends and replay.
    fn apply_marker(
        &mut self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        coordinator_epoch: CoordinatorEpoch,
        result: TxnResult,
        offset: i64,
        timestamp_ms: i64,
    ) -> Option<CompletedTxn> {
        self.next_offset = offset + 1;
        let e = self
            .producers
            .entry(producer_id)
            .or_insert_with(ProducerEntry::new);
        e.update_epoch(producer_epoch);
        e.coordinator_epoch = coordinator_epoch;
        e.last_timestamp_ms = timestamp_ms;
        let first_offset = e.current_txn_first_offset.take()?;
        let txn = CompletedTxn {
            producer_id,
            first_offset,
            marker_offset: offset,
            result,
        };
        self.txns.complete(txn);
        Some(txn)
    }

    // ===== replay =====

    /// Rebuilds the state from a partition's batches, in log order (Kafka's producer-state
    /// recovery: applied without the client-side checks, as replication does).
    pub fn replay<I>(
        config: ParticipantConfig,
        log_start_offset: i64,
        batches: I,
    ) -> Result<Self, AppendError>
    where
        I: IntoIterator<Item = LogBatch>,
    {
        let mut state = Self::new(config, log_start_offset);
        for batch in batches {
            state.replay_batch(&batch)?;
        }
        Ok(state)
    }

    /// As [`PartitionState::replay`], reading the batches from raw log bytes.
    pub fn replay_log(
        config: ParticipantConfig,
        log_start_offset: i64,
        log: Bytes,
    ) -> Result<Self, ReplayError> {
        let mut state = Self::new(config, log_start_offset);
        for batch in LogBatch::read_all(log) {
            state.replay_batch(&batch?)?;
        }
        Ok(state)
    }

    /// Applies one batch already in the log (replay after a restart or a snapshot, or a
    /// follower copying the leader). No epoch or sequence checks; offsets must not go back.
    pub fn replay_batch(&mut self, batch: &LogBatch) -> Result<(), AppendError> {
        let h = batch.header();
        let last = self.check_offsets(h.base_offset, h.last_offset_delta)?;
        match batch {
            LogBatch::Data(h) => {
                if h.is_transactional && !h.has_producer_id() {
                    return Err(AppendError::InvalidBatch(ProduceError::InvalidRecord {
                        reason: "a transactional batch must carry a producer id",
                    }));
                }
                self.apply_data(h, h.base_offset, last);
            }
            LogBatch::Control {
                header,
                record:
                    ControlRecord::EndTxn {
                        result,
                        coordinator_epoch,
                    },
            } => {
                if !header.has_producer_id() {
                    return Err(AppendError::InvalidBatch(ProduceError::InvalidRecord {
                        reason: "a transaction marker must carry a producer id",
                    }));
                }
                // A replayed marker carries no transaction version: any verification of the
                // producer is cleared, the TV0/TV1 rule of `complete_marker`.
                self.verifications.remove(&header.producer_id);
                self.apply_marker(
                    header.producer_id,
                    header.producer_epoch,
                    *coordinator_epoch,
                    *result,
                    last,
                    header.max_timestamp_ms,
                );
            }
            LogBatch::Control {
                record: ControlRecord::Other { .. },
                ..
            } => self.next_offset = last + 1,
        }
        Ok(())
    }

    // ===== reads =====

    /// Moves the high watermark (the offset below which the log is replicated). A single
    /// replica broker calls this with its log end offset after every append. Values above
    /// [`PartitionState::next_offset`] are clamped to it.
    pub fn advance_high_watermark(&mut self, high_watermark: i64) {
        self.txns
            .set_high_watermark(high_watermark.clamp(self.log_start_offset, self.next_offset));
    }

    /// The high watermark last given.
    pub fn high_watermark(&self) -> i64 {
        self.txns.high_watermark()
    }

    /// Last stable offset: the smallest first offset of a transaction that is open or whose
    /// marker is not yet below the high watermark; else the high watermark. read_committed
    /// readers see nothing at or above it; ListOffsets(read_committed, latest) returns it.
    pub fn last_stable_offset(&self) -> i64 {
        self.txns.last_stable_offset()
    }

    /// First offset of the oldest unstable transaction, if any (Kafka's `firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.txns.first_unstable_offset()
    }

    /// Aborted transactions overlapping the data offsets `range` (`last_offset >= start &&
    /// first_offset < end`), ordered by marker offset.
    pub fn aborted_transactions(&self, range: Range<i64>) -> Vec<AbortedTxn> {
        self.txns.aborted_overlapping(range)
    }

    /// For a read_committed Fetch from `fetch_offset` whose data would end (exclusive) at
    /// `end_offset`: the LSO to cap it at, and the aborted transactions over
    /// `fetch_offset..min(end_offset, LSO)`.
    pub fn read_committed(&self, fetch_offset: i64, end_offset: i64) -> ReadCommitted {
        let lso = self.last_stable_offset();
        ReadCommitted {
            last_stable_offset: lso,
            aborted: self.aborted_transactions(fetch_offset..end_offset.min(lso)),
        }
    }

    /// The state of one producer.
    pub fn producer(&self, producer_id: ProducerId) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every producer with state here (in no particular order).
    pub fn producers(&self) -> impl Iterator<Item = (ProducerId, &ProducerEntry)> {
        self.producers.iter().map(|(&p, e)| (p, e))
    }

    /// The answer to DescribeProducers (KIP-664) for this partition: one row per producer the
    /// partition has state for (until [`PartitionState::expire_producers`] removes it), ordered
    /// by producer id, with Kafka's `-1` for "none".
    ///
    /// A broker answers DescribeProducers from the partition's leader with these rows
    /// (`producer_id`, `producer_epoch`, `last_sequence`, `last_timestamp`,
    /// `coordinator_epoch`, `current_txn_start_offset`); for a partition that does not exist
    /// it answers UNKNOWN_TOPIC_OR_PARTITION (3), for one it does not lead
    /// NOT_LEADER_OR_FOLLOWER (6). A row with `current_txn_start_offset >= 0` is a
    /// transaction open on this partition: `kafka-transactions.sh find-hanging` compares it
    /// with what the coordinator knows, and `kafka-transactions.sh abort --start-offset`
    /// takes the producer id, epoch and coordinator epoch from it for the ABORT marker it
    /// sends (WriteTxnMarkers to this partition).
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let mut rows: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(&p, e)| ActiveProducer::of(p, e))
            .collect();
        rows.sort_by_key(|r| r.producer_id);
        rows
    }

    /// Open transactions as `(first_offset, producer_id)`, oldest first.
    pub fn open_transactions(&self) -> impl Iterator<Item = (i64, ProducerId)> + '_ {
        self.txns.open_txns()
    }

    /// Number of open transactions.
    pub fn open_transaction_count(&self) -> usize {
        self.txns.open_count()
    }

    /// Number of entries in the aborted-transaction index.
    pub fn aborted_index_len(&self) -> usize {
        self.txns.aborted_len()
    }

    /// One past the last offset the state has seen (the log end offset).
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// First offset of the log.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// Counters.
    pub fn metrics(&self) -> &ParticipantMetrics {
        &self.metrics
    }

    // ===== housekeeping =====

    /// Retention moved the log start: forget aborted transactions wholly below it.
    pub fn advance_log_start_offset(&mut self, log_start_offset: i64) {
        let start = log_start_offset.clamp(self.log_start_offset, self.next_offset);
        self.log_start_offset = start;
        self.txns.truncate_before(start);
        if self.txns.high_watermark() < start {
            self.txns.set_high_watermark(start);
        }
    }

    /// Removes producers with no open transaction whose last timestamp (that of their last
    /// batch or marker) is at least `expiration_ms` before `now_ms` (Kafka's
    /// `producer.id.expiration.ms`, default 1 day).
    /// Returns how many were removed.
    pub fn expire_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp_ms) < expiration_ms
        });
        let removed = before - self.producers.len();
        self.metrics.producers_expired += u64::try_from(removed).unwrap_or(u64::MAX);
        // Verifications that never led to an append (Kafka drops them with the producers).
        self.verifications
            .retain(|_, v| now_ms.saturating_sub(v.started_ms) < expiration_ms);
        removed
    }
}
