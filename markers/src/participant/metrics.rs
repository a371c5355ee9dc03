//! Counters of one partition's producer state, as plain fields.

/// Counters kept by a [`PartitionState`](super::PartitionState); read them with
/// [`PartitionState::metrics`](super::PartitionState::metrics). They only grow (except on
/// [`PartitionState::replay`](super::PartitionState::replay), which starts from zero and
/// counts nothing but what live traffic does afterwards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParticipantMetrics {
    /// Data batches recorded by `complete_append`.
    pub batches_appended: u64,
    /// Batches answered as duplicates (acknowledged with their original offset, not appended).
    pub duplicates: u64,
    /// Produce batches rejected with INVALID_PRODUCER_EPOCH (zombie producers).
    pub produce_epoch_fenced: u64,
    /// Produce batches rejected with OUT_OF_ORDER_SEQUENCE_NUMBER.
    pub out_of_order: u64,
    /// Produce batches rejected with INVALID_TXN_STATE.
    pub invalid_txn_state: u64,
    /// Produce batches rejected with UNKNOWN_PRODUCER_ID.
    pub unknown_producer: u64,
    /// Produce batches rejected with INVALID_RECORD.
    pub invalid_records: u64,
    /// Markers recorded by `complete_marker`.
    pub markers_applied: u64,
    /// Markers rejected with INVALID_PRODUCER_EPOCH.
    pub markers_epoch_fenced: u64,
    /// Markers rejected with TRANSACTION_COORDINATOR_FENCED.
    pub markers_coordinator_fenced: u64,
    /// Markers rejected with INVALID_REQUEST.
    pub markers_invalid: u64,
    /// Transactions closed by a COMMIT marker.
    pub txns_committed: u64,
    /// Transactions closed by an ABORT marker.
    pub txns_aborted: u64,
    /// Producers removed by `expire_producers`.
    pub producers_expired: u64,
    /// KIP-890 verifications started by `start_verification` (a new guard handed out).
    pub verifications_started: u64,
    /// Transactional batches refused with INVALID_TXN_STATE for want of a current
    /// verification guard (`ProduceError::NotVerified`).
    pub not_verified: u64,
}
