//! One driver task per owned log partition: owns the [`Engine`], feeds it inputs and executes
//! its effects in order.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use txn_log::{
    Appending, CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition,
    TransactionalId, TxnState,
};

use super::metrics::LogPartitionLabels;
use crate::{MarkerCompletion, TxnMarkerRequest};

use super::clock::BoxFuture;
use super::{MarkerReply, Shared, trail};
use crate::{
    Effect, Engine, EngineMetrics, ErrorCode, IoId, Millis, Request, RequestId, Response,
    UnloadReason,
};

/// Where a [`super::Coordinator::transaction_completed`] call gets its answer.
pub(crate) type CompletionReply = oneshot::Sender<Result<TxnState, ErrorCode>>;

/// How long a driver waits before offering refused marker decisions to the sink again.
const MARKER_RETRY_INTERVAL: Duration = Duration::from_millis(2);

/// How the epoch of a load is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpochChoice {
    /// Exactly this epoch (an external leader election chose it).
    Exact(CoordinatorEpoch),
    /// One above the stored epoch (0 if none), claimed in one atomic step
    /// ([`txn_log::TxnLog::claim_next`]): owners that share a log never get the same one.
    NextAfterStored,
}

/// Inputs of a driver.
pub(crate) enum Msg {
    Request {
        request: Request,
        reply: oneshot::Sender<Response>,
    },
    Load {
        epoch: EpochChoice,
        done: oneshot::Sender<Result<CoordinatorEpoch, LogError>>,
    },
    Loaded {
        generation: u64,
        result: Result<(CoordinatorEpoch, LoadedPartition), LogError>,
        started: Instant,
    },
    Markers(MarkerCompletion),
    /// A `transaction_completed` call: answered at once, or when the first Complete* of `id`
    /// is durable (see [`Driver::await_completion`]).
    AwaitCompletion {
        id: TransactionalId,
        reply: CompletionReply,
    },
    Unload {
        done: oneshot::Sender<()>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

pub(crate) struct Driver {
    partition: LogPartition,
    engine: Engine,
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Msg>,
    tx: mpsc::UnboundedSender<Msg>,
    /// Where the marker sink reports this partition's decisions: a send on this driver's own
    /// inbox, which wakes it directly.
    reply: MarkerReply,
    /// The appends started and not yet finished, in any order of completion (the log
    /// orders them by the `append` calls, made in the engine's order).
    appends: FuturesUnordered<InFlight>,
    /// Marker decisions the sink refused (full), oldest first; offered again before any newer
    /// one, so a partition's decisions reach the writer in the engine's order.
    deferred_markers: VecDeque<TxnMarkerRequest>,
    waiting: HashMap<RequestId, oneshot::Sender<Response>>,
    next_request: u64,
    /// Bumped on every load and unload, so that a stale load result is ignored.
    generation: u64,
    load_waiters: Vec<oneshot::Sender<Result<CoordinatorEpoch, LogError>>>,
    /// `transaction_completed` calls waiting for the Complete* of their id's transaction,
    /// registered while the engine was loaded; woken when that append is durable and applied.
    completion_waiters: HashMap<TransactionalId, Vec<CompletionReply>>,
    /// `transaction_completed` calls that arrived while the partition was loading: checked
    /// once it is loaded.
    completion_checks: Vec<(TransactionalId, CompletionReply)>,
    /// Requests that arrived while the partition was loading, oldest first, each with the
    /// time it is given to the engine anyway (`txn.park.max.ms` after its arrival): a client
    /// that takes over from a dead coordinator is then answered once the state is loaded,
    /// instead of COORDINATOR_LOAD_IN_PROGRESS, which librdkafka and the Java client retry
    /// only after 100-500 ms.
    held_for_load: VecDeque<(Request, oneshot::Sender<Response>, Millis)>,
    loaded_gauge: bool,
    /// This partition's share of the `transactions_refused` gauge.
    refused_gauge: i64,
    last_metrics: EngineMetrics,
    /// The armed timer and the deadline it was armed for ([`Driver::arm_timer`]).
    timer: Option<(Millis, BoxFuture<'static, ()>)>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// The reply a driver hands the marker sink with each decision: the completion goes into
/// `inbox` (a driver that is gone drops it, as it would any message).
fn marker_reply(inbox: mpsc::UnboundedSender<Msg>) -> MarkerReply {
    MarkerReply::new(move |done| {
        let _ = inbox.send(Msg::Markers(done));
    })
}

impl Driver {
    /// Spawns the driver of `partition` (in the unloaded state: NOT_COORDINATOR until loaded).
    pub(crate) fn spawn(
        partition: LogPartition,
        shared: Arc<Shared>,
    ) -> mpsc::UnboundedSender<Msg> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut engine = Engine::new(partition, shared.config.clone(), shared.allocator.clone());
        engine.handle_unload();
        // Unloading a fresh engine only emits `Unloaded`; nothing to execute.
        let _ = engine.drain_effects();
        let shared_for_watch = shared.clone();
        let driver = Self {
            partition,
            engine,
            shared,
            rx,
            tx: tx.clone(),
            reply: marker_reply(tx.clone()),
            appends: FuturesUnordered::new(),
            deferred_markers: VecDeque::new(),
            waiting: HashMap::new(),
            next_request: 1,
            generation: 0,
            load_waiters: Vec::new(),
            completion_waiters: HashMap::new(),
            completion_checks: Vec::new(),
            held_for_load: VecDeque::new(),
            loaded_gauge: false,
            refused_gauge: 0,
            last_metrics: EngineMetrics::default(),
            timer: None,
            shutdown: None,
        };
        let span = tracing::info_span!("log_partition", partition = partition.0);
        let watched = shared_for_watch.clone();
        let handle = tokio::spawn(driver.run().instrument(span));
        // A driver ends only when asked to; a panic (an engine assertion) is fatal.
        tokio::spawn(async move {
            if let Err(e) = handle.await
                && e.is_panic()
            {
                let reason = format!("driver of log partition {} panicked", partition.0);
                tracing::error!("{reason}");
                watched.fail(reason);
            }
        });
        tx
    }

    async fn run(mut self) {
        loop {
            let deadline = if self.shutdown.is_some() {
                None
            } else {
                let held = self.held_for_load.front().map(|(_, _, until)| *until);
                match (self.engine.poll_timeout(), held) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            self.arm_timer(deadline);
            let timer = async {
                match &mut self.timer {
                    Some((_, sleep)) => sleep.as_mut().await,
                    None => std::future::pending().await,
                }
            };
            let deferred = !self.deferred_markers.is_empty();
            tokio::select! {
                msg = self.rx.recv() => {
                    let Some(msg) = msg else { break };
                    self.handle(msg);
                }
                Some(done) = self.appends.next(), if !self.appends.is_empty() => {
                    self.append_finished(done);
                }
                () = timer => {
                    self.timer = None;
                    let now = self.shared.clock.now_ms();
                    self.engine.handle_timeout(now);
                    self.release_held(Some(now));
                }
                () = tokio::time::sleep(MARKER_RETRY_INTERVAL), if deferred => {}
            }
            self.offer_deferred_markers();
            self.execute();
            if self.shutdown.is_some() && self.appends.is_empty() {
                break;
            }
        }
        self.fail_completion_waiters(ErrorCode::COORDINATOR_NOT_AVAILABLE, true);
        if let Some(done) = self.shutdown.take() {
            let _ = done.send(());
        }
        if self.loaded_gauge {
            self.shared.metrics.partitions_loaded.dec();
            self.shared
                .metrics
                .partition_coordinator_epoch
                .remove(&LogPartitionLabels::of(self.partition));
        }
        self.shared
            .metrics
            .transactions_refused
            .dec_by(self.refused_gauge);
        tracing::debug!("driver stopped");
    }

    /// Keeps a timer armed for `deadline`. The engine's deadline moves on almost every turn of
    /// the loop (parked requests, the reaper), nearly always later; a timer already armed for
    /// an earlier time is kept, since a timeout the engine gets early changes nothing and the
    /// next turn arms the timer again. So a timer is made only when the deadline comes
    /// earlier than the armed one, or after one fired, not on every message.
    fn arm_timer(&mut self, deadline: Option<Millis>) {
        match (deadline, &self.timer) {
            (None, _) => self.timer = None,
            (Some(d), Some((armed, _))) if *armed <= d => {}
            (Some(d), _) => self.timer = Some((d, self.shared.clock.sleep_until(d))),
        }
    }

    /// An append finished: metrics, the trail, then the engine.
    fn append_finished(&mut self, (io, result, started, trail, completes): AppendOutcome) {
        self.shared
            .metrics
            .log_append_seconds
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                if let Some(t) = trail {
                    t.emit(self.shared.clock.now_ms().0);
                }
                // Only an append the engine applies ends a transaction it serves (one issued
                // before an unload or reload is ignored by the engine, and so here).
                let applied = !completes.is_empty() && self.engine.is_append_pending(io);
                self.engine.handle_append_done(io);
                if applied {
                    for (id, state) in completes {
                        self.transaction_ended(&id, state);
                    }
                }
            }
            Err(e) => {
                self.shared.metrics.log_append_failures.inc();
                tracing::warn!(error = %e, "log append failed");
                if matches!(e, LogError::Poisoned { .. }) {
                    self.shared.log_poisoned(&e);
                }
                self.engine.handle_append_failed(io, e);
            }
        }
    }

    fn now(&self) -> Millis {
        self.shared.clock.now_ms()
    }

    /// A `transaction_completed` call for `id`. Answering and registering are one step of this
    /// task, which also applies every append: no Complete* can fall between the look at the
    /// state and the registration. Loaded, by `id`'s durable record:
    /// - none: TRANSACTIONAL_ID_NOT_FOUND;
    /// - `Empty`, `CompleteCommit`, `CompleteAbort`: that state at once (nothing in flight);
    /// - `Ongoing`, `PrepareCommit`, `PrepareAbort`, `PrepareEpochFence`: registered; answered
    ///   with the state of the first `Complete*` record of `id` that becomes durable (that
    ///   transaction's end, even when the same append starts the next transaction).
    ///
    /// Loading: checked once loaded. Unloaded: NOT_COORDINATOR. Shutting down:
    /// COORDINATOR_NOT_AVAILABLE.
    fn await_completion(&mut self, id: TransactionalId, reply: CompletionReply) {
        if self.shutdown.is_some() {
            let _ = reply.send(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE));
            return;
        }
        if self.engine.is_loading() {
            self.completion_checks.push((id, reply));
            return;
        }
        if !self.engine.is_loaded() {
            let _ = reply.send(Err(ErrorCode::NOT_COORDINATOR));
            return;
        }
        let answer = match self.engine.record(&id).map(|r| r.state) {
            None | Some(TxnState::Dead) => Err(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND),
            Some(s @ (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)) => {
                Ok(s)
            }
            Some(
                TxnState::Ongoing
                | TxnState::PrepareCommit
                | TxnState::PrepareAbort
                | TxnState::PrepareEpochFence,
            ) => {
                let waiters = self.completion_waiters.entry(id).or_default();
                // Callers that gave up (a timeout dropped their future) are forgotten here.
                waiters.retain(|w| !w.is_closed());
                waiters.push(reply);
                return;
            }
        };
        let _ = reply.send(answer);
    }

    /// The Complete* record of `id` is durable and applied: wakes its waiters with `state`.
    fn transaction_ended(&mut self, id: &TransactionalId, state: TxnState) {
        if let Some(waiters) = self.completion_waiters.remove(id) {
            for w in waiters {
                let _ = w.send(Ok(state));
            }
        }
    }

    /// Answers every `transaction_completed` call registered here with `code` (the partition
    /// is unloaded, reloaded or the driver stops: the transaction waited for is no longer
    /// followed), and, with `queued`, those waiting for a load too.
    fn fail_completion_waiters(&mut self, code: ErrorCode, queued: bool) {
        for (_, waiters) in self.completion_waiters.drain() {
            for w in waiters {
                let _ = w.send(Err(code));
            }
        }
        if queued {
            for (_, w) in self.completion_checks.drain(..) {
                let _ = w.send(Err(code));
            }
        }
    }

    /// Gives `request` to the engine.
    fn submit(&mut self, request: Request, reply: oneshot::Sender<Response>) {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.waiting.insert(id, reply);
        let now = self.now();
        self.engine.handle_request(now, id, request);
    }

    /// Gives the engine the requests held while the partition loaded: all of them (`None`:
    /// the load ended, or the partition was unloaded), or those whose time is up at `now`.
    /// The engine answers each as its state allows (COORDINATOR_LOAD_IN_PROGRESS while
    /// still loading, NOT_COORDINATOR once unloaded).
    fn release_held(&mut self, now: Option<Millis>) {
        while let Some((_, _, until)) = self.held_for_load.front() {
            if now.is_some_and(|now| *until > now) {
                break;
            }
            if let Some((request, reply, _)) = self.held_for_load.pop_front() {
                self.submit(request, reply);
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Request { request, reply } => {
                if self.shutdown.is_some() {
                    let _ =
                        reply.send(request.error_response(ErrorCode::COORDINATOR_NOT_AVAILABLE));
                    return;
                }
                let park = self.shared.config.park_max_ms;
                if self.engine.is_loading() && park > 0 {
                    let until = Millis(self.now().0.saturating_add(park));
                    self.held_for_load.push_back((request, reply, until));
                    return;
                }
                self.submit(request, reply);
            }
            Msg::Load { epoch, done } => self.start_load(epoch, done),
            Msg::Loaded {
                generation,
                result,
                started,
            } => {
                if generation != self.generation {
                    return;
                }
                let waiters = std::mem::take(&mut self.load_waiters);
                match result {
                    Ok((epoch, loaded)) => {
                        let ids = loaded.records.len();
                        let now = self.now();
                        self.engine.handle_load(now, epoch, loaded);
                        let secs = started.elapsed().as_secs_f64();
                        self.shared.metrics.partition_load_seconds.observe(secs);
                        self.shared.metrics.ids_loaded.inc_by(ids as u64);
                        if self.engine.is_loaded() {
                            if !self.loaded_gauge {
                                self.loaded_gauge = true;
                                self.shared.metrics.partitions_loaded.inc();
                            }
                            self.shared
                                .metrics
                                .partition_coordinator_epoch
                                .get_or_create(&LogPartitionLabels::of(self.partition))
                                .set(i64::from(epoch.0));
                            tracing::info!(
                                coordinator_epoch = epoch.0,
                                ids,
                                load_ms = started.elapsed().as_millis() as u64,
                                "log partition loaded"
                            );
                            for w in waiters {
                                let _ = w.send(Ok(epoch));
                            }
                            for (id, reply) in std::mem::take(&mut self.completion_checks) {
                                self.await_completion(id, reply);
                            }
                        } else {
                            for w in waiters {
                                let _ = w.send(Err(LogError::Fenced {
                                    partition: self.partition,
                                    current: epoch,
                                }));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "loading the log partition failed");
                        self.engine.handle_unload();
                        for w in waiters {
                            let _ = w.send(Err(e.clone()));
                        }
                    }
                }
                self.release_held(None);
            }
            Msg::Markers(done) => {
                self.shared.metrics.markers_pending.dec();
                if !done.dropped_partitions.is_empty() {
                    tracing::warn!(
                        transactional_id = %done.transactional_id,
                        dropped = ?done.dropped_partitions,
                        "markers skipped for partitions whose topic is gone"
                    );
                }
                let now = self.now();
                self.engine.handle_markers_done(now, done);
            }
            Msg::AwaitCompletion { id, reply } => self.await_completion(id, reply),
            Msg::Unload { done } => {
                self.generation += 1;
                for w in self.load_waiters.drain(..) {
                    let _ = w.send(Err(LogError::Closed));
                }
                self.engine.handle_unload();
                self.release_held(None);
                let _ = done.send(());
            }
            Msg::Shutdown { done } => {
                for (request, reply, _) in self.held_for_load.drain(..) {
                    let _ =
                        reply.send(request.error_response(ErrorCode::COORDINATOR_NOT_AVAILABLE));
                }
                self.shutdown = Some(done);
            }
        }
    }

    fn start_load(
        &mut self,
        choice: EpochChoice,
        done: oneshot::Sender<Result<CoordinatorEpoch, LogError>>,
    ) {
        self.generation += 1;
        // A reload of a loaded partition starts over. The state it reads may already hold the
        // next transaction of an id waited for, so those waits end here (calls made while
        // loading stay queued: they are checked against the state loaded).
        self.fail_completion_waiters(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, false);
        self.engine.handle_begin_load();
        for w in self.load_waiters.drain(..) {
            let _ = w.send(Err(LogError::Closed));
        }
        self.load_waiters.push(done);
        let generation = self.generation;
        let partition = self.partition;
        let log = self.shared.log.clone();
        let config = self.shared.config.clone();
        let tx = self.tx.clone();
        tokio::spawn(
            async move {
                let started = Instant::now();
                let result = async {
                    let epoch = match choice {
                        EpochChoice::Exact(e) => {
                            log.claim(partition, e).await?;
                            e
                        }
                        // One atomic step: two daemons taking the partition at once never
                        // both get the same epoch.
                        EpochChoice::NextAfterStored => log.claim_next(partition).await?,
                    };
                    let loaded = log.load(partition).await?;
                    config.check_loaded(partition, &loaded)?;
                    Ok((epoch, loaded))
                }
                .await;
                let _ = tx.send(Msg::Loaded {
                    generation,
                    result,
                    started,
                });
            }
            .in_current_span(),
        );
    }

    /// Hands a marker decision to the sink, behind any it refused earlier.
    fn submit_markers(&mut self, request: TxnMarkerRequest) {
        if self.deferred_markers.is_empty() {
            match self
                .shared
                .markers
                .try_submit_replying(request, &self.reply)
            {
                Ok(()) => {}
                Err(refused) => self.defer_markers(refused),
            }
        } else {
            self.defer_markers(request);
        }
    }

    fn defer_markers(&mut self, request: TxnMarkerRequest) {
        self.shared.metrics.marker_submissions_deferred.inc();
        self.shared.metrics.markers_deferred.inc();
        self.deferred_markers.push_back(request);
    }

    /// Offers the refused decisions again, oldest first, until the sink refuses one.
    fn offer_deferred_markers(&mut self) {
        while let Some(request) = self.deferred_markers.pop_front() {
            match self
                .shared
                .markers
                .try_submit_replying(request, &self.reply)
            {
                Ok(()) => {
                    self.shared.metrics.markers_deferred.dec();
                }
                Err(refused) => {
                    self.deferred_markers.push_front(refused);
                    break;
                }
            }
        }
    }

    /// Executes every queued effect, in order.
    fn execute(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::AppendLog {
                    io,
                    partition,
                    coordinator_epoch,
                    entries,
                } => {
                    debug_assert_eq!(partition, self.partition);
                    // The call queues the append in the log: its order among this partition's
                    // appends is fixed here, in the engine's order.
                    let started = Instant::now();
                    let trail = trail::capture(&*self.shared.clock, coordinator_epoch, &entries);
                    let completes = completions(&entries);
                    let appending = self
                        .shared
                        .log
                        .append(partition, coordinator_epoch, entries);
                    self.appends.push(InFlight {
                        io,
                        started,
                        trail,
                        completes,
                        appending,
                    });
                }
                Effect::Respond { to, response } => {
                    if let Some(w) = self.waiting.remove(&to) {
                        // The caller may have gone away (connection closed); nothing to do.
                        let _ = w.send(response);
                    }
                }
                Effect::WriteMarkers(request) => {
                    tracing::debug!(
                        transactional_id = %request.transactional_id,
                        producer_id = request.producer_id.0,
                        producer_epoch = request.producer_epoch.0,
                        result = ?request.result,
                        participants = request.partitions.len(),
                        "writing markers"
                    );
                    self.shared.metrics.markers_pending.inc();
                    self.shared.metrics.marker_jobs.inc();
                    self.submit_markers(request);
                }
                Effect::NeedProducerIds { block_size } => {
                    self.shared.refill_producer_ids(block_size);
                }
                Effect::Unloaded {
                    partition,
                    coordinator_epoch,
                    reason,
                } => {
                    match &reason {
                        UnloadReason::Requested => {
                            tracing::info!(?coordinator_epoch, "log partition unloaded");
                        }
                        other => tracing::warn!(
                            ?coordinator_epoch,
                            reason = ?other,
                            "log partition unloaded: no longer the coordinator"
                        ),
                    }
                    self.shared.markers.cancel_log_partition(partition);
                    // No Complete* will be applied here any more.
                    self.fail_completion_waiters(ErrorCode::NOT_COORDINATOR, true);
                    // Decisions of the old epoch; the next owner re-drives them from the log.
                    let dropped = self.deferred_markers.len();
                    self.deferred_markers.clear();
                    self.shared.metrics.markers_deferred.dec_by(dropped as i64);
                    self.shared.metrics.markers_pending.dec_by(dropped as i64);
                    let _ = self.shared.unloads.send(super::PartitionUnloaded {
                        partition,
                        coordinator_epoch,
                        reason,
                    });
                    if self.loaded_gauge {
                        self.loaded_gauge = false;
                        self.shared.metrics.partitions_loaded.dec();
                        self.shared
                            .metrics
                            .partition_coordinator_epoch
                            .remove(&LogPartitionLabels::of(partition));
                    }
                }
            }
        }
        let refused = self.engine.refused().count() as i64;
        if refused != self.refused_gauge {
            self.shared
                .metrics
                .transactions_refused
                .inc_by(refused - self.refused_gauge);
            self.refused_gauge = refused;
        }
        if *self.engine.metrics() != self.last_metrics {
            let now = self.engine.metrics().clone();
            self.shared
                .metrics
                .add_engine_delta(&self.last_metrics, &now);
            self.last_metrics = now;
        }
    }
}

/// The transactions an append ends: the id and state of each `Complete*` record in it.
fn completions(entries: &[LogEntry]) -> Vec<(TransactionalId, TxnState)> {
    entries
        .iter()
        .filter_map(|e| match &e.op {
            LogOp::Upsert(r)
                if matches!(r.state, TxnState::CompleteCommit | TxnState::CompleteAbort) =>
            {
                Some((e.id.clone(), r.state))
            }
            _ => None,
        })
        .collect()
}

/// A finished append: its id, result, start, its entries if the trail is on, and the
/// transactions it ends.
type AppendOutcome = (
    IoId,
    Result<(), LogError>,
    Instant,
    Option<trail::Pending>,
    Vec<(TransactionalId, TxnState)>,
);

/// An append in flight, with what its completion needs.
struct InFlight {
    io: IoId,
    started: Instant,
    trail: Option<trail::Pending>,
    completes: Vec<(TransactionalId, TxnState)>,
    appending: Appending,
}

impl Future for InFlight {
    type Output = AppendOutcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AppendOutcome> {
        let this = self.get_mut();
        this.appending.as_mut().poll(cx).map(|result| {
            (
                this.io,
                result,
                this.started,
                this.trail.take(),
                std::mem::take(&mut this.completes),
            )
        })
    }
}
