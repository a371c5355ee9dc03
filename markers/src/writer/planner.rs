//! The pure marker planner: what to look up, what to send where, what to retry and when a
//! decision is finished. No IO, no clock: the caller passes `now` in milliseconds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::protocol::StrBytes;
use txn_log::{
    CoordinatorEpoch, ErrorCode, LogPartition, ProducerId, TopicPartition, TransactionalId,
    TxnVersion,
};

use super::{
    BrokerEndpoint, LeaderLookup, MarkerCompletion, MarkerOutcome, RefusedMarker, TxnMarkerRequest,
};

/// Milliseconds on the caller's monotonic clock.
pub type Millis = u64;

/// The Kafka error codes the planner distinguishes: [`ErrorCode`]'s constants under the
/// names this module always had (the same type and values; no table of its own).
pub mod codes {
    use txn_log::ErrorCode;

    /// No error.
    pub const NONE: ErrorCode = ErrorCode::NONE;
    /// Unknown server error (fatal in Kafka; retried here).
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode::UNKNOWN_SERVER_ERROR;
    /// Partition not hosted by the receiver.
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
    /// Receiver is not the leader.
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode::NOT_LEADER_OR_FOLLOWER;
    /// The append timed out.
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode::REQUEST_TIMED_OUT;
    /// ISR too small.
    pub const NOT_ENOUGH_REPLICAS: ErrorCode = ErrorCode::NOT_ENOUGH_REPLICAS;
    /// ISR shrank after the append.
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode =
        ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND;
    /// The API version is not supported by the partition.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode::UNSUPPORTED_VERSION;
    /// Record format older than v2: no transactions on this partition.
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: ErrorCode = ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT;
    /// The marker's producer epoch is stale.
    pub const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode::INVALID_PRODUCER_EPOCH;
    /// The marker's coordinator epoch is lower than the partition has seen.
    pub const TRANSACTION_COORDINATOR_FENCED: ErrorCode = ErrorCode::TRANSACTION_COORDINATOR_FENCED;
    /// Storage failure on the leader.
    pub const KAFKA_STORAGE_ERROR: ErrorCode = ErrorCode::KAFKA_STORAGE_ERROR;
}

/// What the planner does with one partition's error code (Kafka's `TransactionMarkerRequestCompletionHandler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// The partition has the marker (or cannot take one): done.
    Done,
    /// Done, but because the partition cannot hold markers.
    Unsupported,
    /// Retry after re-resolving the leader, with backoff.
    Retry,
    /// Refused for good: no more markers of this decision to this partition; the others
    /// go on (Kafka stops the whole transaction).
    Refuse,
    /// Not in Kafka's table (Kafka throws `IllegalStateException`). Retried with backoff and
    /// counted, so a bug on the participant side is visible but never loses a marker.
    Unexpected,
}

fn classify(code: ErrorCode) -> Action {
    match code {
        codes::NONE => Action::Done,
        codes::UNSUPPORTED_FOR_MESSAGE_FORMAT | codes::UNSUPPORTED_VERSION => Action::Unsupported,
        codes::UNKNOWN_TOPIC_OR_PARTITION
        | codes::NOT_LEADER_OR_FOLLOWER
        | codes::NOT_ENOUGH_REPLICAS
        | codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | codes::REQUEST_TIMED_OUT
        | codes::KAFKA_STORAGE_ERROR => Action::Retry,
        codes::INVALID_PRODUCER_EPOCH | codes::TRANSACTION_COORDINATOR_FENCED => Action::Refuse,
        _ => Action::Unexpected,
    }
}

/// Identifies one submitted decision inside a planner (increasing in submit order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DecisionId(pub u64);

/// Identifies one `WriteTxnMarkers` request handed out by [`MarkerPlanner::poll_effect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Planner limits and backoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerConfig {
    /// Most decisions held at once; [`MarkerPlanner::submit`] refuses more.
    pub max_pending_decisions: usize,
    /// Most markers (one per transaction) in one `WriteTxnMarkers` request; the rest of a
    /// broker's queue goes in the next request.
    pub max_markers_per_request: usize,
    /// Most partitions in one [`Effect::Resolve`].
    pub max_lookups_per_batch: usize,
    /// Backoff before the first retry of a partition; doubles per attempt.
    pub retry_backoff_ms: Millis,
    /// Backoff cap.
    pub retry_backoff_max_ms: Millis,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            max_pending_decisions: 10_000,
            max_markers_per_request: 1_000,
            max_lookups_per_batch: 1_000,
            retry_backoff_ms: 50,
            retry_backoff_max_ms: 5_000,
        }
    }
}

