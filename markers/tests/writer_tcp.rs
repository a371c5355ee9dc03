//! The marker writer over real loopback TCP: fake brokers speaking `ApiVersions`,
//! `WriteTxnMarkers` (v1, or v1-2 as Kafka 4.2) and `Metadata` through `markers::wire`, the
//! Kafka-wire transport and the Metadata resolver.
#![cfg(feature = "net")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, TopicName, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use markers::writer::{
    KafkaWireTransport, MarkerCompletion, MarkerOutcome, MarkerWriter, MetadataLeaderResolver,
    TxnMarkerRequest, WireTransportConfig, WriterConfig, build_response, codes,
};
use tokio::sync::mpsc;
use txn_log::sync::Mutex;
use txn_log::{
    CoordinatorEpoch, ErrorCode, LogPartition, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult, TxnVersion,
};
use txn_testkit::fake_broker::{FakeBroker, FakeBrokerConfig, FakeCluster, Reply, Script};

/// Each marker's answer: `(pid, topic, partition) -> code`.
type Answer = dyn Fn(i64, &str, i32) -> ErrorCode + Send + Sync;

/// One member of the fake cluster, as the writer's tests see it: the test kit's fake broker,
/// scripted to record each WriteTxnMarkers request with its version, to close the connection
/// instead of answering the next `drop_next` of them, and to answer each marker with `answer`.
struct Node {
    broker: FakeBroker,
    requests: Arc<Mutex<Vec<(i16, WriteTxnMarkersRequest)>>>,
    drop_next: Arc<AtomicU64>,
}

impl Node {
    /// Starts node `id` in `cluster`, listing WriteTxnMarkers 1 to `write_txn_markers_max`.
    async fn start(
        id: i32,
        cluster: &Arc<FakeCluster>,
        write_txn_markers_max: i16,
        answer: Box<Answer>,
    ) -> Self {
        let requests: Arc<Mutex<Vec<(i16, WriteTxnMarkersRequest)>>> = Arc::default();
        let drop_next = Arc::new(AtomicU64::new(0));
        let (recorded, dropping) = (requests.clone(), drop_next.clone());
        let script: Script = Arc::new(move |body, v| {
            let RequestKind::WriteTxnMarkers(w) = body else {
                return Reply::Default;
            };
            recorded.lock().push((v, w.clone()));
            let dropped =
                dropping.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if dropped.is_ok() {
                return Reply::Close; // disconnect mid-request
            }
            let response = build_response(w, |pid, t, p| answer(pid.0, t, p));
            Reply::Answer(Box::new(ResponseKind::WriteTxnMarkers(response)))
        });
        let config = FakeBrokerConfig {
            node_id: id,
            apis: vec![
                (ApiKey::WriteTxnMarkers, 1, write_txn_markers_max),
                (ApiKey::Metadata, 0, 13),
                (ApiKey::ApiVersions, 0, 3),
            ],
            script: Some(script),
            cluster: Some(cluster.clone()),
            ..FakeBrokerConfig::default()
        };
        let broker = FakeBroker::start("127.0.0.1:0", config)
            .await
            .expect("start fake broker");
        Self {
            broker,
            requests,
            drop_next,
        }
    }

    /// Starts node `id` in `cluster` listing WriteTxnMarkers 1-2 (as Kafka 4.2) and writing
    /// every marker.
    async fn healthy(id: i32, cluster: &Arc<FakeCluster>) -> Self {
        Self::start(id, cluster, 2, Box::new(|_, _, _| codes::NONE)).await
    }

    fn port(&self) -> u16 {
        self.broker.addr().port()
    }

