//! The async shell: a [`Coordinator`] handle with an async method per API, one driver task per
//! owned log partition (each owning its [`crate::Engine`]), an injected [`TxnLog`], marker sink
//! and [`Clock`].
//!
//! Embedding (a broker; `coordinator/examples/embed_minimal.rs` is a complete one, with markers
//! applied in process through a `markers::apply::MarkerApplier`):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use coordinator::shell::Coordinator;
//! use coordinator::{Config, InitProducerIdRequest};
//! use markers::writer::{BrokerEndpoint, StaticLeaderResolver, WireTransportConfig};
//! use txn_log::{MemTxnLog, ProducerEpoch, ProducerId};
//!
//! // Markers go as WriteTxnMarkers over the wire to the broker leading each partition.
//! let leaders = Arc::new(StaticLeaderResolver::single(BrokerEndpoint::new(1, "broker1", 9092)));
//! let coordinator = Coordinator::builder(Config::default(), Arc::new(MemTxnLog::new()))
//!     .markers_over_wire(leaders, WireTransportConfig::default())
//!     .start()?;
//! coordinator.load_all_partitions().await?;
//! let r = coordinator
//!     .init_producer_id(InitProducerIdRequest {
//!         version: 4,
//!         transactional_id: Some("app".into()),
//!         transaction_timeout_ms: 60_000,
//!         producer_id: ProducerId::NONE,
//!         producer_epoch: ProducerEpoch::NONE,
//!         enable_2pc: false,
//!         keep_prepared_txn: false,
//!     })
//!     .await;
//! assert!(r.error.is_none());
//! coordinator.shutdown().await;
//! # Ok(()) }
//! ```

mod builder;
mod catalog;
mod clock;
mod completion;
mod driver;
mod markers;
mod metrics;
mod ownership;
mod trail;
mod verify;
mod writer;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use txn_log::sync::Mutex;
use txn_log::{CoordinatorEpoch, LogError, LogPartition, ProducerId, TransactionalId, TxnLog};

pub use builder::{BuildError, CoordinatorBuilder};
pub use catalog::{CatalogUnavailable, EveryPartitionExists, PartitionCatalog};
pub use clock::{BoxFuture, Clock, ManualClock, SystemClock};
pub use markers::{MarkerReply, MarkerSink, MarkerSinkStats, RecordingMarkerSink};
pub use metrics::{ApiErrorLabels, ApiLabels, LogPartitionLabels, Metrics};
pub use ownership::LeaderEpoch;
pub use trail::TRANSITION_TARGET;
pub use verify::IN_PROCESS_NODE;
pub use writer::WriterSink;

use driver::{Driver, EpochChoice, Msg};

use crate::engine::add_partitions::add_partitions_precheck;
use crate::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    AddPartitionsTxnResult, Config, DescribeTransactionsRequest, DescribedTxn, EndTxnRequest,
    EndTxnResponse, ErrorCode, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, MarkerCompletion, ProducerIdAllocator,
    Request, Response, handle_unrouted, merge_list_responses,
};

/// A good capacity for the channel of marker completions ([`CoordinatorOptions::marker_completions`]):
/// while it is full the writer holds completions back and stops taking new decisions.
pub const MARKER_COMPLETIONS_CAPACITY: usize = 1024;

/// What a [`Coordinator`] is built from.
pub struct CoordinatorOptions {
    /// Engine configuration (validated by [`Coordinator::start`]'s caller).
    pub config: Config,
    /// The transaction log.
    pub log: Arc<dyn TxnLog>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Where marker jobs go.
    pub markers: Arc<dyn MarkerSink>,
    /// Where a sink that does not [reply directly](MarkerSink::replies_directly) reports the
    /// end of each job (a routing task forwards each to the driver of its partition). A sink
    /// that replies directly ([`WriterSink`]) answers each driver itself: this receiver is then
    /// dropped unread and no routing task runs.
    pub marker_completions: mpsc::Receiver<MarkerCompletion>,
    /// Which participant partitions exist (consulted before AddPartitionsToTxn).
    pub catalog: Arc<dyn PartitionCatalog>,
    /// Metrics to update (register them in your registry).
    pub metrics: Metrics,
}

