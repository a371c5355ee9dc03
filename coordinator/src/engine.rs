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
    ProducerId, TopicPartition, TransactionalId, TxnRecord, TxnResult, TxnState,
};

use crate::request::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    AddPartitionsTxn, AddPartitionsTxnResult, DescribedTxn, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest,
    ListTransactionsResponse, ListedTxn, unknown_state_filters,
};
use crate::{
    Config, Effect, ErrorCode, IoId, MarkerOutcome, MarkersDone, Millis, ProducerIdAllocator,
    Request, RequestId, Response, UnloadReason,
};

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

#[derive(Debug)]
enum Purpose {
    InitProducerId {
        to: RequestId,
        version: i16,
        pid: ProducerId,
        epoch: ProducerEpoch,
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
    Expire,
}

#[derive(Debug)]
struct Inflight {
    ops: Vec<(TransactionalId, LogOp)>,
    purpose: Purpose,
}

#[derive(Debug)]
struct BatchReply {
    version: i16,
    response: AddPartitionsToTxnResponse,
    outstanding: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MarkerWork {
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    coordinator_epoch: CoordinatorEpoch,
}

/// A request that met its id's previous transaction completing and waits for its Complete*
/// (see [`Config::park_max_ms`]); it is handled again when that is durable, or at `until`
/// without waiting any longer.
#[derive(Debug)]
struct Parked {
    to: RequestId,
    request: ParkedRequest,
    until: Millis,
}

/// The requests that may park: those a client sends right after EndTxn.
#[derive(Debug)]
enum ParkedRequest {
    InitProducerId(InitProducerIdRequest),
    /// With exactly one transaction (a client's request, not a broker's batch).
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
}

impl ParkedRequest {
    /// The answer `code` for every part of the request.
    fn error(&self, code: ErrorCode) -> Response {
        match self {
            Self::InitProducerId(r) => Response::InitProducerId(InitProducerIdResponse::error(
                code.for_version(r.version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
            )),
            Self::AddPartitionsToTxn(r) => {
                Response::AddPartitionsToTxn(AddPartitionsToTxnResponse::all(
                    r,
                    code.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                ))
            }
            Self::AddOffsetsToTxn(r) => Response::AddOffsetsToTxn(
                code.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
            ),
        }
    }
}

/// What the pre-checks of InitProducerId decided before any partition is involved.
enum InitPrecheck {
    Answer(InitProducerIdResponse),
    Continue(TransactionalId, Option<(ProducerId, ProducerEpoch)>),
}

/// Answers a request that needs no log partition, or returns `None` if it must be routed to
/// the engine of `partition_for(id)`.
///
/// Covers InitProducerId with a null id (served from `allocator`, nothing persisted), with
/// half an expectation or an empty id (INVALID_REQUEST) or an invalid timeout
/// (INVALID_TRANSACTION_TIMEOUT, checked before ownership as Kafka does), and EndTxn /
/// AddOffsetsToTxn / AddPartitionsToTxn v0-3 with an empty id (INVALID_REQUEST). When the
/// answer is COORDINATOR_LOAD_IN_PROGRESS because the allocator is empty, the caller should
/// refill it if [`ProducerIdAllocator::begin_refill`] says so.
pub fn handle_unrouted(
    config: &Config,
    allocator: &ProducerIdAllocator,
    request: &Request,
) -> Option<Response> {
    match request {
        Request::InitProducerId(r) => match init_precheck(config, allocator, r) {
            InitPrecheck::Answer(resp) => Some(Response::InitProducerId(resp)),
            InitPrecheck::Continue(..) => None,
        },
        Request::EndTxn(r) if r.transactional_id.is_empty() => Some(Response::EndTxn(
            EndTxnResponse::error(ErrorCode::INVALID_REQUEST),
        )),
        Request::AddOffsetsToTxn(r) if r.transactional_id.is_empty() => {
            Some(Response::AddOffsetsToTxn(ErrorCode::INVALID_REQUEST))
        }
        Request::AddPartitionsToTxn(r)
            if r.version < 4 && r.transactions.iter().all(|t| t.transactional_id.is_empty()) =>
        {
            Some(Response::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::all(r, ErrorCode::INVALID_REQUEST),
            ))
        }
        _ => None,
    }
}

fn init_precheck(
    config: &Config,
    allocator: &ProducerIdAllocator,
    r: &InitProducerIdRequest,
) -> InitPrecheck {
    let err = |e: ErrorCode| InitPrecheck::Answer(InitProducerIdResponse::error(e));
    // KafkaApis: exactly one of (ProducerId, ProducerEpoch) set -> INVALID_REQUEST.
    let expected = match (r.producer_id.is_some(), r.producer_epoch.is_some()) {
        (false, false) => None,
        (true, true) => Some((r.producer_id, r.producer_epoch)),
        _ => return err(ErrorCode::INVALID_REQUEST),
    };
    let Some(raw) = r.transactional_id.as_deref() else {
        return match allocator.next_id() {
            Some(pid) => InitPrecheck::Answer(InitProducerIdResponse {
                error: ErrorCode::NONE,
                producer_id: pid,
                producer_epoch: ProducerEpoch(0),
            }),
            None => err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
        };
    };
    let Ok(id) = TransactionalId::new(raw) else {
        return err(ErrorCode::INVALID_REQUEST);
    };
    if r.transaction_timeout_ms <= 0 || r.transaction_timeout_ms > config.transaction_max_timeout_ms
    {
        return err(ErrorCode::INVALID_TRANSACTION_TIMEOUT);
    }
    InitPrecheck::Continue(id, expected)
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
        // at a new epoch). A load that completes after an unload is dropped (S83).
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
        for (id, record) in loaded.records {
            assert_eq!(
                self.config.partition_for(&id),
                self.partition,
                "{id} was loaded from the wrong log partition"
            );
            self.apply(&id, &LogOp::Upsert(record));
        }
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
        for (id, op) in &inflight.ops {
            let entry = self.txns.get_mut(id).expect("a pending id has an entry");
            assert_eq!(entry.pending, Some(io), "{id}: pending io mismatch");
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

    /// The markers of a [`Effect::WriteMarkers`] finished. `Written` appends CompleteCommit /
    /// CompleteAbort; `CoordinatorFenced` unloads. Reports that do not match the current
    /// marker work (stale epoch, already completed) are ignored.
    pub fn handle_markers_done(&mut self, now: Millis, done: MarkersDone) {
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
            MarkerOutcome::Written => {
                let pending = self
                    .txns
                    .get(&done.transactional_id)
                    .is_some_and(|e| e.pending.is_some());
                if !pending {
                    self.start_complete(&done.transactional_id);
                }
            }
            MarkerOutcome::CoordinatorFenced => self.unload(UnloadReason::MarkersFenced),
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

    /// Ids whose markers are being written.
    pub fn transactions_awaiting_markers(&self) -> impl Iterator<Item = &TransactionalId> {
        self.markers.keys()
    }

    /// Counters.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }

    /// DescribeTransactions for one id (reference §2.8).
    pub fn describe(&self, raw: &str) -> DescribedTxn {
        let Ok(id) = TransactionalId::new(raw) else {
            return DescribedTxn::error(raw, ErrorCode::INVALID_REQUEST);
        };
        if let Err(e) = self.owner_check(&id) {
            return DescribedTxn::error(raw, e);
        }
        let Some(r) = self.record(&id) else {
            return DescribedTxn::error(raw, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND);
        };
        DescribedTxn {
            error: ErrorCode::NONE,
            transactional_id: raw.to_owned(),
            state: r.state.name().to_owned(),
            timeout_ms: r.timeout_ms,
            start_time_ms: r.txn_start_ms,
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            partitions: r.partitions.iter().cloned().collect(),
        }
    }

    /// ListTransactions over this partition (reference §2.9); merge engines with
    /// [`crate::merge_list_responses`].
    pub fn list_transactions(
        &self,
        now: Millis,
        req: &ListTransactionsRequest,
    ) -> ListTransactionsResponse {
        let unknown = unknown_state_filters(&req.state_filters);
        let mut out = ListTransactionsResponse {
            error: ErrorCode::NONE,
            unknown_state_filters: unknown,
            transactions: Vec::new(),
        };
        match self.status {
            Status::Loading => {
                out.error = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
                return out;
            }
            Status::Unloaded => return out,
            Status::Loaded(_) => {}
        }
        let states: Vec<TxnState> = req
            .state_filters
            .iter()
            .filter_map(|s| TxnState::from_name(s))
            .collect();
        // Only unknown names given: nothing matches.
        if !req.state_filters.is_empty() && states.is_empty() {
            return out;
        }
        for (id, r) in self.records() {
            if r.state == TxnState::Dead {
                continue;
            }
            if !req.producer_id_filters.is_empty()
                && !req.producer_id_filters.contains(&r.producer_id)
            {
                continue;
            }
            if !states.is_empty() && !states.contains(&r.state) {
                continue;
            }
            if req.duration_filter_ms >= 0 && now.0 - r.txn_start_ms <= req.duration_filter_ms {
                continue;
            }
            out.transactions.push(ListedTxn {
                transactional_id: id.to_string(),
                producer_id: r.producer_id,
                state: r.state,
            });
        }
        out
    }

    // ===== apply: the one function for live operation and replay =====

    /// Applies one durable log operation to the in-memory state, asserting the transition
    /// table against the previous durable record.
    fn apply(&mut self, id: &TransactionalId, op: &LogOp) {
        match op {
            LogOp::Upsert(record) => {
                assert_record_invariants(id, record);
                let entry = self.txns.entry(id.clone()).or_insert_with(|| Entry {
                    record: record.clone(),
                    durable: false,
                    pending: None,
                });
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

    // ----- parking (Config::park_max_ms) -----

    /// Whether `id`'s durable record is PrepareCommit/PrepareAbort: its markers or its
    /// Complete* append are under way, so a request that meets it can wait for the end.
    fn completing(&self, id: &TransactionalId) -> bool {
        self.txns
            .get(id)
            .is_some_and(|e| e.durable && e.record.state.is_prepare())
    }

    /// Kafka's CONCURRENT_TRANSACTIONS for a request that met `id` busy; parked instead until
    /// `park_until` while `id` is completing.
    fn busy(
        &mut self,
        id: &TransactionalId,
        to: RequestId,
        request: ParkedRequest,
        park_until: Option<Millis>,
    ) {
        match park_until {
            Some(until) if self.completing(id) => {
                self.metrics.requests_parked += 1;
                self.park_deadlines.insert((until, to, id.clone()));
                self.parked
                    .entry(id.clone())
                    .or_default()
                    .push(Parked { to, request, until });
            }
            _ => {
                let answer = request.error(ErrorCode::CONCURRENT_TRANSACTIONS);
                self.respond(to, answer);
            }
        }
    }

    /// `id`'s Complete* is durable: handle its parked requests again, in arrival order.
    fn wake_parked(&mut self, id: &TransactionalId) {
        let Some(parked) = self.parked.remove(id) else {
            return;
        };
        for p in parked {
            self.park_deadlines.remove(&(p.until, p.to, id.clone()));
            self.dispatch_parked(p.to, p.request, Some(p.until));
        }
    }

    fn dispatch_parked(
        &mut self,
        to: RequestId,
        request: ParkedRequest,
        park_until: Option<Millis>,
    ) {
        match request {
            ParkedRequest::InitProducerId(r) => self.handle_init_producer_id(to, r, park_until),
            ParkedRequest::AddPartitionsToTxn(r) => self.handle_add_partitions(to, r, park_until),
            ParkedRequest::AddOffsetsToTxn(r) => self.handle_add_offsets(to, r, park_until),
        }
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
            assert!(e.pending.is_none(), "{id}: second pending transition");
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
        let first_id = inflight.ops.first().map(|(id, _)| id.clone());
        match inflight.purpose {
            Purpose::InitProducerId {
                to,
                version,
                pid,
                epoch,
            } => {
                let resp = match error {
                    None => {
                        self.metrics.producer_ids_initialized += 1;
                        InitProducerIdResponse {
                            error: ErrorCode::NONE,
                            producer_id: pid,
                            producer_epoch: epoch,
                        }
                    }
                    Some(e) => InitProducerIdResponse::error(
                        e.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
                    ),
                };
                self.respond(to, Response::InitProducerId(resp));
            }
            Purpose::FenceAbort {
                to,
                version,
                timed_out,
            } => {
                if error.is_none() {
                    self.metrics.producers_fenced += 1;
                    if timed_out {
                        self.metrics.transactions_timed_out += 1;
                    }
                }
                if let Some(to) = to {
                    let code = error.unwrap_or(ErrorCode::CONCURRENT_TRANSACTIONS);
                    self.respond(
                        to,
                        Response::InitProducerId(InitProducerIdResponse::error(
                            code.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
                        )),
                    );
                }
                if error.is_none() {
                    let id = first_id.expect("one op");
                    self.after_prepare(&id);
                }
            }
            Purpose::AddPartitions { to, index, began } => {
                if error.is_none() && began {
                    self.metrics.transactions_begun += 1;
                }
                self.batch_fill(to, index, error.unwrap_or(ErrorCode::NONE));
            }
            Purpose::AddOffsets { to, version, began } => {
                if error.is_none() && began {
                    self.metrics.transactions_begun += 1;
                }
                let code = error
                    .unwrap_or(ErrorCode::NONE)
                    .for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE);
                self.respond(to, Response::AddOffsetsToTxn(code));
            }
            Purpose::EndTxn {
                to,
                version,
                pid,
                epoch,
            } => {
                let resp = match error {
                    None => EndTxnResponse {
                        error: ErrorCode::NONE,
                        producer_id: pid,
                        producer_epoch: epoch,
                    },
                    Some(e) => EndTxnResponse::error(
                        e.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                    ),
                };
                self.respond(to, Response::EndTxn(resp));
                if error.is_none() {
                    let id = first_id.expect("one op");
                    self.after_prepare(&id);
                }
            }
            Purpose::Complete => {
                let id = first_id.expect("one op");
                match error {
                    None => {
                        self.markers.remove(&id);
                        match self.txns.get(&id).map(|e| e.record.state) {
                            Some(TxnState::CompleteCommit) => {
                                self.metrics.transactions_committed += 1
                            }
                            Some(TxnState::CompleteAbort) => self.metrics.transactions_aborted += 1,
                            other => panic!("{id}: Complete append applied as {other:?}"),
                        }
                        self.wake_parked(&id);
                    }
                    Some(_) => {
                        // Never leave a decided transaction stuck (unlike Kafka §3.3): retry.
                        self.complete_retry.insert(id);
                        let at = Millis(self.now.0 + self.config.complete_retry_backoff_ms);
                        self.complete_retry_at =
                            Some(self.complete_retry_at.map_or(at, |t| t.min(at)));
                    }
                }
            }
            Purpose::Expire => {
                if error.is_none() {
                    self.metrics.transactional_ids_expired += inflight.ops.len() as u64;
                }
            }
        }
    }

    /// A PrepareCommit/PrepareAbort is durable: write markers, or complete at once if the
    /// transaction has no partitions (TV2 abort of an empty transaction).
    fn after_prepare(&mut self, id: &TransactionalId) {
        let Status::Loaded(coordinator_epoch) = self.status else {
            return;
        };
        let r = &self.txns.get(id).expect("prepared id exists").record;
        assert!(r.state.is_prepare(), "{id}: markers for {}", r.state);
        if r.partitions.is_empty() {
            self.start_complete(id);
            return;
        }
        let work = MarkerWork {
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch,
        };
        let effect = Effect::WriteMarkers {
            partition: self.partition,
            transactional_id: id.clone(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch,
            result: if r.state == TxnState::PrepareCommit {
                TxnResult::Commit
            } else {
                TxnResult::Abort
            },
            partitions: r.partitions.clone(),
            transaction_version: r.client_txn_version,
        };
        self.markers.insert(id.clone(), work);
        self.effects.push_back(effect);
    }

    /// Kafka's `prepareComplete`: PrepareX -> CompleteX, TV2 overflow rolls to the next pid.
    fn start_complete(&mut self, id: &TransactionalId) {
        let r = &self.txns.get(id).expect("prepared id exists").record;
        let target = match r.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            other => panic!("{id}: complete from {other}"),
        };
        assert_transition(id, r.state, target);
        let mut next = r.clone();
        next.state = target;
        next.partitions = BTreeSet::new();
        next.txn_last_update_ms = self.now.0;
        if r.next_producer_id.is_some() {
            next.prev_producer_id = r.producer_id;
            next.producer_id = r.next_producer_id;
            next.next_producer_id = ProducerId::NONE;
            next.last_producer_epoch = r.producer_epoch;
            next.producer_epoch = ProducerEpoch(0);
        }
        let work = MarkerWork {
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            coordinator_epoch: self.coordinator_epoch().expect("loaded"),
        };
        self.markers.entry(id.clone()).or_insert(work);
        self.begin_one(id, next, Purpose::Complete);
    }

    fn batch_fill(&mut self, to: RequestId, index: usize, code: ErrorCode) {
        let b = self
            .batches
            .get_mut(&to)
            .expect("batch exists while a slot is outstanding");
        let code = code.for_version(b.version, ErrorCode::TXN_REQUEST_FENCED_SINCE);
        for (_, c) in &mut b.response.results[index].partitions {
            *c = code;
        }
        b.outstanding -= 1;
        if b.outstanding == 0 {
            let b = self.batches.remove(&to).expect("present");
            self.respond(to, Response::AddPartitionsToTxn(b.response));
        }
    }

    /// Drops all state; every waiting request is answered with `code`.
    fn reset(&mut self, code: ErrorCode) {
        let inflight = std::mem::take(&mut self.inflight);
        for (_, f) in inflight {
            match f.purpose {
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
                Purpose::FenceAbort { to: None, .. } | Purpose::Complete | Purpose::Expire => {}
            }
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

    // ----- InitProducerId (reference §2.2) -----

    fn handle_init_producer_id(
        &mut self,
        to: RequestId,
        r: InitProducerIdRequest,
        park_until: Option<Millis>,
    ) {
        let version = r.version;
        let reply = |e: ErrorCode| {
            Response::InitProducerId(InitProducerIdResponse::error(
                e.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE),
            ))
        };
        let (id, expected) = match init_precheck(&self.config, &self.allocator, &r) {
            InitPrecheck::Answer(resp) => {
                if resp.error == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                    && self.allocator.begin_refill()
                {
                    self.effects.push_back(Effect::NeedProducerIds {
                        block_size: self.config.producer_id_block_size,
                    });
                }
                self.respond(to, Response::InitProducerId(resp));
                return;
            }
            InitPrecheck::Continue(id, expected) => (id, expected),
        };
        if let Err(e) = self.owner_check(&id) {
            return self.respond(to, reply(e));
        }
        let now = self.now.0;
        if self.has_pending(&id) {
            return self.busy(&id, to, ParkedRequest::InitProducerId(r), park_until);
        }
        let current = match self.txns.get(&id) {
            Some(e) => e.record.clone(),
            None => {
                let Some(pid) = self.allocate_pid() else {
                    return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
                };
                let fresh = TxnRecord {
                    producer_id: pid,
                    prev_producer_id: ProducerId::NONE,
                    next_producer_id: ProducerId::NONE,
                    producer_epoch: ProducerEpoch::NONE,
                    last_producer_epoch: ProducerEpoch::NONE,
                    next_producer_epoch: ProducerEpoch::NONE,
                    timeout_ms: r.transaction_timeout_ms,
                    state: TxnState::Empty,
                    partitions: BTreeSet::new(),
                    txn_start_ms: -1,
                    txn_last_update_ms: now,
                    client_txn_version: 0,
                };
                self.txns.insert(
                    id.clone(),
                    Entry {
                        record: fresh.clone(),
                        durable: false,
                        pending: None,
                    },
                );
                fresh
            }
        };
        if let Some((epid, eepoch)) = expected {
            let valid = current.producer_epoch == ProducerEpoch::NONE
                || epid == current.producer_id
                || (epid == current.prev_producer_id && is_epoch_exhausted(eepoch));
            if !valid {
                self.drop_if_fresh(&id);
                return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
            }
        }
        match current.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                self.busy(&id, to, ParkedRequest::InitProducerId(r), park_until)
            }
            TxnState::Ongoing => self.fence_and_abort(&id, Some(to), version, false),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut next = current.clone();
                let exhausted = is_epoch_exhausted(current.producer_epoch);
                if exhausted && expected.is_none_or(|(_, e)| e == current.producer_epoch) {
                    // Rotation (prepareProducerIdRotation).
                    let Some(pid) = self.allocate_pid() else {
                        return self.respond(to, reply(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
                    };
                    next.prev_producer_id = current.producer_id;
                    next.producer_id = pid;
                    next.producer_epoch = ProducerEpoch(0);
                    next.last_producer_epoch = if expected.is_some() {
                        current.producer_epoch
                    } else {
                        ProducerEpoch::NONE
                    };
                } else {
                    // prepareIncrementProducerEpoch.
                    match expected {
                        None => {
                            next.producer_epoch = ProducerEpoch(current.producer_epoch.0 + 1);
                            next.last_producer_epoch = ProducerEpoch::NONE;
                        }
                        Some((_, e))
                            if !exhausted
                                && (e == current.producer_epoch
                                    || current.producer_epoch == ProducerEpoch::NONE) =>
                        {
                            next.producer_epoch = ProducerEpoch(current.producer_epoch.0 + 1);
                            next.last_producer_epoch = current.producer_epoch;
                        }
                        // A retry of a call that already bumped: same epoch, no second bump.
                        Some((_, e)) if e == current.last_producer_epoch => {}
                        Some(_) => {
                            self.drop_if_fresh(&id);
                            return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
                        }
                    }
                }
                assert_transition(&id, current.state, TxnState::Empty);
                next.state = TxnState::Empty;
                next.partitions.clear();
                next.txn_start_ms = -1;
                next.timeout_ms = r.transaction_timeout_ms;
                next.txn_last_update_ms = now;
                next.next_producer_id = ProducerId::NONE;
                let (pid, epoch) = (next.producer_id, next.producer_epoch);
                self.begin_one(
                    &id,
                    next,
                    Purpose::InitProducerId {
                        to,
                        version,
                        pid,
                        epoch,
                    },
                );
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                panic!("{id}: pending-only state {} in a record", current.state)
            }
        }
    }

    fn drop_if_fresh(&mut self, id: &TransactionalId) {
        if self.txns.get(id).is_some_and(|e| !e.durable) {
            self.txns.remove(id);
        }
    }

    /// Kafka's `prepareFenceProducerEpoch` + `endTransaction(ABORT, isFromClient = false)`:
    /// one PrepareAbort record with the epoch bumped once (trunk behaviour, also for TV2) and
    /// last epoch -1. The PrepareEpochFence state is pending-only and never persisted.
    fn fence_and_abort(
        &mut self,
        id: &TransactionalId,
        to: Option<RequestId>,
        version: i16,
        timed_out: bool,
    ) {
        let current = self.txns.get(id).expect("exists").record.clone();
        assert_transition(id, current.state, TxnState::PrepareEpochFence);
        assert_transition(id, TxnState::PrepareEpochFence, TxnState::PrepareAbort);
        let mut next = current.clone();
        next.producer_epoch = ProducerEpoch(current.producer_epoch.0.saturating_add(1));
        next.last_producer_epoch = ProducerEpoch::NONE;
        next.state = TxnState::PrepareAbort;
        next.txn_last_update_ms = self.now.0;
        next.client_txn_version = self.config.transaction_version;
        self.begin_one(
            id,
            next,
            Purpose::FenceAbort {
                to,
                version,
                timed_out,
            },
        );
    }

    // ----- AddPartitionsToTxn / AddOffsetsToTxn (reference §2.3, §2.4) -----

    fn handle_add_partitions(
        &mut self,
        to: RequestId,
        r: AddPartitionsToTxnRequest,
        park_until: Option<Millis>,
    ) {
        assert!(
            !self.batches.contains_key(&to),
            "request id {to:?} reused while in flight"
        );
        let version = r.version;
        let mut response = AddPartitionsToTxnResponse::all(&r, ErrorCode::NONE);
        let mut outstanding = 0;
        let mut writes = Vec::new();
        // Only a client's request (one transaction) parks; a broker's batch is answered at once.
        let may_park = park_until.is_some() && r.transactions.len() == 1;
        let mut park = None;
        for (index, txn) in r.transactions.iter().enumerate() {
            let verify = version >= 4 && txn.verify_only;
            let result = if verify {
                AddOutcome::Done(self.verify_partitions(txn))
            } else {
                match TransactionalId::new(txn.transactional_id.as_str()) {
                    Err(_) => AddOutcome::Done(AddPartitionsTxnResult::all(
                        txn,
                        ErrorCode::INVALID_REQUEST,
                    )),
                    Ok(id) => {
                        let parts: BTreeSet<TopicPartition> =
                            txn.partitions.iter().cloned().collect();
                        match self.prepare_add(&id, txn.producer_id, txn.producer_epoch, &parts) {
                            AddDecision::Reply(code) => {
                                AddOutcome::Done(AddPartitionsTxnResult::all(txn, code))
                            }
                            AddDecision::Busy if may_park && self.completing(&id) => {
                                park = Some(id);
                                break;
                            }
                            AddDecision::Busy => AddOutcome::Done(AddPartitionsTxnResult::all(
                                txn,
                                ErrorCode::CONCURRENT_TRANSACTIONS,
                            )),
                            AddDecision::Write(record, began) => {
                                // Mark pending now so a duplicate id later in the batch sees it.
                                outstanding += 1;
                                writes.push((index, id, record, began));
                                AddOutcome::Pending
                            }
                        }
                    }
                }
            };
            if let AddOutcome::Done(res) = result {
                let code_mapped: Vec<_> = res
                    .partitions
                    .into_iter()
                    .map(|(p, c)| {
                        (
                            p,
                            c.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                        )
                    })
                    .collect();
                response.results[index].partitions = code_mapped;
            }
            if let Some((_, id, record, began)) = writes.last().filter(|w| w.0 == index) {
                let (id, record, began) = (id.clone(), record.clone(), *began);
                self.batches.entry(to).or_insert_with(|| BatchReply {
                    version,
                    response: AddPartitionsToTxnResponse {
                        error: ErrorCode::NONE,
                        results: Vec::new(),
                    },
                    outstanding: 0,
                });
                self.begin_one(&id, record, Purpose::AddPartitions { to, index, began });
            }
        }
        if let Some(id) = park {
            return self.busy(&id, to, ParkedRequest::AddPartitionsToTxn(r), park_until);
        }
        if outstanding == 0 {
            self.batches.remove(&to);
            self.respond(to, Response::AddPartitionsToTxn(response));
        } else {
            let b = self
                .batches
                .get_mut(&to)
                .expect("created with the first write");
            b.response = response;
            b.outstanding = outstanding;
        }
    }

    fn handle_add_offsets(
        &mut self,
        to: RequestId,
        r: AddOffsetsToTxnRequest,
        park_until: Option<Millis>,
    ) {
        let reply = |e: ErrorCode| {
            Response::AddOffsetsToTxn(e.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE))
        };
        let Ok(id) = TransactionalId::new(r.transactional_id.as_str()) else {
            return self.respond(to, reply(ErrorCode::INVALID_REQUEST));
        };
        let parts = BTreeSet::from([self.config.offsets_partition_for(&r.group_id)]);
        match self.prepare_add(&id, r.producer_id, r.producer_epoch, &parts) {
            AddDecision::Reply(code) => self.respond(to, reply(code)),
            AddDecision::Busy => {
                self.busy(&id, to, ParkedRequest::AddOffsetsToTxn(r), park_until);
            }
            AddDecision::Write(record, began) => {
                self.begin_one(
                    &id,
                    record,
                    Purpose::AddOffsets {
                        to,
                        version: r.version,
                        began,
                    },
                );
            }
        }
    }

    /// The coordinator add path (`handleAddPartitionsToTransaction`), trunk order: pending
    /// first (so a TV2 client that already uses its next producer id waits), then pid, epoch,
    /// state.
    fn prepare_add(
        &self,
        id: &TransactionalId,
        pid: ProducerId,
        epoch: ProducerEpoch,
        parts: &BTreeSet<TopicPartition>,
    ) -> AddDecision {
        if let Err(e) = self.owner_check(id) {
            return AddDecision::Reply(e);
        }
        let Some(entry) = self.txns.get(id).filter(|e| e.durable) else {
            return AddDecision::Reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        let r = &entry.record;
        if entry.pending.is_some()
            || (r.state.is_prepare() && r.next_producer_id.is_some() && pid == r.next_producer_id)
        {
            return AddDecision::Busy;
        }
        if pid != r.producer_id {
            return AddDecision::Reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if epoch != r.producer_epoch {
            return AddDecision::Reply(ErrorCode::PRODUCER_FENCED);
        }
        if r.state.is_prepare() {
            return AddDecision::Busy;
        }
        // Already present (S34), or nothing to add: NONE without a write. (An empty add would
        // make Kafka write an Ongoing transaction without partitions; we write nothing.)
        if parts.is_empty() || (r.state == TxnState::Ongoing && parts.is_subset(&r.partitions)) {
            return AddDecision::Reply(ErrorCode::NONE);
        }
        assert_transition(id, r.state, TxnState::Ongoing);
        let began = r.state.is_idle();
        let mut next = r.clone();
        next.state = TxnState::Ongoing;
        next.partitions.extend(parts.iter().cloned());
        if began {
            next.txn_start_ms = self.now.0;
        }
        next.txn_last_update_ms = self.now.0;
        AddDecision::Write(next, began)
    }

    /// The verify path (`handleVerifyPartitionsInTransaction`, KIP-890 part 1): no write,
    /// pending transitions deliberately ignored.
    fn verify_partitions(&self, txn: &AddPartitionsTxn) -> AddPartitionsTxnResult {
        let all = |c| AddPartitionsTxnResult::all(txn, c);
        let Ok(id) = TransactionalId::new(txn.transactional_id.as_str()) else {
            return all(ErrorCode::INVALID_REQUEST);
        };
        if let Err(e) = self.owner_check(&id) {
            return all(e);
        }
        let Some(r) = self.record(&id) else {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        if r.producer_id != txn.producer_id {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if r.producer_epoch != txn.producer_epoch {
            return all(ErrorCode::PRODUCER_FENCED);
        }
        if r.state.is_prepare() {
            return all(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        AddPartitionsTxnResult {
            transactional_id: txn.transactional_id.clone(),
            partitions: txn
                .partitions
                .iter()
                .map(|p| {
                    let c = if r.partitions.contains(p) {
                        ErrorCode::NONE
                    } else {
                        ErrorCode::TRANSACTION_ABORTABLE
                    };
                    (p.clone(), c)
                })
                .collect(),
        }
    }

    // ----- EndTxn (reference §2.6) -----

    fn handle_end_txn(&mut self, to: RequestId, r: &EndTxnRequest) {
        let version = r.version;
        let reply = |e: ErrorCode| {
            Response::EndTxn(EndTxnResponse::error(
                e.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
            ))
        };
        let Ok(id) = TransactionalId::new(r.transactional_id.as_str()) else {
            return self.respond(to, reply(ErrorCode::INVALID_REQUEST));
        };
        if let Err(e) = self.owner_check(&id) {
            return self.respond(to, reply(e));
        }
        let Some(entry) = self.txns.get(&id).filter(|e| e.durable) else {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        };
        let pending = entry.pending.is_some();
        let cur = entry.record.clone();
        let result = if r.committed { Commit } else { Abort };
        let ok = |pid, epoch| {
            Response::EndTxn(EndTxnResponse {
                error: ErrorCode::NONE,
                producer_id: pid,
                producer_epoch: epoch,
            })
        };
        // A new decision (Ongoing, Empty) follows the request's TV: v5+ on a TV2 cluster. A
        // request that meets a decision already made (Prepare*, Complete*) is judged by the TV
        // that decision was made under, as Kafka [S] judges by the metadata's TV (S54, S55).
        let request_tv2 = version >= 5 && self.config.transaction_version >= 2;
        let tv2 = match cur.state {
            Ongoing | Empty => request_tv2,
            _ => cur.client_txn_version >= 2,
        };
        use TxnResult::{Abort, Commit};
        use TxnState::*;
        if !tv2 {
            if r.producer_id != cur.producer_id {
                return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
            }
            if r.producer_epoch != cur.producer_epoch {
                return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
            }
            if pending {
                return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
            }
            match (cur.state, result) {
                (Ongoing, _) => self.prepare_end(&id, &cur, result, false, to, version),
                (CompleteCommit, Commit) | (CompleteAbort, Abort) => {
                    self.respond(to, ok(cur.producer_id, cur.producer_epoch))
                }
                (PrepareCommit, Commit) | (PrepareAbort, Abort) => {
                    self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS))
                }
                _ => self.respond(to, reply(ErrorCode::INVALID_TXN_STATE)),
            }
            return;
        }
        // TV2 ([C25] table, [CTn] refinements, KAFKA-20785).
        let retry_overflow = cur.prev_producer_id == r.producer_id
            && r.producer_epoch == ProducerEpoch::MAX
            && cur.producer_epoch == ProducerEpoch(0);
        if r.producer_id != cur.producer_id && !retry_overflow {
            return self.respond(to, reply(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
        }
        if cur.state.is_prepare() {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let is_current = r.producer_id == cur.producer_id && r.producer_epoch == cur.producer_epoch;
        let retry_bump = r.producer_id == cur.producer_id
            && i32::from(cur.producer_epoch.0) == i32::from(r.producer_epoch.0) + 1;
        let valid = match cur.state {
            Ongoing | Empty => is_current,
            CompleteCommit | CompleteAbort => is_current || retry_bump || retry_overflow,
            other => panic!("{id}: state {other} in a record"),
        };
        if !valid {
            return self.respond(to, reply(ErrorCode::PRODUCER_FENCED));
        }
        if pending {
            return self.respond(to, reply(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        let retry = !is_current;
        match (cur.state, result, retry) {
            (Ongoing, _, _) => self.prepare_end(&id, &cur, result, true, to, version),
            (Empty, Abort, false)
            | (CompleteAbort, Abort, false)
            | (CompleteCommit, Abort, false) => {
                self.prepare_end(&id, &cur, Abort, true, to, version)
            }
            (CompleteAbort, Abort, true) | (CompleteCommit, Commit, true) => {
                self.respond(to, ok(cur.producer_id, cur.producer_epoch))
            }
            // KAFKA-20785: a commit at the retry epoch after a coordinator-side (timeout) abort,
            // recognisable by the fence's last epoch -1, is PRODUCER_FENCED.
            (CompleteAbort, Commit, true) if cur.last_producer_epoch == ProducerEpoch::NONE => {
                self.respond(to, reply(ErrorCode::PRODUCER_FENCED))
            }
            _ => self.respond(to, reply(ErrorCode::INVALID_TXN_STATE)),
        }
    }

    /// `prepareAbortOrCommit`: TV2 bumps the epoch (and at exhaustion picks the next producer
    /// id); TV0/1 keep it.
    fn prepare_end(
        &mut self,
        id: &TransactionalId,
        cur: &TxnRecord,
        result: TxnResult,
        tv2: bool,
        to: RequestId,
        version: i16,
    ) {
        let target = if result.is_commit() {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        assert_transition(id, cur.state, target);
        let mut next = cur.clone();
        next.state = target;
        next.txn_last_update_ms = self.now.0;
        if cur.state.is_idle() {
            next.txn_start_ms = self.now.0;
        }
        let (reply_pid, reply_epoch) = if tv2 {
            next.client_txn_version = 2;
            next.last_producer_epoch = cur.producer_epoch;
            next.producer_epoch = ProducerEpoch(cur.producer_epoch.0.saturating_add(1));
            if is_epoch_exhausted(cur.producer_epoch) {
                let Some(pid) = self.allocate_pid() else {
                    let e = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
                    return self.respond(to, Response::EndTxn(EndTxnResponse::error(e)));
                };
                next.next_producer_id = pid;
                (pid, ProducerEpoch(0))
            } else {
                (next.producer_id, next.producer_epoch)
            }
        } else {
            next.client_txn_version = 0;
            (next.producer_id, next.producer_epoch)
        };
        self.begin_one(
            id,
            next,
            Purpose::EndTxn {
                to,
                version,
                pid: reply_pid,
                epoch: reply_epoch,
            },
        );
    }

    // ----- reaper and expiry (reference §4) -----

    fn scan_ids(&self, cursor: &Option<TransactionalId>) -> (Vec<TransactionalId>, bool) {
        let lower = match cursor {
            Some(c) => Bound::Excluded(c.clone()),
            None => Bound::Unbounded,
        };
        let max = self.config.cleanup_scan_max;
        let mut ids: Vec<TransactionalId> = self
            .txns
            .range((lower, Bound::Unbounded))
            .take(max + 1)
            .map(|(id, _)| id.clone())
            .collect();
        let finished = ids.len() <= max;
        ids.truncate(max);
        (ids, finished)
    }

    fn reap_chunk(&mut self, now: Millis) {
        let (ids, finished) = self.scan_ids(&self.reap_cursor);
        for id in &ids {
            let e = &self.txns[id];
            let timed_out = e.durable
                && e.pending.is_none()
                && e.record.state == TxnState::Ongoing
                && e.record.txn_start_ms + i64::from(e.record.timeout_ms) < now.0;
            if timed_out {
                self.fence_and_abort(id, None, 0, true);
            }
        }
        if finished {
            self.reap_cursor = None;
            self.next_reap =
                Millis(now.0 + self.config.abort_timed_out_transaction_cleanup_interval_ms);
        } else {
            self.reap_cursor = ids.last().cloned();
            self.next_reap = now;
        }
    }

    fn expire_chunk(&mut self, now: Millis) {
        let (ids, mut finished) = self.scan_ids(&self.expire_cursor);
        let deadline = now.0 - self.config.transactional_id_expiration_ms;
        let mut batch = Vec::new();
        let mut last = None;
        for id in ids {
            let e = &self.txns[&id];
            let expired = e.durable
                && e.pending.is_none()
                && e.record.state.is_idle()
                && !self.markers.contains_key(&id)
                && e.record.txn_last_update_ms <= deadline;
            if expired {
                assert_transition(&id, e.record.state, TxnState::Dead);
                batch.push((id.clone(), LogOp::Tombstone));
            }
            last = Some(id);
            if batch.len() >= self.config.expiry_batch_max {
                finished = false;
                break;
            }
        }
        if !batch.is_empty() {
            self.begin(batch, Purpose::Expire);
        }
        if finished {
            self.expire_cursor = None;
            self.next_expire =
                Millis(now.0 + self.config.remove_expired_transaction_cleanup_interval_ms);
        } else {
            self.expire_cursor = last;
            self.next_expire = now;
        }
    }
}

enum AddDecision {
    Reply(ErrorCode),
    /// CONCURRENT_TRANSACTIONS: the id has a transition in flight or is completing.
    Busy,
    Write(TxnRecord, bool),
}

enum AddOutcome {
    Done(AddPartitionsTxnResult),
    Pending,
}
