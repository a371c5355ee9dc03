//! The marker writer over real loopback TCP: fake brokers speaking `ApiVersions`,
//! `WriteTxnMarkers` (v1, or v1-2 as Kafka 4.2) and `Metadata` through `markers::wire`, the
//! Kafka-wire transport and the Metadata resolver.
#![cfg(feature = "net")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataResponse, RequestKind, ResponseKind, TopicName,
    WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use markers::wire::{decode_request, encode_response, read_frame, write_frame};
use markers::writer::{
    KafkaWireTransport, MarkerCompletion, MarkerOutcome, MarkerWriter, MetadataLeaderResolver,
    TxnMarkerRequest, WireTransportConfig, WriterConfig, build_response, codes,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use txn_log::sync::Mutex;
use txn_log::{
    CoordinatorEpoch, ErrorCode, LogPartition, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult, TxnVersion,
};

/// Per-marker answer: `(node, pid, topic, partition) -> code`.
type Script = dyn Fn(i32, i64, &str, i32) -> ErrorCode + Send + Sync;

/// The fake cluster: topic -> leader per partition, broker ports.
#[derive(Default)]
struct Cluster {
    topics: Mutex<BTreeMap<String, Vec<i32>>>,
    ports: Mutex<BTreeMap<i32, u16>>,
}

struct Broker {
    node: i32,
    port: u16,
    /// Close the connection on accept (broker down).
    down: Mutex<bool>,
    /// Close the connection after reading this many more WriteTxnMarkers requests unanswered.
    drop_next: Mutex<u64>,
    connections: Mutex<u64>,
    requests: Mutex<Vec<WriteTxnMarkersRequest>>,
    /// The version of each of `requests`.
    versions: Mutex<Vec<i16>>,
    /// The highest `WriteTxnMarkers` version listed and accepted (2, as Kafka 4.2, unless set).
    write_txn_markers_max: Mutex<i16>,
    script: Mutex<Box<Script>>,
}

impl Broker {
    fn supported(&self, k: ApiKey) -> Option<VersionRange> {
        match k {
            ApiKey::WriteTxnMarkers => Some(VersionRange {
                min: 1,
                max: *self.write_txn_markers_max.lock(),
            }),
            ApiKey::Metadata => Some(VersionRange { min: 0, max: 13 }),
            ApiKey::ApiVersions => Some(VersionRange { min: 0, max: 3 }),
            _ => None,
        }
    }

    fn api_versions(&self) -> ApiVersionsResponse {
        let keys = [
            ApiKey::WriteTxnMarkers,
            ApiKey::Metadata,
            ApiKey::ApiVersions,
        ]
        .into_iter()
        .filter_map(|k| {
            self.supported(k).map(|r| {
                ApiVersion::default()
                    .with_api_key(k as i16)
                    .with_min_version(r.min)
                    .with_max_version(r.max)
            })
        })
        .collect();
        ApiVersionsResponse::default().with_api_keys(keys)
    }
}

async fn start(node: i32, cluster: Arc<Cluster>) -> Arc<Broker> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    cluster.ports.lock().insert(node, port);
    let broker = Arc::new(Broker {
        node,
        port,
        down: Mutex::new(false),
        drop_next: Mutex::new(0),
        connections: Mutex::new(0),
        requests: Mutex::new(Vec::new()),
        versions: Mutex::new(Vec::new()),
        write_txn_markers_max: Mutex::new(2),
        script: Mutex::new(Box::new(|_, _, _, _| codes::NONE)),
    });
    let b = broker.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            *b.connections.lock() += 1;
            if *b.down.lock() {
                drop(sock);
                continue;
            }
            tokio::spawn(serve(sock, b.clone(), cluster.clone()));
        }
    });
    broker
}

async fn serve(mut sock: tokio::net::TcpStream, b: Arc<Broker>, cluster: Arc<Cluster>) {
    loop {
        let Ok(Some(frame)) = read_frame(&mut sock, 1 << 20).await else {
            return;
        };
        let req = decode_request(frame, |k| b.supported(k)).expect("well-formed request");
        let (api_key, version, correlation_id) =
            (req.api_key, req.version(), req.header.correlation_id);
        let body = match req.body {
            RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(b.api_versions()),
            RequestKind::WriteTxnMarkers(w) => {
                b.requests.lock().push(w.clone());
                b.versions.lock().push(version);
                {
                    let mut left = b.drop_next.lock();
                    if *left > 0 {
                        *left -= 1;
                        return; // disconnect mid-request
                    }
                }
                let script = b.script.lock();
                ResponseKind::WriteTxnMarkers(build_response(&w, |pid, t, p| {
                    script(b.node, pid.0, t, p)
                }))
            }
            RequestKind::Metadata(m) => ResponseKind::Metadata(metadata(&cluster, &m)),
            other => panic!("unexpected request {other:?}"),
        };
        let out = encode_response(api_key, version, correlation_id, &body).expect("encode");
        if write_frame(&mut sock, &out).await.is_err() {
            return;
        }
    }
}

