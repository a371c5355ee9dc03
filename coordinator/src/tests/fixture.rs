//! A tiny fixture around one [`Engine`]: builds records, sends requests, and turns effects
//! into comparable values.

use std::collections::BTreeSet;

use txn_log::{
    CoordinatorEpoch, LoadedPartition, LogError, LogOp, LogPartition, ProducerEpoch, ProducerId,
    ProducerIdBlock, TopicPartition, TransactionalId, TxnRecord, TxnResult, TxnState, codec,
};

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

/// A record in the shape of Kafka's test fixtures (prev/next/last -1, TV0).
pub(crate) fn rec(pid: i64, epoch: i16, state: TxnState, parts: &[TopicPartition]) -> TxnRecord {
    let ongoing = !parts.is_empty();
    TxnRecord {
        producer_id: ProducerId(pid),
        prev_producer_id: ProducerId::NONE,
        next_producer_id: ProducerId::NONE,
        producer_epoch: ProducerEpoch(epoch),
        last_producer_epoch: ProducerEpoch::NONE,
        session_producer_epoch: ProducerEpoch::NONE,
        session_producer_id: ProducerId::NONE,
        two_phase_commit: false,
        timeout_ms: 1,
        state,
        partitions: parts.iter().cloned().collect::<BTreeSet<_>>(),
        txn_start_ms: if ongoing || state != TxnState::Empty {
            0
        } else {
            -1
        },
        txn_last_update_ms: 0,
        client_txn_version: txn_log::TxnVersion::V0,
    }
}

/// What a log partition holding `records` at coordinator epoch `ce` loads: every record and the
/// epoch are encoded as the logs store them (`txn_log::codec`, which the sled and etcd logs use)
/// and decoded again as their `load` does.
pub(crate) fn through_log(
    partition: LogPartition,
    ce: CoordinatorEpoch,
    records: &[(TransactionalId, TxnRecord)],
) -> LoadedPartition {
    let epoch = codec::encode_epoch(&codec::epoch_key(partition), ce).expect("epoch encodes");
    let stored = records.iter().map(|(id, r)| {
        let key = codec::record_key(partition, id);
        let value = codec::encode_record(&key, r).expect("record encodes");
        Ok((key, value))
    });
    codec::decode_partition(partition, Some(&epoch), stored).expect("log decodes")
}

pub(crate) struct Fx {
    pub(crate) eng: Engine,
    pub(crate) alloc: ProducerIdAllocator,
    pub(crate) now: i64,
    /// Effects of the initial load (re-driven markers).
    pub(crate) loaded: Vec<Ev>,
    next_req: u64,
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

impl Fx {
    /// An engine at coordinator epoch 0 on partition 0 of 1, pids from 0 (as Kafka's mocked
    /// generator), loaded with `records`.
    pub(crate) fn new(records: Vec<(&str, TxnRecord)>) -> Self {
        Self::with_config(config(), records)
    }

    pub(crate) fn with_config(config: Config, records: Vec<(&str, TxnRecord)>) -> Self {
        let alloc = ProducerIdAllocator::with_block(ProducerIdBlock {
            first: ProducerId(0),
            len: 1000,
        })
        .expect("valid");
        let mut eng = Engine::new(LogPartition(0), config, alloc.clone());
        let records: Vec<_> = records.into_iter().map(|(id, r)| (tid(id), r)).collect();
        let loaded = through_log(LogPartition(0), CoordinatorEpoch(0), &records);
        eng.handle_load(Millis(0), CoordinatorEpoch(0), loaded);
        let mut fx = Self {
            eng,
            alloc,
            now: 0,
            loaded: Vec::new(),
            next_req: 1,
        };
        fx.loaded = fx.effects();
        fx
    }

    pub(crate) fn effects(&mut self) -> Vec<Ev> {
        self.eng
            .drain_effects()
            .into_iter()
            .map(summarize)
            .collect()
    }

    pub(crate) fn send(&mut self, req: Request) -> RequestId {
        let to = RequestId(self.next_req);
        self.next_req += 1;
        self.eng.handle_request(Millis(self.now), to, req);
        to
    }

    pub(crate) fn init(
        &mut self,
        id: Option<&str>,
        timeout: i32,
        expected: Option<(i64, i16)>,
    ) -> RequestId {
        self.init_v(5, id, timeout, expected)
    }

