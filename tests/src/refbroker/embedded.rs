//! Embedded mode: the broker hosts the transaction coordinator in process.
//!
//! Wiring (the worked example of `docs/broker-integration.md`):
//!
//! ```text
//! client ──InitProducerId/AddPartitionsToTxn/AddOffsetsToTxn/EndTxn──▶ refbroker
//!     └─ coordinator::server::protocol (the daemon's kafka-protocol ↔ coordinator::Request
//!        conversions) ──▶ coordinator::shell::Coordinator
//!           ├─ TxnLog: coordinator::server::DaemonLog (`txn.log.backend`): sled in
//!           │  <data-dir>/txn-log (txn.log.sync, txn.log.cache.bytes), producer ids scoped
//!           │  to the node; or etcd (etcd.endpoints, etcd.key.prefix), shared by every node
//!           ├─ PartitionCatalog: BrokerCatalog (this broker's topics: AddPartitionsToTxn
//!           │  for a partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION)
//!           └─ MarkerSink: WriterSink(markers::writer::MarkerWriter)
//!                 ├─ LeaderResolver: ClusterResolver (the fixed placement rule)
//!                 └─ builder's markers_routed:
//!                       ├─ this node  → MarkerApplier(LocalMarkers) → handlers::apply_markers
//!                       └─ other nodes → KafkaWireTransport (WriteTxnMarkers v2 over TCP)
//! ```
//!
//! On sled each node loads the `__transaction_state` partitions the fixed placement rule gives
//! it. On etcd the nodes share one log and the daemon's membership decides
//! ([`coordinator::server::membership`]): each node registers under a lease
//! (`etcd.lease.ttl.ms`), the partitions are spread over the live nodes, and those of a dead
//! node move to the survivors. Either way FindCoordinator(TRANSACTION) and the coordinator
//! agree on every node.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use coordinator::server::listeners;
use coordinator::server::membership::{self, Member, Membership};
use coordinator::server::outgoing::ClientSecurity;
use coordinator::server::peers::Probe;
use coordinator::server::protocol as p;
use coordinator::server::{DaemonLog, LogBackend};
use coordinator::shell::{CatalogUnavailable, Coordinator, PartitionCatalog};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::VersionRange;
use markers::apply::{ApplyError, MarkerApplier};
use markers::participant::Marker;
use markers::wire::{Connector, PlaintextConnector};
use markers::writer::{
    BrokerEndpoint, LeaderLookup, LeaderResolver, ResolveError, WireTransportConfig,
};
use txn_log::{LogPartition, TopicPartition, java_string_hash, kafka_partition_for};

use super::server::Broker;
use super::{Config, TRANSACTION_STATE};

/// The coordinator's settings: the daemon's own parser (`coordinator::server::Settings`,
/// Kafka key names) over the broker's `--set` values that are coordinator keys, with
/// `offsets.topic.num.partitions` = `--offsets-partitions`.
pub(crate) fn coordinator_settings(
    config: &Config,
) -> anyhow::Result<coordinator::server::Settings> {
    let mut s = coordinator::server::Settings::default();
    for (k, v) in &config.settings {
        if is_coordinator_key(k) {
            s.set(k, v)?;
        }
    }
    s.engine.offsets_topic_num_partitions = u32::try_from(config.offsets_partitions)?;
    // The broker hands out every producer id of its node itself (idempotent producers too),
    // from its node's range (`NodeScopedLog`): no other allocator to keep clear of.
    if !config.settings.contains_key("producer.id.start") {
        s.engine.producer_id_start = 0;
    }
    Ok(s.validate()?)
}

/// The coordinator configuration (see [`coordinator_settings`]).
pub(crate) fn coordinator_config(config: &Config) -> anyhow::Result<coordinator::Config> {
    Ok(coordinator_settings(config)?.engine)
}

/// Whether `key` is a setting of the coordinator (as `txn-coordinator serve --set` takes).
pub(crate) fn is_coordinator_key(key: &str) -> bool {
    // `listener.name.<listener>.<key>` stands for the per-listener keys.
    coordinator::server::KEYS.iter().any(|(k, _, _)| *k == key) || key.starts_with("listener.name.")
}

/// The node coordinating `transactional_id`: the owner of its `__transaction_state` partition
/// among the live members (etcd), or its leader by the fixed placement rule (sled). `None`
/// while no member is known.
pub(crate) fn coordinator_node(
    broker: &Broker,
    partitions: u32,
    membership: Option<&Membership>,
    transactional_id: &str,
) -> Option<i32> {
    let p = kafka_partition_for(java_string_hash(transactional_id), partitions.max(1));
    match membership {
        Some(m) => m.owner(LogPartition(p)).map(|o| o.node_id),
        None => Some(
            broker
                .cluster
                .leader(TRANSACTION_STATE, i32::try_from(p).unwrap_or(0)),
        ),
    }
}

