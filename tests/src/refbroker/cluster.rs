//! Who leads what: the fixed placement rule every node computes the same way.
//!
//! Nodes are sorted by id. Partition `p` of topic `t` is led by
//! `nodes[(kafka_partition_for(java_string_hash(t), n) + p) % n]`, where `n` is the number of
//! nodes: the topic's hash picks the node of partition 0 and the following partitions go round
//! the ring. Internal topics (`__consumer_offsets`, `__transaction_state`) follow the same rule,
//! so the group coordinator of group `g` is the leader of
//! `__consumer_offsets-<abs(javaStringHash(g)) % offsets_partitions>` and, in embedded mode,
//! the transaction coordinator of `transactional.id` `x` is the leader of
//! `__transaction_state-<abs(javaStringHash(x)) % txn_log_partitions>`.

use std::collections::BTreeMap;

use txn_log::{java_string_hash, kafka_partition_for};

/// A node's advertised address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// Host name or IP clients connect to.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// The cluster: node ids and addresses, and the placement rule.
#[derive(Debug, Clone)]
pub struct Cluster {
    nodes: BTreeMap<i32, NodeAddr>,
}

impl Cluster {
    /// A cluster of `nodes` (must not be empty).
    pub fn new(nodes: BTreeMap<i32, NodeAddr>) -> Self {
        assert!(!nodes.is_empty(), "a cluster has at least one node");
        Self { nodes }
    }

    /// All nodes by id.
    pub fn nodes(&self) -> &BTreeMap<i32, NodeAddr> {
        &self.nodes
    }

    /// The address of `node`.
    pub fn addr(&self, node: i32) -> Option<&NodeAddr> {
        self.nodes.get(&node)
    }

    /// The leader of partition `partition` of `topic` (`partition >= 0`).
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let n = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX);
        let first = kafka_partition_for(java_string_hash(topic), n);
        let p = u32::try_from(partition).unwrap_or(0);
        let idx = usize::try_from((u64::from(first) + u64::from(p)) % u64::from(n)).unwrap_or(0);
        *self.nodes.keys().nth(idx).unwrap_or(&1)
    }

    /// The lowest node id (reported as the controller).
    pub fn controller(&self) -> i32 {
        *self.nodes.keys().next().unwrap_or(&1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(n: i32) -> Cluster {
        Cluster::new(
            (1..=n)
                .map(|i| {
                    (
                        i,
                        NodeAddr {
                            host: "127.0.0.1".into(),
                            port: 9000 + u16::try_from(i).unwrap(),
                        },
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn partitions_go_round_the_ring_from_the_topics_hash() {
        let c = cluster(3);
        let p0 = c.leader("orders", 0);
        let p1 = c.leader("orders", 1);
        let p2 = c.leader("orders", 2);
        let mut all = vec![p0, p1, p2];
        all.sort_unstable();
        assert_eq!(
            all,
            vec![1, 2, 3],
            "three partitions spread over three nodes"
        );
        assert_eq!(c.leader("orders", 3), p0);
        let single = cluster(1);
        assert_eq!(single.leader("anything", 17), 1);
    }
}