/// One partition whose leader the driver must look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The partition.
    pub partition: TopicPartition,
    /// The previous answer proved wrong (retry after an error): bypass caches.
    pub refresh: bool,
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Resolve these leaders; answer each with [`MarkerPlanner::handle_leader`] or
    /// [`MarkerPlanner::handle_lookup_failed`].
    Resolve {
        /// The partitions.
        lookups: Vec<Lookup>,
    },
    /// Send `request` to `broker`; answer with [`MarkerPlanner::handle_response`] or
    /// [`MarkerPlanner::handle_send_failed`]. At most one per broker is outstanding.
    Send {
        /// Destination.
        broker: BrokerEndpoint,
        /// Correlates the answer.
        request_id: RequestId,
        /// The request, each marker's `transaction_version` set to its decision's version
        /// (sent on the wire at `WriteTxnMarkers` v2 only; v1 leaves the field out).
        request: WriteTxnMarkersRequest,
        /// The same transaction versions, parallel to `request.markers`.
        txn_versions: Vec<TxnVersion>,
    },
}

/// Why a submit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// [`PlannerConfig::max_pending_decisions`] decisions are pending; the request is returned.
    #[error("marker planner is full")]
    Full(Box<TxnMarkerRequest>),
}

/// Counters and gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlannerStats {
    /// Decisions not yet finished.
    pub pending_decisions: usize,
    /// Partitions of those decisions still waiting for an acknowledgement.
    pub pending_partitions: usize,
    /// Pending partitions waiting for a leader lookup or a retry backoff.
    pub awaiting_leader: usize,
    /// Per broker: node id, partitions queued (not yet sent), partitions in flight.
    pub brokers: Vec<(i32, usize, usize)>,
    /// Partition markers put into requests (each retry counts again).
    pub markers_sent: u64,
    /// Partition markers acknowledged with NONE.
    pub markers_acked: u64,
    /// Partition retries scheduled (retriable error, disconnect, unknown leader).
    pub markers_retried: u64,
    /// Partitions dropped because their topic is gone.
    pub markers_dropped: u64,
    /// Partitions done with `UNSUPPORTED_FOR_MESSAGE_FORMAT` / `UNSUPPORTED_VERSION`.
    pub markers_unsupported: u64,
    /// Error codes outside Kafka's table, or answers missing a partition (retried).
    pub unexpected_errors: u64,
    /// `WriteTxnMarkers` requests built.
    pub requests_sent: u64,
    /// Requests that failed as a whole (disconnect, timeout).
    pub requests_failed: u64,
    /// Partition markers refused for good (`INVALID_PRODUCER_EPOCH`,
    /// `TRANSACTION_COORDINATOR_FENCED`).
    pub markers_refused: u64,
    /// Completions by outcome.
    pub completed: u64,
    /// Completions with [`MarkerOutcome::Refused`].
    pub refused: u64,
    /// Completions with [`MarkerOutcome::Cancelled`].
    pub cancelled: u64,
    /// Completions with [`MarkerOutcome::Superseded`].
    pub superseded: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// In `unrouted`, waiting for (or in) a lookup.
    Unrouted,
    /// In `backoff` until the given time.
    Backoff(Millis),
    /// In a broker queue.
    Queued(i32),
    /// In the in-flight request of a broker.
    InFlight(i32, RequestId),
}

#[derive(Debug)]
struct Part {
    attempts: u32,
    at: Where,
}

#[derive(Debug)]
struct Decision {
    request: TxnMarkerRequest,
    parts: BTreeMap<TopicPartition, Part>,
    dropped: Vec<TopicPartition>,
    refused: Vec<RefusedMarker>,
}

#[derive(Debug)]
struct InFlight {
    id: RequestId,
    markers: Vec<(DecisionId, ProducerId, Vec<TopicPartition>)>,
    partitions: usize,
}

#[derive(Debug)]
struct Broker {
    endpoint: BrokerEndpoint,
    queue: BTreeMap<DecisionId, BTreeSet<TopicPartition>>,
    queued: usize,
    in_flight: Option<InFlight>,
}

