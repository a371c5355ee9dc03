//! The exact-effect fixture of the handler and scenario tests: [`Fx`], a thin layer over the
//! engine's one simulated driver ([`EngineHarness`]) that holds every append, marker request
//! and producer-id request for the test, and turns effects into comparable values ([`Ev`]).

use std::collections::BTreeSet;

use txn_log::{
    CoordinatorEpoch, LogEntry, LogError, LogOp, LogPartition, MemTxnLog, ProducerEpoch,
    ProducerId, RefusedMarker, TopicPartition, TransactionalId, TxnRecord, TxnResult, TxnState,
};

use crate::testing::{Appends, EngineHarness, Markers, ProducerIds};
use crate::*;

/// A comparable summary of an [`Effect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ev {
    Append(IoId, Vec<(String, Option<TxnRecord>)>),
    Respond(RequestId, Response),
    Markers {
        id: String,
        pid: i64,
        epoch: i16,
        ce: i32,
        result: TxnResult,
        parts: Vec<TopicPartition>,
    },
    NeedPids,
    Unloaded,
}

pub(crate) fn summarize(e: Effect) -> Ev {
    match e {
        Effect::AppendLog { io, entries, .. } => Ev::Append(
            io,
            entries
                .into_iter()
                .map(|en| {
                    let r = match en.op {
                        LogOp::Upsert(r) => Some(r),
                        LogOp::Tombstone => None,
                    };
                    (en.id.to_string(), r)
                })
                .collect(),
        ),
        Effect::Respond { to, response } => Ev::Respond(to, response),
        Effect::WriteMarkers(r) => Ev::Markers {
            id: r.transactional_id.to_string(),
            pid: r.producer_id.0,
            epoch: r.producer_epoch.0,
            ce: r.coordinator_epoch.0,
            result: r.result,
            parts: r.partitions.into_iter().collect(),
        },
        Effect::NeedProducerIds { .. } => Ev::NeedPids,
        Effect::Unloaded { .. } => Ev::Unloaded,
    }
}

pub(crate) fn tid(s: &str) -> TransactionalId {
    TransactionalId::new(s).expect("non-empty")
}

pub(crate) fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

/// The partitions of Kafka's fixture transaction: {topic1-0}.
pub(crate) fn t1() -> Vec<TopicPartition> {
    vec![tp("topic1", 0)]
}

/// The fixture partition topic1-0 answered `code`, as [`add_reply`] lists it.
pub(crate) fn t1_result(code: ErrorCode) -> Vec<(TopicPartition, ErrorCode)> {
    vec![(tp("topic1", 0), code)]
}

/// The marker request for Kafka's fixture transaction: id "known", producer 10 at `epoch`,
/// coordinator epoch `ce`, `result` on [`t1`].
pub(crate) fn known_markers(epoch: i16, ce: i32, result: TxnResult) -> Ev {
    Ev::Markers {
        id: "known".into(),
        pid: 10,
        epoch,
        ce,
        result,
        parts: t1(),
    }
}

/// A record in the shape of Kafka's test fixtures (prev/next/last -1, TV0).
pub(crate) fn rec(pid: i64, epoch: i16, state: TxnState, parts: &[TopicPartition]) -> TxnRecord {
    let ongoing = !parts.is_empty();
    TxnRecord {
        state,
        partitions: parts.iter().cloned().collect::<BTreeSet<_>>(),
        txn_start_ms: if ongoing || state != TxnState::Empty {
            0
        } else {
            -1
        },
        ..TxnRecord::initialized(ProducerId(pid), ProducerEpoch(epoch), 1, 0)
    }
}

/// One log partition; requests that meet a completing transaction are answered at once, as
/// Kafka answers them (parking has its own tests).
pub(crate) fn config() -> Config {
    Config {
        transaction_state_log_num_partitions: 1,
        park_max_ms: 0,
        ..Config::default()
    }
}

