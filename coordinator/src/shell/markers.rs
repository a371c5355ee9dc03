//! The marker seam of the shell: where [`crate::Effect::WriteMarkers`] goes, and how its end
//! comes back.
//!
//! A [`MarkerSink`] receives one [`TxnMarkerRequest`] per decision and reports exactly one
//! [`MarkerCompletion`] per accepted request: on the [`MarkerReply`] of the partition driver
//! that submitted it (a sink that [`MarkerSink::replies_directly`]; the completion wakes that
//! driver with no task in between), or else on the completion channel handed to
//! [`crate::shell::Coordinator::start`], from which a routing task forwards it to the driver.
//! Submission never waits: a full sink hands the request back and the partition's driver keeps
//! it, in order, until the sink has room (see `docs/markers.md`, "Backpressure"). These are the
//! marker writer's own types: the real sink ([`crate::shell::WriterSink`]) hands them to
//! `markers::writer::MarkerWriter`, which answers the submitting driver directly.
//! [`RecordingMarkerSink`] is the test double (it reports on the channel).

use std::sync::Arc;

use crate::{MarkerCompletion, MarkerOutcome, TxnMarkerRequest};
pub use markers::writer::MarkerReply;
use tokio::sync::mpsc;
use txn_log::LogPartition;
use txn_log::sync::Mutex;

/// Counters a sink may expose (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarkerSinkStats {
    /// Marker requests retried so far.
    pub retries: u64,
    /// Decisions accepted and not yet reported.
    pub pending: u64,
}

/// Where the shell sends marker work.
pub trait MarkerSink: Send + Sync + 'static {
    /// Accepts `request` without waiting, or hands it back (`Err`) when the sink is full; the
    /// caller offers it again later, in the same order. An accepted request's end is reported
    /// on the completion channel exactly once.
    fn try_submit(&self, request: TxnMarkerRequest) -> Result<(), TxnMarkerRequest>;

    /// As [`try_submit`](Self::try_submit), from the driver of `request.log_partition`, whose
    /// inbox `reply` feeds. A sink that [`replies_directly`](Self::replies_directly) reports
    /// the end of an accepted request through `reply`; the default ignores it and calls
    /// `try_submit` (the end then comes on the completion channel).
    fn try_submit_replying(
        &self,
        request: TxnMarkerRequest,
        reply: &MarkerReply,
    ) -> Result<(), TxnMarkerRequest> {
        let _ = reply;
        self.try_submit(request)
    }

    /// Whether every request accepted by [`try_submit_replying`](Self::try_submit_replying)
    /// is reported on its reply and never on the completion channel: the coordinator then
    /// reads no channel (no routing task). The default: `false`.
    fn replies_directly(&self) -> bool {
        false
    }

    /// Drops every decision of `partition` (unload); their reports may be `Cancelled` or absent.
    fn cancel_log_partition(&self, partition: LogPartition);

    /// Counters, if the sink keeps any.
    fn stats(&self) -> MarkerSinkStats {
        MarkerSinkStats::default()
    }
}

/// Test double: records every decision; completes them at once (`auto_complete`) or when told
/// to. Delivers no marker to anyone.
#[derive(Debug, Clone)]
pub struct RecordingMarkerSink {
    inner: Arc<Recording>,
}

#[derive(Debug)]
struct Recording {
    jobs: Mutex<Vec<TxnMarkerRequest>>,
    held: Mutex<Vec<TxnMarkerRequest>>,
    cancelled: Mutex<Vec<LogPartition>>,
    auto_complete: Mutex<bool>,
    refusals: Mutex<usize>,
    done: mpsc::Sender<MarkerCompletion>,
}

impl RecordingMarkerSink {
    /// A sink reporting on `done`. With `auto_complete`, every decision completes at once.
    pub fn new(done: mpsc::Sender<MarkerCompletion>, auto_complete: bool) -> Self {
        Self {
            inner: Arc::new(Recording {
                jobs: Mutex::new(Vec::new()),
                held: Mutex::new(Vec::new()),
                cancelled: Mutex::new(Vec::new()),
                auto_complete: Mutex::new(auto_complete),
                refusals: Mutex::new(0),
                done,
            }),
        }
    }

    /// Every decision submitted so far, in order.
    pub fn jobs(&self) -> Vec<TxnMarkerRequest> {
        self.inner.jobs.lock().clone()
    }

    /// Partitions cancelled so far.
    pub fn cancelled(&self) -> Vec<LogPartition> {
        self.inner.cancelled.lock().clone()
    }

    /// Switches automatic completion on or off (held decisions stay held).
    pub fn set_auto_complete(&self, on: bool) {
        *self.inner.auto_complete.lock() = on;
    }

    /// Refuses the next `offers` submissions, as a full writer does.
    pub fn refuse_next(&self, offers: usize) {
        *self.inner.refusals.lock() = offers;
    }

    /// Reports every held decision with `outcome`; returns how many. Waits for room in the
    /// completion channel.
    pub async fn complete_held(&self, outcome: MarkerOutcome) -> usize {
        let held = std::mem::take(&mut *self.inner.held.lock());
        for job in &held {
            // A closed channel means the coordinator is gone; nothing to report to.
            let _ = self
                .inner
                .done
                .send(MarkerCompletion::of(job, outcome))
                .await;
        }
        held.len()
    }
}

impl MarkerSink for RecordingMarkerSink {
    fn try_submit(&self, request: TxnMarkerRequest) -> Result<(), TxnMarkerRequest> {
        {
            let mut refusals = self.inner.refusals.lock();
            if *refusals > 0 {
                *refusals -= 1;
                return Err(request);
            }
        }
        let auto = *self.inner.auto_complete.lock();
        if auto {
            let done = MarkerCompletion::of(&request, MarkerOutcome::Completed);
            match self.inner.done.try_send(done) {
                // A closed channel means the coordinator is gone; nothing to report to.
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                // No room for the completion: refuse, as a full writer would.
                Err(mpsc::error::TrySendError::Full(_)) => return Err(request),
            }
            self.inner.jobs.lock().push(request);
        } else {
            self.inner.jobs.lock().push(request.clone());
            self.inner.held.lock().push(request);
        }
        Ok(())
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
