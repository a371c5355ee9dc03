//! One error-code type at the broker's seam: the participant's and the marker path's typed
//! errors convert into [`ErrorCode`], the coordinator's (the same `int16` Kafka puts on the
//! wire; `markers::writer::codes` names the codes the marker writer reads).

use markers::apply::ApplyError;
use markers::participant::{MarkerError, ProduceError};

use crate::ErrorCode;

impl From<&MarkerError> for ErrorCode {
    fn from(e: &MarkerError) -> Self {
        Self(e.code())
    }
}

impl From<&ProduceError> for ErrorCode {
    fn from(e: &ProduceError) -> Self {
        Self(e.code())
    }
}

impl From<&ApplyError> for ErrorCode {
    fn from(e: &ApplyError) -> Self {
        Self(e.code())
    }
}

#[cfg(test)]
mod tests {
    use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId};

    use super::*;

    #[test]
    fn participant_errors_are_coordinator_error_codes() {
        let fenced = MarkerError::CoordinatorFenced {
            producer_id: ProducerId(1),
            marker_coordinator_epoch: CoordinatorEpoch(1),
            current_coordinator_epoch: CoordinatorEpoch(2),
        };
        assert_eq!(
            ErrorCode::from(&fenced),
            ErrorCode::TRANSACTION_COORDINATOR_FENCED
        );
        let zombie = ProduceError::InvalidProducerEpoch {
            producer_id: ProducerId(1),
            batch_epoch: ProducerEpoch(0),
            current_epoch: ProducerEpoch(1),
        };
        assert_eq!(ErrorCode::from(&zombie), ErrorCode::INVALID_PRODUCER_EPOCH);
        assert_eq!(
            ErrorCode::from(&ApplyError::NotLeader),
            ErrorCode::NOT_LEADER_OR_FOLLOWER
        );
        assert_eq!(
            ErrorCode::from(&ApplyError::Rejected(fenced)),
            ErrorCode::TRANSACTION_COORDINATOR_FENCED
        );
    }
}
