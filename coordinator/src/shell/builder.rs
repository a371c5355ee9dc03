//! [`Coordinator::builder`]: a coordinator from a configuration and a log, with the marker
//! writer, its completion channel and the defaults wired by the library.
//!
//! ```no_run
//! # async fn demo(resolver: std::sync::Arc<dyn markers::writer::LeaderResolver>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use coordinator::shell::Coordinator;
//! use markers::writer::WireTransportConfig;
//! use txn_log::MemTxnLog;
//!
//! let coordinator = Coordinator::builder(coordinator::Config::default(), Arc::new(MemTxnLog::new()))
//!     .markers_over_wire(resolver, WireTransportConfig::default())
//!     .start()?;
//! coordinator.load_all_partitions().await?;
//! # Ok(()) }
//! ```

use std::sync::Arc;

use markers::apply::{ApplierTransport, MarkerApplier};
use markers::wire::Connector;
use markers::writer::{
    BrokerEndpoint, KafkaWireTransport, LeaderResolver, MarkerCompletion, MarkerTransport,
    RoutingTransport, StaticLeaderResolver, WireTransportConfig, WriterConfig,
};
use tokio::sync::mpsc;
use txn_log::{LogError, NodeScopedLog, TxnLog};

use super::{
    Clock, Coordinator, CoordinatorOptions, EveryPartitionExists, MARKER_COMPLETIONS_CAPACITY,
    MarkerSink, Metrics, PartitionCatalog, SystemClock, WriterSink,
};
use crate::{Config, ConfigError};

/// Why [`CoordinatorBuilder::start`] refused to start a coordinator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The configuration is invalid ([`Config::validate`]).
    #[error("invalid coordinator configuration: {0}")]
    Config(#[from] ConfigError),
    /// No way to deliver markers was chosen: a coordinator without one would decide
    /// transactions whose participants never learn the outcome.
    #[error(
        "no marker delivery: call markers_in_process, markers_routed, markers_over_wire, markers or marker_sink"
    )]
    NoMarkerDelivery,
    /// [`CoordinatorBuilder::node_scoped`] got a node id outside `0..NodeScopedLog::MAX_NODES`.
    #[error("producer-id scoping: {0}")]
    NodeId(LogError),
    /// `start` was called outside a tokio runtime (the coordinator spawns its tasks on it).
    #[error("the coordinator must be started inside a tokio runtime")]
    NoRuntime,
}

/// The broker id [`CoordinatorBuilder::markers_in_process`] addresses its markers to (any
/// id: every request goes to the one applier).
const IN_PROCESS_NODE: i32 = 0;

type SinkFactory = Box<dyn FnOnce(mpsc::Sender<MarkerCompletion>) -> Arc<dyn MarkerSink> + Send>;

enum Delivery {
    Writer {
        resolver: Arc<dyn LeaderResolver>,
        transport: Arc<dyn MarkerTransport>,
    },
    Sink(SinkFactory),
}

/// Builds a [`Coordinator`] ([`Coordinator::builder`]). Defaults: [`SystemClock`], every
/// partition exists ([`EveryPartitionExists`]), fresh [`Metrics`], [`WriterConfig::default`].
/// Choosing how markers reach participants is required.
pub struct CoordinatorBuilder {
    config: Config,
    log: Arc<dyn TxnLog>,
    node_id: Option<i32>,
    clock: Arc<dyn Clock>,
    catalog: Arc<dyn PartitionCatalog>,
    metrics: Metrics,
    writer: WriterConfig,
    delivery: Option<Delivery>,
}

impl std::fmt::Debug for CoordinatorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorBuilder")
            .field("config", &self.config)
            .field("node_id", &self.node_id)
            .field("writer", &self.writer)
            .field("delivery", &self.delivery.is_some())
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// A builder for a coordinator over `log` with `config` (validated by
    /// [`CoordinatorBuilder::start`]).
    pub fn builder(config: Config, log: Arc<dyn TxnLog>) -> CoordinatorBuilder {
        CoordinatorBuilder {
            config,
            log,
            node_id: None,
            clock: Arc::new(SystemClock::new()),
            catalog: Arc::new(EveryPartitionExists),
            metrics: Metrics::default(),
            writer: WriterConfig::default(),
            delivery: None,
        }
    }
}

impl CoordinatorBuilder {
    /// The clock (default [`SystemClock`]; tests use a [`super::ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Which participant partitions exist, consulted before AddPartitionsToTxn (default: all).
    pub fn catalog(mut self, catalog: Arc<dyn PartitionCatalog>) -> Self {
        self.catalog = catalog;
        self
    }

    /// The metrics to update (register them in your registry first; default: fresh ones).
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The marker writer's settings (default [`WriterConfig::default`]).
    pub fn writer_config(mut self, config: WriterConfig) -> Self {
        self.writer = config;
        self
    }

