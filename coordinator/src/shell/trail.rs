//! The transition trail: with `RUST_LOG=...,txn_transition=debug`, one debug event per log
//! entry once its append is durable, because the log itself keeps only the latest record of
//! each transactional id. Off (one level check per append) unless that target is enabled.
//!
//! An event (`tracing-subscriber`'s plain format) reads
//! `... txn_transition: persisted transactional_id="app" producer_id=1000 producer_epoch=3
//! state=PrepareCommit partitions=orders:0,orders:5 txn_start_ms=... txn_version=2
//! coordinator_epoch=1 issued_ms=... durable_ms=...`: `issued_ms` is the wall clock when the
//! append was handed to the log, `durable_ms` when the log acknowledged it. A removed id
//! (expiry) has `state=Tombstone` and no record fields.

use std::fmt;

use txn_log::{CoordinatorEpoch, LogEntry, LogOp, TopicPartition};

use super::Clock;

/// The `tracing` target of the transition trail.
pub const TRANSITION_TARGET: &str = "txn_transition";

/// The entries of one append in flight, kept only while the trail is enabled.
pub(crate) struct Pending {
    issued_ms: i64,
    coordinator_epoch: CoordinatorEpoch,
    entries: Vec<LogEntry>,
}

/// Copies the entries of an append about to be issued, if the trail is enabled.
pub(crate) fn capture(
    clock: &dyn Clock,
    coordinator_epoch: CoordinatorEpoch,
    entries: &[LogEntry],
) -> Option<Pending> {
    if !tracing::enabled!(target: TRANSITION_TARGET, tracing::Level::DEBUG) {
        return None;
    }
    Some(Pending {
        issued_ms: clock.now_ms().0,
        coordinator_epoch,
        entries: entries.to_vec(),
    })
}

struct Partitions<'a>(&'a std::collections::BTreeSet<TopicPartition>);

impl fmt::Display for Partitions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, tp) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}:{}", tp.topic, tp.partition)?;
        }
        Ok(())
    }
}

impl Pending {
    /// Emits one event per entry: the append became durable at `durable_ms`.
    pub(crate) fn emit(self, durable_ms: i64) {
        let (issued_ms, coordinator_epoch) = (self.issued_ms, self.coordinator_epoch.0);
        for e in &self.entries {
            match &e.op {
                LogOp::Upsert(r) => tracing::debug!(
                    target: TRANSITION_TARGET,
                    transactional_id = e.id.as_str(),
                    producer_id = r.producer_id.0,
                    producer_epoch = r.producer_epoch.0,
                    state = %r.state,
                    partitions = %Partitions(&r.partitions),
                    txn_start_ms = r.txn_start_ms,
                    txn_version = r.client_txn_version.0,
                    coordinator_epoch,
                    issued_ms,
                    durable_ms,
                    "persisted"
                ),
                LogOp::Tombstone => tracing::debug!(
                    target: TRANSITION_TARGET,
                    transactional_id = e.id.as_str(),
                    state = %"Tombstone",
                    coordinator_epoch,
                    issued_ms,
                    durable_ms,
                    "persisted"
                ),
            }
        }
    }
}