fn metadata(cluster: &Cluster, m: &kafka_protocol::messages::MetadataRequest) -> MetadataResponse {
    let brokers = cluster
        .ports
        .lock()
        .iter()
        .map(|(&n, &p)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(n))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(i32::from(p))
        })
        .collect();
    let topics_map = cluster.topics.lock();
    let topics = m
        .topics
        .iter()
        .flatten()
        .filter_map(|t| t.name.clone())
        .map(|name| {
            let t = MetadataResponseTopic::default().with_name(Some(name.clone()));
            match topics_map.get(name.0.as_str()) {
                None => t.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION.code()),
                Some(leaders) => t.with_partitions(
                    leaders
                        .iter()
                        .enumerate()
                        .map(|(i, &l)| {
                            MetadataResponsePartition::default()
                                .with_partition_index(i as i32)
                                .with_leader_id(BrokerId(l))
                        })
                        .collect(),
                ),
            }
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics)
}

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn req(txn: &str, pid: i64, parts: &[TopicPartition]) -> TxnMarkerRequest {
    req_tv(txn, pid, parts, TxnVersion::V0)
}

fn req_tv(txn: &str, pid: i64, parts: &[TopicPartition], tv: TxnVersion) -> TxnMarkerRequest {
    TxnMarkerRequest {
        transactional_id: TransactionalId::new(txn).expect("id"),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(4),
        coordinator_epoch: CoordinatorEpoch(9),
        log_partition: LogPartition(3),
        result: TxnResult::Abort,
        partitions: parts.to_vec(),
        txn_version: tv,
    }
}

fn writer(bootstrap: u16) -> (MarkerWriter, mpsc::Receiver<MarkerCompletion>) {
    let resolver = Arc::new(MetadataLeaderResolver::new(
        vec![("127.0.0.1".into(), bootstrap)],
        "test",
        Duration::from_secs(10),
    ));
    let transport = Arc::new(KafkaWireTransport::new(WireTransportConfig {
        reconnect_backoff: Duration::from_millis(5),
        reconnect_backoff_max: Duration::from_millis(20),
        ..WireTransportConfig::default()
    }));
    let (tx, rx) = mpsc::channel(16);
    let config = WriterConfig {
        retry_backoff: Duration::from_millis(5),
        retry_backoff_max: Duration::from_millis(20),
        request_timeout: Duration::from_secs(10),
        ..WriterConfig::default()
    };
    (MarkerWriter::spawn(resolver, transport, config, tx), rx)
}

/// Bounds a test body (a hang fails instead of blocking CI).
async fn bounded<F: Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test finished within its bound");
}

#[tokio::test]
async fn tcp_disconnect_mid_request_then_success_and_topic_deletion() {
    bounded(async {
        let cluster = Arc::new(Cluster::default());
        cluster.topics.lock().insert("t".into(), vec![1, 1]);
        let b1 = start(1, cluster.clone()).await;
        *b1.drop_next.lock() = 1;
        let (w, mut rx) = writer(b1.port);
        w.submit(req("a", 42, &[tp("t", 0), tp("t", 1), tp("gone", 0)]))
            .await
            .expect("submit");
        let c = rx.recv().await.expect("completion");
        assert_eq!(c.outcome, MarkerOutcome::Completed);
        assert_eq!(c.dropped_partitions, vec![tp("gone", 0)]);
        let requests = b1.requests.lock().clone();
        assert_eq!(requests.len(), 2, "the dropped request was sent again");
        for r in &requests {
            assert_eq!(r.markers.len(), 1);
            let m = &r.markers[0];
            assert_eq!(
                (
                    m.producer_id.0,
                    m.producer_epoch,
                    m.coordinator_epoch,
                    m.transaction_result
                ),
                (42, 4, 9, false)
            );
            assert_eq!(m.topics.len(), 1);
            assert_eq!(m.topics[0].name, TopicName(StrBytes::from_static_str("t")));
            assert_eq!(m.topics[0].partition_indexes, vec![0, 1]);
        }
        assert!(*b1.connections.lock() >= 2, "reconnected");
        let st = w.stats();
        assert_eq!(
            (st.requests_failed, st.markers_dropped, st.markers_acked),
            (1, 1, 2)
        );
        assert!(rx.try_recv().is_err());
    })
    .await;
}

