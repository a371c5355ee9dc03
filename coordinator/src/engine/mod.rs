//! The per-partition engine: Kafka's transaction state machine as a sans-IO core.
//!
//! Every state change is two-phase, as Kafka's `prepareXxx` / `completeTransitionTo`:
//! validate, build the new [`TxnRecord`], mark the id pending, emit [`Effect::AppendLog`];
//! on `handle_append_done` the record is applied through `Engine::apply` (the same function
//! `handle_load` replays with) and only then is the dependent reply released. The in-memory
//! map therefore only ever holds durable records: every answer computed from it is safe.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use txn_log::{
    CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition, ProducerEpoch,
    ProducerId, TransactionalId, TxnRecord, TxnState,
};

use crate::{
    Config, Effect, ErrorCode, IoId, MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator,
    Request, RequestId, Response, UnloadReason,
};

pub(crate) mod add_partitions;
mod cleanup;
mod end_txn;
mod init_producer_id;
mod parking;
mod queries;
mod refused;
mod state;

use add_partitions::BatchReply;
pub use init_producer_id::handle_unrouted;
use parking::Parked;
use state::Txn;

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
    /// Partition markers a participant refused for good (each delivery of a decision counted).
    pub markers_refused: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Loading,
    Loaded(CoordinatorEpoch),
    Unloaded,
}

/// One transactional id: its durable state and the append in flight for it.
#[derive(Debug, Clone)]
struct Entry {
    /// None while the id's first record is still being appended.
    txn: Option<Txn>,
    pending: Option<IoId>,
}

impl Entry {
    /// The entry of an id whose durable state is `txn`, with nothing in flight: what a live
    /// upsert of a new id and a load install.
    fn durable(txn: Txn) -> Self {
        Self {
            txn: Some(txn),
            pending: None,
        }
    }

    /// The durable state with no transition in flight.
    fn idle(&self) -> Option<&Txn> {
        self.txn.as_ref().filter(|_| self.pending.is_none())
    }
}

/// What finishes an append: each API's module owns the continuations of the appends it
/// issues, and knows how to answer its request once the append is durable or has failed.
trait Continuation: std::fmt::Debug + Send {
    /// The append of `ops` is durable (`error` None, its entries already applied) or failed
    /// with `error` (the Kafka code to answer).
    fn finish(
        self: Box<Self>,
        engine: &mut Engine,
        ops: &[(TransactionalId, LogOp)],
        error: Option<ErrorCode>,
    );

    /// The append will never finish (unload, reload): answer the waiting request with `code`.
    fn abandon(self: Box<Self>, engine: &mut Engine, code: ErrorCode);
}

