//! A scriptable fake Kafka broker: it leads every partition of its topics, acknowledges every
//! Produce and every WriteTxnMarkers at once (no disk, no validation), sends transactional
//! clients to a coordinator, and lets a test or a benchmark replace any answer with a
//! [`Script`]. It counts the requests it answered, so that a benchmark can put its own cost
//! per request (the floor of a server that only answers) beside a coordinator's.
//!
//! Several fake brokers form one cluster through a shared [`FakeCluster`]: each lists every
//! member in Metadata and names the leader of each partition from one table that a test may
//! change while they run (a leader that moves), and a member can refuse connections for a
//! while (a node that is down).
//!
//! It checks nothing (sequences, epochs): refbroker is the broker that keeps data.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kafka_protocol::messages::{
    ApiKey, BrokerId, RequestKind, ResponseKind, TopicName,
    api_versions_response::{ApiVersion, ApiVersionsResponse},
    find_coordinator_response::FindCoordinatorResponse,
    metadata_request::MetadataRequestTopic,
    metadata_response::{
        MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    },
    produce_response::{PartitionProduceResponse, ProduceResponse, TopicProduceResponse},
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use markers::ErrorCode;
use markers::wire::{
    DEFAULT_MAX_FRAME_BYTES, decode_request, encode_response, read_frame, write_frame,
};
use markers::writer::build_response;
use tokio::net::{TcpListener, TcpStream};
use txn_log::sync::Mutex;

/// The APIs and versions a Kafka 4.1 broker lists for them (ApiVersions), of those the fake
/// broker answers: Kafka 4.1 lists WriteTxnMarkers 1 only (4.2 added v2).
pub const KAFKA_4_1_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::WriteTxnMarkers, 1, 1),
];

/// What a [`Script`] makes of one request.
#[derive(Debug)]
pub enum Reply {
    /// The fake broker's own answer.
    Default,
    /// This answer instead.
    Answer(Box<ResponseKind>),
    /// No answer; the connection stays open.
    Ignore,
    /// Close the connection without an answer.
    Close,
}

/// Decides the reply to each request (its body and version) before the default answer.
pub type Script = Arc<dyn Fn(&RequestKind, i16) -> Reply + Send + Sync>;

/// What the fake broker serves.
#[derive(Clone)]
pub struct FakeBrokerConfig {
    /// Its node id.
    pub node_id: i32,
    /// Topics it leads, with their partition counts.
    pub topics: Vec<(String, i32)>,
    /// Where FindCoordinator sends clients (`None`: to itself).
    pub coordinator: Option<SocketAddr>,
    /// APIs it lists in ApiVersions and decodes, with (min, max) versions.
    pub apis: Vec<(ApiKey, i16, i16)>,
    /// Overrides answers; `None` answers everything by default.
    pub script: Option<Script>,
    /// The cluster it is a member of: its Metadata answers list the cluster's members and
    /// leaders instead of `topics`. `None`: a cluster of one that leads all of `topics`.
    pub cluster: Option<Arc<FakeCluster>>,
}

impl std::fmt::Debug for FakeBrokerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeBrokerConfig")
            .field("node_id", &self.node_id)
            .field("topics", &self.topics)
            .field("coordinator", &self.coordinator)
            .field("apis", &self.apis)
            .field("script", &self.script.is_some())
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl Default for FakeBrokerConfig {
    /// Node 1, no topic, its own coordinator, Kafka 4.1's versions, no script.
    fn default() -> Self {
        Self {
            node_id: 1,
            topics: Vec::new(),
            coordinator: None,
            apis: KAFKA_4_1_APIS.to_vec(),
            script: None,
            cluster: None,
        }
    }
}

/// Fake brokers that form one cluster: the members' addresses (each registers itself when it
/// starts) and each topic's leader per partition, shared by every member's Metadata answers.
#[derive(Debug, Default)]
pub struct FakeCluster {
    view: Mutex<ClusterView>,
}

/// The brokers and partition leaders a Metadata answer lists.
#[derive(Debug, Default, Clone)]
struct ClusterView {
    /// Node id -> where it listens.
    nodes: BTreeMap<i32, SocketAddr>,
    /// Topic -> the leader's node id of each partition, by partition index.
    leaders: BTreeMap<String, Vec<i32>>,
}

impl FakeCluster {
    /// An empty cluster, to pass to each member's [`FakeBrokerConfig::cluster`].
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Sets `topic`'s leaders, one node id per partition (its partition count is their
    /// number); takes effect at the next Metadata answer.
    pub fn set_leaders(&self, topic: &str, leaders: Vec<i32>) {
        self.view.lock().leaders.insert(topic.to_owned(), leaders);
    }
}

/// The coordinator's node id in FindCoordinator answers that name another process.
const COORDINATOR_NODE: i32 = 1000;

