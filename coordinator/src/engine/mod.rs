//! The per-partition engine: Kafka's transaction state machine as a sans-IO core.
//!
//! Every state change is two-phase, as Kafka's `prepareXxx` / `completeTransitionTo`:
//! validate, build the new [`TxnRecord`], mark the id pending, emit [`Effect::AppendLog`];
//! on `handle_append_done` the record is applied through `Engine::apply` (the same function
//! `handle_load` replays with) and only then is the dependent reply released. The in-memory
//! map therefore only ever holds durable records: every answer computed from it is safe.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;

use txn_log::{
    CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition, ProducerEpoch,
    ProducerId, TopicPartition, TransactionalId, TxnMarkerRequest, TxnRecord, TxnResult, TxnState,
    TxnVersion,
};

use crate::request::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    AddPartitionsTxn, AddPartitionsTxnResult, DescribedTxn, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest,
    ListTransactionsResponse, ListedTxn, unknown_state_filters,
};
use crate::{
    Config, Effect, ErrorCode, IoId, MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator,
    Request, RequestId, Response, UnloadReason,
};

mod add_partitions;
mod cleanup;
mod end_txn;
mod init_producer_id;
mod parking;
mod queries;

pub(crate) use add_partitions::add_partitions_precheck;
use add_partitions::{AddDecision, BatchReply};
pub use init_producer_id::handle_unrouted;
use parking::{Parked, ParkedRequest};

/// The state a Complete* append writes (its first operation).
fn completed(ops: &[(TransactionalId, LogOp)]) -> TxnState {
    match ops.first() {
        Some((_, LogOp::Upsert(r))) => r.state,
        other => panic!("a Complete append without its record: {other:?}"),
    }
}

/// Kafka's `isEpochExhausted`: `epoch >= Short.MaxValue - 1`.
pub fn is_epoch_exhausted(epoch: ProducerEpoch) -> bool {
    epoch.0 >= ProducerEpoch::MAX.0
}

/// Counters of one engine (monotonic; reset only by constructing a new engine).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineMetrics {
    /// Transactions begun (first partition added to an idle id).
    pub transactions_begun: u64,
    /// Transactions whose CompleteCommit is durable.
    pub transactions_committed: u64,
    /// Transactions whose CompleteAbort is durable.
    pub transactions_aborted: u64,
    /// Transactions the reaper fenced and aborted.
    pub transactions_timed_out: u64,
    /// Producers fenced by an epoch bump of the coordinator (InitProducerId on Ongoing, reaper).
    pub producers_fenced: u64,
    /// Successful InitProducerId answers for transactional ids.
    pub producer_ids_initialized: u64,
    /// Transactional ids tombstoned by expiry.
    pub transactional_ids_expired: u64,
    /// Log appends issued.
    pub appends: u64,
    /// Log appends that failed.
    pub append_failures: u64,
    /// Requests parked until their id's previous transaction completed (`txn.park.max.ms`).
    pub requests_parked: u64,
    /// Parked requests that waited `txn.park.max.ms` and were answered CONCURRENT_TRANSACTIONS.
    pub parked_requests_timed_out: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Loading,
    Loaded(CoordinatorEpoch),
    Unloaded,
}

#[derive(Debug, Clone)]
struct Entry {
    record: TxnRecord,
    /// False for an id whose first record is still being appended.
    durable: bool,
    pending: Option<IoId>,
}

impl Entry {
    /// The entry of an id whose durable record is `record`, with nothing in flight: what a
    /// live upsert of a new id and a load install.
    fn durable(record: TxnRecord) -> Self {
        Self {
            record,
            durable: true,
            pending: None,
        }
    }
}

#[derive(Debug)]
enum Purpose {
    InitProducerId {
        to: RequestId,
        version: i16,
        pid: ProducerId,
        epoch: ProducerEpoch,
        /// The kept transaction's pair (KIP-939 `KeepPreparedTxn`), if one was kept.
        ongoing: Option<(ProducerId, ProducerEpoch)>,
    },
    /// Fence (PrepareEpochFence) + abort; `to` is the InitProducerId that caused it (None: reaper).
    FenceAbort {
        to: Option<RequestId>,
        version: i16,
        timed_out: bool,
    },
    AddPartitions {
        to: RequestId,
        index: usize,
        began: bool,
    },
    AddOffsets {
        to: RequestId,
        version: i16,
        began: bool,
    },
    EndTxn {
        to: RequestId,
        version: i16,
        pid: ProducerId,
        epoch: ProducerEpoch,
    },
    Complete,
    /// Complete* and, in the same append, the next transaction's first add: a parked
    /// AddPartitionsToTxn or AddOffsetsToTxn of the same producer (see `start_complete`).
    CompleteThenAdd(Box<Self>),
    Expire,
}

