//! loom models of fencing, failover recovery and the reaper. Every model lives in `tests/` and
//! compiles only under `--cfg txn_loom`; they drive the production types, not copies.
//!
//! This library is the glue the models share, and nothing more: [`Node`] plays the shell's
//! driver task (it feeds one [`Engine`] and executes its effects in order, appends one at a
//! time through the [`MemTxnLog`], hands markers to the production [`MarkerPlanner`]) and
//! [`Broker`] plays a partition leader (it answers `WriteTxnMarkers` through the production
//! participant [`PartitionState`], following the call sequence documented in
//! `markers::participant`). Neither decides anything a production type decides: no state
//! transition, no epoch comparison, no retry policy is re-implemented here.
//!
//! Everything shared is built on the `txn_log::sync` facade, so it is loom's model-checked
//! `Mutex` under `--cfg txn_loom` and std's otherwise; this crate also compiles (and is linted)
//! in the normal build.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use coordinator::{
    AddPartitionsToTxnRequest, Config, Effect, EndTxnRequest, Engine, InitProducerIdRequest, IoId,
    MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator, Request, RequestId, Response,
    UnloadReason,
};
use markers::apply::ApplyError;
use markers::participant::{
    BatchHeader, Marker, MarkerApplied, MarkerError, ParticipantConfig, PartitionState,
    ProduceDecision,
};
use markers::writer::{self, BrokerEndpoint, LeaderLookup, MarkerPlanner, PlannerConfig};
use txn_log::mem::{WaitDurable, poll_once};
use txn_log::sync::Mutex;
use txn_log::{
    CoordinatorEpoch, ErrorCode, LoadedPartition, LogEntry, LogError, LogOp, LogPartition,
    MemTxnLog, ProducerEpoch, ProducerId, ProducerIdBlock, TopicPartition, TransactionalId, TxnLog,
    TxnRecord, TxnResult, TxnState,
};

/// The loom model builder every model uses: the environment's settings
/// (`LOOM_MAX_PREEMPTIONS`, ...), with a preemption bound of 2 when none is set, so that a
/// run without the variable stays as small as the documented command.
#[cfg(txn_loom)]
pub fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b
}

/// The one log partition every model uses (the configs have a single partition).
pub const PARTITION: LogPartition = LogPartition(0);

/// A config with one log partition, so every transactional id maps to [`PARTITION`].
pub fn config() -> Config {
    Config {
        transaction_state_log_num_partitions: 1,
        ..Config::default()
    }
}

/// An allocator holding one block of 100 ids starting at 1000.
pub fn allocator() -> ProducerIdAllocator {
    ProducerIdAllocator::with_block(ProducerIdBlock {
        first: ProducerId(1000),
        len: 100,
    })
    .expect("valid block")
}

/// A transactional id.
pub fn tid(s: &str) -> TransactionalId {
    TransactionalId::new(s).expect("non-empty")
}

/// A topic partition.
pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

/// InitProducerId v4 for `id` without an expected (pid, epoch).
pub fn init_producer_id(id: &str, timeout_ms: i32) -> Request {
    Request::InitProducerId(InitProducerIdRequest {
        version: 4,
        transactional_id: Some(id.to_owned()),
        transaction_timeout_ms: timeout_ms,
        producer_id: ProducerId::NONE,
        producer_epoch: ProducerEpoch::NONE,
        enable_2pc: false,
        keep_prepared_txn: false,
    })
}

/// AddPartitionsToTxn v3 (one transaction).
pub fn add_partitions(
    id: &str,
    pid: ProducerId,
    epoch: ProducerEpoch,
    partitions: &[TopicPartition],
) -> Request {
    Request::AddPartitionsToTxn(AddPartitionsToTxnRequest::add(
        3, id, pid, epoch, partitions,
    ))
}

/// EndTxn at `version` (v5+ is TV2 with the default config).
pub fn end_txn(
    version: i16,
    id: &str,
    pid: ProducerId,
    epoch: ProducerEpoch,
    commit: bool,
) -> Request {
    Request::EndTxn(EndTxnRequest {
        version,
        transactional_id: id.to_owned(),
        producer_id: pid,
        producer_epoch: epoch,
        committed: commit,
    })
}

