//! The tokio driver: one task owns a [`MarkerPlanner`] and performs its effects.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::WriteTxnMarkersResponse;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use txn_log::sync::Mutex;
use txn_log::{LogPartition, TopicPartition};

use super::planner::{Effect, MarkerPlanner, Millis, PlannerConfig, RequestId};
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

/// Pending work towards one broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStats {
    /// Broker id.
    pub node_id: i32,
    /// Partition markers queued for it, not yet sent.
    pub queued: usize,
    /// Partition markers in its in-flight request.
    pub in_flight: usize,
}

/// A snapshot of the writer's metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Partition markers put into requests (each retry counts again).
    pub markers_sent: u64,
    /// Partition markers acknowledged.
    pub markers_acked: u64,
    /// Partition retries scheduled.
    pub markers_retried: u64,
    /// Partitions dropped (topic gone).
    pub markers_dropped: u64,
    /// Partitions done with `UNSUPPORTED_FOR_MESSAGE_FORMAT` / `UNSUPPORTED_VERSION`.
    pub markers_unsupported: u64,
    /// Answers outside Kafka's table (retried).
    pub unexpected_errors: u64,
    /// Requests sent.
    pub requests_sent: u64,
    /// Requests that failed as a whole.
    pub requests_failed: u64,
    /// Completions with `Completed`.
    pub completed: u64,
    /// Completions with `CoordinatorFenced`.
    pub fenced: u64,
    /// Completions with `Cancelled`.
    pub cancelled: u64,
    /// Completions with `Superseded`.
    pub superseded: u64,
    /// Decisions not yet finished.
    pub pending_decisions: usize,
    /// Their partitions still waiting.
    pub pending_partitions: usize,
    /// Partitions waiting for a leader lookup or a retry backoff.
    pub awaiting_leader: usize,
    /// Finished decisions whose completion the completions channel has not taken yet.
    pub undelivered_completions: usize,
    /// Pending partitions per broker.
    pub brokers: Vec<BrokerStats>,
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
    Submit(TxnMarkerRequest),
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
            Self::Submit(r) => f.debug_tuple("Submit").field(&r.transactional_id).finish(),
            Self::Cancel(lp) => f.debug_tuple("Cancel").field(lp).finish(),
        }
    }
}

