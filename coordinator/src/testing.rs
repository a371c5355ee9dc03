//! The simulated driver of one [`Engine`] for tests, examples, fuzz harnesses and benchmarks
//! (feature `testing`): [`EngineHarness`]. No stability promise.

use std::collections::VecDeque;

use txn_log::{
    CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogPartition, MemTxnLog, ProducerId,
    TxnMarkerRequest, codec,
};

use crate::{
    Config, Effect, Engine, IoId, MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator,
    Request, RequestId, Response, UnloadReason,
};

/// What the harness does with an [`Effect::AppendLog`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Appends {
    /// Written to the log at once (the log must be in `Durability::Immediate` mode) and reported
    /// done, or failed with the log's error (a stale epoch is fenced).
    #[default]
    Immediate,
    /// Held until the test calls [`EngineHarness::ack_append`] (written to the log then, at
    /// the epoch the engine asked for; the log must be in `Durability::Immediate` mode) or
    /// [`EngineHarness::fail_append`], oldest first, or names one by its [`IoId`]
    /// ([`EngineHarness::ack_append_io`], [`EngineHarness::fail_append_io`]) in any order.
    Held,
    /// Reported done at once without writing the log: the engine alone, for benchmarks and
    /// fuzzing of the state machine.
    Unlogged,
}

/// What the harness does with an [`Effect::WriteMarkers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Markers {
    /// Kept in [`EngineHarness::markers`] until the test completes them
    /// ([`EngineHarness::complete_marker`], [`EngineHarness::complete_markers`]).
    #[default]
    Held,
    /// Reported [`MarkerOutcome::Completed`] at once, as when every participant acknowledged.
    AckAtOnce,
}

/// What the harness does with an [`Effect::NeedProducerIds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProducerIds {
    /// A block of the asked size is allocated from the log at once and added to the engine's
    /// allocator (or the allocator is told the refill failed).
    #[default]
    FromLog,
    /// The request is held until the test serves it ([`EngineHarness::serve_producer_ids`]):
    /// meanwhile the engine runs on what its allocator has left.
    Held,
}

/// The most effects one [`EngineHarness::drive`] executes before it calls the engine livelocked.
const DRIVE_LIMIT: usize = 100_000;

/// One [`Engine`] on one partition of a [`MemTxnLog`], driven as the shell's driver does, but
/// synchronously and on a virtual clock: the one effect executor of the engine's tests.
///
/// Inputs (`request`, `ack_append`, `ack_append_io`, `fail_append`, `fail_append_io`,
/// `complete_marker`, `complete_marker_request`, `serve_producer_ids`, `advance`, `begin_load`,
/// `unload`, `load`, `load_again`) only feed the engine; [`step`](Self::step) executes one
/// effect and returns it, so that a test can check each as it happens, and
/// [`drive`](Self::drive) executes effects until none is left ([`call`](Self::call) sends a
/// request, drives and returns its answer). Executing means: appends go to the log as
/// [`Appends`] says, responses are collected ([`take_reply`](Self::take_reply)), marker
/// requests are held or acknowledged as [`Markers`] says, producer-id blocks are allocated from
/// the log or held as [`ProducerIds`] says, unloads are recorded. A test that wants every
/// effect for itself holds all three and acks, fails, completes and serves what it names (the
/// engine's exact-effect fixture does). The log handle is shared (clone it to start a
/// second coordinator on the same log, to crash it, to make writes durable, or to inject
/// faults); [`crash`](Self::crash) then [`load`](Self::load) restarts the coordinator from
/// the log's durable image.
///
/// Every load reads the partition as the persistent logs give it back: each record and the
/// epoch are encoded with `txn_log::codec` (the encoding of the sled and etcd logs) and decoded
/// again ([`through_codec`]), so that a field the encoding drops is lost as on a real failover.
#[derive(Debug)]
pub struct EngineHarness {
    engine: Engine,
    log: MemTxnLog,
    allocator: ProducerIdAllocator,
    epoch: CoordinatorEpoch,
    now: Millis,
    next_request: u64,
    appends: Appends,
    markers_mode: Markers,
    producer_ids: ProducerIds,
    held_appends: VecDeque<HeldAppend>,
    markers: Vec<TxnMarkerRequest>,
    producer_id_requests: Vec<u32>,
    replies: Vec<(RequestId, Response)>,
    unloads: Vec<UnloadReason>,
    appended: u64,
}