/// The record of `id` in `loaded`, if present.
pub fn record_of<'a>(loaded: &'a LoadedPartition, id: &TransactionalId) -> Option<&'a TxnRecord> {
    loaded.records.iter().find(|(k, _)| k == id).map(|(_, r)| r)
}

/// The state of `id` in `loaded`, if present.
pub fn state_of(loaded: &LoadedPartition, id: &TransactionalId) -> Option<TxnState> {
    record_of(loaded, id).map(|r| r.state)
}

/// Whether `entries` carry a record in `state`.
pub fn has_state(entries: &[LogEntry], state: TxnState) -> bool {
    entries
        .iter()
        .any(|e| matches!(&e.op, LogOp::Upsert(r) if r.state == state))
}

/// Whether `entries` carry a `CompleteCommit` or `CompleteAbort` record.
pub fn is_complete(entries: &[LogEntry]) -> bool {
    has_state(entries, TxnState::CompleteCommit) || has_state(entries, TxnState::CompleteAbort)
}

/// One response the engine released, in emission order.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The request.
    pub to: RequestId,
    /// The answer.
    pub response: Response,
    /// The durable state of the partition when the reply was released (if
    /// [`Node::snapshot_replies`] is set).
    pub durable: Option<LoadedPartition>,
}

/// One `WriteMarkers` effect of the engine (what it asked the participants to do).
#[derive(Debug, Clone)]
pub struct MarkerWrite {
    /// The transactional id.
    pub transactional_id: TransactionalId,
    /// The coordinator epoch stamped on the markers.
    pub coordinator_epoch: CoordinatorEpoch,
    /// Commit or abort.
    pub result: TxnResult,
    /// The participant partitions.
    pub partitions: BTreeSet<TopicPartition>,
}

/// One append the node handed to the log, with what became of it.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The engine's id of the append.
    pub io: IoId,
    /// The coordinator epoch it was stamped with.
    pub epoch: CoordinatorEpoch,
    /// The batch.
    pub entries: Vec<LogEntry>,
    /// What [`Node::before_append`] returned for it (false without a hook).
    pub flagged: bool,
    /// `None` while waiting for durability; then the log's answer.
    pub result: Option<Result<(), LogError>>,
}

/// A hook run just before an append reaches the log (epoch, batch); its return value is kept
/// in [`Attempt::flagged`]. Models use it to check invariants at append time.
pub type AppendHook = Box<dyn FnMut(CoordinatorEpoch, &[LogEntry]) -> bool + Send>;

/// How a node's marker work is delivered.
#[derive(Debug)]
pub enum Markers {
    /// An ideal writer: every `WriteMarkers` is reported `Completed` at once (for models whose
    /// invariant does not involve participants).
    AckAtOnce,
    /// The production planner. Leader lookups are answered from `leaders`; requests wait in
    /// `outbox` until a broker thread takes them ([`deliver_one`]).
    Planner {
        /// The planner (boxed: it is large).
        planner: Box<MarkerPlanner>,
        /// Leader of every participant partition.
        leaders: BTreeMap<TopicPartition, BrokerEndpoint>,
        /// `WriteTxnMarkers` requests not yet taken by a broker.
        outbox: VecDeque<writer::Effect>,
    },
}

impl Markers {
    /// The production planner with default settings and the given leaders.
    pub fn planner(leaders: &[(TopicPartition, &Broker)]) -> Self {
        Self::Planner {
            planner: Box::new(MarkerPlanner::new(PlannerConfig::default())),
            leaders: leaders
                .iter()
                .map(|(tp, b)| (tp.clone(), b.endpoint()))
                .collect(),
            outbox: VecDeque::new(),
        }
    }
}

#[derive(Debug)]
enum AppendState {
    Queued,
    Waiting(WaitDurable),
}

