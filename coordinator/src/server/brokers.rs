//! The daemon's view of the brokers from `--bootstrap-servers`: their Metadata (forwarded to
//! clients with this node added), group coordinator lookups, and the topic check of
//! AddPartitionsToTxn.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{self as km};
use kafka_protocol::protocol::{Request, StrBytes};
use markers::wire::KafkaConnection;
use tokio::net::TcpStream;
use txn_log::TopicPartition;

use crate::ErrorCode;

/// Highest Metadata version used towards the brokers.
const METADATA_VERSION_MAX: i16 = 12;

/// Client of the bootstrap brokers (one connection, reused, moved on after a failure).
#[derive(Debug)]
pub struct Brokers {
    servers: Vec<String>,
    timeout: Duration,
    max_age: Duration,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    conn: Option<KafkaConnection<TcpStream>>,
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
        Self {
            servers,
            timeout,
            max_age,
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
                    match tokio::time::timeout(self.timeout, TcpStream::connect(&addr)).await {
                        Ok(Ok(s)) => {
                            let _ = s.set_nodelay(true);
                            KafkaConnection::new(s, "txn-coordinator")
                        }
                        Ok(Err(e)) => {
                            last = format!("connect {addr}: {e}");
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

    /// Forwards a Metadata request (at `min(version, 12)`) and returns the brokers' answer.
    pub async fn metadata(
        &self,
        request: &km::MetadataRequest,
        version: i16,
    ) -> Result<km::MetadataResponse, BrokerError> {
        let v = version.min(METADATA_VERSION_MAX);
        let mut req = request.clone();
        if v < 4 {
            req.allow_auto_topic_creation = true;
        }
        if !(8..=10).contains(&v) {
            req.include_cluster_authorized_operations = false;
        }
        if v < 8 {
            req.include_topic_authorized_operations = false;
        }
        let resp = self.call(&req, v).await?;
        self.remember(&resp);
        Ok(resp)
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
