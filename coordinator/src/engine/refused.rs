//! Decided transactions whose markers a participant refused for good.
//!
//! A participant that answers a marker with `INVALID_PRODUCER_EPOCH` (it holds the producer id
//! at a newer epoch) or `TRANSACTION_COORDINATOR_FENCED` (it has seen a newer coordinator epoch
//! for the producer id) will refuse it again. Kafka's coordinator then stops sending that
//! transaction's markers and leaves it pending until the partition is loaded again. Here the
//! other partitions of the decision still get their markers (the marker writer goes on), and
//! the transaction stays decided (Prepare*, no Complete* append) and visible: DescribeTransactions
//! lists only the refused partitions, and an InitProducerId for the id (the producer restarting,
//! or an operator's `force-terminate` once the participant is fixed) delivers the markers again.
//!
//! A participant's word says nothing about who owns the log partition: the log does. A
//! `TRANSACTION_COORDINATOR_FENCED` therefore starts an empty append at our coordinator epoch,
//! which the log refuses (`Fenced`, and the engine unloads) only if a newer epoch claimed it.

use txn_log::{LogOp, RefusedMarker, TransactionalId};

use super::{Continuation, Engine};
use crate::{ErrorCode, Millis};

/// The least time between two deliveries of one refused decision, however often its id's
/// InitProducerId is retried (a client retries CONCURRENT_TRANSACTIONS every ~100 ms).
pub(super) const REDRIVE_MIN_INTERVAL_MS: i64 = 1_000;

/// The partitions that refused a decision, and when.
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    partitions: Vec<RefusedMarker>,
    at: Millis,
}

impl Engine {
    /// The decision of `id` is refused at `partitions`, every other partition has its marker:
    /// hold it decided, answer its parked requests, and check ownership against the log if a
    /// participant claimed a newer coordinator epoch.
    pub(super) fn hold_refused(&mut self, id: TransactionalId, partitions: Vec<RefusedMarker>) {
        self.markers.remove(&id);
        self.metrics.markers_refused += partitions.len() as u64;
        self.answer_parked(&id, ErrorCode::CONCURRENT_TRANSACTIONS);
        let coordinator_fenced = partitions
            .iter()
            .any(|r| r.error == ErrorCode::TRANSACTION_COORDINATOR_FENCED);
        let at = self.now;
        self.refused.insert(id, Refusal { partitions, at });
        if coordinator_fenced {
            self.begin(Vec::new(), Box::new(OwnershipChecked));
        }
    }

    /// Delivers the markers of `id`'s refused decision again, unless the last delivery ended
    /// less than [`REDRIVE_MIN_INTERVAL_MS`] ago. Whether `id` was refused.
    pub(super) fn redrive_refused(&mut self, id: &TransactionalId) -> bool {
        let Some(r) = self.refused.get(id) else {
            return false;
        };
        if self.now.0 - r.at.0 >= REDRIVE_MIN_INTERVAL_MS {
            self.refused.remove(id);
            self.after_prepare(id);
        }
        true
    }

    /// Whether `id`'s decision is held refused.
    pub(super) fn is_refused(&self, id: &TransactionalId) -> bool {
        self.refused.contains_key(id)
    }

    /// The partitions that refused `id`'s decision, if it is held refused.
    pub(super) fn refused_partitions(&self, id: &TransactionalId) -> Option<&[RefusedMarker]> {
        self.refused.get(id).map(|r| r.partitions.as_slice())
    }

    /// Every decided transaction held because a participant refused its markers, by id, with
    /// the partitions that refused.
    pub fn refused(&self) -> impl Iterator<Item = (&TransactionalId, &[RefusedMarker])> {
        self.refused
            .iter()
            .map(|(id, r)| (id, r.partitions.as_slice()))
    }
}

/// The empty append that asks the log whether our coordinator epoch still owns the partition.
/// A `Fenced` answer unloads the engine before this runs; any other outcome changes nothing.
#[derive(Debug)]
struct OwnershipChecked;

impl Continuation for OwnershipChecked {
    fn finish(
        self: Box<Self>,
        _engine: &mut Engine,
        _ops: &[(TransactionalId, LogOp)],
        _error: Option<ErrorCode>,
    ) {
    }

    fn abandon(self: Box<Self>, _engine: &mut Engine, _code: ErrorCode) {}
}