/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// A running fake broker; it serves until dropped.
#[derive(Debug)]
pub struct FakeBroker {
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeBroker {
    /// Binds `listen` (port 0 for a free one) and serves `config` on the current runtime.
    pub async fn start(listen: &str, config: FakeBrokerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let me = listener.local_addr()?;
        if let Some(cluster) = &config.cluster {
            cluster.view.lock().nodes.insert(config.node_id, me);
        }
        let shared = Arc::new(Shared {
            me,
            config,
            answered: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refusing: AtomicBool::new(false),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                accepting.accepted.fetch_add(1, Ordering::Relaxed);
                if accepting.refusing.load(Ordering::Relaxed) {
                    continue; // closed at once
                }
                let _ = s.set_nodelay(true);
                let shared = accepting.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(s, &shared).await {
                        tracing::debug!(error = %e, "fake broker connection ended");
                    }
                });
            }
        });
        Ok(Self { shared, accept })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.shared.me
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::Relaxed)
    }

    /// Connections accepted so far, refused ones included.
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// While `down`, each new connection is closed as soon as it is accepted (a broker that
    /// is down); connections already open keep being served.
    pub fn set_down(&self, down: bool) {
        self.shared.refusing.store(down, Ordering::Relaxed);
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

#[derive(Debug)]
struct Shared {
    me: SocketAddr,
    config: FakeBrokerConfig,
    answered: AtomicU64,
    accepted: AtomicU64,
    refusing: AtomicBool,
}

impl Shared {
    fn supported(&self, k: ApiKey) -> Option<VersionRange> {
        self.config
            .apis
            .iter()
            .find(|(a, _, _)| *a == k)
            .map(|&(_, min, max)| VersionRange { min, max })
    }
}

async fn serve(mut s: TcpStream, shared: &Shared) -> anyhow::Result<()> {
    while let Some(frame) = read_frame(&mut s, DEFAULT_MAX_FRAME_BYTES).await? {
        let req = decode_request(frame, |k| shared.supported(k))?;
        let v = req.version();
        let body = match reply(&shared.config, shared.me, req.body, v) {
            Reply::Answer(body) => *body,
            Reply::Default | Reply::Ignore => continue,
            Reply::Close => return Ok(()),
        };
        let out = encode_response(req.api_key, v, req.header.correlation_id, &body)?;
        write_frame(&mut s, &out).await?;
        shared.answered.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// What a broker of `config` listening at `me` does with request `body` at version `v`: the
/// script's reply, else the default answer (never [`Reply::Default`]: an API without a
/// default answer, or a Produce with acks=0, is [`Reply::Ignore`]). For fake brokers that
/// put their own transport (TLS, SASL) around the test kit's answers.
pub fn reply(config: &FakeBrokerConfig, me: SocketAddr, body: RequestKind, v: i16) -> Reply {
    let scripted = match &config.script {
        Some(script) => script(&body, v),
        None => Reply::Default,
    };
    match scripted {
        Reply::Default => match default_answer(body, v, config, me) {
            Some(answer) => Reply::Answer(Box::new(answer)),
            None => Reply::Ignore,
        },
        other => other,
    }
}

fn sb(s: String) -> StrBytes {
    StrBytes::from_string(s)
}

/// The default answer to `body`; `None` for an acks=0 Produce and for APIs it has no answer
/// for.
fn default_answer(
    body: RequestKind,
    v: i16,
    config: &FakeBrokerConfig,
    me: SocketAddr,
) -> Option<ResponseKind> {
    let node = BrokerId(config.node_id);
    Some(match body {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(
            ApiVersionsResponse::default().with_api_keys(
                config
                    .apis
                    .iter()
                    .map(|&(k, min, max)| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect(),
            ),
        ),
        RequestKind::Metadata(r) => {
            let view = match &config.cluster {
                Some(cluster) => cluster.view.lock().clone(),
                None => ClusterView {
                    nodes: BTreeMap::from([(config.node_id, me)]),
                    leaders: config
                        .topics
                        .iter()
                        .map(|(t, n)| (t.clone(), vec![config.node_id; *n as usize]))
                        .collect(),
                },
            };
            ResponseKind::Metadata(metadata(&view, r.topics.as_deref(), v, node))
        }
        RequestKind::FindCoordinator(_) => {
            let (id, at) = match config.coordinator {
                Some(c) => (BrokerId(COORDINATOR_NODE), c),
                None => (node, me),
            };
            ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default()
                    .with_node_id(id)
                    .with_host(sb(at.ip().to_string()))
                    .with_port(i32::from(at.port())),
            )
        }
        RequestKind::Produce(r) => {
            if r.acks == 0 {
                return None;
            }
            ResponseKind::Produce(
                ProduceResponse::default().with_responses(
                    r.topic_data
                        .into_iter()
                        .map(|t| {
                            TopicProduceResponse::default()
                                .with_name(t.name)
                                .with_topic_id(t.topic_id)
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
        // every marker written
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(build_response(&r, |_, _, _| ErrorCode::NONE))
        }
        _ => return None,
    })
}

/// A Metadata answer from `view` for the topics asked for (all it has when none are named);
/// one it does not have is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers without
/// auto-creation. `me` is the controller.
fn metadata(
    view: &ClusterView,
    asked: Option<&[MetadataRequestTopic]>,
    v: i16,
    me: BrokerId,
) -> MetadataResponse {
    let names: Vec<String> = match asked {
        None => view.leaders.keys().cloned().collect(),
        Some(ts) => ts
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect(),
    };
    let topics = names
        .into_iter()
        .map(|name| {
            let leaders = view.leaders.get(&name);
            let topic = MetadataResponseTopic::default().with_name(Some(TopicName(sb(name))));
            match leaders {
                Some(leaders) => topic.with_partitions(
                    (0..)
                        .zip(leaders)
                        .map(|(p, &leader)| {
                            let leader = BrokerId(leader);
                            MetadataResponsePartition::default()
                                .with_partition_index(p)
                                .with_leader_id(leader)
                                .with_replica_nodes(vec![leader])
                                .with_isr_nodes(vec![leader])
                        })
                        .collect(),
                ),
                None => topic.with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
            }
        })
        .collect();
    let brokers = view
        .nodes
        .iter()
        .map(|(&node, at)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(node))
                .with_host(sb(at.ip().to_string()))
                .with_port(i32::from(at.port()))
        })
        .collect();
    let mut m = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics);
    if v >= 1 {
        m.controller_id = me;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Conn;
    use kafka_protocol::messages::MetadataRequest;

    /// A fake broker on a free port with `config`, and a connection to it.
    async fn started(config: FakeBrokerConfig) -> (FakeBroker, Conn) {
        let b = FakeBroker::start("127.0.0.1:0", config)
            .await
            .expect("start");
        let c = Conn::connect(&b.addr().to_string(), "fake-broker-test")
            .await
            .expect("connect");
        (b, c)
    }

    #[tokio::test]
    async fn lists_kafka_4_1_versions_answers_metadata_and_counts() {
        let (b, mut c) = started(FakeBrokerConfig {
            topics: vec![("t".into(), 3)],
            ..FakeBrokerConfig::default()
        })
        .await;
        let v = c
            .versions
            .pick(ApiKey::WriteTxnMarkers, 0, 2)
            .expect("pick");
        assert_eq!(v, 1, "Kafka 4.1 lists WriteTxnMarkers 1 only");
        // No topic list (null): every topic, as Kafka answers.
        let md = c
            .call(&MetadataRequest::default().with_topics(None), 12)
            .await
            .expect("metadata");
        assert_eq!(md.topics.len(), 1);
        assert_eq!(md.topics[0].partitions.len(), 3);
        assert_eq!(b.answered(), 2, "ApiVersions and Metadata");
    }

    #[tokio::test]
    async fn a_script_replaces_or_withholds_answers() {
        let script: Script = Arc::new(|body, _| match body {
            RequestKind::Metadata(_) => Reply::Close,
            _ => Reply::Default,
        });
        let (b, mut c) = started(FakeBrokerConfig {
            script: Some(script),
            ..FakeBrokerConfig::default()
        })
        .await;
        assert!(c.call(&MetadataRequest::default(), 12).await.is_err());
        assert_eq!(b.answered(), 1, "only ApiVersions was answered");
    }

    #[tokio::test]
    async fn members_of_a_cluster_list_each_other_and_its_leaders() {
        let cluster = FakeCluster::new();
        cluster.set_leaders("t", vec![2, 1]);
        let member = |node_id| FakeBrokerConfig {
            node_id,
            cluster: Some(cluster.clone()),
            ..FakeBrokerConfig::default()
        };
        let (b1, mut c) = started(member(1)).await;
        let b2 = FakeBroker::start("127.0.0.1:0", member(2))
            .await
            .expect("2");
        let leaders = |md: &MetadataResponse| -> Vec<i32> {
            md.topics[0]
                .partitions
                .iter()
                .map(|p| p.leader_id.0)
                .collect()
        };
        let md = c
            .call(&MetadataRequest::default().with_topics(None), 12)
            .await
            .expect("metadata");
        let brokers: Vec<(i32, i32)> = md.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
        assert_eq!(
            brokers,
            vec![
                (1, i32::from(b1.addr().port())),
                (2, i32::from(b2.addr().port()))
            ]
        );
        assert_eq!(leaders(&md), vec![2, 1]);
        cluster.set_leaders("t", vec![1, 1]);
        let md = c
            .call(&MetadataRequest::default().with_topics(None), 12)
            .await
            .expect("metadata");
        assert_eq!(leaders(&md), vec![1, 1], "the leader moved");

        b2.set_down(true);
        assert!(Conn::connect(&b2.addr().to_string(), "down").await.is_err());
        b2.set_down(false);
        Conn::connect(&b2.addr().to_string(), "up")
            .await
            .expect("back up");
        assert_eq!(b2.connections(), 2, "the refused connection counts");
    }
}