#[derive(Debug)]
struct Inflight {
    ops: Vec<(TransactionalId, LogOp)>,
    purpose: Purpose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MarkerWork {
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    coordinator_epoch: CoordinatorEpoch,
}

/// Asserts the Kafka transition table for `from -> to` (a violation is a bug in the engine).
fn assert_transition(id: &TransactionalId, from: TxnState, to: TxnState) {
    assert!(
        from.can_transition_to(to),
        "illegal transition {from} -> {to} for {id} (valid previous states of {to}: {:?})",
        to.valid_previous_states()
    );
}

/// Record invariants that hold for every record the engine writes or loads
/// ([`TxnRecord::check_persistable`]; the codec refuses to load a record that breaks them).
fn assert_record_invariants(id: &TransactionalId, r: &TxnRecord) {
    if let Err(why) = r.check_persistable() {
        panic!("{id}: {why}: {r:?}");
    }
}

/// One engine per owned transaction-log partition. Single owner, no locks; see the crate doc
/// for the drive loop.
#[derive(Debug)]
pub struct Engine {
    partition: LogPartition,
    config: Config,
    allocator: ProducerIdAllocator,
    status: Status,
    txns: BTreeMap<TransactionalId, Entry>,
    inflight: BTreeMap<IoId, Inflight>,
    batches: BTreeMap<RequestId, BatchReply>,
    markers: BTreeMap<TransactionalId, MarkerWork>,
    complete_retry: BTreeSet<TransactionalId>,
    complete_retry_at: Option<Millis>,
    /// Parked requests by id, in arrival order.
    parked: BTreeMap<TransactionalId, Vec<Parked>>,
    /// (until, request, id) of every parked request, soonest first.
    park_deadlines: BTreeSet<(Millis, RequestId, TransactionalId)>,
    effects: VecDeque<Effect>,
    next_io: u64,
    now: Millis,
    next_reap: Millis,
    next_expire: Millis,
    reap_cursor: Option<TransactionalId>,
    expire_cursor: Option<TransactionalId>,
    metrics: EngineMetrics,
}
impl Engine {
    /// A new engine for `partition`, in the loading state: requests get
    /// COORDINATOR_LOAD_IN_PROGRESS until [`Engine::handle_load`].
    ///
    /// `config` should have passed [`Config::validate`].
    pub fn new(partition: LogPartition, config: Config, allocator: ProducerIdAllocator) -> Self {
        Self {
            partition,
            config,
            allocator,
            status: Status::Loading,
            txns: BTreeMap::new(),
            inflight: BTreeMap::new(),
            batches: BTreeMap::new(),
            markers: BTreeMap::new(),
            complete_retry: BTreeSet::new(),
            complete_retry_at: None,
            parked: BTreeMap::new(),
            park_deadlines: BTreeSet::new(),
            effects: VecDeque::new(),
            next_io: 1,
            now: Millis(0),
            next_reap: Millis(0),
            next_expire: Millis(0),
            reap_cursor: None,
            expire_cursor: None,
            metrics: EngineMetrics::default(),
        }
    }

    // ===== inputs =====

