//! A scriptable fake Kafka broker: it leads every partition of its topics, acknowledges every
//! Produce and every WriteTxnMarkers at once (no disk, no validation), sends transactional
//! clients to a coordinator, and lets a test or a benchmark replace any answer with a
//! [`Script`]. It counts the requests it answered, so that a benchmark can put its own cost
//! per request (the floor of a server that only answers) beside a coordinator's.
//!
//! It checks nothing (sequences, epochs): refbroker is the broker that keeps data.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kafka_protocol::messages::{
    ApiKey, BrokerId, RequestKind, ResponseKind, TopicName,
    api_versions_response::{ApiVersion, ApiVersionsResponse},
    find_coordinator_response::FindCoordinatorResponse,
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
}

impl std::fmt::Debug for FakeBrokerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeBrokerConfig")
            .field("node_id", &self.node_id)
            .field("topics", &self.topics)
            .field("coordinator", &self.coordinator)
            .field("apis", &self.apis)
            .field("script", &self.script.is_some())
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
        }
    }
}

/// The coordinator's node id in FindCoordinator answers that name another process.
const COORDINATOR_NODE: i32 = 1000;

/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// A running fake broker; it serves until dropped.
#[derive(Debug)]
pub struct FakeBroker {
    addr: SocketAddr,
    answered: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeBroker {
    /// Binds `listen` (port 0 for a free one) and serves `config` on the current runtime.
    pub async fn start(listen: &str, config: FakeBrokerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let answered = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(Shared {
            me: addr,
            config,
            answered: answered.clone(),
        });
        let accept = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let _ = s.set_nodelay(true);
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(s, &shared).await {
                        tracing::debug!(error = %e, "fake broker connection ended");
                    }
                });
            }
        });
        Ok(Self {
            addr,
            answered,
            accept,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

struct Shared {
    me: SocketAddr,
    config: FakeBrokerConfig,
    answered: Arc<AtomicU64>,
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
            // The topics asked for (all it has when none are named); one it does not have is
            // UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers without auto-creation.
            let names: Vec<String> = match &r.topics {
                None => config.topics.iter().map(|(t, _)| t.clone()).collect(),
                Some(ts) => ts
                    .iter()
                    .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                    .collect(),
            };
            let topics = names
                .into_iter()
                .map(|name| {
                    let known = config.topics.iter().find(|(t, _)| *t == name);
                    let topic =
                        MetadataResponseTopic::default().with_name(Some(TopicName(sb(name))));
                    match known {
                        Some((_, partitions)) => topic.with_partitions(
                            (0..*partitions)
                                .map(|p| {
                                    MetadataResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_leader_id(node)
                                        .with_replica_nodes(vec![node])
                                        .with_isr_nodes(vec![node])
                                })
                                .collect(),
                        ),
                        None => topic.with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
                    }
                })
                .collect();
            let mut m = MetadataResponse::default()
                .with_brokers(vec![
                    MetadataResponseBroker::default()
                        .with_node_id(node)
                        .with_host(sb(me.ip().to_string()))
                        .with_port(i32::from(me.port())),
                ])
                .with_topics(topics);
            if v >= 1 {
                m.controller_id = node;
            }
            ResponseKind::Metadata(m)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Conn;
    use kafka_protocol::messages::MetadataRequest;

    #[tokio::test]
    async fn lists_kafka_4_1_versions_answers_metadata_and_counts() {
        let b = FakeBroker::start(
            "127.0.0.1:0",
            FakeBrokerConfig {
                topics: vec![("t".into(), 3)],
                ..FakeBrokerConfig::default()
            },
        )
        .await
        .expect("start");
        let mut c = Conn::connect(&b.addr().to_string(), "fake-broker-test")
            .await
            .expect("connect");
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
        let b = FakeBroker::start(
            "127.0.0.1:0",
            FakeBrokerConfig {
                script: Some(script),
                ..FakeBrokerConfig::default()
            },
        )
        .await
        .expect("start");
        let mut c = Conn::connect(&b.addr().to_string(), "fake-broker-test")
            .await
            .expect("connect");
        assert!(c.call(&MetadataRequest::default(), 12).await.is_err());
        assert_eq!(b.answered(), 1, "only ApiVersions was answered");
    }
}
