//! `--null-broker HOST:PORT`: a data broker that keeps nothing. It leads every partition of
//! one topic, acknowledges every Produce and every WriteTxnMarkers at once (no disk, no
//! validation) and sends transaction clients to `--coordinator`. It isolates the coordinator's
//! own cost: with it, committed txn/s measure the daemon, not a participant's fsyncs.
//!
//! It is a benchmark fixture only: it does not check sequences, epochs or anything else.

use std::sync::Arc;

use anyhow::Context;
use kafka_protocol::messages::{
    ApiKey, BrokerId, RequestKind, ResponseKind, TopicName,
    api_versions_response::{ApiVersion, ApiVersionsResponse},
    find_coordinator_response::FindCoordinatorResponse,
    metadata_response::{
        MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    },
    produce_response::{PartitionProduceResponse, ProduceResponse, TopicProduceResponse},
    write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
        WriteTxnMarkersResponse,
    },
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use markers::wire::{
    DEFAULT_MAX_FRAME_BYTES, decode_request, encode_response, read_frame, write_frame,
};
use tokio::net::{TcpListener, TcpStream};

const APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::FindCoordinator, 1, 3),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::WriteTxnMarkers, 1, 1),
];

fn supported(k: ApiKey) -> Option<VersionRange> {
    APIS.iter()
        .find(|(a, _, _)| *a == k)
        .map(|&(_, min, max)| VersionRange { min, max })
}

struct Cfg {
    host: String,
    port: i32,
    topic: String,
    partitions: i32,
    coordinator_host: String,
    coordinator_port: i32,
}

const NODE: i32 = 1;
const COORDINATOR_NODE: i32 = 1000;

fn split(addr: &str) -> anyhow::Result<(String, i32)> {
    let (h, p) = addr.rsplit_once(':').context("HOST:PORT")?;
    Ok((h.to_owned(), p.parse().context("port")?))
}

/// Serves until the process is killed.
pub(crate) async fn serve(
    listen: &str,
    topic: &str,
    partitions: i32,
    coordinator: &str,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let (coordinator_host, coordinator_port) = split(coordinator)?;
    let cfg = Arc::new(Cfg {
        host: bound.ip().to_string(),
        port: i32::from(bound.port()),
        topic: topic.to_owned(),
        partitions,
        coordinator_host,
        coordinator_port,
    });
    println!("null broker listening on {bound}");
    loop {
        let (s, _) = listener.accept().await?;
        let _ = s.set_nodelay(true);
        let cfg = cfg.clone();
        tokio::spawn(async move {
            if let Err(e) = conn(s, &cfg).await {
                tracing::debug!(error = %e, "null broker connection ended");
            }
        });
    }
}

async fn conn(mut s: TcpStream, cfg: &Cfg) -> anyhow::Result<()> {
    while let Some(frame) = read_frame(&mut s, DEFAULT_MAX_FRAME_BYTES).await? {
        let req = decode_request(frame, supported)?;
        let v = req.version();
        let body = match req.body {
            RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(
                ApiVersionsResponse::default().with_api_keys(
                    APIS.iter()
                        .map(|&(k, min, max)| {
                            ApiVersion::default()
                                .with_api_key(k as i16)
                                .with_min_version(min)
                                .with_max_version(max)
                        })
                        .collect(),
                ),
            ),
            RequestKind::Metadata(_) => ResponseKind::Metadata(
                MetadataResponse::default()
                    .with_brokers(vec![
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(NODE))
                            .with_host(StrBytes::from_string(cfg.host.clone()))
                            .with_port(cfg.port),
                    ])
                    .with_controller_id(BrokerId(NODE))
                    .with_topics(vec![
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(cfg.topic.clone()))))
                            .with_partitions(
                                (0..cfg.partitions)
                                    .map(|p| {
                                        MetadataResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_leader_id(BrokerId(NODE))
                                            .with_replica_nodes(vec![BrokerId(NODE)])
                                            .with_isr_nodes(vec![BrokerId(NODE)])
                                    })
                                    .collect(),
                            ),
                    ]),
            ),
            RequestKind::FindCoordinator(_) => ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(COORDINATOR_NODE))
                    .with_host(StrBytes::from_string(cfg.coordinator_host.clone()))
                    .with_port(cfg.coordinator_port),
            ),
            RequestKind::Produce(r) => {
                if r.acks == 0 {
                    continue;
                }
                ResponseKind::Produce(
                    ProduceResponse::default().with_responses(
                        r.topic_data
                            .into_iter()
                            .map(|t| {
                                TopicProduceResponse::default()
                                    .with_name(t.name)
                                    .with_partition_responses(
                                        t.partition_data
                                            .iter()
                                            .map(|p| {
                                                PartitionProduceResponse::default()
                                                    .with_index(p.index)
                                                    .with_base_offset(0)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                )
            }
            RequestKind::WriteTxnMarkers(r) => ResponseKind::WriteTxnMarkers(
                WriteTxnMarkersResponse::default().with_markers(
                    r.markers
                        .iter()
                        .map(|m| {
                            WritableTxnMarkerResult::default()
                                .with_producer_id(m.producer_id)
                                .with_topics(
                                    m.topics
                                        .iter()
                                        .map(|t| {
                                            WritableTxnMarkerTopicResult::default()
                                                .with_name(t.name.clone())
                                                .with_partitions(
                                                    t.partition_indexes
                                                        .iter()
                                                        .map(|&p| {
                                                            WritableTxnMarkerPartitionResult::default()
                                                                .with_partition_index(p)
                                                        })
                                                        .collect(),
                                                )
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            ),
            _ => continue,
        };
        let out = encode_response(req.api_key, v, req.header.correlation_id, &body)?;
        write_frame(&mut s, &out).await?;
    }
    Ok(())
}