/// One coordinator process for [`PARTITION`]: what the shell's driver task does around an
/// [`Engine`], reduced to synchronous steps. Share it as `Arc<Mutex<Node>>` (the facade
/// mutex): the lock plays the driver's message loop, which serialises every input.
///
/// Appends go to the log one at a time, in effect order (as the shell's appender task); an
/// append's completion is reported by [`Node::pump`], a separate step, so other inputs can
/// interleave between "durable" and "applied".
pub struct Node {
    /// The engine.
    pub engine: Engine,
    /// The shared log.
    pub log: MemTxnLog,
    /// The clock value passed to the engine.
    pub now: Millis,
    /// Marker delivery.
    pub markers: Markers,
    /// Every released response, in order.
    pub replies: Vec<Reply>,
    /// Every append handed to the log, in order.
    pub attempts: Vec<Attempt>,
    /// Every unload the engine reported.
    pub unloads: Vec<UnloadReason>,
    /// Every `WriteMarkers` effect the engine emitted, in order.
    pub marker_writes: Vec<MarkerWrite>,
    /// Take a durable snapshot of the partition whenever a response is released.
    pub snapshot_replies: bool,
    /// Runs before each append reaches the log.
    pub before_append: Option<AppendHook>,
    appender: VecDeque<(usize, AppendState)>,
    done: VecDeque<MarkerCompletion>,
    dead: bool,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("engine", &self.engine)
            .field("attempts", &self.attempts)
            .field("replies", &self.replies)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A node whose engine is still loading.
    pub fn new(log: MemTxnLog, allocator: ProducerIdAllocator, markers: Markers) -> Self {
        Self {
            engine: Engine::new(PARTITION, config(), allocator),
            log,
            now: Millis(0),
            markers,
            replies: Vec::new(),
            attempts: Vec::new(),
            unloads: Vec::new(),
            marker_writes: Vec::new(),
            snapshot_replies: false,
            before_append: None,
            appender: VecDeque::new(),
            done: VecDeque::new(),
            dead: false,
        }
    }

    /// What the shell's load task does outside the driver: claim [`PARTITION`] at `epoch`
    /// through the `TxnLog` trait, then read it. Call without holding the node's lock.
    pub fn claim_and_read(
        log: &MemTxnLog,
        epoch: CoordinatorEpoch,
    ) -> Result<LoadedPartition, LogError> {
        let mut claim = log.claim(PARTITION, epoch);
        poll_once(&mut claim).expect("claim resolves at once in Immediate mode")?;
        let mut load = log.load(PARTITION);
        poll_once(&mut load).expect("load never waits")
    }

    /// What the shell's load task does for `EpochChoice::NextAfterStored` (the multi-daemon
    /// membership's `load_partition_next_epoch`, `coordinator/src/shell/driver.rs`
    /// `start_load`): `claim_next` (one atomic step), then read. Call without holding the
    /// node's lock.
    pub fn claim_next_and_read(
        log: &MemTxnLog,
    ) -> Result<(CoordinatorEpoch, LoadedPartition), LogError> {
        let mut claim = log.claim_next(PARTITION);
        let epoch = poll_once(&mut claim).expect("claim resolves at once in Immediate mode")?;
        let mut load = log.load(PARTITION);
        Ok((epoch, poll_once(&mut load).expect("load never waits")?))
    }

    /// The load task's result reached the driver: `handle_load`, then execute the effects.
    pub fn loaded(&mut self, now: Millis, epoch: CoordinatorEpoch, loaded: LoadedPartition) {
        if self.dead {
            return;
        }
        self.now = now;
        self.engine.handle_load(now, epoch, loaded);
        self.execute();
    }

    /// Claim, read and load in one step (setup code, before threads start).
    pub fn load_now(&mut self, now: Millis, epoch: CoordinatorEpoch) {
        let loaded = Self::claim_and_read(&self.log, epoch).expect("claim and load");
        self.loaded(now, epoch, loaded);
    }

    /// A request arrived.
    pub fn request(&mut self, now: Millis, to: RequestId, request: Request) {
        if self.dead {
            return;
        }
        self.now = now;
        self.engine.handle_request(now, to, request);
        self.execute();
    }

