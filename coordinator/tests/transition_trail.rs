//! The transition trail (`coordinator::shell::TRANSITION_TARGET`): one line per durable record
//! when its target is enabled, nothing when it is not. Its own test binary with one test, so
//! that no other test's thread races tracing's per-callsite interest cache while the scoped
//! subscribers are swapped.
// Uses tracing-subscriber, a dependency of the `daemon` feature only.
#![cfg(feature = "daemon")]

use std::io::Write;
use std::sync::Arc;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use txn_log::MemTxnLog;
use txn_log::sync::Mutex;

use coordinator::shell::{
    Coordinator, CoordinatorOptions, ManualClock, Metrics, RecordingMarkerSink,
};
use coordinator::{Config, ErrorCode, InitProducerIdRequest};

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
            let (done_tx, done_rx) = tokio::sync::mpsc::channel(1024);
            let coordinator = Coordinator::start(CoordinatorOptions {
                config: Config::default(),
                log: Arc::new(MemTxnLog::new()),
                clock: Arc::new(ManualClock::new(1_000_000)),
                markers: Arc::new(RecordingMarkerSink::new(done_tx, true)),
                marker_completions: done_rx,
                catalog: Arc::new(coordinator::shell::EveryPartitionExists),
                metrics: Metrics::new(),
            });
            coordinator.load_all_partitions().await.expect("loads");
            // Retried while the first producer-id block is being fetched.
            let mut r = None;
            for _ in 0..1000 {
                let answer = coordinator
                    .init_producer_id(InitProducerIdRequest::new_producer(4, "app", 60_000))
                    .await;
                if answer.error != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS {
                    r = Some(answer);
                    break;
                }
                tokio::task::yield_now().await;
            }
            let r = r.expect("producer ids never became available");
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