impl EngineHarness {
    /// An engine of `partition` over `log`, not loaded yet ([`load`](Self::load) it), at time 0,
    /// with appends written at once, markers held and producer ids from the log.
    pub fn new(
        log: MemTxnLog,
        partition: LogPartition,
        config: Config,
        allocator: ProducerIdAllocator,
    ) -> Self {
        Self {
            engine: Engine::new(partition, config, allocator.clone()),
            log,
            allocator,
            epoch: CoordinatorEpoch(0),
            now: Millis(0),
            next_request: 1,
            appends: Appends::default(),
            markers_mode: Markers::default(),
            producer_ids: ProducerIds::default(),
            held_appends: VecDeque::new(),
            markers: Vec::new(),
            producer_id_requests: Vec::new(),
            replies: Vec::new(),
            unloads: Vec::new(),
            appended: 0,
        }
    }

    /// Sets what happens to appends.
    pub fn with_appends(mut self, appends: Appends) -> Self {
        self.appends = appends;
        self
    }

    /// Sets what happens to marker requests.
    pub fn with_markers(mut self, markers: Markers) -> Self {
        self.markers_mode = markers;
        self
    }

    /// Sets what happens to producer-id block requests.
    pub fn with_producer_ids(mut self, producer_ids: ProducerIds) -> Self {
        self.producer_ids = producer_ids;
        self
    }

    /// Sets the virtual clock.
    pub fn with_now(mut self, now: Millis) -> Self {
        self.now = now;
        self
    }

    /// Sets the virtual clock without letting the engine act (the next input carries the new
    /// time). It may go back, as a wall clock can.
    pub fn set_now(&mut self, now: Millis) {
        self.now = now;
    }

    /// A (re)started coordinator: a fresh engine (same partition, config and allocator) claims
    /// the partition at `epoch`, reads it from the log and loads it. Work in flight of the
    /// previous engine (held appends and markers, unread replies) is dropped. Does not drive:
    /// the re-driven effects of the load are the next [`step`](Self::step)s.
    pub fn load(&mut self, epoch: CoordinatorEpoch) -> Result<(), LogError> {
        self.forget_in_flight();
        let partition = self.engine.partition();
        self.engine = Engine::new(
            partition,
            self.engine.config().clone(),
            self.allocator.clone(),
        );
        self.read_and_load(epoch, None)
    }

    /// The same engine loads the partition again at `epoch` (claims it, reads it from the log),
    /// as the shell's driver, which keeps one engine per partition, does when a partition it
    /// unloaded ([`unload`](Self::unload)) or began loading ([`begin_load`](Self::begin_load))
    /// comes back, or comes back at a higher epoch while loaded. Work in flight stays held: its
    /// completions reach the engine late.
    pub fn load_again(&mut self, epoch: CoordinatorEpoch) -> Result<(), LogError> {
        self.read_and_load(epoch, None)
    }

    /// As [`load_again`](Self::load_again), but a newer owner claims the partition at
    /// `overtaken_by` between this engine's claim at `epoch` and its read: the read shows the
    /// newer epoch, as when a load loses the race with the next coordinator.
    pub fn load_again_overtaken(
        &mut self,
        epoch: CoordinatorEpoch,
        overtaken_by: CoordinatorEpoch,
    ) -> Result<(), LogError> {
        self.read_and_load(epoch, Some(overtaken_by))
    }

    fn read_and_load(
        &mut self,
        epoch: CoordinatorEpoch,
        overtaken_by: Option<CoordinatorEpoch>,
    ) -> Result<(), LogError> {
        let partition = self.engine.partition();
        self.log.claim_sync(partition, epoch)?;
        if let Some(newer) = overtaken_by {
            self.log.claim_sync(partition, newer)?;
        }
        let loaded = through_codec(partition, &self.log.load_sync(partition)?)?;
        self.epoch = epoch;
        self.engine.handle_load(self.now, epoch, loaded);
        Ok(())
    }

