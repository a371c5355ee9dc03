//! The persisted transaction metadata of one transactional id, and the batches appended to the log.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{ProducerEpoch, ProducerId, TopicPartition, TransactionalId, TxnState, TxnVersion};

/// Everything Kafka's `TransactionLogValue` v1 persists, plus what Kafka forgets to persist
/// (`last_producer_epoch`: KAFKA-20357; prev/next ids: KAFKA-20310), so that replay after a
/// failover reproduces the in-memory state exactly, plus the two-phase-commit state of
/// [KIP-939](https://cwiki.apache.org/confluence/display/KAFKA/KIP-939%3A+Support+Participation+in+2PC):
/// the flag and, while a prepared transaction is kept, the new producer session's id and epoch
/// (the transaction's own are `producer_id` / `producer_epoch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    /// Current producer id.
    pub producer_id: ProducerId,
    /// Producer id of the last committed transaction before a rotation (`-1` if none).
    pub prev_producer_id: ProducerId,
    /// Producer id handed to the client for after the current transaction (TV2 overflow; `-1`).
    pub next_producer_id: ProducerId,
    /// Current producer epoch.
    pub producer_epoch: ProducerEpoch,
    /// Epoch before the last bump, for retry detection (`-1` if none).
    pub last_producer_epoch: ProducerEpoch,
    /// Producer id of the session that kept this prepared transaction (KIP-939
    /// `KeepPreparedTxn`; `-1` if none): the only producer that may end it.
    pub session_producer_id: ProducerId,
    /// Epoch of that session (`-1` if none; Kafka's `NextProducerEpoch`).
    pub session_producer_epoch: ProducerEpoch,
    /// Transaction timeout requested by the client.
    pub timeout_ms: i32,
    /// State of the transactional id.
    pub state: TxnState,
    /// Partitions in the current transaction (empty unless Ongoing / Prepare*).
    pub partitions: BTreeSet<TopicPartition>,
    /// When the current transaction started (ms since the Unix epoch; `-1` if not started).
    pub txn_start_ms: i64,
    /// When this record was last updated (ms since the Unix epoch).
    pub txn_last_update_ms: i64,
    /// Transaction version (0, 1 or 2) the client used for the last transition.
    pub client_txn_version: TxnVersion,
    /// The id was initialized with `Enable2Pc` (KIP-939): its transactions are never timed out
    /// by the coordinator, only ended by a producer.
    pub two_phase_commit: bool,
}

/// One change to a transactional id within an append batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogOp {
    /// Replace the id's record.
    Upsert(TxnRecord),
    /// Remove the id (it expired).
    Tombstone,
}

/// One entry of an append batch: an id and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// The transactional id this entry is about.
    pub id: TransactionalId,
    /// The change.
    pub op: LogOp,
}

impl TxnRecord {
    /// The record of an id that InitProducerId has just given `producer_id` at
    /// `producer_epoch`: Empty, no transaction started, no previous, next or kept producer,
    /// transaction version 0, no two-phase commit. Other records are this one with fields
    /// changed (`TxnRecord { state, ..TxnRecord::initialized(..) }`).
    pub fn initialized(
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        timeout_ms: i32,
        now_ms: i64,
    ) -> Self {
        Self {
            producer_id,
            prev_producer_id: ProducerId::NONE,
            next_producer_id: ProducerId::NONE,
            producer_epoch,
            last_producer_epoch: ProducerEpoch::NONE,
            session_producer_id: ProducerId::NONE,
            session_producer_epoch: ProducerEpoch::NONE,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            txn_start_ms: -1,
            txn_last_update_ms: now_ms,
            client_txn_version: TxnVersion::V0,
            two_phase_commit: false,
        }
    }

    /// Why this record cannot be a persisted transaction state, or `Ok` if it can: it has a
    /// producer id and epoch, a next producer id (rotation) is another id, its state is not a pending-only one (Dead, PrepareEpochFence), an
    /// idle state (Empty, Complete*) holds no partitions, and Ongoing has partitions and a start
    /// time. A kept session (both of its fields set, or neither) belongs to a two-phase-commit
    /// transaction that is Ongoing or Prepare*, and is a newer producer than the transaction's:
    /// the same id at a higher epoch, or another id. The engine asserts this for every record
    /// it writes; the codec refuses to load a record that breaks it
    /// ([`LogError::Corrupt`](crate::LogError::Corrupt)).
    pub fn check_persistable(&self) -> Result<(), String> {
        if !self.producer_id.is_some() {
            return Err("record without producer id".into());
        }
        if !self.producer_epoch.is_some() {
            return Err("record without producer epoch".into());
        }
        // A next id is freshly allocated for a rotation. (A previous id may equal the current
        // one: Kafka's TV2 overflow retry, the coordinator's test `s57_tv2_overflow_retry`.)
        if self.next_producer_id == self.producer_id {
            return Err("next producer id equal to the current one".into());
        }
        self.check_session()?;
        match self.state {
            TxnState::Dead | TxnState::PrepareEpochFence => Err(format!(
                "{} is a pending-only state and is never persisted",
                self.state
            )),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                if !self.partitions.is_empty() =>
            {
                Err(format!("idle record ({}) with partitions", self.state))
            }
            TxnState::Ongoing if self.partitions.is_empty() => {
                Err("Ongoing without partitions".into())
            }
            TxnState::Ongoing if self.txn_start_ms < 0 => Err("Ongoing without start time".into()),
            _ => Ok(()),
        }
    }

