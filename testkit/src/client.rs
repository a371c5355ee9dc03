//! A negotiating client on `markers::wire`'s connection: ApiVersions at connect, the highest
//! common version per API, metadata, coordinator lookup, topic creation, each call bounded.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    FindCoordinatorRequest, MetadataRequest, TopicName, create_topics_request::CreatableTopic,
    metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::{Request, StrBytes};
use markers::wire::{BoxedConnection, Connector, PlaintextConnector};
use txn_log::ErrorCode;

use crate::wire::{BoundedCallError, call_before};

/// API version ranges a peer advertised (ApiVersions).
#[derive(Debug, Clone, Default)]
pub struct Versions(HashMap<i16, (i16, i16)>);

impl Versions {
    /// The ranges an ApiVersions answer lists.
    pub fn of(resp: &ApiVersionsResponse) -> Self {
        Self(
            resp.api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
        )
    }

    /// The `(min, max)` versions the peer offers of `key`, if it offers it.
    pub fn range(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.0.get(&(key as i16)).copied()
    }

    /// The highest version both sides speak, at most `max` and at least `min`.
    pub fn pick(&self, key: ApiKey, min: i16, max: i16) -> anyhow::Result<i16> {
        let Some(&(lo, hi)) = self.0.get(&(key as i16)) else {
            bail!("the server does not offer {key:?}");
        };
        let codec = key.valid_versions();
        let v = hi.min(max).min(codec.max);
        if v < lo.max(min).max(codec.min) {
            bail!("no common version of {key:?}: server {lo}..={hi}, client {min}..={max}");
        }
        Ok(v)
    }
}

/// The features an ApiVersions answer (v3+) lists, as `(name, min, max)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    /// `SupportedFeatures`: the versions the peer could run.
    pub supported: Vec<(String, i16, i16)>,
    /// `FinalizedFeaturesEpoch`.
    pub finalized_epoch: i64,
    /// `FinalizedFeatures`: the levels in force.
    pub finalized: Vec<(String, i16, i16)>,
}

impl Features {
    /// The features `resp` lists.
    pub fn of(resp: &ApiVersionsResponse) -> Self {
        Self {
            supported: resp
                .supported_features
                .iter()
                .map(|f| (f.name.to_string(), f.min_version, f.max_version))
                .collect(),
            finalized_epoch: resp.finalized_features_epoch,
            finalized: resp
                .finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
                .collect(),
        }
    }
}

/// One connection with the versions its peer offers.
#[derive(Debug)]
pub struct Conn {
    inner: BoxedConnection,
    /// What the peer offers.
    pub versions: Versions,
    /// Where it is connected.
    pub addr: String,
}

impl Conn {
    /// Connects over plain TCP and negotiates (ApiVersions v3).
    pub async fn connect(addr: &str, client_id: &str) -> anyhow::Result<Self> {
        Self::connect_with(&PlaintextConnector, addr, client_id).await
    }

    /// Connects through `connector` (TLS, SASL: `--coordinator-security`) and negotiates.
    pub async fn connect_with(
        connector: &dyn Connector,
        addr: &str,
        client_id: &str,
    ) -> anyhow::Result<Self> {
        let (host, port) = addr
            .rsplit_once(':')
            .with_context(|| format!("{addr} is not HOST:PORT"))?;
        let port: u16 = port.parse().with_context(|| format!("port of {addr}"))?;
        let mut inner = tokio::time::timeout(
            Duration::from_secs(15),
            connector.connect(host, port, client_id),
        )
        .await
        .with_context(|| format!("connect to {addr} timed out"))?
        .with_context(|| format!("cannot connect to {addr}"))?;
        let resp = inner
            .call(
                &ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("txn-testkit"))
                    .with_client_software_version(StrBytes::from_static_str("0.1.0")),
                3,
            )
            .await
            .with_context(|| format!("ApiVersions to {addr}"))?;
        if resp.error_code != ErrorCode::NONE.code() {
            bail!("ApiVersions to {addr}: error {}", resp.error_code);
        }
        let versions = Versions::of(&resp);
        Ok(Self {
            inner,
            versions,
            addr: addr.to_owned(),
        })
    }

    /// One request/response round trip with a 30 s bound.
    pub async fn call<R: Request>(&mut self, req: &R, version: i16) -> anyhow::Result<R::Response> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        match call_before(&mut self.inner, req, version, deadline).await {
            Ok(r) => Ok(r),
            Err(BoundedCallError::TimedOut) => {
                bail!("{:?} to {} timed out after 30 s", R::KEY, self.addr)
            }
            Err(BoundedCallError::Failed(e)) => {
                Err(e).with_context(|| format!("{:?} v{version} to {}", R::KEY, self.addr))
            }
        }
    }
}