    /// The engine's timer fired at `now` (reaper, expiry, Complete retries).
    pub fn timeout(&mut self, now: Millis) {
        if self.dead {
            return;
        }
        self.now = now;
        self.engine.handle_timeout(now);
        self.execute();
    }

    /// The shell unloads the partition.
    pub fn unload(&mut self) {
        if self.dead {
            return;
        }
        self.engine.handle_unload();
        self.execute();
    }

    /// The planner's timer fired at `now_ms` (marker retries).
    pub fn marker_timeout(&mut self, now_ms: u64) {
        if self.dead {
            return;
        }
        if let Markers::Planner { planner, .. } = &mut self.markers {
            planner.handle_timeout(now_ms);
        }
        self.execute();
    }

    /// The process crashes: the log loses what is not durable ([`MemTxnLog::crash`]) and this
    /// node never takes another step. Call with the node's lock held, so no step is half done.
    pub fn crash(&mut self) {
        self.dead = true;
        self.log.crash();
    }

    /// Whether [`Node::crash`] was called.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// The response to `to`, if released.
    pub fn reply(&self, to: RequestId) -> Option<&Reply> {
        self.replies.iter().find(|r| r.to == to)
    }

    /// Appends of a `CompleteCommit`/`CompleteAbort` record that became durable.
    pub fn completes_landed(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| matches!(a.result, Some(Ok(()))) && is_complete(&a.entries))
            .count()
    }

    /// Reports every append at the front of the appender queue whose log call resolved, in
    /// order (the shell's `AppendDone` messages), executing the effects after each.
    pub fn pump(&mut self) {
        if self.dead {
            return;
        }
        while let Some((index, AppendState::Waiting(wait))) = self.appender.front_mut() {
            let index = *index;
            let Some(result) = poll_once(wait) else {
                break;
            };
            self.appender.pop_front();
            self.attempts[index].result = Some(result.clone());
            let io = self.attempts[index].io;
            match result {
                Ok(()) => self.engine.handle_append_done(io),
                Err(e) => self.engine.handle_append_failed(io, e),
            }
            self.execute();
        }
    }

    /// Executes every effect in order, feeds marker completions back, and starts the next
    /// append if none is in flight.
    fn execute(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(effect) = self.engine.poll_effect() {
                progressed = true;
                self.effect(effect);
            }
            self.drive_planner();
            while let Some(done) = self.done.pop_front() {
                progressed = true;
                self.engine.handle_markers_done(self.now, done);
            }
            if !self.start_append() && !progressed {
                break;
            }
        }
    }

    fn effect(&mut self, effect: Effect) {
        match effect {
            Effect::AppendLog {
                io,
                partition,
                coordinator_epoch,
                entries,
            } => {
                assert_eq!(partition, PARTITION);
                self.attempts.push(Attempt {
                    io,
                    epoch: coordinator_epoch,
                    entries,
                    flagged: false,
                    result: None,
                });
                self.appender
                    .push_back((self.attempts.len() - 1, AppendState::Queued));
            }
            Effect::Respond { to, response } => {
                let durable = self
                    .snapshot_replies
                    .then(|| self.log.durable_snapshot(PARTITION));
                self.replies.push(Reply {
                    to,
                    response,
                    durable,
                });
            }
            Effect::WriteMarkers(request) => {
                self.marker_writes.push(MarkerWrite {
                    transactional_id: request.transactional_id.clone(),
                    coordinator_epoch: request.coordinator_epoch,
                    result: request.result,
                    partitions: request.partitions.iter().cloned().collect(),
                });
                match &mut self.markers {
                    Markers::AckAtOnce => self
                        .done
                        .push_back(MarkerCompletion::of(&request, MarkerOutcome::Completed)),
                    Markers::Planner { planner, .. } => {
                        planner
                            .submit(now_ms(self.now), request)
                            .expect("planner has room");
                    }
                }
            }
            // The models seed the allocator with enough ids: a refill request is a model bug.
            Effect::NeedProducerIds { block_size } => {
                panic!("unexpected producer-id refill of {block_size} ids")
            }
            Effect::Unloaded {
                partition, reason, ..
            } => {
                if let Markers::Planner { planner, .. } = &mut self.markers {
                    planner.cancel_log_partition(partition);
                }
                self.unloads.push(reason);
            }
            other => panic!("effect the harness does not know: {other:?}"),
        }
    }

    /// Planner effects: lookups are answered from the leader table at once, requests are
    /// queued for the brokers; completions go to the engine as they are.
    fn drive_planner(&mut self) {
        let Markers::Planner {
            planner,
            leaders,
            outbox,
        } = &mut self.markers
        else {
            return;
        };
        let now = now_ms(self.now);
        while let Some(effect) = planner.poll_effect() {
            match effect {
                writer::Effect::Resolve { lookups } => {
                    for l in lookups {
                        let answer = leaders
                            .get(&l.partition)
                            .cloned()
                            .map_or(LeaderLookup::Unknown, LeaderLookup::Leader);
                        planner.handle_leader(now, &l.partition, answer);
                    }
                }
                send @ writer::Effect::Send { .. } => outbox.push_back(send),
            }
        }
        while let Some(c) = planner.poll_completion() {
            self.done.push_back(c);
        }
    }

    /// Hands the next queued append to the log if none is in flight (one at a time, in
    /// order, as the shell's appender). Returns whether something changed.
    fn start_append(&mut self) -> bool {
        let Some((index, state @ AppendState::Queued)) = self.appender.front_mut() else {
            return false;
        };
        let index = *index;
        let attempt = &mut self.attempts[index];
        if let Some(hook) = self.before_append.as_mut() {
            attempt.flagged = hook(attempt.epoch, &attempt.entries);
        }
        match self
            .log
            .append_sync(PARTITION, attempt.epoch, attempt.entries.clone())
        {
            Ok(ticket) => {
                *state = AppendState::Waiting(self.log.wait_durable(ticket));
            }
            Err(e) => {
                self.appender.pop_front();
                attempt.result = Some(Err(e.clone()));
                let io = attempt.io;
                self.engine.handle_append_failed(io, e);
            }
        }
        true
    }
}