/// An [`EngineHarness`] on partition 0 of a [`MemTxnLog`] that executes nothing on the test's
/// behalf: appends, marker requests and producer-id requests are held until the test acks,
/// fails or serves the ones it names, in any order. An acked append is written to the log, and
/// every load reads the log through the persistent logs' encoding, so that a field the
/// encoding drops is lost here as it would be on a real failover.
pub(crate) struct Fx {
    h: EngineHarness,
    /// Effects of the initial load (re-driven markers).
    pub(crate) loaded: Vec<Ev>,
}

impl Fx {
    /// An engine at coordinator epoch 0 on partition 0 of 1, pids from 0 (as Kafka's mocked
    /// generator), loaded with `records`.
    pub(crate) fn new(records: Vec<(&str, TxnRecord)>) -> Self {
        Self::with_config(config(), records)
    }

    /// An engine as [`Fx::new`] makes, loaded with `record` alone under Kafka's fixture id
    /// "known".
    pub(crate) fn known(record: TxnRecord) -> Self {
        Self::new(vec![("known", record)])
    }

    pub(crate) fn with_config(config: Config, records: Vec<(&str, TxnRecord)>) -> Self {
        let log = MemTxnLog::new();
        let (block, _) = log
            .allocate_block_sync(1000, ProducerId(0))
            .expect("a block");
        assert_eq!(block.first, ProducerId(0), "pids from 0");
        let alloc = ProducerIdAllocator::with_block(block).expect("valid");
        let epoch = CoordinatorEpoch(0);
        log.claim_sync(LogPartition(0), epoch).expect("claim");
        if !records.is_empty() {
            let entries = records
                .into_iter()
                .map(|(id, r)| LogEntry {
                    id: tid(id),
                    op: LogOp::Upsert(r),
                })
                .collect();
            log.append_sync(LogPartition(0), epoch, entries)
                .expect("the log takes the records");
        }
        let mut fx = Self::unloaded_on(log, config, alloc);
        fx.loaded = fx.load_again(0);
        fx
    }

    /// An engine on partition 0 of 1 over an empty log, not loaded, with the producer ids of
    /// `alloc` only.
    pub(crate) fn unloaded(alloc: ProducerIdAllocator) -> Self {
        Self::unloaded_on(MemTxnLog::new(), config(), alloc)
    }

    fn unloaded_on(log: MemTxnLog, config: Config, alloc: ProducerIdAllocator) -> Self {
        let h = EngineHarness::new(log, LogPartition(0), config, alloc)
            .with_appends(Appends::Held)
            .with_markers(Markers::Held)
            .with_producer_ids(ProducerIds::Held);
        Self {
            h,
            loaded: Vec::new(),
        }
    }

    /// The effects the engine has produced since the last input, none executed: appends,
    /// marker requests and producer-id requests stay held for the test.
    pub(crate) fn effects(&mut self) -> Vec<Ev> {
        let mut evs = Vec::new();
        while let Some(effect) = self.h.step() {
            if let Effect::Respond { to, .. } = &effect {
                // The answer is in `evs`; the harness need not keep it.
                self.h.take_reply(*to);
            }
            evs.push(summarize(effect));
        }
        evs
    }

    /// [`effects`](Self::effects) that hold no append: what a request answered without a
    /// write leaves.
    pub(crate) fn effects_without_write(&mut self) -> Vec<Ev> {
        let evs = self.effects();
        assert!(appended(&evs).is_empty(), "nothing written: {evs:#?}");
        evs
    }

    pub(crate) fn send(&mut self, req: Request) -> RequestId {
        self.h.request(req)
    }

    pub(crate) fn init(
        &mut self,
        id: Option<&str>,
        timeout: i32,
        expected: Option<(i64, i16)>,
    ) -> RequestId {
        self.init_v(5, id, timeout, expected)
    }