    /// For a cluster whose nodes each have a log of their own: hands out producer ids in this
    /// node's range only, `[node_id << 40, (node_id + 1) << 40)` ([`NodeScopedLog`]), so no two
    /// coordinators give the same producer id to different transactional ids. Not for a log
    /// all nodes share (etcd), whose blocks are unique already.
    pub fn node_scoped(mut self, node_id: i32) -> Self {
        self.node_id = Some(node_id);
        self
    }

    /// Markers go to the leaders `resolver` names through `transport` (any
    /// [`MarkerTransport`]; the methods below build the usual ones).
    pub fn markers(
        mut self,
        resolver: Arc<dyn LeaderResolver>,
        transport: Arc<dyn MarkerTransport>,
    ) -> Self {
        self.delivery = Some(Delivery::Writer {
            resolver,
            transport,
        });
        self
    }

    /// Markers are applied by this broker, in process, to its own partitions: the
    /// single-broker case, where it leads every partition a transaction can name (the
    /// [`catalog`](Self::catalog) keeps the others out). `applier` gets `(TopicPartition,
    /// Marker)` pairs and answers typed results ([`MarkerApplier`]).
    pub fn markers_in_process(self, applier: Arc<dyn MarkerApplier>) -> Self {
        let resolver = Arc::new(StaticLeaderResolver::single(BrokerEndpoint::new(
            IN_PROCESS_NODE,
            "in-process",
            0,
        )));
        self.markers(resolver, Arc::new(ApplierTransport::new(applier)))
    }

    /// A broker of a cluster hosting the coordinator: markers for partitions this node
    /// (`local_node_id`) leads go to `applier` in process, the others as `WriteTxnMarkers` (v2
    /// where the broker lists it, else v1) over the wire ([`KafkaWireTransport`]) to the
    /// leaders `resolver` names, on connections `connector` opens (the brokers' inter-broker
    /// security; `markers::wire::PlaintextConnector` for plain TCP).
    pub fn markers_routed(
        self,
        local_node_id: i32,
        applier: Arc<dyn MarkerApplier>,
        resolver: Arc<dyn LeaderResolver>,
        wire: WireTransportConfig,
        connector: Arc<dyn Connector>,
    ) -> Self {
        let transport = RoutingTransport::new(
            local_node_id,
            Arc::new(ApplierTransport::new(applier)),
            Arc::new(KafkaWireTransport::with_connector(wire, connector)),
        );
        self.markers(resolver, Arc::new(transport))
    }

    /// Markers go to the leaders `resolver` names as `WriteTxnMarkers` (v2 where the broker
    /// lists it, else v1) over Kafka's wire protocol ([`KafkaWireTransport`]): a coordinator
    /// hosted apart from the data.
    pub fn markers_over_wire(
        self,
        resolver: Arc<dyn LeaderResolver>,
        config: WireTransportConfig,
    ) -> Self {
        self.markers(resolver, Arc::new(KafkaWireTransport::new(config)))
    }

    /// A sink of your own instead of the marker writer (a test double such as
    /// [`super::RecordingMarkerSink`]): `make` gets the completion channel the coordinator
    /// reads, on which the sink reports every accepted decision exactly once.
    pub fn marker_sink(
        mut self,
        make: impl FnOnce(mpsc::Sender<MarkerCompletion>) -> Arc<dyn MarkerSink> + Send + 'static,
    ) -> Self {
        self.delivery = Some(Delivery::Sink(Box::new(make)));
        self
    }