fn now_ms(now: Millis) -> u64 {
    u64::try_from(now.0).unwrap_or(0)
}

/// Sends `request` as `to` and returns the response. For logs in Immediate mode, where the
/// request step plus one [`Node::pump`] always release the reply; two lock acquisitions, so
/// other threads can interleave between the append and its apply.
pub fn call(node: &Mutex<Node>, now: Millis, to: RequestId, request: Request) -> Response {
    node.lock().request(now, to, request);
    let mut n = node.lock();
    n.pump();
    n.reply(to)
        .unwrap_or_else(|| panic!("no reply to {to:?} after the append resolved"))
        .response
        .clone()
}

/// A node on `log` that owns its partition at coordinator epoch 1, loaded at 0 ms (nothing
/// in the log yet, or what the model put there).
pub fn loaded_node(log: &MemTxnLog, markers: Markers) -> Node {
    let mut node = Node::new(log.clone(), allocator(), markers);
    node.load_now(Millis(0), CoordinatorEpoch(1));
    node
}

/// Opens a transaction of `id` over `partitions` on `node`, whose log is in Immediate mode:
/// InitProducerId (request 1 at 1 ms, 60 s timeout), then AddPartitionsToTxn (request 2 at
/// 2 ms), both answered without error. Returns the producer id and epoch.
pub fn open_txn(
    node: &Mutex<Node>,
    id: &str,
    partitions: &[TopicPartition],
) -> (ProducerId, ProducerEpoch) {
    let Response::InitProducerId(init) =
        call(node, Millis(1), RequestId(1), init_producer_id(id, 60_000))
    else {
        panic!("wrong response kind");
    };
    assert_eq!(init.error, ErrorCode::NONE, "InitProducerId");
    let (pid, epoch) = (init.producer_id, init.producer_epoch);
    let Response::AddPartitionsToTxn(add) = call(
        node,
        Millis(2),
        RequestId(2),
        add_partitions(id, pid, epoch, partitions),
    ) else {
        panic!("wrong response kind");
    };
    for (partition, error) in add.results.iter().flat_map(|t| &t.partitions) {
        assert_eq!(*error, ErrorCode::NONE, "AddPartitionsToTxn {partition:?}");
    }
    (pid, epoch)
}

