//! The real marker sink: `markers::writer::MarkerWriter` behind the shell's [`MarkerSink`].

use std::sync::Arc;

use markers::writer::{
    LeaderResolver, MarkerCompletion, MarkerReply, MarkerTransport, MarkerWriter, TrySubmitError,
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
    /// Spawns a writer over `resolver` and `transport`. It answers each partition driver on
    /// that driver's own reply ([`MarkerSink::try_submit_replying`]); `done` only gets the
    /// completions of decisions offered with plain [`MarkerSink::try_submit`] (a full `done`
    /// holds those back in the writer, which then stops accepting decisions).
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

/// The sink's answer to a writer submission: a full writer hands the request back.
fn refused_if_full(submitted: Result<(), TrySubmitError>) -> Result<(), TxnMarkerRequest> {
    match submitted {
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

impl MarkerSink for WriterSink {
    fn try_submit(&self, request: TxnMarkerRequest) -> Result<(), TxnMarkerRequest> {
        refused_if_full(self.writer.try_submit(request))
    }

    fn try_submit_replying(
        &self,
        request: TxnMarkerRequest,
        reply: &MarkerReply,
    ) -> Result<(), TxnMarkerRequest> {
        refused_if_full(self.writer.try_submit_replying(request, reply.clone()))
    }

    fn replies_directly(&self) -> bool {
        true
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
