//! The tokio driver: one task owns a [`MarkerPlanner`] and performs its effects.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use kafka_protocol::messages::WriteTxnMarkersResponse;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use txn_log::sync::Mutex;
use txn_log::{LogPartition, TopicPartition};

use super::planner::{Effect, MarkerPlanner, Millis, PlannerConfig, PlannerStats, RequestId};
use super::resolver::LeaderResolver;
use super::transport::{MarkerTransport, TransportError};
use super::{LeaderLookup, MarkerCompletion, TxnMarkerRequest};

/// Settings of the [`MarkerWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// Most decisions pending at once, counting those whose completion is not yet taken by the
    /// completions channel; [`MarkerWriter::submit`] waits beyond that.
    pub max_pending_decisions: usize,
    /// Most markers (transactions) per `WriteTxnMarkers` request.
    pub max_markers_per_request: usize,
    /// First retry backoff of a partition; doubles per attempt.
    pub retry_backoff: Duration,
    /// Retry backoff cap.
    pub retry_backoff_max: Duration,
    /// Limit for one transport call or one leader lookup (Kafka's `request.timeout.ms`).
    pub request_timeout: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            max_pending_decisions: 10_000,
            max_markers_per_request: 1_000,
            retry_backoff: Duration::from_millis(50),
            retry_backoff_max: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl WriterConfig {
    fn planner(&self) -> PlannerConfig {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        PlannerConfig {
            max_pending_decisions: self.max_pending_decisions.max(1),
            max_markers_per_request: self.max_markers_per_request.max(1),
            max_lookups_per_batch: 1_000,
            retry_backoff_ms: ms(self.retry_backoff),
            retry_backoff_max_ms: ms(self.retry_backoff_max),
        }
    }
}

/// A snapshot of the writer's metrics: the planner's counters and gauges (reachable as
/// fields of the snapshot itself, through `Deref`) and what waits in the completions channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// The planner's counters and gauges.
    pub planner: PlannerStats,
    /// Finished decisions submitted without a [`MarkerReply`] whose completion the
    /// completions channel has not taken yet.
    pub undelivered_completions: usize,
}

impl std::ops::Deref for WriterStats {
    type Target = PlannerStats;

    fn deref(&self) -> &PlannerStats {
        &self.planner
    }
}

/// Where the writer reports the end of one decision submitted with
/// [`MarkerWriter::try_submit_replying`]: a function the writer task calls once per completion,
/// which must not wait (typically a send on the unbounded inbox of the task that submitted the
/// decision: that wakes the submitter directly, with no task in between). The writer keeps the
/// reply of the latest submission of each log partition and answers every completion of that
/// log partition with it.
#[derive(Clone)]
pub struct MarkerReply(Arc<dyn Fn(MarkerCompletion) + Send + Sync>);

impl MarkerReply {
    /// A reply calling `f` with each completion.
    pub fn new(f: impl Fn(MarkerCompletion) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Reports `completion`.
    pub fn send(&self, completion: MarkerCompletion) {
        (self.0)(completion);
    }
}

impl std::fmt::Debug for MarkerReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkerReply").finish_non_exhaustive()
    }
}

/// Why a decision was not accepted: the writer task has stopped. The request is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("marker writer stopped")]
pub struct WriterClosed(pub Box<TxnMarkerRequest>);

/// Why [`MarkerWriter::try_submit`] did not accept a decision. The request is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrySubmitError {
    /// `max_pending_decisions` are pending.
    #[error("marker writer is full")]
    Full(Box<TxnMarkerRequest>),
    /// The writer task has stopped.
    #[error("marker writer stopped")]
    Closed(Box<TxnMarkerRequest>),
}

enum Command {
    Submit(TxnMarkerRequest, Option<MarkerReply>),
    Cancel(LogPartition),
}

/// Handle to the marker writer task. Cloning shares the task. The task stops when every handle
/// is dropped (pending decisions are then abandoned without completion: the engine re-drives
/// `Prepare*` transactions when it loads the log partition again).
#[derive(Debug, Clone)]
pub struct MarkerWriter {
    commands: mpsc::UnboundedSender<Command>,
    permits: Arc<Semaphore>,
    stats: Arc<Mutex<WriterStats>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Submit(r, _) => f.debug_tuple("Submit").field(&r.transactional_id).finish(),
            Self::Cancel(lp) => f.debug_tuple("Cancel").field(lp).finish(),
        }
    }
}

