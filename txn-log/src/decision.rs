//! A marker decision, the one type that carries it from the coordinator's engine to the marker
//! writer ([`TxnMarkerRequest`]) and the one that brings its end back ([`MarkerCompletion`]).
//! Both crates see them here, so nothing converts between copies on the way.

use crate::{
    CoordinatorEpoch, ErrorCode, LogPartition, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult, TxnVersion,
};

/// One decision to deliver: the markers of one transaction (Kafka's `TxnMarkerEntry` plus the
/// transactional id and the log partition that owns it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkerRequest {
    /// The transaction.
    pub transactional_id: TransactionalId,
    /// Producer id written into every marker.
    pub producer_id: ProducerId,
    /// Producer epoch written into every marker (under TV2 the already bumped epoch).
    pub producer_epoch: ProducerEpoch,
    /// Epoch of the coordinator that made the decision; participants reject lower ones.
    pub coordinator_epoch: CoordinatorEpoch,
    /// The transaction-log partition owning the transaction (the unit of cancellation).
    pub log_partition: LogPartition,
    /// COMMIT or ABORT.
    pub result: TxnResult,
    /// Participant partitions (duplicates are ignored; empty completes at once).
    pub partitions: Vec<TopicPartition>,
    /// Client transaction version (0, 1, 2): each marker's `TransactionVersion` in
    /// `WriteTxnMarkers` v2 (KIP-1228), sent to brokers that list v2; v1 cannot carry it. Also
    /// handed to in-process participants alongside the request.
    pub txn_version: TxnVersion,
}

/// How one decision ended. Exactly one per submitted [`TxnMarkerRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerOutcome {
    /// Every partition acknowledged the marker, was deleted (leader lookup said the topic is
    /// gone) or does not support markers (`UNSUPPORTED_FOR_MESSAGE_FORMAT`). The engine appends
    /// `Complete*` now, retrying that append on retriable log errors.
    Completed,
    /// Every partition is done except those whose participant refused the marker for good
    /// (`INVALID_PRODUCER_EPOCH`: it holds the producer id at a newer epoch;
    /// `TRANSACTION_COORDINATOR_FENCED`: it has seen a newer coordinator epoch for it), listed
    /// in [`MarkerCompletion::refused_partitions`]. The participant's word decides nothing
    /// about ownership: the engine keeps the transaction decided (no `Complete*` append),
    /// reports it, and checks its ownership against the log when fenced by coordinator epoch.
    Refused,
    /// The log partition was unloaded (`cancel_log_partition`); pending work was dropped and
    /// in-flight acknowledgements are ignored.
    Cancelled,
    /// A newer decision replaced this one before it finished: a later submit for the same
    /// transactional id, or a submit for the same log partition at a higher coordinator epoch
    /// (then also any submit at a lower epoch than one already seen). Nothing to do; the newer
    /// decision gets its own completion.
    Superseded,
}

/// The end of one decision, reported exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerCompletion {
    /// The transaction.
    pub transactional_id: TransactionalId,
    /// Producer id of the decision.
    pub producer_id: ProducerId,
    /// Producer epoch of the decision.
    pub producer_epoch: ProducerEpoch,
    /// Coordinator epoch of the decision (compare before appending `Complete*`).
    pub coordinator_epoch: CoordinatorEpoch,
    /// Owning log partition.
    pub log_partition: LogPartition,
    /// COMMIT or ABORT.
    pub result: TxnResult,
    /// How it ended.
    pub outcome: MarkerOutcome,
    /// Partitions dropped without a marker because their topic is gone.
    pub dropped_partitions: Vec<TopicPartition>,
    /// Partitions whose participant refused the marker ([`MarkerOutcome::Refused`]).
    pub refused_partitions: Vec<RefusedMarker>,
}

/// One partition whose participant refused a decision's marker for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedMarker {
    /// The participant partition.
    pub partition: TopicPartition,
    /// Its answer: `INVALID_PRODUCER_EPOCH` or `TRANSACTION_COORDINATOR_FENCED`.
    pub error: ErrorCode,
}

impl MarkerCompletion {
    /// The completion of `request` with `outcome` (no partition dropped).
    pub fn of(request: &TxnMarkerRequest, outcome: MarkerOutcome) -> Self {
        Self {
            transactional_id: request.transactional_id.clone(),
            producer_id: request.producer_id,
            producer_epoch: request.producer_epoch,
            coordinator_epoch: request.coordinator_epoch,
            log_partition: request.log_partition,
            result: request.result,
            outcome,
            dropped_partitions: Vec::new(),
            refused_partitions: Vec::new(),
        }
    }
}