/// An append in flight: its entries and what finishes it.
#[derive(Debug)]
struct Inflight {
    ops: Vec<(TransactionalId, LogOp)>,
    then: Box<dyn Continuation>,
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
    /// Decided transactions whose markers a participant refused: held, not completed.
    refused: BTreeMap<TransactionalId, refused::Refusal>,
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
            refused: BTreeMap::new(),
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
                let txn = Txn::from_record(&record);
                (id, Entry::durable(txn))
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
            .filter(|(_, e)| e.txn.as_ref().is_some_and(|t| t.state().is_prepare()))
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
        self.dispatch(to, request, park_until);
    }

    /// Handles `request`, new or parked before; `park_until`: how long it may park.
    fn dispatch(&mut self, to: RequestId, request: Request, park_until: Option<Millis>) {
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
                let out = self.list_transactions(self.now, &r);
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
        inflight.then.finish(self, &inflight.ops, None);
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
            if entry.txn.is_none() {
                self.txns.remove(id);
            }
        }
        if ErrorCode::append_error_loses_partition(&err) {
            // The failed append's own waiter gets NOT_COORDINATOR too.
            self.inflight.insert(io, inflight);
            self.unload(UnloadReason::LogFailed(err));
            return;
        }
        let error = ErrorCode::for_append_error(&err);
        inflight.then.finish(self, &inflight.ops, Some(error));
    }

    /// The markers of a [`Effect::WriteMarkers`] finished. `Completed` appends CompleteCommit /
    /// CompleteAbort; `Refused` holds the transaction decided (see [`Engine::refused`]);
    /// `Cancelled` and `Superseded` change nothing. Reports that do not match the current
    /// marker work (stale epoch, already completed) are ignored.
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
            MarkerOutcome::Refused => {
                self.hold_refused(done.transactional_id, done.refused_partitions);
            }
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
        self.expire_parked(now);
        if self.complete_retry_at.is_some_and(|t| t <= now) {
            self.complete_retry_at = None;
            let ids = std::mem::take(&mut self.complete_retry);
            for id in ids {
                let ready = self
                    .txns
                    .get(&id)
                    .and_then(Entry::idle)
                    .is_some_and(|t| t.state().is_prepare());
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

    /// The durable record of `id`, if any (its state projected as the log persists it).
    pub fn record(&self, id: &TransactionalId) -> Option<TxnRecord> {
        self.txn(id).map(Txn::to_record)
    }

    /// Every durable record, ordered by id (equals what a reload of the log would produce).
    pub fn records(&self) -> impl Iterator<Item = (&TransactionalId, TxnRecord)> {
        self.txns
            .iter()
            .filter_map(|(id, e)| e.txn.as_ref().map(|t| (id, t.to_record())))
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

    /// Applies one durable log operation to the in-memory state (the record becomes a [`Txn`]
    /// as a load builds it), asserting the transition table against the previous durable state.
    fn apply(&mut self, id: &TransactionalId, op: &LogOp) {
        match op {
            LogOp::Upsert(record) => {
                assert_record_invariants(id, record);
                let txn = Txn::from_record(record);
                let Some(entry) = self.txns.get_mut(id) else {
                    self.txns.insert(id.clone(), Entry::durable(txn));
                    return;
                };
                if let Some(old) = &entry.txn {
                    assert_transition(id, old.state(), txn.state());
                    let (old, new) = (old.producer(), txn.producer());
                    if old.id == new.id {
                        assert!(
                            new.epoch >= old.epoch,
                            "{id}: producer epoch went backwards: {:?} -> {:?}",
                            old.epoch,
                            new.epoch
                        );
                    }
                }
                entry.txn = Some(txn);
            }
            LogOp::Tombstone => {
                if let Some(Entry { txn: Some(t), .. }) = self.txns.remove(id) {
                    assert_transition(id, t.state(), TxnState::Dead);
                }
            }
        }
    }

    /// The durable state of `id`, if any.
    fn txn(&self, id: &TransactionalId) -> Option<&Txn> {
        self.txns.get(id).and_then(|e| e.txn.as_ref())
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
    fn begin(&mut self, ops: Vec<(TransactionalId, LogOp)>, then: Box<dyn Continuation>) {
        let Status::Loaded(coordinator_epoch) = self.status else {
            panic!("append while not loaded");
        };
        let io = IoId(self.next_io);
        self.next_io += 1;
        for (id, op) in &ops {
            // A new id is in the map from its first append on, without a durable state.
            let e = match self.txns.entry(id.clone()) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    assert!(
                        matches!(op, LogOp::Upsert(_)),
                        "{id}: tombstone of a new id"
                    );
                    v.insert(Entry {
                        txn: None,
                        pending: None,
                    })
                }
            };
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
        self.inflight.insert(io, Inflight { ops, then });
    }

    /// Starts the transition of `id` to `next`, persisted as its record.
    fn begin_one(&mut self, id: &TransactionalId, next: &Txn, then: Box<dyn Continuation>) {
        self.begin(vec![(id.clone(), LogOp::Upsert(next.to_record()))], then);
    }

    /// Drops all state; every waiting request is answered with `code`.
    fn reset(&mut self, code: ErrorCode) {
        let inflight = std::mem::take(&mut self.inflight);
        for (_, f) in inflight {
            f.then.abandon(self, code);
        }
        assert!(
            self.batches.is_empty(),
            "a batch reply outlived its appends"
        );
        self.drop_parked(code);
        self.txns.clear();
        self.markers.clear();
        self.refused.clear();
        self.complete_retry.clear();
        self.complete_retry_at = None;
        self.reap_cursor = None;
        self.expire_cursor = None;
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