impl std::fmt::Debug for CoordinatorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorOptions")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    config: Config,
    allocator: ProducerIdAllocator,
    log: Arc<dyn TxnLog>,
    clock: Arc<dyn Clock>,
    markers: Arc<dyn MarkerSink>,
    catalog: Arc<dyn PartitionCatalog>,
    metrics: Metrics,
    drivers: Mutex<BTreeMap<LogPartition, mpsc::UnboundedSender<Msg>>>,
    poisoned: tokio::sync::watch::Sender<Option<String>>,
    unloads: tokio::sync::broadcast::Sender<PartitionUnloaded>,
    leadership: ownership::Leadership,
}

/// A log partition this coordinator stopped serving (see [`Coordinator::subscribe_unloads`]).
#[derive(Debug, Clone)]
pub struct PartitionUnloaded {
    /// The partition.
    pub partition: LogPartition,
    /// The coordinator epoch it was loaded with, if it was loaded.
    pub coordinator_epoch: Option<CoordinatorEpoch>,
    /// Why.
    pub reason: crate::UnloadReason,
}

impl Shared {
    /// Reserves a producer-id block in the background and hands it to the allocator.
    fn refill_producer_ids(self: &Arc<Self>, block_size: u32) {
        let me = self.clone();
        tokio::spawn(async move {
            let floor = ProducerId(me.config.producer_id_start);
            match me.log.allocate_block(block_size, floor).await {
                Ok(block) => {
                    tracing::info!(
                        first = block.first.0,
                        len = block.len,
                        "producer id block reserved"
                    );
                    if let Err(e) = me.allocator.add_block(block) {
                        tracing::error!(error = %e, "producer id block refused");
                        me.allocator.refill_failed();
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "reserving a producer id block failed");
                    if matches!(e, LogError::Poisoned { .. }) {
                        me.log_poisoned(&e);
                    }
                    me.allocator.refill_failed();
                }
            }
        });
    }

    fn refill_if_needed(self: &Arc<Self>) {
        if self.allocator.begin_refill() {
            self.refill_producer_ids(self.config.producer_id_block_size);
        }
    }

    fn log_poisoned(&self, e: &LogError) {
        self.fail(e.to_string());
    }

    fn fail(&self, reason: String) {
        self.poisoned.send_if_modified(|p| {
            if p.is_none() {
                *p = Some(reason);
                true
            } else {
                false
            }
        });
    }
}