/// Partition leaders for the marker writer, by the fixed placement rule.
struct ClusterResolver {
    broker: Weak<Broker>,
}

#[async_trait]
impl LeaderResolver for ClusterResolver {
    async fn leader(&self, tp: &TopicPartition) -> Result<LeaderLookup, ResolveError> {
        let Some(broker) = self.broker.upgrade() else {
            return Ok(LeaderLookup::Unknown);
        };
        if !broker.exists(&tp.topic, tp.partition) {
            return Ok(LeaderLookup::TopicGone);
        }
        let node = broker.cluster.leader(&tp.topic, tp.partition);
        Ok(match broker.cluster.addr(node) {
            Some(a) => LeaderLookup::Leader(BrokerEndpoint::new(node, a.host.clone(), a.port)),
            None => LeaderLookup::Unknown,
        })
    }
}

/// Which partitions exist, from this broker's own metadata (the same topics every node
/// knows), so AddPartitionsToTxn answers UNKNOWN_TOPIC_OR_PARTITION as Kafka's broker does.
struct BrokerCatalog {
    broker: Weak<Broker>,
}

#[async_trait]
impl PartitionCatalog for BrokerCatalog {
    async fn unknown_partitions(
        &self,
        wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, CatalogUnavailable> {
        let Some(broker) = self.broker.upgrade() else {
            return Err(CatalogUnavailable("the broker is shutting down".into()));
        };
        Ok(wanted
            .iter()
            .filter(|tp| !broker.exists(&tp.topic, tp.partition))
            .cloned()
            .collect())
    }
}

/// Applies markers for this node's partitions directly (no TCP round trip to itself), in the
/// participant's types: the same code as the broker's WriteTxnMarkers handler.
struct LocalMarkers {
    broker: Weak<Broker>,
}

#[async_trait]
impl MarkerApplier for LocalMarkers {
    async fn apply_markers(
        &self,
        markers: Vec<(TopicPartition, Marker)>,
    ) -> Vec<Result<(), ApplyError>> {
        let Some(broker) = self.broker.upgrade() else {
            return markers.iter().map(|_| Err(ApplyError::NotLeader)).collect();
        };
        super::handlers::apply_markers(&broker, markers).await
    }
}

/// The started embedded coordinator and, on etcd, the membership that decides which node
/// owns which log partition.
#[derive(Debug)]
pub(crate) struct Embedded {
    /// The coordinator.
    pub(crate) coordinator: Coordinator,
    /// `Some` on the etcd backend.
    pub(crate) membership: Option<Arc<Membership>>,
    /// Opens the connections to the other nodes (the inter-broker listener's client side).
    pub(crate) inter_broker: Arc<dyn Connector>,
}

/// Builds and starts the embedded coordinator; loads this node's partitions in the background
/// (sled), or joins the members on etcd, which load what this node owns.
pub(crate) async fn start(broker: &Arc<Broker>) -> anyhow::Result<Embedded> {
    let settings = coordinator_settings(&broker.config)?;
    let log = DaemonLog::open(&settings, &broker.config.data_dir.join("txn-log")).await?;
    // The ACLs and SCRAM credentials live beside the transaction records, as the daemon's.
    broker.security.install(log.as_security_store()).await?;
    let config = settings.engine.clone();
    let weak = Arc::downgrade(broker);
    let resolver = Arc::new(ClusterResolver {
        broker: weak.clone(),
    });
    let local = Arc::new(LocalMarkers {
        broker: weak.clone(),
    });
    let wire = WireTransportConfig {
        client_id: format!("refbroker-{}-markers", broker.config.node_id),
        ..WireTransportConfig::default()
    };
    // The nodes talk to each other (markers, KIP-890 verification) on the inter-broker
    // listener, with its security as a client, as Kafka's brokers do. A node alone leads every
    // partition: nothing crosses nodes, and its listener needs no client settings.
    let specs = broker.security.specs(broker.config.listen)?;
    let listener = listeners::inter_broker_listener(&settings, &specs)?;
    let inter_broker: Arc<dyn Connector> = if broker.cluster.nodes().len() > 1 {
        ClientSecurity::inter_broker(&settings, listener, true)?.connector()
    } else {
        Arc::new(PlaintextConnector)
    };
    let n = config.transaction_state_log_num_partitions;
    let mut builder = Coordinator::builder(config, log.as_txn_log())
        .markers_routed(
            broker.config.node_id,
            local,
            resolver,
            wire,
            inter_broker.clone(),
        )
        .catalog(Arc::new(BrokerCatalog { broker: weak }));
    // One sled log per node counts producer ids from 0: scope them to the node. etcd hands
    // out blocks unique across the nodes already.
    if let DaemonLog::Sled(_) = &log {
        builder = builder.node_scoped(broker.config.node_id);
    }
    let coordinator = builder.start()?;
    let membership = match settings.txn_log_backend {
        LogBackend::Etcd => {
            let me = broker
                .cluster
                .addr(broker.config.node_id)
                .map(|a| Member {
                    node_id: broker.config.node_id,
                    host: a.host.clone(),
                    port: a.port,
                    listeners: Vec::new(),
                })
                .ok_or_else(|| anyhow::anyhow!("this node's address is unknown"))?;
            // Probed as the daemons probe each other: ApiVersions, not authenticated.
            let probe = Probe {
                listener: listener.name().to_owned(),
                connector: ClientSecurity::inter_broker(&settings, listener, false)?.connector(),
            };
            Some(membership::start(&settings, me, coordinator.clone(), probe).await?)
        }
        LogBackend::Sled => {
            let mine: Vec<u32> = (0..n)
                .filter(|&p| {
                    broker
                        .cluster
                        .leader(TRANSACTION_STATE, i32::try_from(p).unwrap_or(0))
                        == broker.config.node_id
                })
                .collect();
            let c = coordinator.clone();
            tokio::spawn(async move {
                for p in mine {
                    if let Err(e) = c.load_partition_next_epoch(LogPartition(p)).await {
                        tracing::error!(partition = p, error = %e, "loading a transaction-log partition failed");
                    }
                }
                tracing::info!("embedded coordinator loaded its transaction-log partitions");
            });
            None
        }
    };
    // Fail-stop on a poisoned log. `Coordinator::log_failure`'s future is not `Send`, so it
    // waits on a thread of its own.
    let c = coordinator.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
            return;
        };
        let why = rt.block_on(c.log_failure());
        tracing::error!(%why, "transaction log failed; stopping (fail-stop)");
        std::process::exit(70);
    });
    Ok(Embedded {
        coordinator,
        membership,
        inter_broker,
    })
}

