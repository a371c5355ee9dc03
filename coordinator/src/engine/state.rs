//! The in-memory state of one transactional id: one variant per state of Kafka's
//! `TransactionState` that a durable record can hold, each carrying only what that state needs
//! (no `-1` sentinels). [`Txn::to_record`] projects it to the persisted [`TxnRecord`] when an
//! append is built, [`Txn::from_record`] builds it back when a record is durable (the same
//! function on append-done and on load).
//!
//! Kafka's two other states are transitions only: PrepareEpochFence is never persisted (a fence
//! writes PrepareAbort directly, trunk behaviour) and Dead is a tombstone, which removes the id.

use std::collections::BTreeSet;

use txn_log::{
    ProducerEpoch, ProducerId, TopicPartition, TxnRecord, TxnResult, TxnState, TxnVersion,
};

/// The producer an id belongs to, in every state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Producer {
    /// The current producer id.
    pub(super) id: ProducerId,
    /// The current epoch.
    pub(super) epoch: ProducerEpoch,
    /// The epoch before the last bump, for retry detection.
    pub(super) last_epoch: Option<ProducerEpoch>,
    /// The producer id before the last rotation.
    pub(super) prev_id: Option<ProducerId>,
}

/// The session that kept an open two-phase-commit transaction (KIP-939 `KeepPreparedTxn`): the
/// only producer that may end it. After a decision by a session with another producer id it is
/// the pair the id moves to on completion.
pub(super) type Session = (ProducerId, ProducerEpoch);

/// An open or decided transaction: its partitions, since when, and who kept it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Open {
    partitions: BTreeSet<TopicPartition>,
    start_ms: i64,
    session: Option<Session>,
}

/// What a state holds beyond what every state holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Initialized, no transaction.
    Empty,
    /// A transaction with at least one partition.
    Ongoing(Open),
    /// PrepareCommit / PrepareAbort: decided, markers under way (partitions may be empty: the
    /// TV2 abort of an empty transaction).
    Prepare {
        result: TxnResult,
        open: Open,
        /// The producer id the completion moves to (TV2 epoch overflow, KAFKA-20090).
        next_producer_id: Option<ProducerId>,
    },
    /// CompleteCommit / CompleteAbort: the last transaction is over.
    Complete { result: TxnResult, start_ms: i64 },
}

/// One transactional id's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Txn {
    producer: Producer,
    timeout_ms: i32,
    two_phase_commit: bool,
    client_txn_version: TxnVersion,
    last_update_ms: i64,
    phase: Phase,
}

fn some_pid(p: ProducerId) -> Option<ProducerId> {
    p.is_some().then_some(p)
}

fn some_epoch(e: ProducerEpoch) -> Option<ProducerEpoch> {
    e.is_some().then_some(e)
}

fn result_of(state: TxnState) -> TxnResult {
    match state {
        TxnState::PrepareCommit | TxnState::CompleteCommit => TxnResult::Commit,
        _ => TxnResult::Abort,
    }
}

impl Txn {
    /// The state a durable record holds. `record` passed [`TxnRecord::check_persistable`].
    pub(super) fn from_record(r: &TxnRecord) -> Self {
        let open = || Open {
            partitions: r.partitions.clone(),
            start_ms: r.txn_start_ms,
            session: r.session(),
        };
        let phase = match r.state {
            TxnState::Empty => Phase::Empty,
            TxnState::Ongoing => Phase::Ongoing(open()),
            TxnState::PrepareCommit | TxnState::PrepareAbort => Phase::Prepare {
                result: result_of(r.state),
                open: open(),
                next_producer_id: some_pid(r.next_producer_id),
            },
            TxnState::CompleteCommit | TxnState::CompleteAbort => Phase::Complete {
                result: result_of(r.state),
                start_ms: r.txn_start_ms,
            },
            TxnState::Dead | TxnState::PrepareEpochFence => {
                panic!("pending-only state {} in a durable record", r.state)
            }
        };
        Self {
            producer: Producer {
                id: r.producer_id,
                epoch: r.producer_epoch,
                last_epoch: some_epoch(r.last_producer_epoch),
                prev_id: some_pid(r.prev_producer_id),
            },
            timeout_ms: r.timeout_ms,
            two_phase_commit: r.two_phase_commit,
            client_txn_version: r.client_txn_version,
            last_update_ms: r.txn_last_update_ms,
            phase,
        }
    }