impl MarkerWriter {
    /// Starts the writer task on the current tokio runtime. The completions of decisions
    /// submitted without a [`MarkerReply`] ([`submit`](Self::submit),
    /// [`try_submit`](Self::try_submit)) go to `completions`, exactly one per decision; drain it
    /// concurrently with `submit` (a full completions channel holds back permits, so `submit`
    /// would wait). Decisions submitted with [`try_submit_replying`](Self::try_submit_replying)
    /// are answered on their reply instead.
    pub fn spawn(
        resolver: Arc<dyn LeaderResolver>,
        transport: Arc<dyn MarkerTransport>,
        config: WriterConfig,
        completions: mpsc::Sender<MarkerCompletion>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let permits = Arc::new(Semaphore::new(config.max_pending_decisions.max(1)));
        let stats = Arc::new(Mutex::new(WriterStats::default()));
        let driver = Driver {
            planner: MarkerPlanner::new(config.planner()),
            resolver,
            transport,
            request_timeout: config.request_timeout,
            completions,
            replies: HashMap::new(),
            outbox: VecDeque::new(),
            permits: permits.clone(),
            stats: stats.clone(),
            start: Instant::now(),
            io: FuturesUnordered::new(),
        };
        tokio::spawn(driver.run(rx));
        Self {
            commands: tx,
            permits,
            stats,
        }
    }

    /// Submits one decision; waits while `max_pending_decisions` decisions are pending.
    pub async fn submit(&self, request: TxnMarkerRequest) -> Result<(), WriterClosed> {
        match self.permits.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return Err(WriterClosed(Box::new(request))),
        }
        self.send_submit(request, None)
            .map_err(|r| WriterClosed(Box::new(r)))
    }

    /// Submits one decision without waiting.
    pub fn try_submit(&self, request: TxnMarkerRequest) -> Result<(), TrySubmitError> {
        self.try_submit_with(request, None)
    }

    /// Submits one decision without waiting; its completion (and every later completion of its
    /// log partition) goes to `reply`, called from the writer task, instead of the completions
    /// channel. Its permit is returned as soon as the reply is called.
    pub fn try_submit_replying(
        &self,
        request: TxnMarkerRequest,
        reply: MarkerReply,
    ) -> Result<(), TrySubmitError> {
        self.try_submit_with(request, Some(reply))
    }

    fn try_submit_with(
        &self,
        request: TxnMarkerRequest,
        reply: Option<MarkerReply>,
    ) -> Result<(), TrySubmitError> {
        match self.permits.try_acquire() {
            Ok(permit) => permit.forget(),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                return Err(TrySubmitError::Full(Box::new(request)));
            }
            Err(tokio::sync::TryAcquireError::Closed) => {
                return Err(TrySubmitError::Closed(Box::new(request)));
            }
        }
        self.send_submit(request, reply)
            .map_err(|r| TrySubmitError::Closed(Box::new(r)))
    }

    /// Hands a permitted decision to the task; `Err` (the request back) if it has stopped.
    fn send_submit(
        &self,
        request: TxnMarkerRequest,
        reply: Option<MarkerReply>,
    ) -> Result<(), TxnMarkerRequest> {
        self.commands
            .send(Command::Submit(request, reply))
            .map_err(|e| match e.0 {
                Command::Submit(r, _) => r,
                Command::Cancel(_) => unreachable!("sent a submit"),
            })
    }

    /// The log partition was unloaded: its decisions submitted before this call finish as
    /// `Cancelled`; answers to their in-flight markers are ignored. Ordered with `submit`:
    /// a decision submitted after this call is not affected.
    pub fn cancel_log_partition(&self, log_partition: LogPartition) {
        // A send error means the task stopped; there is nothing left to cancel.
        let _ = self.commands.send(Command::Cancel(log_partition));
    }

    /// A snapshot of the metrics (refreshed by the task after every step).
    pub fn stats(&self) -> WriterStats {
        self.stats.lock().clone()
    }
}