    /// The partition starts moving to this coordinator ([`Engine::handle_begin_load`]): until a
    /// load, requests are answered `COORDINATOR_LOAD_IN_PROGRESS`.
    pub fn begin_load(&mut self) {
        self.engine.handle_begin_load();
    }

    /// The partition leaves this coordinator ([`Engine::handle_unload`]). Work in flight stays
    /// held: its completions reach the engine late.
    pub fn unload(&mut self) {
        self.engine.handle_unload();
    }

    /// The process dies with the log: [`MemTxnLog::crash`] (writes not durable are lost) and
    /// everything in flight is dropped. [`load`](Self::load) starts the next engine.
    pub fn crash(&mut self) {
        self.log.crash();
        self.forget_in_flight();
    }

    fn forget_in_flight(&mut self) {
        self.held_appends.clear();
        self.markers.clear();
        self.producer_id_requests.clear();
        self.replies.clear();
    }

    /// Sends `request` at the current time and returns its id (answers are collected by
    /// [`drive`](Self::drive)).
    pub fn request(&mut self, request: Request) -> RequestId {
        let to = RequestId(self.next_request);
        self.next_request += 1;
        self.engine.handle_request(self.now, to, request);
        to
    }

    /// Sends `request`, drives, and returns its answer.
    ///
    /// # Panics
    /// If the request is not answered once nothing is left to do (with held appends or
    /// markers, answers can wait for the test).
    pub fn call(&mut self, request: Request) -> Response {
        let to = self.request(request);
        self.drive();
        self.take_reply(to)
            .unwrap_or_else(|| panic!("request {to:?} not answered"))
    }

    /// Executes the next effect and returns it, or `None` when the engine has nothing to do.
    pub fn step(&mut self) -> Option<Effect> {
        let effect = self.engine.poll_effect()?;
        self.execute(effect.clone());
        Some(effect)
    }

    /// Executes effects until none is left; returns how many ran.
    ///
    /// # Panics
    /// After 100 000 effects (a livelock of the engine).
    pub fn drive(&mut self) -> usize {
        for n in 0..DRIVE_LIMIT {
            let Some(effect) = self.engine.poll_effect() else {
                return n;
            };
            self.execute(effect);
        }
        panic!("the engine produced more than {DRIVE_LIMIT} effects without settling");
    }

    fn execute(&mut self, effect: Effect) {
        match effect {
            Effect::AppendLog {
                io,
                partition,
                coordinator_epoch,
                entries,
            } => {
                assert_eq!(
                    (partition, coordinator_epoch),
                    (self.engine.partition(), self.epoch),
                    "an append of this engine's partition at its epoch"
                );
                self.appended += 1;
                match self.appends {
                    // A failure reached the engine as `handle_append_failed`.
                    Appends::Immediate => drop(self.write(io, coordinator_epoch, entries)),
                    Appends::Held => self.held_appends.push_back(HeldAppend {
                        io,
                        epoch: coordinator_epoch,
                        entries,
                    }),
                    Appends::Unlogged => self.engine.handle_append_done(io),
                }
            }
            Effect::Respond { to, response } => self.replies.push((to, response)),
            Effect::WriteMarkers(request) => {
                assert_eq!(
                    request.coordinator_epoch, self.epoch,
                    "markers at the engine's epoch"
                );
                match self.markers_mode {
                    Markers::Held => self.markers.push(request),
                    Markers::AckAtOnce => self.engine.handle_markers_done(
                        self.now,
                        MarkerCompletion::of(&request, MarkerOutcome::Completed),
                    ),
                }
            }
            Effect::NeedProducerIds { block_size } => match self.producer_ids {
                ProducerIds::FromLog => self.allocate_producer_ids(block_size),
                ProducerIds::Held => self.producer_id_requests.push(block_size),
            },
            Effect::Unloaded { reason, .. } => self.unloads.push(reason),
        }
    }

    fn allocate_producer_ids(&mut self, block_size: u32) {
        let floor = ProducerId(self.engine.config().producer_id_start);
        match self.log.allocate_block_sync(block_size, floor) {
            Ok((block, _)) => self.allocator.add_block(block).expect("a fresh block"),
            Err(_) => self.allocator.refill_failed(),
        }
    }