/// Answers a coordinator API through the embedded coordinator with the daemon's own code
/// ([`coordinator::server::txn_apis::handle`]: its authorization checks, then its
/// conversions), so embedded mode serves the versions the daemon serves ([`supported`]).
/// `authz` makes the checks of the client's request.
pub(crate) async fn dispatch_checked<'a>(
    c: &Coordinator,
    authz: &(dyn Fn(&'static str) -> coordinator::server::authz::Authz<'a> + Sync),
    body: RequestKind,
    v: i16,
) -> anyhow::Result<ResponseKind> {
    coordinator::server::txn_apis::handle(c, authz, v, body)
        .await
        .map_err(|other| anyhow::anyhow!("request {other:?} is not served"))
}

/// [`dispatch_checked`] without an authorizer (everything allowed).
pub(crate) async fn dispatch(
    c: &Coordinator,
    body: RequestKind,
    v: i16,
) -> anyhow::Result<ResponseKind> {
    let denials = coordinator::server::authz::Denials::default();
    let session =
        coordinator::server::session::Session::anonymous(std::net::Ipv4Addr::LOCALHOST.into());
    let authz =
        |api: &'static str| coordinator::server::authz::Authz::new(None, &session, &denials, api);
    dispatch_checked(c, &authz, body, v).await
}

/// The versions embedded mode serves for a coordinator API: the daemon's table.
pub(crate) fn supported(key: ApiKey) -> Option<VersionRange> {
    p::supported(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(set: &str) -> Config {
        let args = format!(
            "--listen 127.0.0.1:1 --data-dir /tmp/d --topics a:1 --embedded-coordinator {set}"
        );
        super::super::cli::parse_args(args.split_whitespace().map(str::to_owned)).unwrap()
    }

    #[test]
    fn the_daemons_log_settings_reach_the_embedded_log() {
        let s = coordinator_settings(&config("")).unwrap();
        let sled = s.sled_config("/tmp/d/txn-log");
        assert_eq!(sled.sync_mode, txn_log::SyncMode::Fsync);
        let s = coordinator_settings(&config(
            "--set txn.log.sync=os-buffered --set txn.log.cache.bytes=2097152",
        ))
        .unwrap();
        let sled = s.sled_config("/tmp/d/txn-log");
        assert_eq!(sled.sync_mode, txn_log::SyncMode::OsBuffered);
        assert_eq!(sled.cache_capacity, 2_097_152);
        assert!(coordinator_settings(&config("--set txn.log.sync=sometimes")).is_err());
    }
}
