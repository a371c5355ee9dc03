//! The ownership hook of a broker whose own replication decides who leads the
//! `__transaction_state` partitions: [`Coordinator::became_leader`] and
//! [`Coordinator::lost_leadership`] (the rules are on `became_leader`, which rustdoc shows; this
//! module is private).

use std::collections::BTreeMap;

use txn_log::sync::Mutex;
use txn_log::{CoordinatorEpoch, LogError, LogPartition};

use super::Coordinator;
use super::driver::EpochChoice;

/// The coordinator epoch a new leadership claims ([`Coordinator::became_leader`]); an `i32`
/// converts into [`LeaderEpoch::Elected`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderEpoch {
    /// The leader epoch the broker's replication elected this node at: claimed exactly
    /// (Kafka's rule: the leader epoch is the coordinator epoch).
    Elected(i32),
    /// A log every node shares decides: one above its stored epoch, claimed atomically
    /// ([`txn_log::TxnLog::claim_next`]).
    NextInLog,
}

impl From<i32> for LeaderEpoch {
    fn from(leader_epoch: i32) -> Self {
        Self::Elected(leader_epoch)
    }
}

/// The highest leader epoch reported per partition.
#[derive(Debug, Default)]
pub(crate) struct Leadership {
    epochs: Mutex<BTreeMap<LogPartition, i32>>,
}

impl Coordinator {
    /// This broker became the leader of `__transaction_state-<partition>` at `epoch` (an
    /// `i32` leader epoch, or [`LeaderEpoch::NextInLog`] on a shared log): claims the partition
    /// in the log at that coordinator epoch, loads it and serves it. Resolves once serving,
    /// with the epoch.
    ///
    /// Kafka's rule (`TransactionCoordinator.onElection`/`onResignation`): the coordinator
    /// epoch of a log partition is the leader epoch of its `__transaction_state` partition. So
    /// the epoch the broker's replication gives the new leader is the one the coordinator
    /// claims in the log (`TxnLog::claim`, which fences every lower epoch) and stamps on every
    /// marker (which participants fence by). The hook keeps the notifications in order per
    /// partition:
    ///
    /// - `became_leader(p, e)` with `e` below the highest epoch seen for `p` is stale (a newer
    ///   election was already reported): refused with `LogError::Fenced`, nothing changes.
    /// - `became_leader(p, e)` again with the same `e` loads `p` again (claiming the same epoch
    ///   succeeds): how to take a partition back after a forced unload (see
    ///   [`Coordinator::subscribe_unloads`]) while still its leader.
    /// - [`Coordinator::lost_leadership`]`(p, Some(e))` unloads `p` unless a later election
    ///   (`> e`) was reported; `lost_leadership(p, None)` always unloads.
    ///
    /// A log shared by every node (etcd) is its own election: there the hook is called with
    /// [`LeaderEpoch::NextInLog`], which claims one above the stored epoch in one atomic step
    /// (`TxnLog::claim_next`: two nodes taking the partition at once never get the same
    /// epoch), and the epoch so claimed is recorded as the partition's highest. The daemon's
    /// etcd membership (`coordinator::server::membership`, feature `daemon`) takes and gives up
    /// its partitions through this hook only.
    pub async fn became_leader(
        &self,
        partition: LogPartition,
        epoch: impl Into<LeaderEpoch>,
    ) -> Result<CoordinatorEpoch, LogError> {
        let leader_epoch = match epoch.into() {
            LeaderEpoch::Elected(e) => e,
            LeaderEpoch::NextInLog => {
                let claimed = self.load(partition, EpochChoice::NextAfterStored).await?;
                let mut epochs = self.shared.leadership.epochs.lock();
                let seen = epochs.entry(partition).or_insert(claimed.0);
                *seen = (*seen).max(claimed.0);
                return Ok(claimed);
            }
        };
        if leader_epoch < 0 {
            return Err(LogError::InvalidArgument(format!(
                "leader epoch {leader_epoch} of log partition {partition} is negative"
            )));
        }
        {
            let mut epochs = self.shared.leadership.epochs.lock();
            let seen = epochs.entry(partition).or_insert(leader_epoch);
            if leader_epoch < *seen {
                return Err(LogError::Fenced {
                    partition,
                    current: CoordinatorEpoch(*seen),
                });
            }
            *seen = leader_epoch;
        }
        self.load_partition(partition, CoordinatorEpoch(leader_epoch))
            .await
    }