    /// Serves the held producer-id block requests ([`ProducerIds::Held`]) from the log, oldest
    /// first; returns how many there were.
    pub fn serve_producer_ids(&mut self) -> usize {
        let requests = std::mem::take(&mut self.producer_id_requests);
        for &block_size in &requests {
            self.allocate_producer_ids(block_size);
        }
        requests.len()
    }

    /// The held producer-id block requests' sizes, oldest first.
    pub fn producer_id_requests(&self) -> &[u32] {
        &self.producer_id_requests
    }

    /// Writes one batch to the log at `epoch` and reports the outcome to the engine.
    fn write(
        &mut self,
        io: IoId,
        epoch: CoordinatorEpoch,
        entries: Vec<LogEntry>,
    ) -> Result<(), LogError> {
        let written = self
            .log
            .append_sync(self.engine.partition(), epoch, entries)
            .and_then(|ticket| self.log.is_durable(ticket));
        match written {
            Ok(true) => {
                self.engine.handle_append_done(io);
                Ok(())
            }
            Ok(false) => panic!("Appends::Immediate and Held need a log in Durability::Immediate"),
            Err(err) => {
                self.engine.handle_append_failed(io, err.clone());
                Err(err)
            }
        }
    }

    /// Writes the oldest held append to the log and reports it done (or failed with the log's
    /// error). Returns its entries and the log's answer, `None` if no append is held.
    pub fn ack_append(&mut self) -> Option<(Vec<LogEntry>, Result<(), LogError>)> {
        let held = self.held_appends.pop_front()?;
        Some(self.ack_held(held))
    }

    /// Writes the held append `io` to the log and reports it done (or failed with the log's
    /// error), whatever its place among the held ones. Returns its entries and the log's
    /// answer, `None` if `io` is not held.
    pub fn ack_append_io(&mut self, io: IoId) -> Option<(Vec<LogEntry>, Result<(), LogError>)> {
        let held = self.take_held(io)?;
        Some(self.ack_held(held))
    }

    fn ack_held(&mut self, held: HeldAppend) -> (Vec<LogEntry>, Result<(), LogError>) {
        let written = self.write(held.io, held.epoch, held.entries.clone());
        (held.entries, written)
    }

    /// Fails the oldest held append with `err` without writing it; returns its entries.
    pub fn fail_append(&mut self, err: LogError) -> Option<Vec<LogEntry>> {
        let held = self.held_appends.pop_front()?;
        self.engine.handle_append_failed(held.io, err);
        Some(held.entries)
    }

    /// Fails the held append `io` with `err` without writing it, whatever its place among the
    /// held ones; returns its entries, `None` if `io` is not held.
    pub fn fail_append_io(&mut self, io: IoId, err: LogError) -> Option<Vec<LogEntry>> {
        let held = self.take_held(io)?;
        self.engine.handle_append_failed(io, err);
        Some(held.entries)
    }

    fn take_held(&mut self, io: IoId) -> Option<HeldAppend> {
        let i = self.held_appends.iter().position(|held| held.io == io)?;
        self.held_appends.remove(i)
    }

    /// The held appends, oldest first.
    pub fn held_appends(&self) -> impl Iterator<Item = &[LogEntry]> {
        self.held_appends.iter().map(|held| held.entries.as_slice())
    }

    /// The held marker requests, in the order they came.
    pub fn markers(&self) -> &[TxnMarkerRequest] {
        &self.markers
    }

    /// Reports the held marker request at `index` ended with `outcome`.
    ///
    /// # Panics
    /// If there is no such request.
    pub fn complete_marker(&mut self, index: usize, outcome: MarkerOutcome) {
        let request = self.markers.remove(index);
        self.engine
            .handle_markers_done(self.now, MarkerCompletion::of(&request, outcome));
    }

    /// Reports the marker request `completion` names ended as it says, whatever its place among
    /// the held ones. The request is named by its transactional id, producer id and epoch,
    /// coordinator epoch and result; a held one of that name is no longer held. Without one
    /// (completed already, or asked for by the engine before a [`load`](Self::load)) the
    /// completion reaches the engine as a repeated or late completion would.
    pub fn complete_marker_request(&mut self, completion: MarkerCompletion) {
        let named = |r: &TxnMarkerRequest| {
            (
                &r.transactional_id,
                r.producer_id,
                r.producer_epoch,
                r.coordinator_epoch,
                r.result,
            ) == (
                &completion.transactional_id,
                completion.producer_id,
                completion.producer_epoch,
                completion.coordinator_epoch,
                completion.result,
            )
        };
        if let Some(i) = self.markers.iter().position(named) {
            self.markers.remove(i);
        }
        self.engine.handle_markers_done(self.now, completion);
    }