enum Io {
    Resolved(Vec<(TopicPartition, Option<LeaderLookup>)>),
    Sent {
        node_id: i32,
        request_id: RequestId,
        result: Result<WriteTxnMarkersResponse, TransportError>,
    },
}

/// What an io future was doing, to fail its work cleanly if it panics.
enum PendingIo {
    Resolve(Vec<TopicPartition>),
    Send(i32, RequestId),
}

/// One leader lookup batch or one request, polled by the writer task itself (no task of its
/// own): its answer wakes the writer directly. A panic inside is caught and ends as `Err`.
type IoFuture = Pin<Box<dyn Future<Output = (PendingIo, std::thread::Result<Io>)> + Send>>;

struct Driver {
    planner: MarkerPlanner,
    resolver: Arc<dyn LeaderResolver>,
    transport: Arc<dyn MarkerTransport>,
    request_timeout: Duration,
    completions: mpsc::Sender<MarkerCompletion>,
    /// The reply of the latest replying submission of each log partition.
    replies: HashMap<LogPartition, MarkerReply>,
    /// Completions waiting for room in `completions`.
    outbox: VecDeque<MarkerCompletion>,
    permits: Arc<Semaphore>,
    stats: Arc<Mutex<WriterStats>>,
    start: Instant,
    io: FuturesUnordered<IoFuture>,
}

/// Commands taken per loop turn before effects run (batches submissions into requests).
const COMMAND_BATCH: usize = 256;

