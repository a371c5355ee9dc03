//! The real marker sink: `markers::writer::MarkerWriter` behind the shell's [`MarkerSink`].

use std::sync::Arc;

use async_trait::async_trait;
use markers::writer::{
    LeaderResolver, MarkerCompletion, MarkerOutcome, MarkerTransport, MarkerWriter,
    TxnMarkerRequest, WriterConfig,
};
use tokio::sync::mpsc;
use txn_log::LogPartition;

use super::{MarkerJob, MarkerJobDone, MarkerJobOutcome, MarkerSink, MarkerSinkStats};

/// A [`MarkerSink`] delivering through a [`MarkerWriter`].
#[derive(Debug)]
pub struct WriterSink {
    writer: MarkerWriter,
}

impl WriterSink {
    /// Spawns a writer over `resolver` and `transport`; its completions are forwarded to
    /// `done` (the channel given to [`super::Coordinator::start`]).
    pub fn spawn(
        resolver: Arc<dyn LeaderResolver>,
        transport: Arc<dyn MarkerTransport>,
        config: WriterConfig,
        done: mpsc::UnboundedSender<MarkerJobDone>,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<MarkerCompletion>(1024);
        let writer = MarkerWriter::spawn(resolver, transport, config, tx);
        tokio::spawn(async move {
            while let Some(c) = rx.recv().await {
                let outcome = match c.outcome {
                    MarkerOutcome::Completed => MarkerJobOutcome::Completed,
                    MarkerOutcome::CoordinatorFenced => MarkerJobOutcome::CoordinatorFenced,
                    MarkerOutcome::Cancelled => MarkerJobOutcome::Cancelled,
                    MarkerOutcome::Superseded => MarkerJobOutcome::Superseded,
                };
                if !c.dropped_partitions.is_empty() {
                    tracing::warn!(
                        transactional_id = %c.transactional_id,
                        dropped = ?c.dropped_partitions,
                        "markers skipped for partitions whose topic is gone"
                    );
                }
                let report = MarkerJobDone {
                    transactional_id: c.transactional_id,
                    producer_id: c.producer_id,
                    producer_epoch: c.producer_epoch,
                    coordinator_epoch: c.coordinator_epoch,
                    log_partition: c.log_partition,
                    outcome,
                };
                if done.send(report).is_err() {
                    break;
                }
            }
        });
        Self { writer }
    }

    /// The writer's own counters.
    pub fn writer_stats(&self) -> markers::writer::WriterStats {
        self.writer.stats()
    }
}

#[async_trait]
impl MarkerSink for WriterSink {
    async fn submit(&self, job: MarkerJob) {
        let request = TxnMarkerRequest {
            transactional_id: job.transactional_id,
            producer_id: job.producer_id,
            producer_epoch: job.producer_epoch,
            coordinator_epoch: job.coordinator_epoch,
            log_partition: job.log_partition,
            result: job.result,
            partitions: job.partitions,
            txn_version: job.txn_version,
        };
        if let Err(closed) = self.writer.submit(request).await {
            tracing::error!(transactional_id = %closed.0.transactional_id, "marker writer stopped; decision not delivered");
        }
    }

    fn cancel_log_partition(&self, partition: LogPartition) {
        self.writer.cancel_log_partition(partition);
    }

    fn stats(&self) -> MarkerSinkStats {
        let s = self.writer.stats();
        MarkerSinkStats {
            retries: s.markers_retried,
            pending: s.pending_decisions as u64,
        }
    }
}