#[derive(Debug, Default)]
struct Unrouted {
    waiters: BTreeSet<DecisionId>,
    refresh: bool,
    in_lookup: bool,
}

/// The pure marker planner. See the module docs of `markers::writer` for the contract.
///
/// Inputs: [`submit`](Self::submit), [`cancel_log_partition`](Self::cancel_log_partition),
/// [`handle_leader`](Self::handle_leader), [`handle_lookup_failed`](Self::handle_lookup_failed),
/// [`handle_response`](Self::handle_response), [`handle_send_failed`](Self::handle_send_failed),
/// [`handle_timeout`](Self::handle_timeout). Outputs: [`poll_effect`](Self::poll_effect),
/// [`poll_completion`](Self::poll_completion), [`poll_timeout`](Self::poll_timeout),
/// [`stats`](Self::stats).
///
/// Memory is proportional to pending decisions and their partitions: a retry reschedules the
/// existing per-partition entry, it never adds one.
#[derive(Debug)]
pub struct MarkerPlanner {
    config: PlannerConfig,
    next_decision: u64,
    next_request: u64,
    decisions: HashMap<DecisionId, Decision>,
    by_txn: HashMap<TransactionalId, DecisionId>,
    by_log: HashMap<LogPartition, BTreeSet<DecisionId>>,
    log_epochs: HashMap<LogPartition, CoordinatorEpoch>,
    brokers: BTreeMap<i32, Broker>,
    unrouted: BTreeMap<TopicPartition, Unrouted>,
    to_lookup: BTreeSet<TopicPartition>,
    backoff: BTreeSet<(Millis, DecisionId, TopicPartition)>,
    completions: VecDeque<MarkerCompletion>,
    pending_parts: usize,
    stats: PlannerStats,
}

