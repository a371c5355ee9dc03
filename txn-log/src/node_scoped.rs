//! [`NodeScopedLog`]: producer-id blocks moved into one node's own id range.

use async_trait::async_trait;

use crate::{
    Appending, CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogPartition, ProducerId,
    ProducerIdBlock, TxnLog,
};
use std::sync::Arc;

/// A [`TxnLog`] whose producer-id blocks lie in `[node_id << 40, (node_id + 1) << 40)`;
/// everything else is the inner log's.
///
/// When every node of a cluster has its own transaction log, each log counts producer ids from 0:
/// two coordinators would give the same producer id to different transactional ids, and one's
/// COMMIT marker would commit the other's records. Kafka gets cluster-wide unique ids from its
/// controller (`AllocateProducerIds`); wrap each node's log in this to get the same guarantee
/// without one. Logs shared by every node (etcd) allocate unique blocks already and need no
/// wrapper.
pub struct NodeScopedLog {
    inner: Arc<dyn TxnLog>,
    base: i64,
}

impl NodeScopedLog {
    /// Bits of a producer id below the node id.
    pub const NODE_SHIFT: u32 = 40;
    /// Node ids this wrapper accepts: `0..MAX_NODES`.
    pub const MAX_NODES: i32 = 1 << 20;

    /// Wraps `inner` for `node_id` (in `0..MAX_NODES`).
    pub fn new(inner: Arc<dyn TxnLog>, node_id: i32) -> Result<Self, LogError> {
        if !(0..Self::MAX_NODES).contains(&node_id) {
            return Err(LogError::InvalidArgument(format!(
                "a node-scoped log needs a node id in 0..{}, got {node_id}",
                Self::MAX_NODES
            )));
        }
        Ok(Self {
            inner,
            base: i64::from(node_id) << Self::NODE_SHIFT,
        })
    }
}

#[async_trait]
impl TxnLog for NodeScopedLog {
    async fn claim(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
    ) -> Result<(), LogError> {
        self.inner.claim(partition, epoch).await
    }

    async fn claim_next(&self, partition: LogPartition) -> Result<CoordinatorEpoch, LogError> {
        self.inner.claim_next(partition).await
    }

    fn append(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Appending {
        self.inner.append(partition, epoch, batch)
    }

    async fn load(&self, partition: LogPartition) -> Result<LoadedPartition, LogError> {
        self.inner.load(partition).await
    }

    /// `floor` is an id of the whole id space: a floor below this node's range is no floor
    /// here, one above it leaves the node no ids (`InvalidArgument`).
    async fn allocate_block(
        &self,
        len: u32,
        floor: ProducerId,
    ) -> Result<ProducerIdBlock, LogError> {
        let inner_floor = (floor.0 - self.base).max(0);
        if inner_floor >= 1 << Self::NODE_SHIFT {
            return Err(LogError::InvalidArgument(format!(
                "producer id floor {} lies above this node's range",
                floor.0
            )));
        }
        let block = self
            .inner
            .allocate_block(len, ProducerId(inner_floor))
            .await?;
        let end = block.first.0.saturating_add(i64::from(block.len));
        if block.first.0 < 0 || end > (1 << Self::NODE_SHIFT) {
            return Err(LogError::InvalidArgument(format!(
                "producer id block {}+{} leaves this node's range",
                block.first.0, block.len
            )));
        }
        Ok(ProducerIdBlock {
            first: ProducerId(self.base + block.first.0),
            len: block.len,
        })
    }
}

#[cfg(all(test, not(txn_loom)))]
mod tests {
    use super::*;
    use crate::MemTxnLog;
    use crate::mem::block_on;

    #[test]
    fn blocks_of_two_nodes_never_overlap_and_the_rest_is_delegated() {
        let a = NodeScopedLog::new(Arc::new(MemTxnLog::new()), 1).expect("node 1");
        let b = NodeScopedLog::new(Arc::new(MemTxnLog::new()), 2).expect("node 2");
        let ba = block_on(a.allocate_block(10, ProducerId(0))).expect("a");
        let bb = block_on(b.allocate_block(10, ProducerId(0))).expect("b");
        assert_eq!(ba.first, ProducerId(1 << 40));
        assert_eq!(bb.first, ProducerId(2 << 40));
        // A floor inside node 1's range moves its next block; one above it is refused.
        let floor = ProducerId((1 << 40) + 500);
        assert_eq!(
            block_on(a.allocate_block(10, floor)).expect("a").first,
            floor
        );
        assert!(block_on(b.allocate_block(10, ProducerId(3 << 40))).is_err());
        let p = LogPartition(0);
        block_on(a.claim(p, CoordinatorEpoch(3))).expect("claim");
        block_on(a.append(p, CoordinatorEpoch(3), Vec::new())).expect("append");
        let loaded = block_on(a.load(p)).expect("load");
        assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(3)));
    }

    #[test]
    fn node_ids_out_of_range_are_refused() {
        for bad in [-1, NodeScopedLog::MAX_NODES] {
            assert!(matches!(
                NodeScopedLog::new(Arc::new(MemTxnLog::new()), bad),
                Err(LogError::InvalidArgument(_))
            ));
        }
    }
}