    /// Reports every held marker request completed, driving after each.
    pub fn complete_markers(&mut self) {
        while !self.markers.is_empty() {
            self.complete_marker(0, MarkerOutcome::Completed);
            self.drive();
        }
    }

    /// The engine's producer-id allocator (shared with it).
    pub fn allocator(&self) -> &ProducerIdAllocator {
        &self.allocator
    }

    /// Moves the clock `ms` forward and lets the engine do what is due then
    /// ([`Engine::handle_timeout`]).
    pub fn advance(&mut self, ms: i64) {
        self.now = Millis(self.now.0 + ms);
        self.engine.handle_timeout(self.now);
    }

    /// The answer to `to`, once (`None` if not answered yet).
    pub fn take_reply(&mut self, to: RequestId) -> Option<Response> {
        let i = self.replies.iter().position(|(t, _)| *t == to)?;
        Some(self.replies.remove(i).1)
    }

    /// Why the engine unloaded, each time it did.
    pub fn unloads(&self) -> &[UnloadReason] {
        &self.unloads
    }

    /// How many appends the engine asked for.
    pub fn appended(&self) -> u64 {
        self.appended
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, for inputs the harness has no method for.
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The log (a shared handle).
    pub fn log(&self) -> &MemTxnLog {
        &self.log
    }

    /// The coordinator epoch of the last [`load`](Self::load).
    pub fn epoch(&self) -> CoordinatorEpoch {
        self.epoch
    }

    /// The virtual clock.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Panics unless the engine's records equal the log's durable records (what a reload reads).
    pub fn assert_matches_log(&self) {
        let durable = self.log.durable_snapshot(self.engine.partition());
        let mem: Vec<_> = self.engine.records().map(|(k, v)| (k.clone(), v)).collect();
        assert_eq!(
            mem, durable.records,
            "engine state equals what a reload reads"
        );
    }
}

/// An append the engine asked for, held for the test ([`Appends::Held`]).
#[derive(Debug)]
struct HeldAppend {
    io: IoId,
    epoch: CoordinatorEpoch,
    entries: Vec<LogEntry>,
}

/// `loaded` as a persistent log gives it back: every record and the epoch encoded as the logs
/// store them (`txn_log::codec`, which the sled and etcd logs use) and decoded again as their
/// `load` does, so that a field the encoding drops is lost.
///
/// # Errors
/// What the codec answers for a record it cannot encode or decode.
pub fn through_codec(
    partition: LogPartition,
    loaded: &LoadedPartition,
) -> Result<LoadedPartition, LogError> {
    let epoch = loaded
        .coordinator_epoch
        .map(|epoch| codec::encode_epoch(&codec::epoch_key(partition), epoch))
        .transpose()?;
    let stored = loaded.records.iter().map(|(id, record)| {
        let key = codec::record_key(partition, id);
        let value = codec::encode_record(&key, record)?;
        Ok((key, value))
    });
    codec::decode_partition(partition, epoch.as_deref(), stored)
}

#[cfg(test)]
mod tests {
    use txn_log::{ErrorCode, TransactionalId};

    use super::*;
    use crate::InitProducerIdRequest;

    fn harness(appends: Appends) -> EngineHarness {
        let log = MemTxnLog::new();
        let (block, _) = log.allocate_block_sync(100, ProducerId(0)).expect("block");
        let allocator = ProducerIdAllocator::with_block(block).expect("block");
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let mut h =
            EngineHarness::new(log, LogPartition(0), config, allocator).with_appends(appends);
        h.load(CoordinatorEpoch(3)).expect("load");
        assert_eq!(h.drive(), 0, "an empty partition re-drives nothing");
        h
    }

    fn init(id: &str) -> Request {
        Request::InitProducerId(InitProducerIdRequest::new_producer(4, id, 60_000))
    }

