//! Who leads a partition: a static map, or Kafka `Metadata` from bootstrap servers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use txn_log::sync::Mutex;
use txn_log::{ErrorCode, TopicPartition};

use super::{BrokerEndpoint, LeaderLookup};
use crate::wire::{BoxedConnection, Connector, PlaintextConnector};

/// The `Metadata` version [`MetadataLeaderResolver`] sends (supported by Kafka 2.8 to 4.x).
pub const METADATA_VERSION: i16 = 12;

/// A lookup that produced no answer at all (treated like [`LeaderLookup::Unknown`]: retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("leader lookup failed: {0}")]
pub struct ResolveError(pub String);

/// Resolves partition leaders for the writer.
#[async_trait]
pub trait LeaderResolver: Send + Sync {
    /// The current leader of `tp`.
    async fn leader(&self, tp: &TopicPartition) -> Result<LeaderLookup, ResolveError>;

    /// The last answer for `tp` proved wrong (the partition is being retried): the next
    /// [`leader`](Self::leader) call must not answer from a cache. The default does nothing.
    async fn invalidate(&self, tp: &TopicPartition) {
        let _ = tp;
    }
}

/// A fixed, mutable map. Partitions not in the map get the default answer.
#[derive(Debug)]
pub struct StaticLeaderResolver {
    map: Mutex<HashMap<TopicPartition, LeaderLookup>>,
    default: Mutex<LeaderLookup>,
}

impl StaticLeaderResolver {
    /// Every partition not set explicitly answers `default`.
    pub fn new(default: LeaderLookup) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            default: Mutex::new(default),
        }
    }

    /// Every partition is led by `broker` (a single embedded broker).
    pub fn single(broker: BrokerEndpoint) -> Self {
        Self::new(LeaderLookup::Leader(broker))
    }

    /// Sets the answer for `tp` (a leader move, a deletion, ...).
    pub fn set(&self, tp: TopicPartition, lookup: LeaderLookup) {
        self.map.lock().insert(tp, lookup);
    }

    /// Sets the answer for partitions not set explicitly.
    pub fn set_default(&self, lookup: LeaderLookup) {
        *self.default.lock() = lookup;
    }
}

#[async_trait]
impl LeaderResolver for StaticLeaderResolver {
    async fn leader(&self, tp: &TopicPartition) -> Result<LeaderLookup, ResolveError> {
        if let Some(l) = self.map.lock().get(tp) {
            return Ok(l.clone());
        }
        Ok(self.default.lock().clone())
    }
}

#[derive(Debug, Default)]
struct MetaState {
    conn: Option<BoxedConnection>,
    next_server: usize,
    brokers: HashMap<i32, BrokerEndpoint>,
    leaders: HashMap<TopicPartition, i32>,
}

/// Resolves leaders with Kafka `Metadata` requests (v12, one topic at a time, no auto
/// creation) to the bootstrap servers and the brokers they announce. Caches leaders per
/// partition; a cache entry is refreshed on [`LeaderResolver::invalidate`] and never holds
/// "unknown" or "gone". A failed connection moves on to the next server.
#[derive(Debug)]
pub struct MetadataLeaderResolver {
    bootstrap: Vec<(String, u16)>,
    client_id: String,
    timeout: Duration,
    connector: Arc<dyn Connector>,
    state: tokio::sync::Mutex<MetaState>,
}

impl MetadataLeaderResolver {
    /// `bootstrap` is a list of `(host, port)`; `timeout` bounds each connect and call.
    pub fn new(bootstrap: Vec<(String, u16)>, client_id: &str, timeout: Duration) -> Self {
        Self::with_connector(bootstrap, client_id, timeout, Arc::new(PlaintextConnector))
    }

    /// The same, with connections opened by `connector` (TLS, SASL).
    pub fn with_connector(
        bootstrap: Vec<(String, u16)>,
        client_id: &str,
        timeout: Duration,
        connector: Arc<dyn Connector>,
    ) -> Self {
        Self {
            bootstrap,
            client_id: client_id.to_owned(),
            timeout,
            connector,
            state: tokio::sync::Mutex::new(MetaState::default()),
        }
    }