impl MarkerPlanner {
    /// An empty planner.
    pub fn new(config: PlannerConfig) -> Self {
        Self {
            config,
            next_decision: 0,
            next_request: 0,
            decisions: HashMap::new(),
            by_txn: HashMap::new(),
            by_log: HashMap::new(),
            log_epochs: HashMap::new(),
            brokers: BTreeMap::new(),
            unrouted: BTreeMap::new(),
            to_lookup: BTreeSet::new(),
            backoff: BTreeSet::new(),
            completions: VecDeque::new(),
            pending_parts: 0,
            stats: PlannerStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    /// Number of decisions not yet finished.
    pub fn pending_decisions(&self) -> usize {
        self.decisions.len()
    }

    /// Whether nothing is pending, queued, in flight or waiting to be polled.
    pub fn is_idle(&self) -> bool {
        self.decisions.is_empty()
            && self.completions.is_empty()
            && self.brokers.values().all(|b| b.in_flight.is_none())
            && self.unrouted.is_empty()
    }

    /// Accepts one decision. A previous unfinished decision for the same transactional id is
    /// finished as [`MarkerOutcome::Superseded`] (Kafka replaces it too), as are unfinished
    /// decisions of the same log partition at a lower coordinator epoch. A decision at a lower
    /// coordinator epoch than one already seen for its log partition is itself finished as
    /// `Superseded` at once. A decision without partitions completes at once.
    pub fn submit(
        &mut self,
        _now: Millis,
        request: TxnMarkerRequest,
    ) -> Result<DecisionId, SubmitError> {
        if self.decisions.len() >= self.config.max_pending_decisions {
            return Err(SubmitError::Full(Box::new(request)));
        }
        let id = DecisionId(self.next_decision);
        self.next_decision += 1;
        let lp = request.log_partition;
        let epoch = request.coordinator_epoch;
        match self.log_epochs.get(&lp) {
            Some(&seen) if seen > epoch => {
                self.push_completion(&request, MarkerOutcome::Superseded, Vec::new(), Vec::new());
                return Ok(id);
            }
            Some(&seen) if seen < epoch => {
                let stale: Vec<DecisionId> = self
                    .by_log
                    .get(&lp)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|d| self.decisions[d].request.coordinator_epoch < epoch)
                    .collect();
                for d in stale {
                    self.finish(d, MarkerOutcome::Superseded);
                }
            }
            _ => {}
        }
        self.log_epochs.insert(lp, epoch);
        if let Some(&old) = self.by_txn.get(&request.transactional_id) {
            self.finish(old, MarkerOutcome::Superseded);
        }

        let partitions: BTreeSet<TopicPartition> = request.partitions.iter().cloned().collect();
        let mut stored = request;
        stored.partitions = Vec::new();
        let mut parts = BTreeMap::new();
        for tp in partitions {
            let entry = self.unrouted.entry(tp.clone()).or_default();
            entry.waiters.insert(id);
            if !entry.in_lookup {
                self.to_lookup.insert(tp.clone());
            }
            parts.insert(
                tp,
                Part {
                    attempts: 0,
                    at: Where::Unrouted,
                },
            );
        }
        self.pending_parts += parts.len();
        self.by_txn.insert(stored.transactional_id.clone(), id);
        self.by_log.entry(lp).or_default().insert(id);
        self.decisions.insert(
            id,
            Decision {
                request: stored,
                parts,
                dropped: Vec::new(),
                refused: Vec::new(),
            },
        );
        self.maybe_complete(id);
        Ok(id)
    }

    /// The log partition was unloaded: every unfinished decision of it finishes as
    /// [`MarkerOutcome::Cancelled`]; its queued markers are removed and answers to its
    /// in-flight markers will be ignored.
    pub fn cancel_log_partition(&mut self, log_partition: LogPartition) {
        let ids: Vec<DecisionId> = self
            .by_log
            .get(&log_partition)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for d in ids {
            self.finish(d, MarkerOutcome::Cancelled);
        }
    }

    /// The answer to a lookup of `partition`.
    pub fn handle_leader(&mut self, now: Millis, partition: &TopicPartition, lookup: LeaderLookup) {
        let Some(entry) = self.unrouted.remove(partition) else {
            return;
        };
        self.to_lookup.remove(partition);
        match lookup {
            LeaderLookup::Leader(endpoint) => {
                let node = endpoint.node_id;
                let broker = self.brokers.entry(node).or_insert_with(|| Broker {
                    endpoint: endpoint.clone(),
                    queue: BTreeMap::new(),
                    queued: 0,
                    in_flight: None,
                });
                broker.endpoint = endpoint;
                for d in entry.waiters {
                    let Some(part) = self
                        .decisions
                        .get_mut(&d)
                        .and_then(|dec| dec.parts.get_mut(partition))
                    else {
                        continue;
                    };
                    if part.at != Where::Unrouted {
                        continue;
                    }
                    part.at = Where::Queued(node);
                    broker.queue.entry(d).or_default().insert(partition.clone());
                    broker.queued += 1;
                }
            }
            LeaderLookup::Unknown => {
                for d in entry.waiters {
                    self.retry_part(now, d, partition, Where::Unrouted);
                }
            }
            LeaderLookup::TopicGone => {
                for d in entry.waiters {
                    let Some(dec) = self.decisions.get_mut(&d) else {
                        continue;
                    };
                    if dec.parts.get(partition).map(|p| p.at) != Some(Where::Unrouted) {
                        continue;
                    }
                    dec.parts.remove(partition);
                    dec.dropped.push(partition.clone());
                    self.pending_parts -= 1;
                    self.stats.markers_dropped += 1;
                    tracing::info!(%partition, txn = %dec.request.transactional_id,
                        "partition has no leader metadata (deleted); dropping its marker");
                    self.maybe_complete(d);
                }
            }
        }
    }

    /// The lookup of `partition` failed (resolver error or timeout): retry it with backoff.
    pub fn handle_lookup_failed(&mut self, now: Millis, partition: &TopicPartition) {
        self.handle_leader(now, partition, LeaderLookup::Unknown);
    }

    /// The answer of `broker` to request `request_id`. Answers to requests that are not the
    /// broker's in-flight one, and entries of finished decisions, are ignored.
    pub fn handle_response(
        &mut self,
        now: Millis,
        broker: i32,
        request_id: RequestId,
        response: &WriteTxnMarkersResponse,
    ) {
        let Some(flight) = self.take_in_flight(broker, request_id) else {
            return;
        };
        let mut codes_by_key: HashMap<(i64, &str, i32), ErrorCode> = HashMap::new();
        for marker in &response.markers {
            for topic in &marker.topics {
                for p in &topic.partitions {
                    codes_by_key.insert(
                        (
                            marker.producer_id.0,
                            topic.name.0.as_str(),
                            p.partition_index,
                        ),
                        ErrorCode::from(p.error_code),
                    );
                }
            }
        }
        for (d, pid, tps) in flight.markers {
            for tp in tps {
                if !self.is_in_flight(d, &tp, broker, request_id) {
                    continue;
                }
                let code = codes_by_key.get(&(pid.0, tp.topic.as_str(), tp.partition));
                let action = match code {
                    Some(&c) => classify(c),
                    None => Action::Unexpected,
                };
                match action {
                    Action::Done | Action::Unsupported => {
                        if action == Action::Done {
                            self.stats.markers_acked += 1;
                        } else {
                            self.stats.markers_unsupported += 1;
                        }
                        if let Some(dec) = self.decisions.get_mut(&d) {
                            dec.parts.remove(&tp);
                            self.pending_parts -= 1;
                        }
                        self.maybe_complete(d);
                    }
                    Action::Retry => {
                        self.retry_part(now, d, &tp, Where::InFlight(broker, request_id))
                    }
                    Action::Unexpected => {
                        self.stats.unexpected_errors += 1;
                        tracing::error!(%tp, broker, code = ?code,
                            "unexpected WriteTxnMarkers answer; retrying the partition");
                        self.retry_part(now, d, &tp, Where::InFlight(broker, request_id));
                    }
                    Action::Refuse => {
                        let error = code.copied().unwrap_or(codes::INVALID_PRODUCER_EPOCH);
                        self.refuse_part(d, tp, broker, error);
                    }
                }
            }
        }
    }

    /// Request `request_id` to `broker` failed as a whole (disconnect, timeout, connect
    /// failure): every partition in it is retried after backoff with a fresh leader lookup.
    pub fn handle_send_failed(&mut self, now: Millis, broker: i32, request_id: RequestId) {
        let Some(flight) = self.take_in_flight(broker, request_id) else {
            return;
        };
        self.stats.requests_failed += 1;
        for (d, _, tps) in flight.markers {
            for tp in tps {
                self.retry_part(now, d, &tp, Where::InFlight(broker, request_id));
            }
        }
    }

    /// Time passed: partitions whose backoff expired go back to leader lookup.
    pub fn handle_timeout(&mut self, now: Millis) {
        while let Some(first) = self.backoff.first() {
            if first.0 > now {
                break;
            }
            let Some((at, d, tp)) = self.backoff.pop_first() else {
                break;
            };
            let Some(part) = self
                .decisions
                .get_mut(&d)
                .and_then(|dec| dec.parts.get_mut(&tp))
            else {
                continue;
            };
            if part.at != Where::Backoff(at) {
                continue;
            }
            part.at = Where::Unrouted;
            let entry = self.unrouted.entry(tp.clone()).or_default();
            entry.waiters.insert(d);
            entry.refresh = true;
            if !entry.in_lookup {
                self.to_lookup.insert(tp);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to do.
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.backoff.first().map(|e| e.0)
    }

    /// The next effect: leader lookups first, then one request per idle broker with queued
    /// markers.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        if !self.to_lookup.is_empty() {
            let mut lookups = Vec::new();
            while lookups.len() < self.config.max_lookups_per_batch.max(1) {
                let Some(tp) = self.to_lookup.pop_first() else {
                    break;
                };
                if let Some(entry) = self.unrouted.get_mut(&tp) {
                    entry.in_lookup = true;
                    lookups.push(Lookup {
                        partition: tp,
                        refresh: std::mem::take(&mut entry.refresh),
                    });
                }
            }
            if !lookups.is_empty() {
                return Some(Effect::Resolve { lookups });
            }
        }
        let node = self
            .brokers
            .iter()
            .find(|(_, b)| b.in_flight.is_none() && b.queued > 0)
            .map(|(n, _)| *n)?;
        self.build_request(node)
    }

    /// The next finished decision.
    pub fn poll_completion(&mut self) -> Option<MarkerCompletion> {
        self.completions.pop_front()
    }

    /// Counters and gauges.
    pub fn stats(&self) -> PlannerStats {
        let mut stats = self.stats.clone();
        stats.pending_decisions = self.decisions.len();
        stats.pending_partitions = self.pending_parts;
        stats.awaiting_leader = self
            .unrouted
            .values()
            .map(|u| u.waiters.len())
            .sum::<usize>()
            + self.backoff.len();
        stats.brokers = self
            .brokers
            .iter()
            .map(|(n, b)| {
                (
                    *n,
                    b.queued,
                    b.in_flight.as_ref().map_or(0, |f| f.partitions),
                )
            })
            .collect();
        stats
    }

    fn build_request(&mut self, node: i32) -> Option<Effect> {
        let max = self.config.max_markers_per_request.max(1);
        let broker = self.brokers.get_mut(&node)?;
        let request_id = RequestId(self.next_request);
        self.next_request += 1;
        let mut pids = HashSet::new();
        let mut taken = Vec::new();
        for &d in broker.queue.keys() {
            if taken.len() >= max {
                break;
            }
            let Some(dec) = self.decisions.get(&d) else {
                continue;
            };
            if !pids.insert(dec.request.producer_id) {
                // Two markers with one producer id cannot be told apart in the answer.
                continue;
            }
            taken.push(d);
        }
        let mut markers = Vec::with_capacity(taken.len());
        let mut versions = Vec::with_capacity(taken.len());
        let mut flight = Vec::with_capacity(taken.len());
        let mut partitions = 0;
        for d in taken {
            let tps = broker.queue.remove(&d).unwrap_or_default();
            broker.queued -= tps.len();
            partitions += tps.len();
            let Some(dec) = self.decisions.get_mut(&d) else {
                continue;
            };
            for tp in &tps {
                if let Some(part) = dec.parts.get_mut(tp) {
                    part.at = Where::InFlight(node, request_id);
                }
            }
            let r = &dec.request;
            markers.push(marker_entry(r, &tps));
            versions.push(r.txn_version);
            flight.push((d, r.producer_id, tps.into_iter().collect()));
        }
        self.stats.markers_sent += partitions as u64;
        self.stats.requests_sent += 1;
        broker.in_flight = Some(InFlight {
            id: request_id,
            markers: flight,
            partitions,
        });
        Some(Effect::Send {
            broker: broker.endpoint.clone(),
            request_id,
            request: WriteTxnMarkersRequest::default().with_markers(markers),
            txn_versions: versions,
        })
    }

    fn take_in_flight(&mut self, broker: i32, request_id: RequestId) -> Option<InFlight> {
        let b = self.brokers.get_mut(&broker)?;
        if b.in_flight.as_ref().map(|f| f.id) != Some(request_id) {
            return None;
        }
        let flight = b.in_flight.take();
        if b.queued == 0 {
            self.brokers.remove(&broker);
        }
        flight
    }

    fn is_in_flight(&self, d: DecisionId, tp: &TopicPartition, broker: i32, id: RequestId) -> bool {
        self.decisions
            .get(&d)
            .and_then(|dec| dec.parts.get(tp))
            .is_some_and(|p| p.at == Where::InFlight(broker, id))
    }

    /// Moves a part that is currently at `from` into backoff.
    fn retry_part(&mut self, now: Millis, d: DecisionId, tp: &TopicPartition, from: Where) {
        let Some(part) = self
            .decisions
            .get_mut(&d)
            .and_then(|dec| dec.parts.get_mut(tp))
        else {
            return;
        };
        if part.at != from {
            return;
        }
        part.attempts = part.attempts.saturating_add(1);
        let shift = (part.attempts - 1).min(20);
        let delay = self
            .config
            .retry_backoff_ms
            .saturating_mul(1u64 << shift)
            .min(self.config.retry_backoff_max_ms);
        let at = now.saturating_add(delay);
        part.at = Where::Backoff(at);
        self.backoff.insert((at, d, tp.clone()));
        self.stats.markers_retried += 1;
    }

    /// The participant of `tp` refused decision `d`'s marker for good: `tp` leaves the
    /// decision, recorded with its error; the other partitions go on.
    fn refuse_part(&mut self, d: DecisionId, tp: TopicPartition, broker: i32, error: ErrorCode) {
        let Some(dec) = self.decisions.get_mut(&d) else {
            return;
        };
        if dec.parts.remove(&tp).is_none() {
            return;
        }
        self.pending_parts -= 1;
        self.stats.markers_refused += 1;
        let r = &dec.request;
        tracing::warn!(
            transactional_id = %r.transactional_id,
            producer_id = r.producer_id.0,
            producer_epoch = r.producer_epoch.0,
            coordinator_epoch = r.coordinator_epoch.0,
            result = ?r.result,
            partition = %tp,
            broker,
            error = %error,
            "a participant refused the transaction marker; the transaction stays decided and \
             its other partitions get theirs (describe it, force-terminate it once the \
             participant is fixed)"
        );
        dec.refused.push(RefusedMarker {
            partition: tp,
            error,
        });
        self.maybe_complete(d);
    }

    fn maybe_complete(&mut self, d: DecisionId) {
        let Some(dec) = self.decisions.get(&d) else {
            return;
        };
        if dec.parts.is_empty() {
            let outcome = if dec.refused.is_empty() {
                MarkerOutcome::Completed
            } else {
                MarkerOutcome::Refused
            };
            self.finish(d, outcome);
        }
    }

    /// Removes decision `d` everywhere and emits its one completion.
    fn finish(&mut self, d: DecisionId, outcome: MarkerOutcome) {
        let Some(dec) = self.decisions.remove(&d) else {
            return;
        };
        if self.by_txn.get(&dec.request.transactional_id) == Some(&d) {
            self.by_txn.remove(&dec.request.transactional_id);
        }
        if let Some(set) = self.by_log.get_mut(&dec.request.log_partition) {
            set.remove(&d);
            if set.is_empty() {
                self.by_log.remove(&dec.request.log_partition);
            }
        }
        self.pending_parts -= dec.parts.len();
        for (tp, part) in &dec.parts {
            match part.at {
                Where::Unrouted => {
                    if let Some(entry) = self.unrouted.get_mut(tp) {
                        entry.waiters.remove(&d);
                        if entry.waiters.is_empty() && !entry.in_lookup {
                            self.unrouted.remove(tp);
                            self.to_lookup.remove(tp);
                        }
                    }
                }
                Where::Backoff(at) => {
                    self.backoff.remove(&(at, d, tp.clone()));
                }
                Where::Queued(node) => {
                    if let Some(broker) = self.brokers.get_mut(&node) {
                        if let Some(set) = broker.queue.get_mut(&d) {
                            if set.remove(tp) {
                                broker.queued -= 1;
                            }
                            if set.is_empty() {
                                broker.queue.remove(&d);
                            }
                        }
                        if broker.queued == 0 && broker.in_flight.is_none() {
                            self.brokers.remove(&node);
                        }
                    }
                }
                Where::InFlight(..) => {}
            }
        }
        self.push_completion(&dec.request, outcome, dec.dropped, dec.refused);
    }

    fn push_completion(
        &mut self,
        r: &TxnMarkerRequest,
        outcome: MarkerOutcome,
        dropped: Vec<TopicPartition>,
        refused: Vec<RefusedMarker>,
    ) {
        match outcome {
            MarkerOutcome::Completed => self.stats.completed += 1,
            MarkerOutcome::Refused => self.stats.refused += 1,
            MarkerOutcome::Cancelled => self.stats.cancelled += 1,
            MarkerOutcome::Superseded => self.stats.superseded += 1,
        }
        self.completions.push_back(MarkerCompletion {
            transactional_id: r.transactional_id.clone(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch: r.coordinator_epoch,
            log_partition: r.log_partition,
            result: r.result,
            outcome,
            dropped_partitions: dropped,
            refused_partitions: refused,
        });
    }
}

fn marker_entry(r: &TxnMarkerRequest, tps: &BTreeSet<TopicPartition>) -> WritableTxnMarker {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for tp in tps {
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == tp.topic => t.partition_indexes.push(tp.partition),
            _ => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                    .with_partition_indexes(vec![tp.partition]),
            ),
        }
    }
    WritableTxnMarker::default()
        .with_producer_id(kafka_protocol::messages::ProducerId(r.producer_id.0))
        .with_producer_epoch(r.producer_epoch.0)
        .with_transaction_result(r.result.is_commit())
        .with_topics(topics)
        .with_coordinator_epoch(r.coordinator_epoch.0)
        .with_transaction_version(r.txn_version.0)
}

/// Builds the answer to `request` with `code_for(producer_id, topic, partition)` per partition:
/// a helper for participants, in-process transports and tests. The closure answers an
/// [`ErrorCode`] (or the raw `int16`).
pub fn build_response<C: Into<ErrorCode>>(
    request: &WriteTxnMarkersRequest,
    mut code_for: impl FnMut(ProducerId, &str, i32) -> C,
) -> WriteTxnMarkersResponse {
    let markers = request
        .markers
        .iter()
        .map(|m| {
            let pid = ProducerId(m.producer_id.0);
            let topics = m
                .topics
                .iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(p)
                                .with_error_code(code_for(pid, t.name.0.as_str(), p).into().code())
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name.clone())
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}
