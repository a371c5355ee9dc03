//! The `request_frame` harness: request frames through the daemon's dispatch.

use std::sync::{Arc, OnceLock};

use coordinator::Config;
use coordinator::server::{Brokers, Dispatched, Dispatcher, Settings};
use coordinator::shell::{
    Coordinator, CoordinatorOptions, ManualClock, Metrics, RecordingMarkerSink,
};
use txn_log::MemTxnLog;

/// Largest frame the `request_frame` harness accepts (the daemon's `socket.request.max.bytes`
/// in the harness; the production default of 100 MiB would only make the fuzzer slower, and the
/// limit itself is unit-tested in `markers::wire`).
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Frames served per input; the rest of the input is ignored.
pub const MAX_FRAMES: usize = 32;
/// Log partitions of the coordinator under test (two, so that routing is exercised).
pub const LOG_PARTITIONS: u32 = 2;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// `request_frame`: `data` is what a client sends on one connection: length-prefixed frames
/// as on the wire. Each is read with `markers::wire::read_frame` and answered by the daemon's
/// [`Dispatcher`] (decode, refusal answers, protocol conversions, the shell [`Coordinator`]
/// over a [`MemTxnLog`], response encoding), until the input ends or the dispatcher closes
/// the connection. A fresh coordinator per input, on a manual clock that moves 1 s per frame.
pub fn request_frame(data: &[u8]) {
    runtime().block_on(async {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let (done_tx, done_rx) = tokio::sync::mpsc::channel(1024);
        let config = Config {
            transaction_state_log_num_partitions: LOG_PARTITIONS,
            ..Config::default()
        };
        let metrics = Metrics::new();
        let coordinator = Coordinator::start(CoordinatorOptions {
            config: config.clone(),
            log: Arc::new(MemTxnLog::new()),
            clock: clock.clone(),
            markers: Arc::new(RecordingMarkerSink::new(done_tx, true)),
            marker_completions: done_rx,
            catalog: Arc::new(coordinator::shell::EveryPartitionExists),
            metrics: metrics.clone(),
        });
        coordinator
            .load_all_partitions()
            .await
            .expect("loading an empty MemTxnLog");
        let settings = Settings {
            engine: config,
            socket_request_max_bytes: MAX_FRAME_BYTES,
            ..Settings::default()
        };
        let dispatcher = Dispatcher::new(
            coordinator.clone(),
            Brokers::new(
                Vec::new(),
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(300),
            ),
            1000,
            "127.0.0.1".into(),
            9093,
            settings,
            metrics,
        );
        let mut rest = data;
        for _ in 0..MAX_FRAMES {
            let Ok(Some(frame)) = markers::wire::read_frame(&mut rest, MAX_FRAME_BYTES).await
            else {
                break;
            };
            match dispatcher.dispatch(frame).await {
                Dispatched::Respond(bytes) => {
                    let len = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                    assert_eq!(
                        usize::try_from(len).ok(),
                        Some(bytes.len() - 4),
                        "response frame length prefix"
                    );
                }
                Dispatched::Silent => {}
                Dispatched::Close(_) => break,
            }
            clock.advance(1000);
            tokio::task::yield_now().await;
        }
        coordinator.shutdown().await;
    });
}
