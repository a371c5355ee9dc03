//! What an embedding broker does first, from outside the workspace: decode a hostile frame
//! with the protocol library it gets through our crates, and run InitProducerId on an embedded
//! coordinator. Exit code 0 and a last line `embedder ok` when everything holds.

use std::sync::Arc;

use coordinator::shell::{
    CatalogUnavailable, Coordinator, CoordinatorOptions, PartitionCatalog, RecordingMarkerSink,
    SystemClock,
};
use coordinator::{Config, ErrorCode, InitProducerIdRequest};
// The protocol library, re-exported: no kafka-protocol dependency (or [patch]) of our own.
use markers::kafka_protocol::messages::{ApiKey, MetadataRequest};
use markers::kafka_protocol::protocol::{Decodable, VersionRange};
use markers::wire::{DecodeError, decode_request};
use txn_log::{MemTxnLog, ProducerEpoch, ProducerId, TopicPartition};

/// Metadata v0, correlation id 1, null client id, then a topic count of i32::MAX: crates.io's
/// kafka-protocol 0.18.0 tries to reserve ~154 GB for it and aborts the process.
const HOSTILE: [u8; 14] = [
    0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff,
];

/// A trait of ours implemented with the re-exported `async_trait` (no async-trait dependency).
struct AllExist;

#[coordinator::async_trait]
impl PartitionCatalog for AllExist {
    async fn unknown_partitions(
        &self,
        _wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, CatalogUnavailable> {
        Ok(Vec::new())
    }
}

fn main() {
    // 1. The whole frame through the markers crate's request decoder.
    let all = |_: ApiKey| {
        Some(VersionRange {
            min: 0,
            max: i16::MAX,
        })
    };
    let frame = bytes::Bytes::copy_from_slice(&HOSTILE);
    match decode_request(frame, all) {
        Err(DecodeError::Malformed {
            api_key: ApiKey::Metadata,
            reason,
            ..
        }) => {
            println!("wire::decode_request refused the 14-byte frame: {reason}");
        }
        other => panic!("the 14-byte frame must be refused as malformed, got {other:?}"),
    }
    // 2. The body (after the 10-byte v0 header) straight through the re-exported library, as a
    //    broker's own handler would call it.
    let mut body = bytes::Bytes::copy_from_slice(&HOSTILE[10..]);
    let err =
        MetadataRequest::decode(&mut body, 0).expect_err("a 4-byte body claiming i32::MAX topics");
    println!("kafka_protocol::MetadataRequest::decode refused it: {err}");

    // 3. InitProducerId on an embedded coordinator over MemTxnLog.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (done_tx, done_rx) =
            tokio::sync::mpsc::channel(coordinator::shell::MARKER_COMPLETIONS_CAPACITY);
        // InitProducerId writes no marker; a broker would pass a WriterSink here.
        let markers = Arc::new(RecordingMarkerSink::new(done_tx, true));
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let coordinator = Coordinator::start(CoordinatorOptions {
            config,
            log: Arc::new(MemTxnLog::new()),
            clock: Arc::new(SystemClock::new()),
            markers,
            marker_completions: done_rx,
            catalog: Arc::new(AllExist),
            metrics: Default::default(),
        });
        coordinator.load_all_partitions().await.expect("load");
        let r = coordinator
            .init_producer_id(InitProducerIdRequest {
                version: 4,
                transactional_id: Some("embedder".into()),
                transaction_timeout_ms: 60_000,
                producer_id: ProducerId::NONE,
                producer_epoch: ProducerEpoch::NONE,
            })
            .await;
        assert_eq!(r.error, ErrorCode::NONE, "{r:?}");
        assert_eq!(r.producer_epoch, ProducerEpoch(0));
        println!(
            "InitProducerId: producer id {:?}, epoch {:?}",
            r.producer_id, r.producer_epoch
        );
        // The metric types are re-exported too.
        let mut registry = coordinator::prometheus_client::registry::Registry::default();
        coordinator.metrics().register(&mut registry);
        coordinator.shutdown().await;
    });
    println!("embedder ok");
}