impl Driver {
    fn now(&self) -> Millis {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: Millis) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut open = true;
        // One timer, moved to the planner's deadline when that changes (a later deadline costs
        // tokio no timer-wheel operation), instead of a new timer on every turn.
        let timer = tokio::time::sleep_until(self.start);
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        loop {
            self.run_effects();
            self.deliver_completions();
            self.publish_stats();
            if !open {
                break;
            }
            let deadline = self.planner.poll_timeout().map(|ms| self.at(ms));
            if let Some(at) = deadline
                && armed != Some(at)
            {
                timer.as_mut().reset(at);
                armed = Some(at);
            }
            let completions = self.completions.clone();
            tokio::select! {
                biased;
                permit = completions.reserve(), if !self.outbox.is_empty() => {
                    match permit {
                        Ok(permit) => {
                            let mut delivered = 0;
                            if let Some(c) = self.outbox.pop_front() {
                                permit.send(c);
                                delivered += 1;
                            }
                            while !self.outbox.is_empty() {
                                let Ok(permit) = self.completions.try_reserve() else {
                                    break;
                                };
                                if let Some(c) = self.outbox.pop_front() {
                                    permit.send(c);
                                    delivered += 1;
                                }
                            }
                            self.permits.add_permits(delivered);
                        }
                        Err(_) => {
                            tracing::warn!(
                                n = self.outbox.len(),
                                "marker completions receiver dropped; discarding completions"
                            );
                            self.permits.add_permits(self.outbox.len());
                            self.outbox.clear();
                        }
                    }
                }
                Some(done) = self.io.next(), if !self.io.is_empty() => {
                    self.handle_io(done);
                    while let Some(Some(done)) = self.io.next().now_or_never() {
                        self.handle_io(done);
                    }
                }
                cmd = commands.recv() => {
                    match cmd {
                        Some(cmd) => {
                            self.handle_command(cmd);
                            for _ in 1..COMMAND_BATCH {
                                match commands.try_recv() {
                                    Ok(cmd) => self.handle_command(cmd),
                                    Err(_) => break,
                                }
                            }
                        }
                        None => open = false,
                    }
                }
                () = &mut timer, if deadline.is_some() => {
                    armed = None;
                    let now = self.now();
                    self.planner.handle_timeout(now);
                }
            }
        }
        self.permits.close();
    }

    /// Hands each finished decision to the reply of its log partition (its permit back at
    /// once), or to the outbox of the completions channel.
    fn deliver_completions(&mut self) {
        let mut replied = 0;
        while let Some(c) = self.planner.poll_completion() {
            match self.replies.get(&c.log_partition) {
                Some(reply) => {
                    reply.send(c);
                    replied += 1;
                }
                None => self.outbox.push_back(c),
            }
        }
        if replied > 0 {
            self.permits.add_permits(replied);
        }
    }

    fn handle_command(&mut self, cmd: Command) {
        let now = self.now();
        match cmd {
            Command::Submit(request, reply) => {
                if let Some(reply) = reply {
                    self.replies.insert(request.log_partition, reply);
                }
                if let Err(e) = self.planner.submit(now, request) {
                    // Cannot happen: permits bound pending decisions below the planner's limit.
                    tracing::error!(error = %e, "planner refused a permitted decision");
                    self.permits.add_permits(1);
                }
            }
            Command::Cancel(lp) => self.planner.cancel_log_partition(lp),
        }
    }

    fn handle_io(&mut self, (pending, io): (PendingIo, std::thread::Result<Io>)) {
        let now = self.now();
        let Ok(io) = io else {
            // A panicking resolver or transport: its work failed (retried).
            tracing::error!("marker writer io panicked");
            match pending {
                PendingIo::Resolve(tps) => {
                    for tp in tps {
                        self.planner.handle_lookup_failed(now, &tp);
                    }
                }
                PendingIo::Send(node_id, request_id) => {
                    self.planner.handle_send_failed(now, node_id, request_id);
                }
            }
            return;
        };
        match io {
            Io::Resolved(answers) => {
                for (tp, answer) in answers {
                    match answer {
                        Some(lookup) => self.planner.handle_leader(now, &tp, lookup),
                        None => self.planner.handle_lookup_failed(now, &tp),
                    }
                }
            }
            Io::Sent {
                node_id,
                request_id,
                result,
            } => match result {
                Ok(response) => {
                    self.planner
                        .handle_response(now, node_id, request_id, &response);
                }
                Err(e) => {
                    tracing::debug!(error = %e, node_id, "marker request failed");
                    self.planner.handle_send_failed(now, node_id, request_id);
                }
            },
        }
    }

    /// Starts the io of each planner effect, polled from now on by the writer task.
    fn run_effects(&mut self) {
        while let Some(effect) = self.planner.poll_effect() {
            let timeout = self.request_timeout;
            let (pending, work): (PendingIo, Pin<Box<dyn Future<Output = Io> + Send>>) =
                match effect {
                    Effect::Resolve { lookups } => {
                        let resolver = self.resolver.clone();
                        let tps = lookups.iter().map(|l| l.partition.clone()).collect();
                        let work = async move {
                            let mut answers = Vec::with_capacity(lookups.len());
                            for l in lookups {
                                if l.refresh {
                                    resolver.invalidate(&l.partition).await;
                                }
                                let lookup = resolver.leader(&l.partition);
                                let answer = match tokio::time::timeout(timeout, lookup).await {
                                    Ok(Ok(lookup)) => Some(lookup),
                                    Ok(Err(e)) => {
                                        tracing::debug!(error = %e, tp = %l.partition, "leader lookup failed");
                                        None
                                    }
                                    Err(_) => None,
                                };
                                answers.push((l.partition, answer));
                            }
                            Io::Resolved(answers)
                        };
                        (PendingIo::Resolve(tps), Box::pin(work))
                    }
                    Effect::Send {
                        broker,
                        request_id,
                        request,
                        txn_versions,
                    } => {
                        let transport = self.transport.clone();
                        let node_id = broker.node_id;
                        let work = async move {
                            let call =
                                transport.write_markers_versioned(&broker, request, txn_versions);
                            let result = match tokio::time::timeout(timeout, call).await {
                                Ok(r) => r,
                                Err(_) => Err(TransportError::Timeout { node_id }),
                            };
                            Io::Sent {
                                node_id,
                                request_id,
                                result,
                            }
                        };
                        (PendingIo::Send(node_id, request_id), Box::pin(work))
                    }
                };
            self.io.push(Box::pin(async move {
                let io = AssertUnwindSafe(work).catch_unwind().await;
                (pending, io)
            }));
        }
    }

    fn publish_stats(&self) {
        *self.stats.lock() = WriterStats {
            planner: self.planner.stats(),
            undelivered_completions: self.outbox.len(),
        };
    }
}