/// A clonable handle on the coordinator: routes each request to the driver of its log
/// partition and awaits the engine's answer.
#[derive(Clone)]
pub struct Coordinator {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field(
                "partitions",
                &self.shared.config.transaction_state_log_num_partitions,
            )
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// Starts the shell. Owns no log partition yet: every routed request gets NOT_COORDINATOR
    /// until [`Coordinator::load_partition`]. Must be called inside a tokio runtime.
    pub fn start(options: CoordinatorOptions) -> Self {
        let CoordinatorOptions {
            config,
            log,
            clock,
            markers,
            mut marker_completions,
            catalog,
            metrics,
        } = options;
        let shared = Arc::new(Shared {
            config,
            allocator: ProducerIdAllocator::new(),
            log,
            clock,
            markers,
            catalog,
            metrics,
            drivers: Mutex::new(BTreeMap::new()),
            poisoned: tokio::sync::watch::Sender::new(None),
            unloads: tokio::sync::broadcast::Sender::new(1024),
            leadership: ownership::Leadership::default(),
        });
        if shared.markers.replies_directly() {
            // The sink answers each driver on its own inbox: nothing comes on the channel.
            drop(marker_completions);
        } else {
            // Route the channel's marker completions to the driver of their partition.
            let router = Arc::downgrade(&shared);
            tokio::spawn(async move {
                while let Some(done) = marker_completions.recv().await {
                    let Some(shared) = router.upgrade() else {
                        break;
                    };
                    let tx = shared.drivers.lock().get(&done.log_partition).cloned();
                    if let Some(tx) = tx {
                        let _ = tx.send(Msg::Markers(done));
                    }
                }
            });
        }
        shared.refill_if_needed();
        Self { shared }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Every later unload of a log partition: asked for ([`Coordinator::unload_partition`]), or
    /// forced (fenced by a newer coordinator, the log unavailable). An owner
    /// that should keep the partition loads it again with a new epoch.
    pub fn subscribe_unloads(&self) -> tokio::sync::broadcast::Receiver<PartitionUnloaded> {
        self.shared.unloads.subscribe()
    }

    /// The metrics this coordinator updates.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Refreshes the gauges that mirror the marker sink's counters.
    pub fn refresh_marker_gauges(&self) {
        let s = self.shared.markers.stats();
        self.shared
            .metrics
            .marker_retries
            .set(i64::try_from(s.retries).unwrap_or(i64::MAX));
    }

    /// Resolves when the coordinator can no longer work: the log reported a durability
    /// failure (it is poisoned), or a partition driver stopped on a bug (an engine assertion).
    /// The process should stop (and be restarted, which replays the log). Returns the reason.
    /// The future is `Send`.
    pub async fn log_failure(&self) -> String {
        let mut rx = self.shared.poisoned.subscribe();
        let reason = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .map(|v| v.clone().unwrap_or_default());
        match reason {
            Some(r) => r,
            None => std::future::pending().await,
        }
    }

    fn existing_driver(&self, p: LogPartition) -> Option<mpsc::UnboundedSender<Msg>> {
        self.shared.drivers.lock().get(&p).cloned()
    }

    /// Becomes the coordinator of `partition` at `coordinator_epoch`: claims it in the log
    /// (fencing older owners), reads and replays it. Requests meanwhile wait for the load up to
    /// `txn.park.max.ms`, then get COORDINATOR_LOAD_IN_PROGRESS. Resolves once serving (or with
    /// the claim/load error).
    pub async fn load_partition(
        &self,
        partition: LogPartition,
        coordinator_epoch: CoordinatorEpoch,
    ) -> Result<CoordinatorEpoch, LogError> {
        self.load(partition, EpochChoice::Exact(coordinator_epoch))
            .await
    }

    /// Like [`Coordinator::load_partition`] with the coordinator epoch one above the stored
    /// one (single-node ownership). Returns the epoch used.
    pub async fn load_partition_next_epoch(
        &self,
        partition: LogPartition,
    ) -> Result<CoordinatorEpoch, LogError> {
        self.load(partition, EpochChoice::NextAfterStored).await
    }

    /// Loads every partition `0..transaction.state.log.num.partitions` at stored+1 epochs,
    /// concurrently, logging progress. Fails with the first error.
    pub async fn load_all_partitions(&self) -> Result<(), LogError> {
        let n = self.shared.config.transaction_state_log_num_partitions;
        let started = std::time::Instant::now();
        // Every partition is in the loading state before this returns its first await, so
        // that requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS, never NOT_COORDINATOR.
        let mut set = tokio::task::JoinSet::new();
        for p in 0..n {
            let rx = self.begin_load(LogPartition(p), EpochChoice::NextAfterStored);
            set.spawn(async move {
                match rx {
                    Ok(rx) => rx.await.unwrap_or(Err(LogError::Closed)),
                    Err(e) => Err(e),
                }
            });
        }
        let mut done = 0u32;
        let mut first_err = None;
        while let Some(r) = set.join_next().await {
            match r {
                Ok(Ok(_)) => {
                    done += 1;
                    if done.is_multiple_of(10) || done == n {
                        tracing::info!(
                            partitions_done = done,
                            partitions = n,
                            ids_loaded = self.shared.metrics.ids_loaded.get(),
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "loading transaction log partitions"
                        );
                    }
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(join) => {
                    first_err.get_or_insert(LogError::Io(Arc::new(std::io::Error::other(
                        join.to_string(),
                    ))));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let ids = self.shared.metrics.ids_loaded.get();
        let secs = started.elapsed().as_secs_f64().max(1e-6);
        tracing::info!(
            partitions = n,
            ids_loaded = ids,
            ids_per_second = (ids as f64 / secs) as u64,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "all transaction log partitions loaded"
        );
        Ok(())
    }

    /// Puts `partition` into the loading state now and returns where its result will come.
    fn begin_load(
        &self,
        partition: LogPartition,
        epoch: EpochChoice,
    ) -> Result<oneshot::Receiver<Result<CoordinatorEpoch, LogError>>, LogError> {
        if partition.0 >= self.shared.config.transaction_state_log_num_partitions {
            return Err(LogError::InvalidArgument(format!(
                "log partition {partition} out of range"
            )));
        }
        let (done, rx) = oneshot::channel();
        // Sent under the map lock, so no request can reach a new driver before its load.
        let mut drivers = self.shared.drivers.lock();
        drivers
            .entry(partition)
            .or_insert_with(|| Driver::spawn(partition, self.shared.clone()))
            .send(Msg::Load { epoch, done })
            .map_err(|_| LogError::Closed)?;
        Ok(rx)
    }

    async fn load(
        &self,
        partition: LogPartition,
        epoch: EpochChoice,
    ) -> Result<CoordinatorEpoch, LogError> {
        let rx = self.begin_load(partition, epoch)?;
        rx.await.unwrap_or(Err(LogError::Closed))
    }

    /// Stops coordinating `partition`: waiting requests get NOT_COORDINATOR, state and marker
    /// work of the partition are dropped.
    pub async fn unload_partition(&self, partition: LogPartition) {
        if let Some(tx) = self.existing_driver(partition) {
            let (done, rx) = oneshot::channel();
            if tx.send(Msg::Unload { done }).is_ok() {
                let _ = rx.await;
            }
        }
    }

    /// Stops every driver after its in-flight appends finished (requests arriving meanwhile get
    /// COORDINATOR_NOT_AVAILABLE). The log itself is not closed.
    pub async fn shutdown(&self) {
        let drivers: Vec<_> = self.shared.drivers.lock().values().cloned().collect();
        let mut waits = Vec::new();
        for tx in drivers {
            let (done, rx) = oneshot::channel();
            if tx.send(Msg::Shutdown { done }).is_ok() {
                waits.push(rx);
            }
        }
        for w in waits {
            let _ = w.await;
        }
    }

    /// Sends `request` to the driver of `partition` and awaits its answer.
    async fn route(&self, partition: LogPartition, request: Request) -> Response {
        let Some(tx) = self.existing_driver(partition) else {
            return request.error_response(ErrorCode::NOT_COORDINATOR);
        };
        let (reply, rx) = oneshot::channel();
        let fallback = request.error_response(ErrorCode::NOT_COORDINATOR);
        if tx.send(Msg::Request { request, reply }).is_err() {
            return fallback;
        }
        rx.await.unwrap_or(fallback)
    }

    fn partition_of(&self, raw: &str) -> Option<LogPartition> {
        TransactionalId::new(raw)
            .ok()
            .map(|id| self.shared.config.partition_for(&id))
    }

    async fn single(&self, raw_id: Option<&str>, request: Request) -> Response {
        if let Some(r) = handle_unrouted(&self.shared.config, &self.shared.allocator, &request) {
            self.shared.refill_if_needed();
            return r;
        }
        match raw_id.and_then(|id| self.partition_of(id)) {
            Some(p) => self.route(p, request).await,
            None => request.error_response(ErrorCode::INVALID_REQUEST),
        }
    }

    /// InitProducerId (v0-5).
    pub async fn init_producer_id(&self, r: InitProducerIdRequest) -> InitProducerIdResponse {
        let span = tracing::info_span!(
            "InitProducerId",
            transactional_id = r.transactional_id.as_deref().unwrap_or("<null>"),
            v = r.version
        );
        async {
            let id = r.transactional_id.clone();
            let out = match self.single(id.as_deref(), Request::InitProducerId(r)).await {
                Response::InitProducerId(x) => x,
                other => unexpected(
                    other,
                    InitProducerIdResponse::error(ErrorCode::UNKNOWN_SERVER_ERROR),
                ),
            };
            self.shared.metrics.record("InitProducerId", out.error);
            out
        }
        .instrument(span)
        .await
    }

    /// AddOffsetsToTxn (v0-4).
    pub async fn add_offsets_to_txn(&self, r: AddOffsetsToTxnRequest) -> ErrorCode {
        let span = tracing::info_span!("AddOffsetsToTxn", transactional_id = %r.transactional_id, group = %r.group_id, v = r.version);
        async {
            let id = r.transactional_id.clone();
            let out = match self.single(Some(&id), Request::AddOffsetsToTxn(r)).await {
                Response::AddOffsetsToTxn(x) => x,
                other => unexpected(other, ErrorCode::UNKNOWN_SERVER_ERROR),
            };
            self.shared.metrics.record("AddOffsetsToTxn", out);
            out
        }
        .instrument(span)
        .await
    }

    /// EndTxn (v0-5).
    pub async fn end_txn(&self, r: EndTxnRequest) -> EndTxnResponse {
        let span = tracing::info_span!("EndTxn", transactional_id = %r.transactional_id, committed = r.committed, v = r.version);
        async {
            let id = r.transactional_id.clone();
            let out = match self.single(Some(&id), Request::EndTxn(r)).await {
                Response::EndTxn(x) => x,
                other => unexpected(
                    other,
                    EndTxnResponse::error(ErrorCode::UNKNOWN_SERVER_ERROR),
                ),
            };
            self.shared.metrics.record("EndTxn", out.error);
            out
        }
        .instrument(span)
        .await
    }

    /// AddPartitionsToTxn (v0-5). A v4+ batch is split by log partition and merged back in
    /// request order.
    pub async fn add_partitions_to_txn(
        &self,
        r: AddPartitionsToTxnRequest,
    ) -> AddPartitionsToTxnResponse {
        let first = r
            .transactions
            .first()
            .map(|t| t.transactional_id.clone())
            .unwrap_or_default();
        let span = tracing::info_span!("AddPartitionsToTxn", transactional_id = %first, transactions = r.transactions.len(), v = r.version);
        async {
            let out = self.add_partitions_inner(r).await;
            // One count per request, labelled with the cause: OPERATION_NOT_ATTEMPTED is
            // what the other partitions of a partly refused request get, never the reason.
            let errors = || {
                out.results
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|(_, e)| *e))
                    .filter(|e| !e.is_none())
            };
            let err = errors()
                .find(|e| *e != ErrorCode::OPERATION_NOT_ATTEMPTED)
                .or_else(|| errors().next())
                .unwrap_or(out.error);
            self.shared.metrics.record("AddPartitionsToTxn", err);
            out
        }
        .instrument(span)
        .await
    }

    /// Kafka's broker-side check: a transaction naming a partition that does not exist gets
    /// UNKNOWN_TOPIC_OR_PARTITION for it and OPERATION_NOT_ATTEMPTED for the rest, and never
    /// reaches the engine; with the catalog unreachable, COORDINATOR_NOT_AVAILABLE. Returns
    /// the answer of each transaction so decided (`None`: goes to the engine).
    async fn unknown_partitions(
        &self,
        r: &AddPartitionsToTxnRequest,
    ) -> Vec<Option<AddPartitionsTxnResult>> {
        let mut slots = Vec::with_capacity(r.transactions.len());
        for t in &r.transactions {
            if t.verify_only {
                slots.push(None);
                continue;
            }
            slots.push(
                match self.shared.catalog.unknown_partitions(&t.partitions).await {
                    Ok(unknown) if unknown.is_empty() => None,
                    Ok(unknown) => Some(AddPartitionsTxnResult::each(t, |tp| {
                        if unknown.contains(tp) {
                            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                        } else {
                            ErrorCode::OPERATION_NOT_ATTEMPTED
                        }
                    })),
                    Err(e) => {
                        tracing::warn!(error = %e, "AddPartitionsToTxn: partition check failed");
                        Some(AddPartitionsTxnResult::all(
                            t,
                            ErrorCode::COORDINATOR_NOT_AVAILABLE,
                        ))
                    }
                },
            );
        }
        slots
    }

    async fn add_partitions_inner(
        &self,
        r: AddPartitionsToTxnRequest,
    ) -> AddPartitionsToTxnResponse {
        if let Some(x) = add_partitions_precheck(&r) {
            return x;
        }
        let mut slots = self.unknown_partitions(&r).await;
        // Group the other transactions by log partition, keeping their request positions.
        let mut groups: BTreeMap<LogPartition, Vec<usize>> = BTreeMap::new();
        for (i, t) in r.transactions.iter().enumerate() {
            if slots[i].is_some() {
                continue;
            }
            match self.partition_of(&t.transactional_id) {
                Some(p) => groups.entry(p).or_default().push(i),
                None => slots[i] = Some(AddPartitionsTxnResult::all(t, ErrorCode::INVALID_REQUEST)),
            }
        }
        let calls = groups.into_iter().map(|(p, idx)| {
            let sub = AddPartitionsToTxnRequest {
                version: r.version,
                transactions: idx.iter().map(|&i| r.transactions[i].clone()).collect(),
            };
            async move {
                let resp = match self.route(p, Request::AddPartitionsToTxn(sub)).await {
                    Response::AddPartitionsToTxn(x) => Some(x),
                    other => unexpected(other, None),
                };
                (idx, resp)
            }
        });
        let mut top = ErrorCode::NONE;
        for (idx, resp) in join_all(calls).await {
            // A wrong or short answer leaves its slots empty: UNKNOWN_SERVER_ERROR below.
            let Some(resp) = resp else {
                continue;
            };
            if !resp.error.is_none() {
                top = resp.error;
            }
            for (&i, res) in idx.iter().zip(resp.results) {
                slots[i] = Some(res);
            }
        }
        AddPartitionsToTxnResponse {
            error: top,
            results: slots
                .into_iter()
                .zip(&r.transactions)
                .map(|(s, t)| {
                    s.unwrap_or_else(|| {
                        AddPartitionsTxnResult::all(t, ErrorCode::UNKNOWN_SERVER_ERROR)
                    })
                })
                .collect(),
        }
    }

    /// DescribeTransactions (v0): each id answered by the engine of its partition, in request
    /// order.
    pub async fn describe_transactions(&self, r: DescribeTransactionsRequest) -> Vec<DescribedTxn> {
        let span = tracing::info_span!("DescribeTransactions", ids = r.transactional_ids.len());
        async {
            let mut slots: Vec<Option<DescribedTxn>> = vec![None; r.transactional_ids.len()];
            let mut groups: BTreeMap<LogPartition, Vec<usize>> = BTreeMap::new();
            for (i, id) in r.transactional_ids.iter().enumerate() {
                match self.partition_of(id) {
                    Some(p) => groups.entry(p).or_default().push(i),
                    None => slots[i] = Some(DescribedTxn::error(id, ErrorCode::INVALID_REQUEST)),
                }
            }
            let calls = groups.into_iter().map(|(p, idx)| {
                let sub = DescribeTransactionsRequest {
                    transactional_ids: idx
                        .iter()
                        .map(|&i| r.transactional_ids[i].clone())
                        .collect(),
                };
                async move {
                    let resp = match self.route(p, Request::DescribeTransactions(sub)).await {
                        Response::DescribeTransactions(x) => x,
                        other => unexpected(other, Vec::new()),
                    };
                    (idx, resp)
                }
            });
            for (idx, resp) in join_all(calls).await {
                let mut it = resp.into_iter();
                for &i in &idx {
                    slots[i] = it.next();
                }
            }
            let out: Vec<DescribedTxn> = slots
                .into_iter()
                .zip(&r.transactional_ids)
                .map(|(s, id)| {
                    s.unwrap_or_else(|| DescribedTxn::error(id, ErrorCode::UNKNOWN_SERVER_ERROR))
                })
                .collect();
            let err = out
                .iter()
                .map(|d| d.error)
                .find(|e| !e.is_none())
                .unwrap_or(ErrorCode::NONE);
            self.shared.metrics.record("DescribeTransactions", err);
            out
        }
        .instrument(span)
        .await
    }

    /// ListTransactions (v0-1) over every partition this process has loaded or is loading.
    pub async fn list_transactions(&self, r: ListTransactionsRequest) -> ListTransactionsResponse {
        let span = tracing::info_span!("ListTransactions");
        async {
            let partitions: Vec<LogPartition> =
                self.shared.drivers.lock().keys().copied().collect();
            let calls = partitions.into_iter().map(|p| {
                let req = Request::ListTransactions(r.clone());
                async move {
                    match self.route(p, req).await {
                        Response::ListTransactions(x) => x,
                        other => unexpected(
                            other,
                            ListTransactionsResponse {
                                error: ErrorCode::UNKNOWN_SERVER_ERROR,
                                unknown_state_filters: Vec::new(),
                                transactions: Vec::new(),
                            },
                        ),
                    }
                }
            });
            // An unloaded partition answers NOT_COORDINATOR: it is simply not ours to list.
            let parts: Vec<ListTransactionsResponse> = join_all(calls)
                .await
                .into_iter()
                .filter(|p| p.error != ErrorCode::NOT_COORDINATOR)
                .collect();
            let out = merge_list_responses(&r, parts);
            self.shared.metrics.record("ListTransactions", out.error);
            out
        }
        .instrument(span)
        .await
    }
}

fn unexpected<T>(got: Response, fallback: T) -> T {
    tracing::error!(response = ?got, "engine answered with a response of another API");
    fallback
}

#[cfg(test)]
mod tests;