    /// The kept session, if any (see [`TxnRecord::check_persistable`]).
    pub fn session(&self) -> Option<(ProducerId, ProducerEpoch)> {
        self.session_producer_id
            .is_some()
            .then_some((self.session_producer_id, self.session_producer_epoch))
    }

    fn check_session(&self) -> Result<(), String> {
        match (
            self.session_producer_id.is_some(),
            self.session_producer_epoch.is_some(),
        ) {
            (false, false) => return Ok(()),
            (true, true) => {}
            _ => return Err("half a kept session".into()),
        }
        if !self.two_phase_commit {
            return Err("kept session without two-phase commit".into());
        }
        if !(self.state == TxnState::Ongoing || self.state.is_prepare()) {
            return Err(format!("kept session in {}", self.state));
        }
        if self.session_producer_id == self.producer_id
            && self.session_producer_epoch <= self.producer_epoch
        {
            return Err("kept session not newer than its transaction".into());
        }
        Ok(())
    }
}

impl LogEntry {
    /// An upsert entry.
    pub fn upsert(id: TransactionalId, record: TxnRecord) -> Self {
        Self {
            id,
            op: LogOp::Upsert(record),
        }
    }

    /// A tombstone entry.
    pub fn tombstone(id: TransactionalId) -> Self {
        Self {
            id,
            op: LogOp::Tombstone,
        }
    }
}

/// A contiguous range of producer ids reserved durably for one coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdBlock {
    /// First producer id of the block.
    pub first: ProducerId,
    /// Number of ids in the block.
    pub len: u32,
}

impl ProducerIdBlock {
    /// One past the last id of the block.
    pub fn end(&self) -> i64 {
        self.first.0 + i64::from(self.len)
    }

    /// Whether `pid` lies inside the block.
    pub fn contains(&self, pid: ProducerId) -> bool {
        pid.0 >= self.first.0 && pid.0 < self.end()
    }
}

/// What `TxnLog::load` returns for one log partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadedPartition {
    /// The coordinator epoch stored by the last successful `claim`, if any.
    pub coordinator_epoch: Option<crate::CoordinatorEpoch>,
    /// The latest record of every live transactional id, ordered by id.
    pub records: Vec<(TransactionalId, TxnRecord)>,
}

#[cfg(all(test, not(txn_loom)))]
mod tests {
    use super::*;

    fn ongoing() -> TxnRecord {
        TxnRecord {
            last_producer_epoch: ProducerEpoch(1),
            state: TxnState::Ongoing,
            partitions: [TopicPartition::new("t", 0)].into_iter().collect(),
            txn_start_ms: 10,
            client_txn_version: TxnVersion::V2,
            ..TxnRecord::initialized(ProducerId(5), ProducerEpoch(2), 60_000, 10)
        }
    }

    fn kept() -> TxnRecord {
        TxnRecord {
            two_phase_commit: true,
            session_producer_id: ProducerId(5),
            session_producer_epoch: ProducerEpoch(3),
            ..ongoing()
        }
    }

    #[test]
    fn persistable_states_and_what_breaks_them() {
        assert_eq!(ongoing().check_persistable(), Ok(()));
        assert_eq!(kept().check_persistable(), Ok(()));
        type Breaker = fn(&mut TxnRecord);
        let broken: [(&str, Breaker); 6] = [
            ("no producer id", |r| r.producer_id = ProducerId::NONE),
            ("no epoch", |r| r.producer_epoch = ProducerEpoch(-3)),
            ("next pid = pid", |r| r.next_producer_id = r.producer_id),
            ("pending-only", |r| r.state = TxnState::PrepareEpochFence),
            ("idle with partitions", |r| {
                r.state = TxnState::CompleteAbort
            }),
            ("ongoing without partitions", |r| r.partitions.clear()),
        ];
        for (what, break_it) in broken {
            let mut r = ongoing();
            break_it(&mut r);
            assert!(r.check_persistable().is_err(), "{what}");
        }
        let mut retry = ongoing();
        retry.prev_producer_id = retry.producer_id;
        assert_eq!(
            retry.check_persistable(),
            Ok(()),
            "the TV2 overflow retry: prev = current is allowed"
        );
        let mut idle = ongoing();
        idle.state = TxnState::CompleteCommit;
        idle.partitions.clear();
        assert_eq!(idle.check_persistable(), Ok(()));
    }

    #[test]
    fn a_kept_session_is_a_newer_producer_of_an_open_two_phase_transaction() {
        type Breaker = fn(&mut TxnRecord);
        let broken: [(&str, Breaker); 5] = [
            ("half a session", |r| {
                r.session_producer_epoch = ProducerEpoch::NONE
            }),
            ("not 2PC", |r| r.two_phase_commit = false),
            ("idle", |r| {
                r.state = TxnState::CompleteCommit;
                r.partitions.clear();
            }),
            ("same epoch", |r| {
                r.session_producer_epoch = r.producer_epoch
            }),
            ("older epoch", |r| {
                r.session_producer_epoch = ProducerEpoch(1)
            }),
        ];
        for (what, break_it) in broken {
            let mut r = kept();
            break_it(&mut r);
            assert!(r.check_persistable().is_err(), "{what}");
        }
        let mut other_id = kept();
        other_id.session_producer_id = ProducerId(9);
        other_id.session_producer_epoch = ProducerEpoch(0);
        assert_eq!(other_id.check_persistable(), Ok(()));
        other_id.state = TxnState::PrepareCommit;
        assert_eq!(other_id.check_persistable(), Ok(()));
        assert_eq!(other_id.session(), Some((ProducerId(9), ProducerEpoch(0))));
        assert_eq!(ongoing().session(), None);
    }
}