    /// Sends an InitProducerId as [`Fx::init`] does, acks the append it makes and returns
    /// the reply (error, pid, epoch).
    pub(crate) fn init_acked(
        &mut self,
        id: &str,
        timeout: i32,
        expected: Option<(i64, i16)>,
    ) -> (ErrorCode, i64, i16) {
        let to = self.init(Some(id), timeout, expected);
        let evs = self.effects();
        init_reply(&self.ack(&evs), to)
    }

    pub(crate) fn init_v(
        &mut self,
        version: i16,
        id: Option<&str>,
        timeout: i32,
        expected: Option<(i64, i16)>,
    ) -> RequestId {
        self.send(init_request(version, id, timeout, expected))
    }

    /// InitProducerId v6 with `Enable2Pc` (KIP-939), and `KeepPreparedTxn` if `keep`.
    pub(crate) fn init_2pc(&mut self, id: &str, keep: bool) -> RequestId {
        self.send(Request::InitProducerId(InitProducerIdRequest {
            version: 6,
            transactional_id: Some(id.to_owned()),
            transaction_timeout_ms: 60_000,
            producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch::NONE,
            enable_2pc: true,
            keep_prepared_txn: keep,
        }))
    }

    pub(crate) fn add(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[TopicPartition],
    ) -> RequestId {
        self.add_partitions(3, false, id, (pid, epoch), parts)
    }

    /// AddPartitionsToTxn v5 with `VerifyOnly` (KIP-890's verification).
    pub(crate) fn verify(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[TopicPartition],
    ) -> RequestId {
        self.add_partitions(5, true, id, (pid, epoch), parts)
    }

    fn add_partitions(
        &mut self,
        version: i16,
        verify_only: bool,
        id: &str,
        (pid, epoch): (i64, i16),
        parts: &[TopicPartition],
    ) -> RequestId {
        let mut request = AddPartitionsToTxnRequest::add(
            version,
            id,
            ProducerId(pid),
            ProducerEpoch(epoch),
            parts,
        );
        request.transactions[0].verify_only = verify_only;
        self.send(Request::AddPartitionsToTxn(request))
    }

    pub(crate) fn end(
        &mut self,
        version: i16,
        id: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
    ) -> RequestId {
        self.send(Request::EndTxn(EndTxnRequest {
            version,
            transactional_id: id.into(),
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            committed: commit,
        }))
    }

    /// Sends an EndTxn as [`Fx::end`] does, by producer `(pid, epoch)`, and returns the error
    /// code of the reply it gets at once (before anything is written).
    pub(crate) fn end_error(
        &mut self,
        version: i16,
        id: &str,
        (pid, epoch): (i64, i16),
        commit: bool,
    ) -> ErrorCode {
        let to = self.end(version, id, pid, epoch, commit);
        end_reply(&self.effects(), to).0
    }

    /// Acks every append in `evs` (writes it to the log), returning the effects that follow
    /// (one round).
    pub(crate) fn ack(&mut self, evs: &[Ev]) -> Vec<Ev> {
        for io in appends_of(evs) {
            // The log's answer reaches the engine: a stale append is fenced.
            let _ = self.h.ack_append_io(io).expect("a held append").1;
        }
        self.effects()
    }

    /// Fails every append in `evs` with `err`, returning the effects that follow.
    pub(crate) fn fail(&mut self, evs: &[Ev], err: LogError) -> Vec<Ev> {
        for io in appends_of(evs) {
            self.h
                .fail_append_io(io, err.clone())
                .expect("a held append");
        }
        self.effects()
    }

    /// Reports markers done for every WriteMarkers in `evs`.
    pub(crate) fn markers_done(&mut self, evs: &[Ev]) -> Vec<Ev> {
        self.markers_finished(evs, MarkerOutcome::Completed)
    }

    /// Reports `outcome` for every WriteMarkers in `evs`, held or not (a request completed
    /// already, or one of the engine before a reload, makes a repeated or late completion).
    pub(crate) fn markers_finished(&mut self, evs: &[Ev], outcome: MarkerOutcome) -> Vec<Ev> {
        self.report_markers(evs, outcome, &[])
    }