    /// The record that persists this state.
    pub(super) fn to_record(&self) -> TxnRecord {
        let (partitions, start_ms, session, next) = match &self.phase {
            Phase::Empty => (BTreeSet::new(), -1, None, None),
            Phase::Ongoing(o) => (o.partitions.clone(), o.start_ms, o.session, None),
            Phase::Prepare {
                open,
                next_producer_id,
                ..
            } => (
                open.partitions.clone(),
                open.start_ms,
                open.session,
                *next_producer_id,
            ),
            Phase::Complete { start_ms, .. } => (BTreeSet::new(), *start_ms, None, None),
        };
        let p = &self.producer;
        TxnRecord {
            producer_id: p.id,
            prev_producer_id: p.prev_id.unwrap_or(ProducerId::NONE),
            next_producer_id: next.unwrap_or(ProducerId::NONE),
            producer_epoch: p.epoch,
            last_producer_epoch: p.last_epoch.unwrap_or(ProducerEpoch::NONE),
            session_producer_id: session.map_or(ProducerId::NONE, |s| s.0),
            session_producer_epoch: session.map_or(ProducerEpoch::NONE, |s| s.1),
            timeout_ms: self.timeout_ms,
            state: self.state(),
            partitions,
            txn_start_ms: start_ms,
            txn_last_update_ms: self.last_update_ms,
            client_txn_version: self.client_txn_version,
            two_phase_commit: self.two_phase_commit,
        }
    }

    // ===== reads =====

    /// Kafka's name of this state.
    pub(super) fn state(&self) -> TxnState {
        match &self.phase {
            Phase::Empty => TxnState::Empty,
            Phase::Ongoing(_) => TxnState::Ongoing,
            Phase::Prepare {
                result: TxnResult::Commit,
                ..
            } => TxnState::PrepareCommit,
            Phase::Prepare { .. } => TxnState::PrepareAbort,
            Phase::Complete {
                result: TxnResult::Commit,
                ..
            } => TxnState::CompleteCommit,
            Phase::Complete { .. } => TxnState::CompleteAbort,
        }
    }

    /// The producer of the id.
    pub(super) fn producer(&self) -> &Producer {
        &self.producer
    }

    /// The decision of a PrepareCommit/PrepareAbort.
    pub(super) fn decision(&self) -> Option<TxnResult> {
        match &self.phase {
            Phase::Prepare { result, .. } => Some(*result),
            _ => None,
        }
    }

    /// The partitions of an Ongoing or Prepare* transaction (None when idle).
    pub(super) fn partitions(&self) -> Option<&BTreeSet<TopicPartition>> {
        self.open().map(|o| &o.partitions)
    }

    /// The kept session of an Ongoing or Prepare* two-phase-commit transaction (KIP-939).
    pub(super) fn session(&self) -> Option<Session> {
        self.open().and_then(|o| o.session)
    }

    /// The producer id a Prepare*'s completion moves to (TV2 epoch overflow).
    pub(super) fn next_producer_id(&self) -> Option<ProducerId> {
        match &self.phase {
            Phase::Prepare {
                next_producer_id, ..
            } => *next_producer_id,
            _ => None,
        }
    }

    /// When the current (or last) transaction started; None for Empty.
    pub(super) fn start_ms(&self) -> Option<i64> {
        match &self.phase {
            Phase::Empty => None,
            Phase::Ongoing(o) | Phase::Prepare { open: o, .. } => Some(o.start_ms),
            Phase::Complete { start_ms, .. } => Some(*start_ms),
        }
    }

    /// The transaction timeout the id was initialized with (`Int.MaxValue` for 2PC).
    pub(super) fn timeout_ms(&self) -> i32 {
        self.timeout_ms
    }

    /// Whether the id was initialized with `Enable2Pc` (KIP-939).
    pub(super) fn two_phase_commit(&self) -> bool {
        self.two_phase_commit
    }

    /// The transaction version of the last transition.
    pub(super) fn client_txn_version(&self) -> TxnVersion {
        self.client_txn_version
    }

    /// When the id last changed.
    pub(super) fn last_update_ms(&self) -> i64 {
        self.last_update_ms
    }

    fn open(&self) -> Option<&Open> {
        match &self.phase {
            Phase::Ongoing(o) | Phase::Prepare { open: o, .. } => Some(o),
            Phase::Empty | Phase::Complete { .. } => None,
        }
    }

    // ===== transitions (the caller asserts Kafka's transition table) =====

