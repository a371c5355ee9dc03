//! Kafka's transaction states, with their persisted ids and names.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The state of a transactional id, exactly as Kafka's `TransactionState` (ids are persisted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum TxnState {
    /// No transaction in progress; a producer id may be assigned.
    Empty = 0,
    /// A transaction has started: partitions or offsets were added.
    Ongoing = 1,
    /// A commit is decided; markers are being written.
    PrepareCommit = 2,
    /// An abort is decided; markers are being written.
    PrepareAbort = 3,
    /// Commit markers were written to every participant.
    CompleteCommit = 4,
    /// Abort markers were written to every participant.
    CompleteAbort = 5,
    /// The id expired and is being removed.
    Dead = 6,
    /// The epoch is being bumped to fence a producer before an abort.
    PrepareEpochFence = 7,
}

impl TxnState {
    /// Every state, in id order.
    pub const ALL: [Self; 8] = [
        Self::Empty,
        Self::Ongoing,
        Self::PrepareCommit,
        Self::PrepareAbort,
        Self::CompleteCommit,
        Self::CompleteAbort,
        Self::Dead,
        Self::PrepareEpochFence,
    ];

    /// Kafka's persisted id of the state.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// The state with a persisted id, if known.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.get(usize::from(id)).copied()
    }

    /// Kafka's external name (as DescribeTransactions / ListTransactions report it).
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
            Self::Dead => "Dead",
            Self::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// Parses Kafka's external name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// States from which Kafka allows a transition into `self` (`TransactionState.validPreviousStates`).
    pub fn valid_previous_states(self) -> &'static [Self] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether Kafka allows the transition `self -> next`.
    pub fn can_transition_to(self, next: Self) -> bool {
        next.valid_previous_states().contains(&self)
    }

    /// Whether a decision (commit or abort) is in flight and markers are owed.
    pub fn is_prepare(self) -> bool {
        matches!(self, Self::PrepareCommit | Self::PrepareAbort)
    }

    /// Whether the transactional id is idle (no open transaction).
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            Self::Empty | Self::CompleteCommit | Self::CompleteAbort
        )
    }
}

impl fmt::Display for TxnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of a transaction, as carried by a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TxnResult {
    /// Abort (control record type 0).
    Abort,
    /// Commit (control record type 1).
    Commit,
}

impl TxnResult {
    /// Kafka's `TransactionResult` boolean (`true` = commit).
    pub fn is_commit(self) -> bool {
        matches!(self, Self::Commit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for (i, s) in TxnState::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(s.id()), i);
            assert_eq!(TxnState::from_id(s.id()), Some(s));
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        assert_eq!(TxnState::from_id(8), None);
    }

    #[test]
    fn prepare_commit_only_from_ongoing() {
        for s in TxnState::ALL {
            assert_eq!(
                s.can_transition_to(TxnState::PrepareCommit),
                s == TxnState::Ongoing
            );
        }
    }
}