    pub(crate) fn init_v(
        &mut self,
        version: i16,
        id: Option<&str>,
        timeout: i32,
        expected: Option<(i64, i16)>,
    ) -> RequestId {
        let (pid, epoch) = expected.unwrap_or((-1, -1));
        self.send(Request::InitProducerId(InitProducerIdRequest {
            version,
            transactional_id: id.map(str::to_owned),
            transaction_timeout_ms: timeout,
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            enable_2pc: false,
            keep_prepared_txn: false,
        }))
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
        self.send(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            version: 3,
            transactions: vec![AddPartitionsTxn {
                transactional_id: id.into(),
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(epoch),
                verify_only: false,
                partitions: parts.to_vec(),
            }],
        }))
    }

    pub(crate) fn verify(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[TopicPartition],
    ) -> RequestId {
        self.send(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            version: 5,
            transactions: vec![AddPartitionsTxn {
                transactional_id: id.into(),
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(epoch),
                verify_only: true,
                partitions: parts.to_vec(),
            }],
        }))
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

    /// Acks every append in `evs`, returning the effects that follow (one round).
    pub(crate) fn ack(&mut self, evs: &[Ev]) -> Vec<Ev> {
        for e in evs {
            if let Ev::Append(io, _) = e {
                self.eng.handle_append_done(*io);
            }
        }
        self.effects()
    }

    pub(crate) fn fail(&mut self, evs: &[Ev], err: LogError) -> Vec<Ev> {
        for e in evs {
            if let Ev::Append(io, _) = e {
                self.eng.handle_append_failed(*io, err.clone());
            }
        }
        self.effects()
    }

    /// Reports markers done for every WriteMarkers in `evs`.
    pub(crate) fn markers_done(&mut self, evs: &[Ev]) -> Vec<Ev> {
        self.markers_finished(evs, MarkerOutcome::Completed)
    }

    /// Reports `outcome` for every WriteMarkers in `evs`.
    pub(crate) fn markers_finished(&mut self, evs: &[Ev], outcome: MarkerOutcome) -> Vec<Ev> {
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
                self.eng.handle_markers_done(
                    Millis(self.now),
                    MarkerCompletion {
                        transactional_id: tid(id),
                        producer_id: ProducerId(*pid),
                        producer_epoch: ProducerEpoch(*epoch),
                        coordinator_epoch: CoordinatorEpoch(*ce),
                        log_partition: LogPartition(0),
                        result: *result,
                        outcome,
                        dropped_partitions: Vec::new(),
                    },
                );
            }
        }
        self.effects()
    }

    /// Acks appends and completes markers until nothing is left; returns every effect seen.
    pub(crate) fn settle(&mut self, mut evs: Vec<Ev>) -> Vec<Ev> {
        let mut all = evs.clone();
        while evs
            .iter()
            .any(|e| matches!(e, Ev::Append(..) | Ev::Markers { .. }))
        {
            let mut next = self.ack(&evs);
            next.extend(self.markers_done(&evs));
            all.extend(next.iter().cloned());
            evs = next;
        }
        all
    }

    pub(crate) fn tick(&mut self, now: i64) -> Vec<Ev> {
        self.now = now;
        self.eng.handle_timeout(Millis(now));
        self.effects()
    }

    /// Failover: a new engine (same allocator) loads the durable records at `ce`, as they come
    /// back from the log's encoding ([`through_log`]), so a field the encoding drops is lost
    /// here as it would be on a real failover.
    pub(crate) fn reload(&mut self, ce: i32) -> Vec<Ev> {
        let records: Vec<_> = self
            .eng
            .records()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let partition = self.eng.partition();
        let mut eng = Engine::new(partition, self.eng.config().clone(), self.alloc.clone());
        eng.handle_load(
            Millis(self.now),
            CoordinatorEpoch(ce),
            through_log(partition, CoordinatorEpoch(ce), &records),
        );
        self.eng = eng;
        self.effects()
    }

    pub(crate) fn record(&self, id: &str) -> Option<TxnRecord> {
        self.eng.record(&tid(id))
    }
}

pub(crate) fn init_reply(evs: &[Ev], to: RequestId) -> (ErrorCode, i64, i16) {
    for e in evs {
        if let Ev::Respond(t, Response::InitProducerId(r)) = e
            && *t == to
        {
            return (r.error, r.producer_id.0, r.producer_epoch.0);
        }
    }
    panic!("no InitProducerId reply for {to:?} in {evs:#?}")
}

/// The kept transaction's pair of an InitProducerId reply (`OngoingTxnProducerId/Epoch`).
pub(crate) fn init_ongoing(evs: &[Ev], to: RequestId) -> (i64, i16) {
    for e in evs {
        if let Ev::Respond(t, Response::InitProducerId(r)) = e
            && *t == to
        {
            return (r.ongoing_txn_producer_id.0, r.ongoing_txn_producer_epoch.0);
        }
    }
    panic!("no InitProducerId reply for {to:?} in {evs:#?}")
}

pub(crate) fn end_reply(evs: &[Ev], to: RequestId) -> (ErrorCode, i64, i16) {
    for e in evs {
        if let Ev::Respond(t, Response::EndTxn(r)) = e
            && *t == to
        {
            return (r.error, r.producer_id.0, r.producer_epoch.0);
        }
    }
    panic!("no EndTxn reply for {to:?} in {evs:#?}")
}

pub(crate) fn add_reply(evs: &[Ev], to: RequestId) -> Vec<(TopicPartition, ErrorCode)> {
    for e in evs {
        if let Ev::Respond(t, Response::AddPartitionsToTxn(r)) = e
            && *t == to
        {
            return r
                .results
                .iter()
                .flat_map(|t| t.partitions.clone())
                .collect();
        }
    }
    panic!("no AddPartitions reply for {to:?} in {evs:#?}")
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