/// EndTxn(commit, v5) of the transaction [`open_txn`] opened, at 3 ms; asserts it succeeded
/// (the PrepareCommit is durable, the markers are planned).
pub fn commit_txn(node: &Mutex<Node>, id: &str, pid: ProducerId, epoch: ProducerEpoch) {
    let request = end_txn(5, id, pid, epoch, true);
    let Response::EndTxn(end) = call(node, Millis(3), RequestId(3), request) else {
        panic!("wrong response kind");
    };
    assert_eq!(end.error, ErrorCode::NONE, "EndTxn(commit)");
}

/// One accepted marker at a broker.
#[derive(Debug, Clone)]
pub struct AppliedMarker {
    /// The partition.
    pub partition: TopicPartition,
    /// The marker.
    pub marker: Marker,
    /// What the participant state did with it.
    pub applied: MarkerApplied,
}

/// A partition leader: the participant state of its partitions, as a broker embeds
/// `markers::participant`. Share it behind the facade `Mutex` (the partition lock).
#[derive(Debug)]
pub struct Broker {
    /// Kafka node id.
    pub node_id: i32,
    /// Participant state per led partition.
    pub partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Accepted markers, in order.
    pub applied: Vec<AppliedMarker>,
    /// Rejected markers, in order.
    pub rejected: Vec<(TopicPartition, Marker, MarkerError)>,
    /// Answer the next `WriteTxnMarkers` with this code for every partition, applying
    /// nothing (e.g. NOT_LEADER_OR_FOLLOWER, to force a retry).
    pub fail_next: Option<ErrorCode>,
}

impl Broker {
    /// A broker leading `partitions`, all empty.
    pub fn new(node_id: i32, partitions: &[TopicPartition]) -> Self {
        Self {
            node_id,
            partitions: partitions
                .iter()
                .map(|p| {
                    (
                        p.clone(),
                        PartitionState::new(ParticipantConfig::default(), 0),
                    )
                })
                .collect(),
            applied: Vec::new(),
            rejected: Vec::new(),
            fail_next: None,
        }
    }

    /// Where the broker is reached.
    pub fn endpoint(&self) -> BrokerEndpoint {
        BrokerEndpoint::new(self.node_id, "localhost", 9092)
    }

    /// A transactional produce of one record by `pid`/`epoch` to `partition` (the produce
    /// call sequence of `markers::participant`): opens the producer's transaction there.
    pub fn produce(&mut self, partition: &TopicPartition, pid: ProducerId, epoch: ProducerEpoch) {
        let state = self.partitions.get_mut(partition).expect("led partition");
        let batch = BatchHeader::transactional(pid, epoch, 0, 1);
        let ProduceDecision::Append(pending) = state.check_batch(&batch).expect("valid batch")
        else {
            panic!("first batch reported as duplicate");
        };
        let at = state.next_offset();
        state.complete_append(pending, at).expect("append recorded");
        state.advance_high_watermark(state.next_offset());
    }

    /// Open transactions on `partition`.
    pub fn open_transactions(&self, partition: &TopicPartition) -> usize {
        self.partitions[partition].open_transaction_count()
    }

    /// Transactions `partition` closed with `result`.
    pub fn closed(&self, partition: &TopicPartition, result: TxnResult) -> usize {
        self.applied
            .iter()
            .filter(|a| {
                &a.partition == partition && a.applied.completed.is_some_and(|c| c.result == result)
            })
            .count()
    }