    fn requests(&self) -> Vec<WriteTxnMarkersRequest> {
        self.requests
            .lock()
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }
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
        let cluster = FakeCluster::new();
        cluster.set_leaders("t", vec![1, 1]);
        let b1 = Node::healthy(1, &cluster).await;
        b1.drop_next.store(1, Ordering::Relaxed);
        let (w, mut rx) = writer(b1.port());
        w.submit(req("a", 42, &[tp("t", 0), tp("t", 1), tp("gone", 0)]))
            .await
            .expect("submit");
        let c = rx.recv().await.expect("completion");
        assert_eq!(c.outcome, MarkerOutcome::Completed);
        assert_eq!(c.dropped_partitions, vec![tp("gone", 0)]);
        let requests = b1.requests();
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
        assert!(b1.broker.connections() >= 2, "reconnected");
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
        let cluster = FakeCluster::new();
        cluster.set_leaders("t", vec![1]);
        let moved = cluster.clone();
        let moves_the_leader = Box::new(move |_: i64, _: &str, _: i32| {
            moved.set_leaders("t", vec![2]);
            codes::NOT_LEADER_OR_FOLLOWER
        });
        let b1 = Node::start(1, &cluster, 2, moves_the_leader).await;
        let b2 = Node::healthy(2, &cluster).await;
        let (w, mut rx) = writer(b1.port());
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
        assert!(!b1.requests().is_empty());
        let on_b2: usize = b2.requests().iter().map(|r| r.markers.len()).sum();
        assert_eq!(on_b2, 2, "both transactions reached the new leader");
        assert!(rx.try_recv().is_err());
    })
    .await;
}

#[tokio::test]
async fn tcp_fenced_response() {
    bounded(async {
        let cluster = FakeCluster::new();
        cluster.set_leaders("t", vec![1]);
        let fenced = Box::new(|_: i64, _: &str, _: i32| codes::TRANSACTION_COORDINATOR_FENCED);
        let b1 = Node::start(1, &cluster, 2, fenced).await;
        let (w, mut rx) = writer(b1.port());
        w.submit(req("a", 1, &[tp("t", 0)])).await.expect("submit");
        let c = rx.recv().await.expect("completion");
        assert_eq!(c.outcome, MarkerOutcome::Refused);
        assert_eq!(c.refused_partitions.len(), 1);
        assert_eq!(
            c.refused_partitions[0].error,
            codes::TRANSACTION_COORDINATOR_FENCED
        );
        assert_eq!(c.log_partition, LogPartition(3));
    })
    .await;
}

#[tokio::test]
async fn tcp_broker_down_then_back() {
    bounded(async {
        let cluster = FakeCluster::new();
        cluster.set_leaders("t", vec![2]);
        // Broker 1 serves metadata; broker 2 leads t-0 and is down at first.
        let b1 = Node::healthy(1, &cluster).await;
        let b2 = Node::healthy(2, &cluster).await;
        b2.broker.set_down(true);
        let (w, mut rx) = writer(b1.port());
        w.submit(req("a", 1, &[tp("t", 0)])).await.expect("submit");
        w.submit(req("b", 2, &[tp("t", 0)])).await.expect("submit");
        while b2.broker.connections() < 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            rx.try_recv().is_err(),
            "nothing completes while the leader is down"
        );
        let st = w.stats();
        assert_eq!(st.pending_partitions, 2);
        assert!(st.markers_retried >= 4, "{}", st.markers_retried);
        b2.broker.set_down(false);
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
        let cluster = FakeCluster::new();
        // t-0 led by broker 1 (lists WriteTxnMarkers 1-2), t-1 by broker 2 (lists 1-1).
        cluster.set_leaders("t", vec![1, 2]);
        let b1 = Node::healthy(1, &cluster).await;
        let b2 = Node::start(2, &cluster, 1, Box::new(|_, _, _| codes::NONE)).await;
        let (w, mut rx) = writer(b1.port());
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
        let sent = |b: &Node| -> Vec<(i16, i64, i8)> {
            let requests = b.requests.lock().clone();
            let mut out: Vec<(i16, i64, i8)> = requests
                .iter()
                .flat_map(|(v, r)| {
                    let v = *v;
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