impl MarkerWriter {
    /// Starts the writer task on the current tokio runtime. Completions go to `completions`,
    /// exactly one per submitted decision; drain it concurrently with `submit` (a full
    /// completions channel holds back permits, so `submit` would wait).
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
            outbox: std::collections::VecDeque::new(),
            permits: permits.clone(),
            stats: stats.clone(),
            start: Instant::now(),
            tasks: JoinSet::new(),
            io_of_task: HashMap::new(),
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
        self.commands
            .send(Command::Submit(request))
            .map_err(|e| match e.0 {
                Command::Submit(r) => WriterClosed(Box::new(r)),
                Command::Cancel(_) => unreachable!("sent a submit"),
            })
    }

    /// Submits one decision without waiting.
    pub fn try_submit(&self, request: TxnMarkerRequest) -> Result<(), TrySubmitError> {
        match self.permits.try_acquire() {
            Ok(permit) => permit.forget(),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                return Err(TrySubmitError::Full(Box::new(request)));
            }
            Err(tokio::sync::TryAcquireError::Closed) => {
                return Err(TrySubmitError::Closed(Box::new(request)));
            }
        }
        self.commands
            .send(Command::Submit(request))
            .map_err(|e| match e.0 {
                Command::Submit(r) => TrySubmitError::Closed(Box::new(r)),
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

struct Driver {
    planner: MarkerPlanner,
    resolver: Arc<dyn LeaderResolver>,
    transport: Arc<dyn MarkerTransport>,
    request_timeout: Duration,
    completions: mpsc::Sender<MarkerCompletion>,
    outbox: std::collections::VecDeque<MarkerCompletion>,
    permits: Arc<Semaphore>,
    stats: Arc<Mutex<WriterStats>>,
    start: Instant,
    tasks: JoinSet<Io>,
    /// What each io task was doing, to fail it cleanly if the task panics.
    io_of_task: HashMap<tokio::task::Id, PendingIo>,
}

enum PendingIo {
    Resolve(Vec<TopicPartition>),
    Send(i32, RequestId),
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
            while let Some(c) = self.planner.poll_completion() {
                self.outbox.push_back(c);
            }
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
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.handle_joined(joined);
                    while let Some(joined) = self.tasks.try_join_next_with_id() {
                        self.handle_joined(joined);
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
        self.tasks.abort_all();
    }

    fn handle_joined(&mut self, joined: Result<(tokio::task::Id, Io), tokio::task::JoinError>) {
        match joined {
            Ok((id, io)) => {
                self.io_of_task.remove(&id);
                self.handle_io(io);
            }
            Err(e) => {
                // A panicking resolver or transport: treat its work as failed (retried).
                tracing::error!(error = %e, "marker writer io task failed");
                let now = self.now();
                match self.io_of_task.remove(&e.id()) {
                    Some(PendingIo::Resolve(tps)) => {
                        for tp in tps {
                            self.planner.handle_lookup_failed(now, &tp);
                        }
                    }
                    Some(PendingIo::Send(node_id, request_id)) => {
                        self.planner.handle_send_failed(now, node_id, request_id);
                    }
                    None => {}
                }
            }
        }
    }

    fn handle_command(&mut self, cmd: Command) {
        let now = self.now();
        match cmd {
            Command::Submit(request) => {
                if let Err(e) = self.planner.submit(now, request) {
                    // Cannot happen: permits bound pending decisions below the planner's limit.
                    tracing::error!(error = %e, "planner refused a permitted decision");
                    self.permits.add_permits(1);
                }
            }
            Command::Cancel(lp) => self.planner.cancel_log_partition(lp),
        }
    }

    fn handle_io(&mut self, io: Io) {
        let now = self.now();
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

    fn run_effects(&mut self) {
        while let Some(effect) = self.planner.poll_effect() {
            let timeout = self.request_timeout;
            match effect {
                Effect::Resolve { lookups } => {
                    let resolver = self.resolver.clone();
                    let tps = lookups.iter().map(|l| l.partition.clone()).collect();
                    let handle = self.tasks.spawn(async move {
                        let mut answers = Vec::with_capacity(lookups.len());
                        for l in lookups {
                            if l.refresh {
                                resolver.invalidate(&l.partition).await;
                            }
                            let answer =
                                match tokio::time::timeout(timeout, resolver.leader(&l.partition))
                                    .await
                                {
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
                    });
                    self.io_of_task.insert(handle.id(), PendingIo::Resolve(tps));
                }
                Effect::Send {
                    broker,
                    request_id,
                    request,
                    txn_versions,
                } => {
                    let transport = self.transport.clone();
                    let pending = PendingIo::Send(broker.node_id, request_id);
                    let handle = self.tasks.spawn(async move {
                        let node_id = broker.node_id;
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
                    });
                    self.io_of_task.insert(handle.id(), pending);
                }
            }
        }
    }

    fn publish_stats(&self) {
        let p = self.planner.stats();
        let s = WriterStats {
            markers_sent: p.markers_sent,
            markers_acked: p.markers_acked,
            markers_retried: p.markers_retried,
            markers_dropped: p.markers_dropped,
            markers_unsupported: p.markers_unsupported,
            unexpected_errors: p.unexpected_errors,
            requests_sent: p.requests_sent,
            requests_failed: p.requests_failed,
            completed: p.completed,
            fenced: p.fenced,
            cancelled: p.cancelled,
            superseded: p.superseded,
            pending_decisions: p.pending_decisions,
            pending_partitions: p.pending_partitions,
            awaiting_leader: p.awaiting_leader,
            undelivered_completions: self.outbox.len(),
            brokers: p
                .brokers
                .into_iter()
                .map(|(node_id, queued, in_flight)| BrokerStats {
                    node_id,
                    queued,
                    in_flight,
                })
                .collect(),
        };
        *self.stats.lock() = s;
    }
}
