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
                    txn_version = r.client_txn_version,
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

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::fmt::MakeWriter;
    use txn_log::sync::Mutex;
    use txn_log::{MemTxnLog, ProducerEpoch, ProducerId};

    use crate::shell::{
        Coordinator, CoordinatorOptions, ManualClock, Metrics, RecordingMarkerSink,
    };
    use crate::{Config, InitProducerIdRequest};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl MakeWriter<'_> for Buf {
        type Writer = Self;

        fn make_writer(&self) -> Self {
            self.clone()
        }
    }

    /// One InitProducerId for `app` under a subscriber with `filter`; returns the log text.
    fn init_logged(filter: &str) -> String {
        let buf = Buf::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new(filter))
            .with_writer(buf.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
                let coordinator = Coordinator::start(CoordinatorOptions {
                    config: Config::default(),
                    log: Arc::new(MemTxnLog::new()),
                    clock: Arc::new(ManualClock::new(1_000_000)),
                    markers: Arc::new(RecordingMarkerSink::new(done_tx, true)),
                    marker_completions: done_rx,
                    metrics: Metrics::new(),
                });
                coordinator.load_all_partitions().await.expect("loads");
                let r = coordinator
                    .init_producer_id(InitProducerIdRequest {
                        version: 4,
                        transactional_id: Some("app".into()),
                        transaction_timeout_ms: 60_000,
                        producer_id: ProducerId::NONE,
                        producer_epoch: ProducerEpoch::NONE,
                    })
                    .await;
                assert!(r.error.is_none(), "{r:?}");
                coordinator.shutdown().await;
            });
        });
        String::from_utf8_lossy(&buf.0.lock()).into_owned()
    }

    #[test]
    fn durable_records_are_logged_only_when_the_target_is_enabled() {
        let on = init_logged("info,txn_transition=debug");
        assert!(
            on.contains(" txn_transition: persisted transactional_id=\"app\" producer_id="),
            "{on}"
        );
        assert!(
            on.contains(
                "producer_epoch=0 state=Empty partitions= txn_start_ms=-1 txn_version=0 \
                 coordinator_epoch=0 issued_ms=1000000 durable_ms=1000000"
            ),
            "{on}"
        );
        let off = init_logged("info");
        assert!(!off.contains("txn_transition"), "{off}");
    }
}
