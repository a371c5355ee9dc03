//! The daemon's view of the brokers from `--bootstrap-servers`: their Metadata (forwarded to
//! clients with this node added), group coordinator lookups, and the topic check of
//! AddPartitionsToTxn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{self as km};
use kafka_protocol::protocol::{Request, StrBytes};
use markers::wire::{BoxedConnection, Connector, PlaintextConnector};
use txn_log::TopicPartition;

use crate::ErrorCode;

/// Highest Metadata version used towards the brokers.
const METADATA_VERSION_MAX: i16 = 12;

/// Resets the fields of a v12 Metadata response that `version` does not have.
pub(crate) fn downgrade_metadata(
    mut r: km::MetadataResponse,
    version: i16,
) -> km::MetadataResponse {
    if version < 1 {
        r.controller_id = km::BrokerId(-1);
    }
    if version < 2 {
        r.cluster_id = None;
    }
    if version < 3 {
        r.throttle_time_ms = 0;
    }
    // Cluster authorized operations exist only in v8-v10; we never ask for them.
    r.cluster_authorized_operations = i32::MIN;
    if version < 13 {
        r.error_code = 0;
    }
    for b in &mut r.brokers {
        if version < 1 {
            b.rack = None;
        }
    }
    for t in &mut r.topics {
        if version < 1 {
            t.is_internal = false;
        }
        if version < 8 {
            t.topic_authorized_operations = i32::MIN;
        }
        if version < 10 {
            t.topic_id = Default::default();
        }
        if version < 12 && t.name.is_none() {
            t.name = Some(km::TopicName(StrBytes::from_static_str("")));
        }
        for p in &mut t.partitions {
            if version < 5 {
                p.offline_replicas.clear();
            }
            if version < 7 {
                p.leader_epoch = -1;
            }
        }
    }
    r
}

/// Client of the bootstrap brokers (one connection, reused, moved on after a failure).
#[derive(Debug)]
pub struct Brokers {
    servers: Vec<String>,
    timeout: Duration,
    max_age: Duration,
    connector: Arc<dyn Connector>,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    conn: Option<BoxedConnection>,
    next: usize,
    /// Topic name -> partition count, with the time it was fetched.
    topics: HashMap<String, (i32, Instant)>,
}

/// Why a call to the brokers failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("brokers unreachable: {0}")]
pub struct BrokerError(pub String);

impl Brokers {
    /// `servers` as `host:port`; `timeout` bounds each connect and call.
    pub fn new(servers: Vec<String>, timeout: Duration, max_age: Duration) -> Self {
        Self::with_connector(servers, timeout, max_age, Arc::new(PlaintextConnector))
    }