    /// Validates the configuration, spawns the marker writer and starts the coordinator. It
    /// owns no log partition yet: load them ([`Coordinator::load_all_partitions`] on a single
    /// node, or the ownership hook [`Coordinator::became_leader`] when the broker's replication
    /// decides). Call inside a tokio runtime.
    pub fn start(self) -> Result<Coordinator, BuildError> {
        let config = self.config.validate()?;
        let delivery = self.delivery.ok_or(BuildError::NoMarkerDelivery)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(BuildError::NoRuntime);
        }
        let log: Arc<dyn TxnLog> = match self.node_id {
            Some(node_id) => {
                Arc::new(NodeScopedLog::new(self.log, node_id).map_err(BuildError::NodeId)?)
            }
            None => self.log,
        };
        let (done_tx, done_rx) = mpsc::channel(MARKER_COMPLETIONS_CAPACITY);
        let markers: Arc<dyn MarkerSink> = match delivery {
            Delivery::Writer {
                resolver,
                transport,
            } => Arc::new(WriterSink::spawn(resolver, transport, self.writer, done_tx)),
            Delivery::Sink(make) => make(done_tx),
        };
        Ok(Coordinator::start(CoordinatorOptions {
            config,
            log,
            clock: self.clock,
            markers,
            marker_completions: done_rx,
            catalog: self.catalog,
            metrics: self.metrics,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InitProducerIdRequest;
    use crate::shell::RecordingMarkerSink;
    use txn_log::MemTxnLog;

    fn init(id: &str) -> InitProducerIdRequest {
        InitProducerIdRequest::new_producer(4, id, 60_000)
    }

    #[tokio::test]
    async fn an_invalid_config_or_no_marker_delivery_is_refused() {
        let log = || Arc::new(MemTxnLog::new()) as Arc<dyn TxnLog>;
        let bad = Config {
            transaction_state_log_num_partitions: 0,
            ..Config::default()
        };
        let e = Coordinator::builder(bad, log())
            .marker_sink(|tx| Arc::new(RecordingMarkerSink::new(tx, true)))
            .start()
            .unwrap_err();
        assert!(
            matches!(e, BuildError::Config(ConfigError::NotPositive { .. })),
            "{e}"
        );
        let e = Coordinator::builder(Config::default(), log())
            .start()
            .unwrap_err();
        assert!(matches!(e, BuildError::NoMarkerDelivery), "{e}");
        let e = Coordinator::builder(Config::default(), log())
            .node_scoped(-1)
            .marker_sink(|tx| Arc::new(RecordingMarkerSink::new(tx, true)))
            .start()
            .unwrap_err();
        assert!(matches!(e, BuildError::NodeId(_)), "{e}");
    }

    #[test]
    fn start_outside_a_runtime_is_refused() {
        let resolver = Arc::new(StaticLeaderResolver::single(BrokerEndpoint::new(
            1,
            "127.0.0.1",
            1,
        )));
        let e = Coordinator::builder(Config::default(), Arc::new(MemTxnLog::new()))
            .markers_over_wire(resolver, WireTransportConfig::default())
            .start()
            .unwrap_err();
        assert!(matches!(e, BuildError::NoRuntime), "{e}");
    }

    #[tokio::test]
    async fn a_node_scoped_coordinator_hands_out_ids_in_its_range() {
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let c = Coordinator::builder(config, Arc::new(MemTxnLog::new()))
            .node_scoped(3)
            .marker_sink(|tx| Arc::new(RecordingMarkerSink::new(tx, true)))
            .start()
            .unwrap();
        c.load_all_partitions().await.unwrap();
        let r = c.init_producer_id(init("app")).await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.producer_id.0 >> NodeScopedLog::NODE_SHIFT, 3);
        c.shutdown().await;
    }
}

#[cfg(test)]
mod in_process_tests {
    use std::time::Duration;

    use markers::apply::ApplyError;
    use markers::participant::{Marker, TxnVersion};
    use txn_log::sync::Mutex;
    use txn_log::{MemTxnLog, TopicPartition, TxnResult, TxnState};

    use super::*;
    use crate::{
        AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest,
        InitProducerIdRequest,
    };

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(TopicPartition, Marker)>>);

    #[async_trait::async_trait]
    impl MarkerApplier for Recorder {
        async fn apply_markers(
            &self,
            markers: Vec<(TopicPartition, Marker)>,
        ) -> Vec<Result<(), ApplyError>> {
            self.0.lock().extend(markers.iter().cloned());
            markers.iter().map(|_| Ok(())).collect()
        }
    }

    #[tokio::test]
    async fn markers_reach_the_applier_as_typed_markers() {
        let applier = Arc::new(Recorder::default());
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let c = Coordinator::builder(config, Arc::new(MemTxnLog::new()))
            .markers_in_process(applier.clone())
            .start()
            .unwrap();
        c.load_all_partitions().await.unwrap();
        let init = c
            .init_producer_id(InitProducerIdRequest::new_producer(5, "app", 60_000))
            .await;
        assert!(init.error.is_none());
        let tp = TopicPartition::new("orders", 2);
        let added = c
            .add_partitions_to_txn(AddPartitionsToTxnRequest::add(
                3,
                "app",
                init.producer_id,
                init.producer_epoch,
                std::slice::from_ref(&tp),
            ))
            .await;
        assert!(added.results[0].partitions[0].1.is_none());
        let end = c
            .end_txn(EndTxnRequest {
                version: 5,
                transactional_id: "app".into(),
                producer_id: init.producer_id,
                producer_epoch: init.producer_epoch,
                committed: true,
            })
            .await;
        assert!(end.error.is_none());
        let complete = async {
            loop {
                let d = c
                    .describe_transactions(DescribeTransactionsRequest {
                        transactional_ids: vec!["app".into()],
                    })
                    .await;
                if d[0].state == Some(TxnState::CompleteCommit) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), complete)
            .await
            .unwrap();
        let got = applier.0.lock().clone();
        assert_eq!(got.len(), 1, "{got:?}");
        let (at, m) = &got[0];
        assert_eq!(at, &tp);
        assert_eq!(m.producer_id, init.producer_id);
        assert_eq!(m.producer_epoch.0, init.producer_epoch.0 + 1, "TV2: bumped");
        assert_eq!(m.result, TxnResult::Commit);
        assert_eq!(m.txn_version, TxnVersion::V2);
        c.shutdown().await;
    }
}