    /// The WriteTxnMarkers handler: for each (marker, partition) `check_marker`, append the
    /// control batch at the log end, `complete_marker` (the documented call sequence).
    /// Returns the error code per (producer id, topic, partition).
    fn write_txn_markers(
        &mut self,
        markers: &[(TopicPartition, Marker)],
        now_ms: i64,
    ) -> Vec<Result<(), ApplyError>> {
        let fail = self.fail_next.take();
        let mut results = Vec::with_capacity(markers.len());
        for (p, marker) in markers {
            if let Some(code) = fail {
                results.push(Err(ApplyError::Code(code)));
                continue;
            }
            let Some(state) = self.partitions.get_mut(p) else {
                results.push(Err(ApplyError::UnknownPartition));
                continue;
            };
            match state.check_marker(marker) {
                Ok(pending) => {
                    let at = state.next_offset();
                    let applied = state
                        .complete_marker(pending, at, now_ms)
                        .expect("checked marker records");
                    state.advance_high_watermark(state.next_offset());
                    self.applied.push(AppliedMarker {
                        partition: p.clone(),
                        marker: *marker,
                        applied,
                    });
                    results.push(Ok(()));
                }
                Err(e) => {
                    self.rejected.push((p.clone(), *marker, e.clone()));
                    results.push(Err(ApplyError::Rejected(e)));
                }
            }
        }
        results
    }
}

/// A broker thread's step: take the next `WriteTxnMarkers` request `node`'s planner addressed
/// to `broker`, let the broker handle it (under the broker's lock), and give the answer back
/// to the planner (under the node's lock). Returns false if no request was waiting.
pub fn deliver_one(node: &Mutex<Node>, broker: &Mutex<Broker>, node_id: i32) -> bool {
    let send = {
        let mut n = node.lock();
        let Markers::Planner { outbox, .. } = &mut n.markers else {
            return false;
        };
        let pos = outbox.iter().position(
            |e| matches!(e, writer::Effect::Send { broker, .. } if broker.node_id == node_id),
        );
        pos.and_then(|i| outbox.remove(i))
    };
    let Some(writer::Effect::Send {
        request_id,
        request,
        txn_versions,
        ..
    }) = send
    else {
        return false;
    };
    // The library's conversion both ways, as a broker hosting the coordinator uses it.
    let markers = markers::apply::markers_of(&request, &txn_versions);
    let results = broker.lock().write_txn_markers(&markers, 0);
    let response = markers::apply::response_of(&request, &results);
    let mut n = node.lock();
    let now = now_ms(n.now);
    if let Markers::Planner { planner, .. } = &mut n.markers {
        planner.handle_response(now, node_id, request_id, &response);
    }
    n.execute();
    true
}

/// Delivers every outstanding marker request of `node` to `brokers` (by node id), reporting
/// resolved appends and firing the planner's retry timer when nothing is queued, until the
/// planner is idle. For the sequential tail of a model, after its threads joined.
pub fn deliver_all(node: &Mutex<Node>, brokers: &[&Mutex<Broker>]) {
    let ids: Vec<i32> = brokers.iter().map(|b| b.lock().node_id).collect();
    for _ in 0..100 {
        let mut any = false;
        for (b, id) in brokers.iter().zip(&ids) {
            while deliver_one(node, b, *id) {
                any = true;
            }
        }
        let mut n = node.lock();
        n.pump();
        let idle = match &n.markers {
            Markers::Planner { planner, .. } => planner.is_idle(),
            Markers::AckAtOnce => true,
        };
        if idle && !any {
            return;
        }
        let retry_at = match &n.markers {
            Markers::Planner { planner, .. } => planner.poll_timeout(),
            Markers::AckAtOnce => None,
        };
        if let Some(at) = retry_at {
            n.marker_timeout(at);
        }
    }
    panic!("marker delivery did not settle");
}

/// The set of ids in a list, asserting none repeats.
pub fn assert_unique<T: Ord + Copy + std::fmt::Debug>(items: &[T], what: &str) -> BTreeSet<T> {
    let mut seen = BTreeSet::new();
    for i in items {
        assert!(seen.insert(*i), "{what} {i:?} handed out twice: {items:?}");
    }
    seen
}