    async fn fetch(
        &self,
        state: &mut MetaState,
        topic: &str,
    ) -> Result<MetadataResponse, ResolveError> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]))
            .with_allow_auto_topic_creation(false);
        let mut servers: Vec<(String, u16)> = self.bootstrap.clone();
        let mut known: Vec<(String, u16)> = state
            .brokers
            .values()
            .map(|b| (b.host.clone(), b.port))
            .filter(|a| !servers.contains(a))
            .collect();
        known.sort();
        servers.extend(known);
        if servers.is_empty() {
            return Err(ResolveError("no bootstrap servers".into()));
        }
        let mut last_error = String::new();
        for _ in 0..servers.len() {
            let mut conn = match state.conn.take() {
                Some(conn) => conn,
                None => {
                    let (host, port) = &servers[state.next_server % servers.len()];
                    state.next_server = state.next_server.wrapping_add(1);
                    let connect = self.connector.connect(host, *port, &self.client_id);
                    match tokio::time::timeout(self.timeout, connect).await {
                        Ok(Ok(conn)) => conn,
                        Ok(Err(e)) => {
                            last_error = e.to_string();
                            continue;
                        }
                        Err(_) => {
                            last_error = format!("connect {host}:{port}: timed out");
                            continue;
                        }
                    }
                }
            };
            match tokio::time::timeout(self.timeout, conn.call(&request, METADATA_VERSION)).await {
                Ok(Ok(response)) => {
                    state.conn = Some(conn);
                    return Ok(response);
                }
                Ok(Err(e)) => last_error = format!("metadata call: {e}"),
                Err(_) => last_error = "metadata call timed out".into(),
            }
        }
        Err(ResolveError(last_error))
    }
}

#[async_trait]
impl LeaderResolver for MetadataLeaderResolver {
    async fn leader(&self, tp: &TopicPartition) -> Result<LeaderLookup, ResolveError> {
        let mut state = self.state.lock().await;
        if let Some(id) = state.leaders.get(tp)
            && let Some(b) = state.brokers.get(id)
        {
            return Ok(LeaderLookup::Leader(b.clone()));
        }
        let response = self.fetch(&mut state, &tp.topic).await?;
        state.brokers = response
            .brokers
            .iter()
            .filter_map(|b| {
                let port = u16::try_from(b.port).ok()?;
                Some((
                    b.node_id.0,
                    BrokerEndpoint::new(b.node_id.0, b.host.as_str(), port),
                ))
            })
            .collect();
        let Some(topic) = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == tp.topic))
        else {
            return Ok(LeaderLookup::Unknown);
        };
        state.leaders.retain(|k, _| k.topic != tp.topic);
        let code = ErrorCode::from(topic.error_code);
        if code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION {
            return Ok(LeaderLookup::TopicGone);
        }
        if !code.is_none() {
            return Ok(LeaderLookup::Unknown);
        }
        for p in &topic.partitions {
            if p.leader_id.0 >= 0 {
                state.leaders.insert(
                    TopicPartition::new(tp.topic.clone(), p.partition_index),
                    p.leader_id.0,
                );
            }
        }
        let Some(p) = topic
            .partitions
            .iter()
            .find(|p| p.partition_index == tp.partition)
        else {
            // The topic exists but not this partition: deleted (or recreated smaller).
            return Ok(LeaderLookup::TopicGone);
        };
        Ok(match state.brokers.get(&p.leader_id.0) {
            Some(b) if p.leader_id.0 >= 0 => LeaderLookup::Leader(b.clone()),
            _ => LeaderLookup::Unknown,
        })
    }

    async fn invalidate(&self, tp: &TopicPartition) {
        self.state.lock().await.leaders.remove(tp);
    }
}