/// Where each partition of the topic is led, and the brokers' addresses.
#[derive(Debug, Clone)]
pub struct TopicLayout {
    /// Topic name.
    pub topic: String,
    /// Leader node of partition `i` (index = partition).
    pub leaders: Vec<i32>,
    /// Broker addresses by node id.
    pub brokers: HashMap<i32, String>,
}

/// Reads the topic's layout; creates it with `create_partitions` if it does not exist.
pub async fn topic_layout(
    bootstrap: &str,
    topic: &str,
    create_partitions: Option<i32>,
) -> anyhow::Result<TopicLayout> {
    let mut conn = Conn::connect(bootstrap, "txn-bench-setup").await?;
    let v = conn.versions.pick(ApiKey::Metadata, 1, 12)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut created = false;
    loop {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]))
            .with_allow_auto_topic_creation(false);
        let resp = conn.call(&req, v).await?;
        let brokers: HashMap<i32, String> = resp
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        let t = resp
            .topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic));
        let err = t.map_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(), |t| {
            t.error_code
        });
        if err == ErrorCode::NONE.code() {
            let t = t.context("topic")?;
            let mut leaders = vec![-1; t.partitions.len()];
            let mut ok = !t.partitions.is_empty();
            for p in &t.partitions {
                let idx = usize::try_from(p.partition_index).context("partition index")?;
                if idx >= leaders.len()
                    || p.error_code != ErrorCode::NONE.code()
                    || p.leader_id.0 < 0
                {
                    ok = false;
                    continue;
                }
                leaders[idx] = p.leader_id.0;
                ok &= brokers.contains_key(&p.leader_id.0);
            }
            if ok {
                return Ok(TopicLayout {
                    topic: topic.to_owned(),
                    leaders,
                    brokers,
                });
            }
        } else if err == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code() && !created {
            let Some(n) = create_partitions else {
                bail!("topic {topic} does not exist (pass --create-partitions N to create it)");
            };
            create_topic(&mut conn, topic, n).await?;
            created = true;
        } else if !ErrorCode(err).is_retried_by_producer() {
            bail!("Metadata for {topic}: error {err}");
        }
        if tokio::time::Instant::now() > deadline {
            bail!("topic {topic} has no leaders after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn create_topic(conn: &mut Conn, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let v = conn.versions.pick(ApiKey::CreateTopics, 2, 7)?;
    let req = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ])
        .with_timeout_ms(30_000);
    let resp = conn.call(&req, v).await?;
    for t in &resp.topics {
        if t.error_code != ErrorCode::NONE.code()
            && t.error_code != ErrorCode::TOPIC_ALREADY_EXISTS.code()
        {
            bail!(
                "CreateTopics {topic}: error {} {:?}",
                t.error_code,
                t.error_message
            );
        }
    }
    Ok(())
}

/// FindCoordinator (key type 1, transaction) for `txn_id`, retrying while it is not available.
pub async fn find_coordinator(
    conn: &mut Conn,
    txn_id: &str,
    deadline: tokio::time::Instant,
) -> anyhow::Result<(i32, String)> {
    let v = conn.versions.pick(ApiKey::FindCoordinator, 1, 3)?;
    let mut backoff = Duration::from_millis(10);
    loop {
        let req = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(txn_id.to_owned()))
            .with_key_type(1);
        let resp = conn.call(&req, v).await?;
        if resp.error_code == ErrorCode::NONE.code() {
            let BrokerId(node) = resp.node_id;
            return Ok((node, format!("{}:{}", resp.host, resp.port)));
        }
        if !ErrorCode(resp.error_code).is_retried_by_producer()
            || tokio::time::Instant::now() > deadline
        {
            bail!(
                "FindCoordinator {txn_id}: error {} {:?}",
                resp.error_code,
                resp.error_message
            );
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}