    fn init_error(response: Option<Response>) -> ErrorCode {
        match response {
            Some(Response::InitProducerId(r)) => r.error,
            other => panic!("not an InitProducerId answer: {other:?}"),
        }
    }

    #[test]
    fn held_appends_answer_once_acked_into_the_log_or_failed() {
        let mut h = harness(Appends::Held);
        let to = h.request(init("app"));
        h.drive();
        assert_eq!(
            h.take_reply(to),
            None,
            "no answer before the record is durable"
        );
        assert_eq!(h.held_appends().count(), 1);
        let (entries, written) = h.ack_append().expect("one held append");
        written.expect("the log takes it");
        h.drive();
        assert_eq!(init_error(h.take_reply(to)), ErrorCode::NONE);
        assert_eq!(entries.len(), 1);
        h.assert_matches_log();

        let to = h.request(init("other"));
        h.drive();
        let io_error = LogError::from(std::io::Error::other("disk says no"));
        assert!(h.fail_append(io_error).is_some());
        h.drive();
        assert_ne!(init_error(h.take_reply(to)), ErrorCode::NONE);
        h.assert_matches_log();
        assert_eq!(h.appended(), 2);
    }

    #[test]
    fn held_appends_are_acked_and_failed_by_id_in_any_order() {
        let mut h = harness(Appends::Held);
        let first = h.request(init("first"));
        let second = h.request(init("second"));
        let third = h.request(init("third"));
        let ios: Vec<IoId> = std::iter::from_fn(|| h.step())
            .filter_map(|effect| match effect {
                Effect::AppendLog { io, .. } => Some(io),
                _ => None,
            })
            .collect();
        assert_eq!(ios.len(), 3);
        assert_eq!(h.held_appends().count(), 3);

        let (entries, written) = h.ack_append_io(ios[2]).expect("held");
        written.expect("the log takes it");
        assert_eq!(entries[0].id.as_str(), "third");
        h.drive();
        assert_eq!(init_error(h.take_reply(third)), ErrorCode::NONE);
        assert_eq!(h.take_reply(first), None, "the older appends still wait");

        let io_error = LogError::from(std::io::Error::other("disk says no"));
        let failed = h.fail_append_io(ios[0], io_error.clone()).expect("held");
        assert_eq!(failed[0].id.as_str(), "first");
        h.drive();
        assert_ne!(init_error(h.take_reply(first)), ErrorCode::NONE);
        assert!(h.ack_append_io(ios[0]).is_none(), "no longer held");
        assert!(
            h.fail_append_io(ios[2], io_error).is_none(),
            "no longer held"
        );

        assert_eq!(h.held_appends().count(), 1);
        h.ack_append_io(ios[1]).expect("held").1.expect("written");
        h.drive();
        assert_eq!(init_error(h.take_reply(second)), ErrorCode::NONE);
        h.assert_matches_log();
    }

    /// Runs a transaction of `id` on `t`-0 up to its commit decision (appends written at once).
    fn commit_decision(h: &mut EngineHarness, id: &str) {
        let Response::InitProducerId(init) = h.call(init(id)) else {
            panic!("not an InitProducerId answer");
        };
        let (producer_id, producer_epoch) = (init.producer_id, init.producer_epoch);
        h.call(Request::AddPartitionsToTxn(
            crate::AddPartitionsToTxnRequest::add(
                3,
                id,
                producer_id,
                producer_epoch,
                &[txn_log::TopicPartition::new("t", 0)],
            ),
        ));
        h.call(Request::EndTxn(crate::EndTxnRequest {
            version: 3,
            transactional_id: id.into(),
            producer_id,
            producer_epoch,
            committed: true,
        }));
    }

    fn state(h: &EngineHarness, id: &str) -> Option<txn_log::TxnState> {
        let id = TransactionalId::new(id).expect("non-empty");
        h.engine().record(&id).map(|r| r.state)
    }