#[tokio::test]
async fn tcp_leader_moves_to_another_broker() {
    bounded(async {
        let cluster = Arc::new(Cluster::default());
        cluster.topics.lock().insert("t".into(), vec![1]);
        let b1 = start(1, cluster.clone()).await;
        let b2 = start(2, cluster.clone()).await;
        let c2 = cluster.clone();
        *b1.script.lock() = Box::new(move |_, _, _, _| {
            c2.topics.lock().insert("t".into(), vec![2]);
            codes::NOT_LEADER_OR_FOLLOWER
        });
        let (w, mut rx) = writer(b1.port);
        w.submit(req("a", 1, &[tp("t", 0)])).await.expect("submit");
        w.submit(req("b", 2, &[tp("t", 0)])).await.expect("submit");
        let mut outcomes = [rx.recv().await.expect("c1"), rx.recv().await.expect("c2")];
        outcomes.sort_by(|x, y| x.transactional_id.cmp(&y.transactional_id));
        assert!(
            outcomes
                .iter()
                .all(|c| c.outcome == MarkerOutcome::Completed)
        );
        assert_eq!(outcomes[0].transactional_id.as_str(), "a");
        assert_eq!(outcomes[1].transactional_id.as_str(), "b");
        assert!(!b1.requests.lock().is_empty());
        let on_b2: usize = b2.requests.lock().iter().map(|r| r.markers.len()).sum();
        assert_eq!(on_b2, 2, "both transactions reached the new leader");
        assert!(rx.try_recv().is_err());
    })
    .await;
}

#[tokio::test]
async fn tcp_fenced_response() {
    bounded(async {
        let cluster = Arc::new(Cluster::default());
        cluster.topics.lock().insert("t".into(), vec![1]);
        let b1 = start(1, cluster.clone()).await;
        *b1.script.lock() = Box::new(|_, _, _, _| codes::TRANSACTION_COORDINATOR_FENCED);
        let (w, mut rx) = writer(b1.port);
        w.submit(req("a", 1, &[tp("t", 0)])).await.expect("submit");
        let c = rx.recv().await.expect("completion");
        assert_eq!(c.outcome, MarkerOutcome::CoordinatorFenced);
        assert_eq!(c.log_partition, LogPartition(3));
    })
    .await;
}

#[tokio::test]
async fn tcp_broker_down_then_back() {
    bounded(async {
        let cluster = Arc::new(Cluster::default());
        cluster.topics.lock().insert("t".into(), vec![2]);
        // Broker 1 serves metadata; broker 2 leads t-0 and is down at first.
        let b1 = start(1, cluster.clone()).await;
        let b2 = start(2, cluster.clone()).await;
        *b2.down.lock() = true;
        let (w, mut rx) = writer(b1.port);
        w.submit(req("a", 1, &[tp("t", 0)])).await.expect("submit");
        w.submit(req("b", 2, &[tp("t", 0)])).await.expect("submit");
        while *b2.connections.lock() < 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            rx.try_recv().is_err(),
            "nothing completes while the leader is down"
        );
        let st = w.stats();
        assert_eq!(st.pending_partitions, 2);
        assert!(st.markers_retried >= 4, "{}", st.markers_retried);
        *b2.down.lock() = false;
        let c1 = rx.recv().await.expect("c1");
        let c2 = rx.recv().await.expect("c2");
        assert_eq!(c1.outcome, MarkerOutcome::Completed);
        assert_eq!(c2.outcome, MarkerOutcome::Completed);
        assert_ne!(c1.transactional_id, c2.transactional_id);
        assert!(rx.try_recv().is_err());
    })
    .await;
}

/// KIP-1228: the transport asks each broker's ApiVersions on connecting and sends
/// `WriteTxnMarkers` v2, with each marker's transaction version, to a broker that lists v2,
/// and v1 (no such field) to one that lists only v1.
#[tokio::test]
async fn tcp_v2_with_transaction_version_to_a_v2_broker_v1_to_a_v1_broker() {
    bounded(async {
        let cluster = Arc::new(Cluster::default());
        // t-0 led by broker 1 (lists WriteTxnMarkers 1-2), t-1 by broker 2 (lists 1-1).
        cluster.topics.lock().insert("t".into(), vec![1, 2]);
        let b1 = start(1, cluster.clone()).await;
        let b2 = start(2, cluster.clone()).await;
        *b2.write_txn_markers_max.lock() = 1;
        let (w, mut rx) = writer(b1.port);
        w.submit(req_tv("a", 1, &[tp("t", 0), tp("t", 1)], TxnVersion::V2))
            .await
            .expect("submit");
        w.submit(req_tv("b", 2, &[tp("t", 0), tp("t", 1)], TxnVersion::V1))
            .await
            .expect("submit");
        for _ in 0..2 {
            let c = rx.recv().await.expect("completion");
            assert_eq!(c.outcome, MarkerOutcome::Completed);
        }
        let sent = |b: &Broker| -> Vec<(i16, i64, i8)> {
            let versions = b.versions.lock().clone();
            let requests = b.requests.lock().clone();
            assert_eq!(versions.len(), requests.len());
            let mut out: Vec<(i16, i64, i8)> = versions
                .iter()
                .zip(&requests)
                .flat_map(|(&v, r)| {
                    r.markers
                        .iter()
                        .map(move |m| (v, m.producer_id.0, m.transaction_version))
                })
                .collect();
            out.sort_unstable();
            out
        };
        assert_eq!(
            sent(&b1),
            vec![(2, 1, 2), (2, 2, 1)],
            "v2, versions carried"
        );
        assert_eq!(sent(&b2), vec![(1, 1, 0), (1, 2, 0)], "v1, no field: 0");
        assert!(rx.try_recv().is_err());
    })
    .await;
}