    /// The shell started loading the partition again after an unload: requests get
    /// COORDINATOR_LOAD_IN_PROGRESS until [`Engine::handle_load`].
    pub fn handle_begin_load(&mut self) {
        if self.status != Status::Loading {
            self.reset(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
            self.status = Status::Loading;
        }
    }

    /// The partition was claimed at `coordinator_epoch` and read: replay `loaded` through the
    /// same `apply` used live, start serving, and re-drive the markers of every
    /// PrepareCommit/PrepareAbort with the new coordinator epoch. A load whose stored epoch is
    /// newer than `coordinator_epoch` unloads at once (someone else owns the partition). Ignored
    /// after [`Engine::handle_unload`] until [`Engine::handle_begin_load`] (a load that lost a
    /// race with an unload must not install state).
    pub fn handle_load(
        &mut self,
        now: Millis,
        coordinator_epoch: CoordinatorEpoch,
        loaded: LoadedPartition,
    ) {
        self.now = now;
        // Kafka installs a load only if the partition is still loading (or loaded: re-immigration
        // at a new epoch). A load that completes after an unload is dropped.
        if self.status == Status::Unloaded {
            return;
        }
        // Re-immigration at a new epoch replaces everything; in-flight work is NOT_COORDINATOR.
        self.reset(ErrorCode::NOT_COORDINATOR);
        if let Some(stored) = loaded.coordinator_epoch
            && stored > coordinator_epoch
        {
            self.status = Status::Unloaded;
            self.effects.push_back(Effect::Unloaded {
                partition: self.partition,
                coordinator_epoch: None,
                reason: UnloadReason::StaleLoad { stored },
            });
            return;
        }
        // One record per id, each installed as a live upsert of a new id installs it (the same
        // checks, `Entry::durable`), in one pass: full B-tree nodes, records moved, not cloned;
        // `reset` left the map empty.
        let (config, partition) = (&self.config, self.partition);
        self.txns = loaded
            .records
            .into_iter()
            .map(|(id, record)| {
                assert_eq!(
                    config.partition_for(&id),
                    partition,
                    "{id} was loaded from the wrong log partition"
                );
                assert_record_invariants(&id, &record);
                (id, Entry::durable(record))
            })
            .collect();
        self.status = Status::Loaded(coordinator_epoch);
        self.next_reap =
            Millis(now.0 + self.config.abort_timed_out_transaction_cleanup_interval_ms);
        self.next_expire =
            Millis(now.0 + self.config.remove_expired_transaction_cleanup_interval_ms);
        let prepared: Vec<TransactionalId> = self
            .txns
            .iter()
            .filter(|(_, e)| e.record.state.is_prepare())
            .map(|(id, _)| id.clone())
            .collect();
        for id in prepared {
            self.after_prepare(&id);
        }
    }

    /// Stop owning the partition: in-flight requests get NOT_COORDINATOR, state and marker
    /// work are dropped, and [`Effect::Unloaded`] is emitted.
    pub fn handle_unload(&mut self) {
        self.unload(UnloadReason::Requested);
    }

    /// A request arrived. An InitProducerId, AddPartitionsToTxn or AddOffsetsToTxn that meets
    /// its id's previous transaction completing may be answered only later, see
    /// [`Config::park_max_ms`].
    pub fn handle_request(&mut self, now: Millis, to: RequestId, request: Request) {
        self.now = now;
        let park_until =
            (self.config.park_max_ms > 0).then(|| Millis(now.0 + self.config.park_max_ms));
        match request {
            Request::InitProducerId(r) => self.handle_init_producer_id(to, r, park_until),
            Request::AddPartitionsToTxn(r) => self.handle_add_partitions(to, r, park_until),
            Request::AddOffsetsToTxn(r) => self.handle_add_offsets(to, r, park_until),
            Request::EndTxn(r) => self.handle_end_txn(to, &r),
            Request::DescribeTransactions(r) => {
                let out = r
                    .transactional_ids
                    .iter()
                    .map(|id| self.describe(id))
                    .collect();
                self.respond(to, Response::DescribeTransactions(out));
            }
            Request::ListTransactions(r) => {
                let out = self.list_transactions(now, &r);
                self.respond(to, Response::ListTransactions(out));
            }
        }
    }

    /// The append `io` is durable. Unknown ids (from before an unload) are ignored.
    pub fn handle_append_done(&mut self, io: IoId) {
        let Some(inflight) = self.inflight.remove(&io) else {
            return;
        };
        for (i, (id, op)) in inflight.ops.iter().enumerate() {
            let entry = self.txns.get_mut(id).expect("a pending id has an entry");
            // An id appears twice in one append only as Complete* then the next add, side by
            // side (`start_complete`).
            let again = i > 0 && inflight.ops[i - 1].0 == *id;
            if !again {
                assert_eq!(entry.pending, Some(io), "{id}: pending io mismatch");
            }
            entry.pending = None;
            self.apply(id, op);
        }
        self.finish(inflight, None);
    }

    /// The append `io` failed. `Fenced`/`NotClaimed`/`Poisoned`/`Closed` unload the engine
    /// (NOT_COORDINATOR to every waiting request); other errors clear the pending transition
    /// and answer with Kafka's append-error translation. A failed Complete* is retried after
    /// `complete_retry_backoff_ms`.
    pub fn handle_append_failed(&mut self, io: IoId, err: LogError) {
        let Some(inflight) = self.inflight.remove(&io) else {
            return;
        };
        self.metrics.append_failures += 1;
        for (id, _) in &inflight.ops {
            let entry = self.txns.get_mut(id).expect("a pending id has an entry");
            entry.pending = None;
            if !entry.durable {
                self.txns.remove(id);
            }
        }
        if ErrorCode::append_error_loses_partition(&err) {
            // The failed append's own waiter gets NOT_COORDINATOR too.
            self.inflight.insert(io, inflight);
            self.unload(UnloadReason::LogFailed(err));
            return;
        }
        self.finish(inflight, Some(ErrorCode::for_append_error(&err)));
    }

    /// The markers of a [`Effect::WriteMarkers`] finished. `Completed` appends CompleteCommit /
    /// CompleteAbort; `CoordinatorFenced` unloads; `Cancelled` and `Superseded` change nothing.
    /// Reports that do not match the current marker work (stale epoch, already completed) are
    /// ignored.
    pub fn handle_markers_done(&mut self, now: Millis, done: MarkerCompletion) {
        self.now = now;
        let work = MarkerWork {
            producer_id: done.producer_id,
            producer_epoch: done.producer_epoch,
            coordinator_epoch: done.coordinator_epoch,
        };
        if self.markers.get(&done.transactional_id) != Some(&work) {
            return;
        }
        match done.outcome {
            MarkerOutcome::Completed => {
                let pending = self
                    .txns
                    .get(&done.transactional_id)
                    .is_some_and(|e| e.pending.is_some());
                if !pending {
                    self.start_complete(&done.transactional_id);
                }
            }
            MarkerOutcome::CoordinatorFenced => self.unload(UnloadReason::MarkersFenced),
            MarkerOutcome::Cancelled | MarkerOutcome::Superseded => {}
        }
    }

    /// Time passed: retry failed Complete* appends, run the reaper and the expiry task when due.
    /// Each task examines at most `cleanup_scan_max` ids per call and continues at the next
    /// call (then [`Engine::poll_timeout`] returns `now`).
    pub fn handle_timeout(&mut self, now: Millis) {
        self.now = now;
        if !matches!(self.status, Status::Loaded(_)) {
            return;
        }
        while let Some((until, to, id)) = self.park_deadlines.first().cloned()
            && until <= now
        {
            self.park_deadlines.pop_first();
            let parked = self
                .parked
                .get_mut(&id)
                .expect("a deadline has its request");
            let at = parked
                .iter()
                .position(|p| p.to == to)
                .expect("a deadline has its request");
            let p = parked.remove(at);
            if parked.is_empty() {
                self.parked.remove(&id);
            }
            self.metrics.parked_requests_timed_out += 1;
            self.dispatch_parked(p.to, p.request, None);
        }
        if self.complete_retry_at.is_some_and(|t| t <= now) {
            self.complete_retry_at = None;
            let ids = std::mem::take(&mut self.complete_retry);
            for id in ids {
                let ready = self
                    .txns
                    .get(&id)
                    .is_some_and(|e| e.pending.is_none() && e.record.state.is_prepare());
                if ready {
                    self.start_complete(&id);
                }
            }
        }
        if now >= self.next_reap {
            self.reap_chunk(now);
        }
        if now >= self.next_expire {
            self.expire_chunk(now);
        }
    }

    // ===== outputs =====

    /// The next effect to execute, in order.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Every queued effect, in order (convenience for tests and simple shells).
    pub fn drain_effects(&mut self) -> Vec<Effect> {
        self.effects.drain(..).collect()
    }

    /// When `handle_timeout` should be called next (None while not loaded).
    pub fn poll_timeout(&self) -> Option<Millis> {
        if !matches!(self.status, Status::Loaded(_)) {
            return None;
        }
        let mut t = self.next_reap.min(self.next_expire);
        if let Some(r) = self.complete_retry_at {
            t = t.min(r);
        }
        if let Some((until, ..)) = self.park_deadlines.first() {
            t = t.min(*until);
        }
        Some(t)
    }

    // ===== getters =====

    /// The configuration of this engine.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The log partition of this engine.
    pub fn partition(&self) -> LogPartition {
        self.partition
    }

    /// The coordinator epoch while loaded.
    pub fn coordinator_epoch(&self) -> Option<CoordinatorEpoch> {
        match self.status {
            Status::Loaded(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the engine is loaded and serving.
    pub fn is_loaded(&self) -> bool {
        matches!(self.status, Status::Loaded(_))
    }

    /// Whether the engine is loading.
    pub fn is_loading(&self) -> bool {
        self.status == Status::Loading
    }

    /// The durable record of `id`, if any.
    pub fn record(&self, id: &TransactionalId) -> Option<&TxnRecord> {
        self.txns.get(id).filter(|e| e.durable).map(|e| &e.record)
    }

    /// Every durable record, ordered by id (equals what a reload of the log would produce).
    pub fn records(&self) -> impl Iterator<Item = (&TransactionalId, &TxnRecord)> {
        self.txns
            .iter()
            .filter(|(_, e)| e.durable)
            .map(|(id, e)| (id, &e.record))
    }

    /// Whether `id` has a transition waiting for its append.
    pub fn has_pending(&self, id: &TransactionalId) -> bool {
        self.txns.get(id).is_some_and(|e| e.pending.is_some())
    }

    /// Whether the engine waits for the append `io`: [`Engine::handle_append_done`] will apply
    /// its entries. False for an append issued before an unload or a reload (ignored).
    pub fn is_append_pending(&self, io: IoId) -> bool {
        self.inflight.contains_key(&io)
    }

    /// Ids whose markers are being written.
    pub fn transactions_awaiting_markers(&self) -> impl Iterator<Item = &TransactionalId> {
        self.markers.keys()
    }

    /// Counters.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }

    // ===== apply: the one function for live operation and replay =====

    /// Applies one durable log operation to the in-memory state, asserting the transition
    /// table against the previous durable record.
    fn apply(&mut self, id: &TransactionalId, op: &LogOp) {
        match op {
            LogOp::Upsert(record) => {
                assert_record_invariants(id, record);
                let Some(entry) = self.txns.get_mut(id) else {
                    self.txns.insert(id.clone(), Entry::durable(record.clone()));
                    return;
                };
                if entry.durable {
                    assert_transition(id, entry.record.state, record.state);
                    if entry.record.producer_id == record.producer_id {
                        assert!(
                            record.producer_epoch >= entry.record.producer_epoch,
                            "{id}: producer epoch went backwards: {:?} -> {:?}",
                            entry.record.producer_epoch,
                            record.producer_epoch
                        );
                    }
                }
                entry.record = record.clone();
                entry.durable = true;
            }
            LogOp::Tombstone => {
                if let Some(e) = self.txns.remove(id)
                    && e.durable
                {
                    assert_transition(id, e.record.state, TxnState::Dead);
                }
            }
        }
    }

    // ===== internals =====

    fn owner_check(&self, id: &TransactionalId) -> Result<CoordinatorEpoch, ErrorCode> {
        match self.status {
            Status::Loading => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            Status::Unloaded => Err(ErrorCode::NOT_COORDINATOR),
            Status::Loaded(_) if self.config.partition_for(id) != self.partition => {
                Err(ErrorCode::NOT_COORDINATOR)
            }
            Status::Loaded(e) => Ok(e),
        }
    }

    fn respond(&mut self, to: RequestId, response: Response) {
        self.effects.push_back(Effect::Respond { to, response });
    }

    fn allocate_pid(&mut self) -> Option<ProducerId> {
        let pid = self.allocator.next_id();
        if self.allocator.begin_refill() {
            self.effects.push_back(Effect::NeedProducerIds {
                block_size: self.config.producer_id_block_size,
            });
        }
        pid
    }

    /// Starts a transition: marks every id pending and emits the append.
    fn begin(&mut self, ops: Vec<(TransactionalId, LogOp)>, purpose: Purpose) -> IoId {
        let Status::Loaded(coordinator_epoch) = self.status else {
            panic!("append while not loaded");
        };
        let io = IoId(self.next_io);
        self.next_io += 1;
        for (id, _) in &ops {
            let e = self
                .txns
                .get_mut(id)
                .expect("an id is in the map before its append");
            assert!(
                e.pending.is_none() || e.pending == Some(io),
                "{id}: second pending transition"
            );
            e.pending = Some(io);
        }
        let entries = ops
            .iter()
            .map(|(id, op)| LogEntry {
                id: id.clone(),
                op: op.clone(),
            })
            .collect();
        self.metrics.appends += 1;
        self.effects.push_back(Effect::AppendLog {
            io,
            partition: self.partition,
            coordinator_epoch,
            entries,
        });
        self.inflight.insert(io, Inflight { ops, purpose });
        io
    }

    fn begin_one(&mut self, id: &TransactionalId, record: TxnRecord, purpose: Purpose) {
        self.begin(vec![(id.clone(), LogOp::Upsert(record))], purpose);
    }

    /// Follow-up of an append: `error` None = durable.
    fn finish(&mut self, inflight: Inflight, error: Option<ErrorCode>) {
        let first_id = || {
            inflight
                .ops
                .first()
                .map(|(id, _)| id.clone())
                .expect("one op")
        };
        let completed = || completed(&inflight.ops);
        match inflight.purpose {
            Purpose::InitProducerId {
                to,
                version,
                pid,
                epoch,
                ongoing,
            } => self.init_producer_id_done(to, version, (pid, epoch), ongoing, error),
            Purpose::FenceAbort {
                to,
                version,
                timed_out,
            } => self.fence_abort_done(&first_id(), to, version, timed_out, error),
            Purpose::AddPartitions { to, index, began } => {
                self.add_partitions_done(to, index, began, error);
            }
            Purpose::AddOffsets { to, version, began } => {
                self.add_offsets_done(to, version, began, error);
            }
            Purpose::EndTxn {
                to,
                version,
                pid,
                epoch,
            } => self.end_txn_done(&first_id(), to, version, (pid, epoch), error),
            Purpose::Complete => self.complete_done(first_id(), completed(), error),
            Purpose::CompleteThenAdd(add) => {
                self.complete_done(first_id(), completed(), error);
                let ops = inflight.ops;
                self.finish(Inflight { ops, purpose: *add }, error);
            }
            Purpose::Expire => self.expire_done(inflight.ops.len(), error),
        }
    }

    /// Drops all state; every waiting request is answered with `code`.
    fn reset(&mut self, code: ErrorCode) {
        let inflight = std::mem::take(&mut self.inflight);
        for (_, f) in inflight {
            self.abandon(f.purpose, code);
        }
        assert!(
            self.batches.is_empty(),
            "a batch reply outlived its appends"
        );
        for (_, parked) in std::mem::take(&mut self.parked) {
            for p in parked {
                self.respond(p.to, p.request.error(code));
            }
        }
        self.park_deadlines.clear();
        self.txns.clear();
        self.markers.clear();
        self.complete_retry.clear();
        self.complete_retry_at = None;
        self.reap_cursor = None;
        self.expire_cursor = None;
    }

    /// Answers the request waiting for an append that will not finish with `code`.
    fn abandon(&mut self, purpose: Purpose, code: ErrorCode) {
        match purpose {
            Purpose::InitProducerId { to, version, .. }
            | Purpose::FenceAbort {
                to: Some(to),
                version,
                ..
            } => {
                self.respond(
                    to,
                    Response::InitProducerId(InitProducerIdResponse::error(
                        code.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
                    )),
                );
            }
            Purpose::AddPartitions { to, index, .. } => self.batch_fill(to, index, code),
            Purpose::AddOffsets { to, version, .. } => {
                self.respond(
                    to,
                    Response::AddOffsetsToTxn(
                        code.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                    ),
                );
            }
            Purpose::EndTxn { to, version, .. } => {
                self.respond(
                    to,
                    Response::EndTxn(EndTxnResponse::error(
                        code.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                    )),
                );
            }
            Purpose::CompleteThenAdd(add) => self.abandon(*add, code),
            Purpose::FenceAbort { to: None, .. } | Purpose::Complete | Purpose::Expire => {}
        }
    }

    fn unload(&mut self, reason: UnloadReason) {
        let coordinator_epoch = self.coordinator_epoch();
        self.reset(ErrorCode::NOT_COORDINATOR);
        self.status = Status::Unloaded;
        self.effects.push_back(Effect::Unloaded {
            partition: self.partition,
            coordinator_epoch,
            reason,
        });
    }
}
