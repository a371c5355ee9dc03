//! The marker seam of the shell: where [`crate::Effect::WriteMarkers`] goes, and how its end
//! comes back.
//!
//! A [`MarkerSink`] receives one [`MarkerJob`] per decision and reports exactly one
//! [`MarkerJobDone`] per job on the completion channel handed to
//! [`crate::shell::Coordinator::start`]. The real sink is the markers writer
//! ([`crate::shell::WriterSink`] over `markers::writer::MarkerWriter`);
//! [`RecordingMarkerSink`] is the test double.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;
use txn_log::sync::Mutex;
use txn_log::{
    CoordinatorEpoch, LogPartition, ProducerEpoch, ProducerId, TopicPartition, TransactionalId,
    TxnResult,
};

/// One decision to deliver to every participant partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    /// The transaction.
    pub transactional_id: TransactionalId,
    /// Producer id of the markers.
    pub producer_id: ProducerId,
    /// Producer epoch of the markers.
    pub producer_epoch: ProducerEpoch,
    /// Coordinator epoch stamped on the markers.
    pub coordinator_epoch: CoordinatorEpoch,
    /// Log partition owning the transaction (unit of cancellation).
    pub log_partition: LogPartition,
    /// Commit or abort.
    pub result: TxnResult,
    /// Participant partitions.
    pub partitions: Vec<TopicPartition>,
    /// Transaction version of the transaction.
    pub txn_version: u8,
}

/// How a [`MarkerJob`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerJobOutcome {
    /// Every participant has the marker (or is gone).
    Completed,
    /// A participant reported a newer coordinator: unload the log partition.
    CoordinatorFenced,
    /// The log partition was cancelled; nothing to do.
    Cancelled,
    /// A newer job for the same transaction replaced this one; nothing to do.
    Superseded,
}

/// The single report of one [`MarkerJob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJobDone {
    /// The transaction.
    pub transactional_id: TransactionalId,
    /// Producer id of the job.
    pub producer_id: ProducerId,
    /// Producer epoch of the job.
    pub producer_epoch: ProducerEpoch,
    /// Coordinator epoch of the job.
    pub coordinator_epoch: CoordinatorEpoch,
    /// Owning log partition.
    pub log_partition: LogPartition,
    /// How it ended.
    pub outcome: MarkerJobOutcome,
}

impl MarkerJobDone {
    /// The report for `job` with `outcome`.
    pub fn of(job: &MarkerJob, outcome: MarkerJobOutcome) -> Self {
        Self {
            transactional_id: job.transactional_id.clone(),
            producer_id: job.producer_id,
            producer_epoch: job.producer_epoch,
            coordinator_epoch: job.coordinator_epoch,
            log_partition: job.log_partition,
            outcome,
        }
    }
}

/// Counters a sink may expose (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarkerSinkStats {
    /// Marker requests retried so far.
    pub retries: u64,
    /// Jobs accepted and not yet reported.
    pub pending: u64,
}

/// Where the shell sends marker work.
#[async_trait]
pub trait MarkerSink: Send + Sync + 'static {
    /// Accepts `job`; may wait for room (backpressure). Its end is reported on the completion
    /// channel exactly once.
    async fn submit(&self, job: MarkerJob);

    /// Drops every job of `partition` (unload); their reports may be `Cancelled` or absent.
    fn cancel_log_partition(&self, partition: LogPartition);

    /// Counters, if the sink keeps any.
    fn stats(&self) -> MarkerSinkStats {
        MarkerSinkStats::default()
    }
}

/// Test double: records every job; completes them at once (`auto_complete`) or when told to.
#[derive(Debug, Clone)]
pub struct RecordingMarkerSink {
    inner: Arc<Recording>,
}

#[derive(Debug)]
struct Recording {
    jobs: Mutex<Vec<MarkerJob>>,
    held: Mutex<Vec<MarkerJob>>,
    cancelled: Mutex<Vec<LogPartition>>,
    auto_complete: Mutex<bool>,
    done: mpsc::UnboundedSender<MarkerJobDone>,
}

impl RecordingMarkerSink {
    /// A sink reporting on `done`. With `auto_complete`, every job completes at once.
    pub fn new(done: mpsc::UnboundedSender<MarkerJobDone>, auto_complete: bool) -> Self {
        Self {
            inner: Arc::new(Recording {
                jobs: Mutex::new(Vec::new()),
                held: Mutex::new(Vec::new()),
                cancelled: Mutex::new(Vec::new()),
                auto_complete: Mutex::new(auto_complete),
                done,
            }),
        }
    }

    /// Every job submitted so far, in order.
    pub fn jobs(&self) -> Vec<MarkerJob> {
        self.inner.jobs.lock().clone()
    }

    /// Partitions cancelled so far.
    pub fn cancelled(&self) -> Vec<LogPartition> {
        self.inner.cancelled.lock().clone()
    }

    /// Switches automatic completion on or off (held jobs stay held).
    pub fn set_auto_complete(&self, on: bool) {
        *self.inner.auto_complete.lock() = on;
    }

    /// Reports every held job with `outcome`; returns how many.
    pub fn complete_held(&self, outcome: MarkerJobOutcome) -> usize {
        let held = std::mem::take(&mut *self.inner.held.lock());
        for job in &held {
            // A closed channel means the coordinator is gone; nothing to report to.
            let _ = self.inner.done.send(MarkerJobDone::of(job, outcome));
        }
        held.len()
    }
}

#[async_trait]
impl MarkerSink for RecordingMarkerSink {
    async fn submit(&self, job: MarkerJob) {
        self.inner.jobs.lock().push(job.clone());
        if *self.inner.auto_complete.lock() {
            let _ = self
                .inner
                .done
                .send(MarkerJobDone::of(&job, MarkerJobOutcome::Completed));
        } else {
            self.inner.held.lock().push(job);
        }
    }

    fn cancel_log_partition(&self, partition: LogPartition) {
        self.inner.cancelled.lock().push(partition);
        self.inner
            .held
            .lock()
            .retain(|j| j.log_partition != partition);
    }

    fn stats(&self) -> MarkerSinkStats {
        MarkerSinkStats {
            retries: 0,
            pending: self.inner.held.lock().len() as u64,
        }
    }
}