    /// Reports every WriteMarkers in `evs` as [`MarkerOutcome::Refused`] at `refused` (the
    /// other partitions delivered).
    pub(crate) fn markers_refused(&mut self, evs: &[Ev], refused: &[RefusedMarker]) -> Vec<Ev> {
        self.report_markers(evs, MarkerOutcome::Refused, refused)
    }

    fn report_markers(
        &mut self,
        evs: &[Ev],
        outcome: MarkerOutcome,
        refused: &[RefusedMarker],
    ) -> Vec<Ev> {
        for e in evs {
            if let Ev::Markers {
                id,
                pid,
                epoch,
                ce,
                result,
                ..
            } = e
            {
                self.h.complete_marker_request(MarkerCompletion {
                    transactional_id: tid(id),
                    producer_id: ProducerId(*pid),
                    producer_epoch: ProducerEpoch(*epoch),
                    coordinator_epoch: CoordinatorEpoch(*ce),
                    log_partition: LogPartition(0),
                    result: *result,
                    outcome,
                    dropped_partitions: Vec::new(),
                    refused_partitions: refused.to_vec(),
                });
            }
        }
        self.effects()
    }

    /// Acks appends and completes markers until nothing is left; returns every effect seen.
    /// Appends of `evs` the test acked already are passed over.
    pub(crate) fn settle(&mut self, mut evs: Vec<Ev>) -> Vec<Ev> {
        let mut all = evs.clone();
        while evs
            .iter()
            .any(|e| matches!(e, Ev::Append(..) | Ev::Markers { .. }))
        {
            for io in appends_of(&evs) {
                // `None`: acked already (`evs` may hold what a test acked itself).
                let _ = self.h.ack_append_io(io).map(|(_, written)| written);
            }
            let mut next = self.effects();
            next.extend(self.markers_done(&evs));
            all.extend(next.iter().cloned());
            evs = next;
        }
        all
    }

    /// Moves the clock to `now` and returns what the engine does then.
    pub(crate) fn tick(&mut self, now: i64) -> Vec<Ev> {
        self.h.advance(now - self.now());
        self.effects()
    }

    /// Failover: a new engine (same allocator) loads the log's records at `ce`, through the
    /// log's encoding ([`EngineHarness::load`]); what was held for the old engine is dropped.
    pub(crate) fn reload(&mut self, ce: i32) -> Vec<Ev> {
        self.h.load(CoordinatorEpoch(ce)).expect("reload");
        self.effects()
    }

    /// The same engine loads the partition again at `ce` ([`EngineHarness::load_again`]);
    /// what is held stays held.
    pub(crate) fn load_again(&mut self, ce: i32) -> Vec<Ev> {
        self.h.load_again(CoordinatorEpoch(ce)).expect("load");
        self.effects()
    }

    /// The same engine claims the partition at `ce` and, before it reads, a newer owner claims
    /// it at `newer` ([`EngineHarness::load_again_overtaken`]).
    pub(crate) fn load_again_overtaken(&mut self, ce: i32, newer: i32) -> Vec<Ev> {
        self.h
            .load_again_overtaken(CoordinatorEpoch(ce), CoordinatorEpoch(newer))
            .expect("load");
        self.effects()
    }

    /// The partition starts moving here ([`Engine::handle_begin_load`]).
    pub(crate) fn begin_load(&mut self) {
        self.h.begin_load();
    }

    /// The partition leaves ([`Engine::handle_unload`]).
    pub(crate) fn unload(&mut self) {
        self.h.unload();
    }

    pub(crate) fn record(&self, id: &str) -> Option<TxnRecord> {
        self.eng().record(&tid(id))
    }

    /// The engine, for its queries.
    pub(crate) fn eng(&self) -> &Engine {
        self.h.engine()
    }

    /// The engine's producer-id allocator.
    pub(crate) fn alloc(&self) -> &ProducerIdAllocator {
        self.h.allocator()
    }