    /// The Empty state a first InitProducerId creates: `pid` at epoch 0.
    pub(super) fn fresh(
        pid: ProducerId,
        timeout_ms: i32,
        two_phase_commit: bool,
        now: i64,
    ) -> Self {
        Self {
            producer: Producer {
                id: pid,
                epoch: ProducerEpoch(0),
                last_epoch: None,
                prev_id: None,
            },
            timeout_ms,
            two_phase_commit,
            client_txn_version: TxnVersion::V0,
            last_update_ms: now,
            phase: Phase::Empty,
        }
    }

    /// Empty again for a new producer session (InitProducerId from an idle state).
    pub(super) fn initialized(
        &self,
        producer: Producer,
        timeout_ms: i32,
        two_phase_commit: bool,
        now: i64,
    ) -> Self {
        Self {
            producer,
            timeout_ms,
            two_phase_commit,
            last_update_ms: now,
            phase: Phase::Empty,
            ..self.clone()
        }
    }

    /// Ongoing with `parts` added; a transaction begun from an idle state starts `now`.
    pub(super) fn with_partitions(&self, parts: &BTreeSet<TopicPartition>, now: i64) -> Self {
        let mut open = match &self.phase {
            Phase::Ongoing(o) => o.clone(),
            _ => Open {
                partitions: BTreeSet::new(),
                start_ms: now,
                session: None,
            },
        };
        open.partitions.extend(parts.iter().cloned());
        Self {
            last_update_ms: now,
            phase: Phase::Ongoing(open),
            ..self.clone()
        }
    }

    /// The Ongoing transaction kept for `session` (KIP-939 `KeepPreparedTxn`).
    pub(super) fn kept(&self, session: Session, now: i64) -> Self {
        let Phase::Ongoing(o) = &self.phase else {
            panic!("kept from {}", self.state());
        };
        Self {
            last_update_ms: now,
            phase: Phase::Ongoing(Open {
                session: Some(session),
                ..o.clone()
            }),
            ..self.clone()
        }
    }

    /// This state with the kept session's epoch taken over by the transaction's producer id
    /// (the session ends it with that id).
    pub(super) fn taken_over(&self, session: Session) -> Self {
        let Phase::Ongoing(o) = &self.phase else {
            panic!("taken over from {}", self.state());
        };
        Self {
            producer: Producer {
                epoch: session.1,
                last_epoch: Some(self.producer.epoch),
                ..self.producer
            },
            phase: Phase::Ongoing(Open {
                session: None,
                ..o.clone()
            }),
            ..self.clone()
        }
    }

    /// PrepareCommit/PrepareAbort of the current transaction (from an idle state: an empty
    /// transaction starting `now`).
    pub(super) fn prepared(
        &self,
        result: TxnResult,
        producer: Producer,
        client_txn_version: TxnVersion,
        next_producer_id: Option<ProducerId>,
        session: Option<Session>,
        now: i64,
    ) -> Self {
        let open = match &self.phase {
            Phase::Ongoing(o) => Open {
                session,
                ..o.clone()
            },
            _ => Open {
                partitions: BTreeSet::new(),
                start_ms: now,
                session,
            },
        };
        Self {
            producer,
            client_txn_version,
            last_update_ms: now,
            phase: Phase::Prepare {
                result,
                open,
                next_producer_id,
            },
            ..self.clone()
        }
    }

    /// Kafka's `prepareComplete`: CompleteCommit/CompleteAbort of a Prepare*. The last epoch
    /// stays what the Prepare* says: the last epoch a client used after its EndTxn, none after
    /// a coordinator-side abort (KAFKA-20090). A kept transaction decided by a session with
    /// another producer id moves to the session's id (under TV2 its last epoch is the one its
    /// EndTxn was sent with, for retries); a TV2 overflow moves to the next producer id.
    pub(super) fn completed(&self, now: i64) -> Self {
        let Phase::Prepare {
            result,
            open,
            next_producer_id,
        } = &self.phase
        else {
            panic!("complete from {}", self.state());
        };
        let mut producer = self.producer;
        if let Some((pid, epoch)) = open.session {
            producer = Producer {
                id: pid,
                epoch,
                last_epoch: self
                    .client_txn_version
                    .bumps_epoch_per_txn()
                    .then(|| ProducerEpoch(epoch.0 - 1)),
                prev_id: Some(self.producer.id),
            };
        } else if let Some(next) = next_producer_id {
            producer = Producer {
                id: *next,
                epoch: ProducerEpoch(0),
                prev_id: Some(self.producer.id),
                ..producer
            };
        }
        Self {
            producer,
            last_update_ms: now,
            phase: Phase::Complete {
                result: *result,
                start_ms: open.start_ms,
            },
            ..self.clone()
        }
    }
}