    /// This broker stopped leading `__transaction_state-<partition>` (its leadership at
    /// `leader_epoch`, if known, ended): unloads it, unless a later election of this broker was
    /// reported already. Waiting requests get NOT_COORDINATOR; marker work of the partition
    /// is dropped (the new leader drives it from the log).
    pub async fn lost_leadership(&self, partition: LogPartition, leader_epoch: Option<i32>) {
        {
            let epochs = self.shared.leadership.epochs.lock();
            if let (Some(e), Some(&seen)) = (leader_epoch, epochs.get(&partition))
                && seen > e
            {
                return;
            }
        }
        self.unload_partition(partition).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use txn_log::{MemTxnLog, TxnLog};

    use crate::shell::RecordingMarkerSink;
    use crate::{Config, ErrorCode, InitProducerIdRequest};

    use super::*;

    fn init() -> InitProducerIdRequest {
        InitProducerIdRequest::new_producer(4, "app", 60_000)
    }

    fn start(log: Arc<dyn TxnLog>) -> Coordinator {
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        Coordinator::builder(config, log)
            .marker_sink(|tx| Arc::new(RecordingMarkerSink::new(tx, true)))
            .start()
            .unwrap()
    }

    #[tokio::test]
    async fn the_leader_epoch_is_the_coordinator_epoch_and_stale_notifications_change_nothing() {
        let log: Arc<dyn TxnLog> = Arc::new(MemTxnLog::new());
        let c = start(log.clone());
        let p = LogPartition(0);
        assert_eq!(c.became_leader(p, 5).await.unwrap(), CoordinatorEpoch(5));
        assert!(c.init_producer_id(init()).await.error.is_none());
        // An older election reported late: refused, the partition keeps serving.
        assert!(matches!(
            c.became_leader(p, 4).await,
            Err(LogError::Fenced {
                current: CoordinatorEpoch(5),
                ..
            })
        ));
        // The end of that older leadership: ignored.
        c.lost_leadership(p, Some(4)).await;
        assert!(c.init_producer_id(init()).await.error.is_none());
        // The end of the current one: unloaded.
        c.lost_leadership(p, Some(5)).await;
        assert_eq!(
            c.init_producer_id(init()).await.error,
            ErrorCode::NOT_COORDINATOR
        );
        // Elected again: the log is claimed at the new epoch.
        assert_eq!(c.became_leader(p, 7).await.unwrap(), CoordinatorEpoch(7));
        assert!(c.init_producer_id(init()).await.error.is_none());
        assert_eq!(log.claim_next(p).await.unwrap(), CoordinatorEpoch(8));
        c.shutdown().await;
    }

    /// A shared log's election: each `NextInLog` claims one above the stored epoch (so above
    /// every other owner's), and the epoch claimed orders later notifications like an
    /// elected one.
    #[tokio::test]
    async fn next_in_log_claims_above_the_stored_epoch_and_orders_later_notifications() {
        let log: Arc<dyn TxnLog> = Arc::new(MemTxnLog::new());
        let p = LogPartition(0);
        log.claim(p, CoordinatorEpoch(4)).await.unwrap();
        let c = start(log.clone());
        let first = c.became_leader(p, LeaderEpoch::NextInLog).await.unwrap();
        assert_eq!(first, CoordinatorEpoch(5));
        assert!(c.init_producer_id(init()).await.error.is_none());
        // Another owner took it meanwhile (claiming the next epoch in the shared log).
        assert_eq!(log.claim_next(p).await.unwrap(), CoordinatorEpoch(6));
        // Taking it back claims above that owner, never the same epoch.
        let second = c.became_leader(p, LeaderEpoch::NextInLog).await.unwrap();
        assert_eq!(second, CoordinatorEpoch(7));
        // Notifications about older leaderships change nothing.
        c.lost_leadership(p, Some(5)).await;
        assert!(c.init_producer_id(init()).await.error.is_none());
        assert!(matches!(
            c.became_leader(p, 6).await,
            Err(LogError::Fenced {
                current: CoordinatorEpoch(7),
                ..
            })
        ));
        // Giving it up unconditionally (what the membership does).
        c.lost_leadership(p, None).await;
        assert_eq!(
            c.init_producer_id(init()).await.error,
            ErrorCode::NOT_COORDINATOR
        );
        c.shutdown().await;
    }

    #[tokio::test]
    async fn a_leader_epoch_below_the_logs_is_fenced() {
        let log: Arc<dyn TxnLog> = Arc::new(MemTxnLog::new());
        log.claim(LogPartition(0), CoordinatorEpoch(9))
            .await
            .unwrap();
        let c = start(log);
        assert!(matches!(
            c.became_leader(LogPartition(0), 3).await,
            Err(LogError::Fenced { .. })
        ));
        assert!(c.became_leader(LogPartition(0), -1).await.is_err());
        c.shutdown().await;
    }
}