    /// The virtual clock.
    pub(crate) fn now(&self) -> i64 {
        self.h.now().0
    }

    /// Sets the clock for the next inputs (no timeout is handled).
    pub(crate) fn set_now(&mut self, now: i64) {
        self.h.set_now(Millis(now));
    }
}

fn appends_of(evs: &[Ev]) -> impl Iterator<Item = IoId> + '_ {
    evs.iter().filter_map(|e| match e {
        Ev::Append(io, _) => Some(*io),
        _ => None,
    })
}

/// InitProducerId `version` of `id` (none: an idempotent producer) with `timeout`, from the
/// `expected` producer id and epoch (none: -1, -1).
pub(crate) fn init_request(
    version: i16,
    id: Option<&str>,
    timeout: i32,
    expected: Option<(i64, i16)>,
) -> Request {
    let (pid, epoch) = expected.unwrap_or((-1, -1));
    Request::InitProducerId(InitProducerIdRequest {
        version,
        transactional_id: id.map(str::to_owned),
        transaction_timeout_ms: timeout,
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(epoch),
        enable_2pc: false,
        keep_prepared_txn: false,
    })
}

/// The answer to `to` among `evs`.
fn reply(evs: &[Ev], to: RequestId) -> Option<&Response> {
    evs.iter().find_map(|e| match e {
        Ev::Respond(t, r) if *t == to => Some(r),
        _ => None,
    })
}

/// The InitProducerId answer to `to` among `evs`.
fn init_response(evs: &[Ev], to: RequestId) -> &InitProducerIdResponse {
    match reply(evs, to) {
        Some(Response::InitProducerId(r)) => r,
        _ => panic!("no InitProducerId reply for {to:?} in {evs:#?}"),
    }
}

pub(crate) fn init_reply(evs: &[Ev], to: RequestId) -> (ErrorCode, i64, i16) {
    let r = init_response(evs, to);
    (r.error, r.producer_id.0, r.producer_epoch.0)
}

/// The kept transaction's pair of an InitProducerId reply (`OngoingTxnProducerId/Epoch`).
pub(crate) fn init_ongoing(evs: &[Ev], to: RequestId) -> (i64, i16) {
    let r = init_response(evs, to);
    (r.ongoing_txn_producer_id.0, r.ongoing_txn_producer_epoch.0)
}

pub(crate) fn end_reply(evs: &[Ev], to: RequestId) -> (ErrorCode, i64, i16) {
    match reply(evs, to) {
        Some(Response::EndTxn(r)) => (r.error, r.producer_id.0, r.producer_epoch.0),
        _ => panic!("no EndTxn reply for {to:?} in {evs:#?}"),
    }
}

pub(crate) fn add_reply(evs: &[Ev], to: RequestId) -> Vec<(TopicPartition, ErrorCode)> {
    match reply(evs, to) {
        Some(Response::AddPartitionsToTxn(r)) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.clone())
            .collect(),
        _ => panic!("no AddPartitions reply for {to:?} in {evs:#?}"),
    }
}

/// Asserts that Kafka's fixture transaction ("known", pid 10) committed at epoch 32766 and
/// rotated: CompleteCommit under pid 0, epoch 0, with 10 as the previous producer id.
pub(crate) fn assert_committed_after_rotation(fx: &Fx) {
    let r = fx.record("known").expect("present");
    assert_eq!(
        (
            r.state,
            r.producer_id.0,
            r.producer_epoch.0,
            r.prev_producer_id.0
        ),
        (TxnState::CompleteCommit, 0, 0, 10)
    );
}

pub(crate) fn appended(evs: &[Ev]) -> Vec<(String, Option<TxnRecord>)> {
    evs.iter()
        .filter_map(|e| match e {
            Ev::Append(_, v) => Some(v.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

pub(crate) fn io_error() -> LogError {
    LogError::Io(std::sync::Arc::new(std::io::Error::other("disk says no")))
}