    #[test]
    fn marker_requests_are_completed_by_name_in_any_order_and_repeats_are_late() {
        let mut h = harness(Appends::Immediate);
        commit_decision(&mut h, "first");
        commit_decision(&mut h, "second");
        assert_eq!(h.markers().len(), 2);
        let second = MarkerCompletion::of(&h.markers()[1], MarkerOutcome::Completed);
        h.complete_marker_request(second.clone());
        assert_eq!(h.drive(), 1, "the Complete append of the second");
        assert_eq!(
            (state(&h, "first"), state(&h, "second")),
            (
                Some(txn_log::TxnState::PrepareCommit),
                Some(txn_log::TxnState::CompleteCommit)
            )
        );
        assert_eq!(h.markers().len(), 1, "the first's request is still held");
        let appended = h.appended();
        h.complete_marker_request(second);
        assert_eq!(h.drive(), 0, "a repeated completion changes nothing");
        assert_eq!(h.appended(), appended);
        h.complete_markers();
        assert_eq!(state(&h, "first"), Some(txn_log::TxnState::CompleteCommit));
        h.assert_matches_log();
    }

    #[test]
    fn held_producer_id_requests_wait_for_the_test() {
        let log = MemTxnLog::new();
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let mut h = EngineHarness::new(log, LogPartition(0), config, ProducerIdAllocator::new())
            .with_producer_ids(ProducerIds::Held);
        h.load(CoordinatorEpoch(0)).expect("load");
        assert_eq!(
            init_error(Some(h.call(init("app")))),
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
            "no producer id before a block is served"
        );
        assert_eq!(h.producer_id_requests().len(), 1);
        assert_eq!(h.serve_producer_ids(), 1);
        assert!(h.producer_id_requests().is_empty());
        assert!(
            h.allocator().next_id().is_some(),
            "the block is the engine's"
        );
        assert_eq!(init_error(Some(h.call(init("app")))), ErrorCode::NONE);
    }

    #[test]
    fn load_again_keeps_the_engine_and_its_late_completions_are_fenced() {
        let mut h = harness(Appends::Held);
        let to = h.request(init("app"));
        h.drive();
        h.begin_load();
        h.drive();
        assert_ne!(init_error(h.take_reply(to)), ErrorCode::NONE);
        h.load_again(CoordinatorEpoch(4)).expect("load");
        h.drive();
        assert_eq!(h.epoch(), CoordinatorEpoch(4));
        let (_, written) = h.ack_append().expect("the old append is still held");
        assert!(
            matches!(written, Err(LogError::Fenced { .. })),
            "written at the epoch it was asked at: {written:?}"
        );
        assert_eq!(h.drive(), 0, "the late completion is ignored");
        h.assert_matches_log();
        let to = h.request(init("app"));
        h.drive();
        h.ack_append().expect("held").1.expect("written at epoch 4");
        h.drive();
        assert_eq!(init_error(h.take_reply(to)), ErrorCode::NONE);
        h.unload();
        h.drive();
        assert_eq!(h.unloads().len(), 1);
    }

    #[test]
    fn loads_read_the_log_through_its_encoding() {
        let app = TransactionalId::new("app").expect("non-empty");
        let mut h = harness(Appends::Immediate);
        assert_eq!(init_error(Some(h.call(init("app")))), ErrorCode::NONE);
        let durable = h.log().durable_snapshot(LogPartition(0));
        assert_eq!(
            through_codec(LogPartition(0), &durable).expect("decodes"),
            durable,
            "the codec keeps every field of the record"
        );
        let mut broken = durable.clone();
        broken.records[0].1.producer_epoch = txn_log::ProducerEpoch::NONE;
        assert!(
            through_codec(LogPartition(0), &broken).is_err(),
            "a record the logs cannot store does not load"
        );
        h.crash();
        h.load(CoordinatorEpoch(5)).expect("load");
        assert_eq!(h.engine().record(&app), Some(durable.records[0].1.clone()));
    }

    #[test]
    fn unlogged_appends_leave_the_log_alone_and_a_reload_reads_the_log() {
        let mut h = harness(Appends::Unlogged);
        assert_eq!(init_error(Some(h.call(init("app")))), ErrorCode::NONE);
        let app = TransactionalId::new("app").expect("non-empty");
        assert!(h.engine().record(&app).is_some());
        assert!(h.log().durable_snapshot(LogPartition(0)).records.is_empty());
        h.crash();
        h.load(CoordinatorEpoch(4)).expect("load");
        h.drive();
        assert_eq!(h.engine().record(&app), None, "the log never had it");
        assert_eq!(h.engine().coordinator_epoch(), Some(CoordinatorEpoch(4)));
    }
}