    /// The same, with connections opened by `connector` (`broker.security.protocol`).
    pub fn with_connector(
        servers: Vec<String>,
        timeout: Duration,
        max_age: Duration,
        connector: Arc<dyn Connector>,
    ) -> Self {
        Self {
            servers,
            timeout,
            max_age,
            connector,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// Whether any broker is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The configured servers.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    async fn call<R: Request>(
        &self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, BrokerError> {
        if self.servers.is_empty() {
            return Err(BrokerError("no --bootstrap-servers configured".into()));
        }
        let mut st = self.state.lock().await;
        let mut last = String::new();
        for _ in 0..self.servers.len() {
            let mut conn = match st.conn.take() {
                Some(c) => c,
                None => {
                    let addr = self.servers[st.next % self.servers.len()].clone();
                    st.next = st.next.wrapping_add(1);
                    let Ok((host, port)) = super::split_host_port(&addr) else {
                        last = format!("bad broker address {addr:?}");
                        continue;
                    };
                    let connect = self.connector.connect(&host, port, "txn-coordinator");
                    match tokio::time::timeout(self.timeout, connect).await {
                        Ok(Ok(c)) => c,
                        Ok(Err(e)) => {
                            last = e.to_string();
                            continue;
                        }
                        Err(_) => {
                            last = format!("connect {addr}: timed out");
                            continue;
                        }
                    }
                }
            };
            match tokio::time::timeout(self.timeout, conn.call(request, version)).await {
                Ok(Ok(r)) => {
                    st.conn = Some(conn);
                    return Ok(r);
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "call timed out".into(),
            }
        }
        Err(BrokerError(last))
    }

    /// Forwards a client's Metadata request of `version` to the brokers at v12 (what the marker
    /// writer needs them to serve anyway; Kafka 4 no longer serves v0-v3) and returns the
    /// answer converted down to `version` (fields that version lacks reset to their defaults).
    pub async fn metadata(
        &self,
        request: &km::MetadataRequest,
        version: i16,
    ) -> Result<km::MetadataResponse, BrokerError> {
        let topics = match &request.topics {
            // v0: an empty list means every topic.
            Some(t) if t.is_empty() && version == 0 => None,
            other => other.clone(),
        };
        let req = km::MetadataRequest::default()
            .with_topics(topics)
            .with_allow_auto_topic_creation(version < 4 || request.allow_auto_topic_creation)
            .with_include_topic_authorized_operations(
                version >= 8 && request.include_topic_authorized_operations,
            );
        let resp = self.call(&req, METADATA_VERSION_MAX).await?;
        self.remember(&resp);
        Ok(downgrade_metadata(resp, version))
    }

    fn remember_into(st: &mut State, resp: &km::MetadataResponse) {
        let now = Instant::now();
        for t in &resp.topics {
            if let Some(name) = &t.name {
                if t.error_code == 0 {
                    let n = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
                    st.topics.insert(name.0.to_string(), (n, now));
                } else {
                    st.topics.remove(name.0.as_str());
                }
            }
        }
    }

    fn remember(&self, resp: &km::MetadataResponse) {
        if let Ok(mut st) = self.state.try_lock() {
            Self::remember_into(&mut st, resp);
        }
    }

    /// The partitions of `wanted` that the brokers do not know (unknown topic, or partition
    /// index beyond the topic's count). With no brokers configured, nothing is checked.
    pub async fn unknown_partitions(
        &self,
        wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, BrokerError> {
        if self.servers.is_empty() || wanted.is_empty() {
            return Ok(Vec::new());
        }
        let fresh = |st: &State, topic: &str| {
            st.topics
                .get(topic)
                .filter(|(_, at)| at.elapsed() <= self.max_age)
                .map(|(n, _)| *n)
        };
        let missing: Vec<String> = {
            let st = self.state.lock().await;
            let mut m: Vec<String> = wanted
                .iter()
                .filter(|tp| fresh(&st, &tp.topic).is_none_or(|n| tp.partition >= n))
                .map(|tp| tp.topic.clone())
                .collect();
            m.sort();
            m.dedup();
            m
        };
        if !missing.is_empty() {
            let req = km::MetadataRequest::default()
                .with_topics(Some(
                    missing
                        .iter()
                        .map(|t| {
                            km::metadata_request::MetadataRequestTopic::default()
                                .with_name(Some(km::TopicName(StrBytes::from_string(t.clone()))))
                        })
                        .collect(),
                ))
                .with_allow_auto_topic_creation(false);
            let resp = self.call(&req, METADATA_VERSION_MAX).await?;
            let mut st = self.state.lock().await;
            Self::remember_into(&mut st, &resp);
        }
        let st = self.state.lock().await;
        Ok(wanted
            .iter()
            .filter(|tp| {
                tp.partition < 0
                    || st
                        .topics
                        .get(&tp.topic)
                        .is_none_or(|(n, _)| tp.partition >= *n)
            })
            .cloned()
            .collect())
    }

    /// Asks the brokers for the coordinator of group `key` (FindCoordinator v`version`).
    pub async fn find_group_coordinator(
        &self,
        key: &str,
    ) -> Result<(ErrorCode, i32, String, i32), BrokerError> {
        // v3 (flexible, single key) is served by every broker since Kafka 2.4 and still by 4.x.
        let req = km::FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(key.to_owned()))
            .with_key_type(0);
        let r = self.call(&req, 3).await?;
        Ok((
            ErrorCode(r.error_code),
            r.node_id.0,
            r.host.to_string(),
            r.port,
        ))
    }
}

#[async_trait::async_trait]
impl crate::shell::PartitionCatalog for Brokers {
    async fn unknown_partitions(
        &self,
        wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, crate::shell::CatalogUnavailable> {
        Self::unknown_partitions(self, wanted)
            .await
            .map_err(|e| crate::shell::CatalogUnavailable(e.0))
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::protocol::Encodable;

    use super::*;

    #[test]
    fn a_full_v12_answer_downgrades_to_every_version() {
        let full = km::MetadataResponse::default()
            .with_throttle_time_ms(5)
            .with_cluster_id(Some(StrBytes::from_static_str("c")))
            .with_controller_id(km::BrokerId(1))
            .with_brokers(vec![
                km::metadata_response::MetadataResponseBroker::default()
                    .with_node_id(km::BrokerId(1))
                    .with_host(StrBytes::from_static_str("h"))
                    .with_port(9092)
                    .with_rack(Some(StrBytes::from_static_str("r"))),
            ])
            .with_topics(vec![
                km::metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(km::TopicName(StrBytes::from_static_str("t"))))
                    .with_is_internal(true)
                    .with_topic_authorized_operations(3)
                    .with_partitions(vec![
                        km::metadata_response::MetadataResponsePartition::default()
                            .with_leader_id(km::BrokerId(1))
                            .with_leader_epoch(4)
                            .with_offline_replicas(vec![km::BrokerId(2)]),
                    ]),
            ]);
        for v in 0..=12 {
            let down = downgrade_metadata(full.clone(), v);
            down.encode(&mut BytesMut::new(), v)
                .unwrap_or_else(|e| panic!("v{v}: {e}"));
            assert_eq!(down.brokers[0].port, 9092);
            assert_eq!(down.topics[0].partitions[0].leader_id, km::BrokerId(1));
        }
        assert!(
            full.encode(&mut BytesMut::new(), 0).is_err(),
            "the test input needs the downgrade"
        );
    }
}
