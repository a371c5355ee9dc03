//! The simulated driver of one [`Engine`] for tests, examples, fuzz harnesses and benchmarks
//! (feature `testing`): [`EngineHarness`]. No stability promise.

use std::collections::VecDeque;

use txn_log::{CoordinatorEpoch, LogEntry, LogError, LogPartition, MemTxnLog, TxnMarkerRequest};

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
    /// Held in order until the test calls [`EngineHarness::ack_append`] (written to the log then,
    /// which must be in `Durability::Immediate` mode) or [`EngineHarness::fail_append`].
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

/// The most effects one [`EngineHarness::drive`] executes before it calls the engine livelocked.
const DRIVE_LIMIT: usize = 100_000;

/// One [`Engine`] on one partition of a [`MemTxnLog`], driven as the shell's driver does, but
/// synchronously and on a virtual clock: the one effect executor of the engine's tests.
///
/// Inputs (`request`, `ack_append`, `fail_append`, `complete_marker`, `advance`, `load`) only
/// feed the engine; [`step`](Self::step) executes one effect and returns it, so that a test can
/// check each as it happens, and [`drive`](Self::drive) executes effects until none is left
/// ([`call`](Self::call) sends a request, drives and returns its answer). Executing means:
/// appends go to the log as [`Appends`] says, responses are collected ([`take_reply`](Self::take_reply)),
/// marker requests are held or acknowledged as [`Markers`] says, producer-id blocks are
/// allocated from the log, unloads are recorded. The log handle is shared (clone it to start a
/// second coordinator on the same log, to crash it, to make writes durable, or to inject
/// faults); [`crash`](Self::crash) then [`load`](Self::load) restarts the coordinator from
/// the log's durable image.
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
    held_appends: VecDeque<(IoId, Vec<LogEntry>)>,
    markers: Vec<TxnMarkerRequest>,
    replies: Vec<(RequestId, Response)>,
    unloads: Vec<UnloadReason>,
    appended: u64,
}

impl EngineHarness {
    /// An engine of `partition` over `log`, not loaded yet ([`load`](Self::load) it), at time 0,
    /// with appends written at once and markers held.
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
            held_appends: VecDeque::new(),
            markers: Vec::new(),
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

    /// Sets the virtual clock.
    pub fn with_now(mut self, now: Millis) -> Self {
        self.now = now;
        self
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
        self.log.claim_sync(partition, epoch)?;
        let loaded = self.log.load_sync(partition)?;
        self.epoch = epoch;
        self.engine.handle_load(self.now, epoch, loaded);
        Ok(())
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
                    Appends::Immediate => drop(self.write(io, entries)),
                    Appends::Held => self.held_appends.push_back((io, entries)),
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
            Effect::NeedProducerIds { block_size } => {
                match self.log.allocate_block_sync(block_size) {
                    Ok((block, _)) => self.allocator.add_block(block).expect("a fresh block"),
                    Err(_) => self.allocator.refill_failed(),
                }
            }
            Effect::Unloaded { reason, .. } => self.unloads.push(reason),
        }
    }

    /// Writes one batch to the log and reports the outcome to the engine.
    fn write(&mut self, io: IoId, entries: Vec<LogEntry>) -> Result<(), LogError> {
        let written = self
            .log
            .append_sync(self.engine.partition(), self.epoch, entries)
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
        let (io, entries) = self.held_appends.pop_front()?;
        let written = self.write(io, entries.clone());
        Some((entries, written))
    }

    /// Fails the oldest held append with `err` without writing it; returns its entries.
    pub fn fail_append(&mut self, err: LogError) -> Option<Vec<LogEntry>> {
        let (io, entries) = self.held_appends.pop_front()?;
        self.engine.handle_append_failed(io, err);
        Some(entries)
    }

    /// The held appends, oldest first.
    pub fn held_appends(&self) -> impl Iterator<Item = &[LogEntry]> {
        self.held_appends
            .iter()
            .map(|(_, entries)| entries.as_slice())
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

    /// Reports every held marker request completed, driving after each.
    pub fn complete_markers(&mut self) {
        while !self.markers.is_empty() {
            self.complete_marker(0, MarkerOutcome::Completed);
            self.drive();
        }
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

#[cfg(test)]
mod tests {
    use txn_log::{ErrorCode, TransactionalId};

    use super::*;
    use crate::InitProducerIdRequest;

    fn harness(appends: Appends) -> EngineHarness {
        let log = MemTxnLog::new();
        let (block, _) = log.allocate_block_sync(100).expect("block");
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
