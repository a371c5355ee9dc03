//! The real marker sink: `markers::writer::MarkerWriter` behind the shell's [`MarkerSink`].

use std::sync::Arc;

use markers::writer::{
    LeaderResolver, MarkerCompletion, MarkerTransport, MarkerWriter, TrySubmitError,
    TxnMarkerRequest, WriterConfig,
};
use tokio::sync::mpsc;
use txn_log::LogPartition;

use super::{MarkerSink, MarkerSinkStats};

/// A [`MarkerSink`] delivering through a [`MarkerWriter`].
#[derive(Debug)]
pub struct WriterSink {
    writer: MarkerWriter,
}

impl WriterSink {
    /// Spawns a writer over `resolver` and `transport` whose completions go straight to
    /// `done` (the channel whose receiver is given to [`super::Coordinator::start`]). A full
    /// channel holds completions back in the writer, which then stops accepting decisions.
    pub fn spawn(
        resolver: Arc<dyn LeaderResolver>,
        transport: Arc<dyn MarkerTransport>,
        config: WriterConfig,
        done: mpsc::Sender<MarkerCompletion>,
    ) -> Self {
        Self {
            writer: MarkerWriter::spawn(resolver, transport, config, done),
        }
    }

    /// The writer's own counters.
    pub fn writer_stats(&self) -> markers::writer::WriterStats {
        self.writer.stats()
    }
}

impl MarkerSink for WriterSink {
    fn try_submit(&self, request: TxnMarkerRequest) -> Result<(), TxnMarkerRequest> {
        match self.writer.try_submit(request) {
            Ok(()) => Ok(()),
            Err(TrySubmitError::Full(request)) => Err(*request),
            Err(TrySubmitError::Closed(request)) => {
                // Only at shutdown: the partition is re-driven from its Prepare* record when it
                // is loaded again.
                tracing::error!(transactional_id = %request.transactional_id, "marker writer stopped; decision not delivered");
                Ok(())
            }
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
