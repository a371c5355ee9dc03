//! KIP-890 part 1: how refbroker asks the transaction coordinator, before a producer's first
//! transactional append to a partition, whether the partition is in its transaction
//! ([`markers::verify`]; switched off with `--set transaction.partition.verification.enable=false`).
//!
//! [`BrokerVerifier`] is refbroker's [`TxnVerifier`]:
//!
//! - standalone, one daemon (`--coordinator HOST:PORT`): every id is coordinated there; the
//!   verify-only AddPartitionsToTxn v4 goes over the connection the broker already forwards
//!   coordinator requests on;
//! - standalone, several daemons (etcd): FindCoordinator (through the daemons, as a client's)
//!   names the owner, which is asked over a connection of its own;
//! - embedded: the owner of the id's `__transaction_state` partition; this node's coordinator
//!   is asked in process (`Coordinator::add_partitions_to_txn` with `verify_only`), another
//!   node's over the wire, as Kafka's brokers ask each other.
//!
//! [`markers::verify::Verifier`] in front of it merges concurrent questions per coordinator
//! node and keeps positive answers for a second, forgotten when a marker for the producer is
//! written here.
//!
//! The same calls carry the implicit add of transaction version 2 (KIP-890 part 2): a
//! Produce v12+ or TxnOffsetCommit v5+ asks with [`markers::verify::Operation::Add`], sent as
//! AddPartitionsToTxn v5 without `verify_only` (in process: `verify_only: false`), so the
//! coordinator adds the partition as it would for a TV1 client's AddPartitionsToTxn.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use markers::verify::{
    CallError, CoordinatorNode, TxnVerifier, Verdict, VerifyTxn, codes, request_version,
    verdicts_of, verify_request,
};
use markers::wire::{BoxedConnection, PlaintextConnector};
use tokio::sync::Mutex;

use super::NodeAddr;
use super::server::Broker;

/// Bound on connecting to a coordinator node for a verify call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// refbroker's [`TxnVerifier`] (see the module docs).
pub(crate) struct BrokerVerifier {
    broker: Weak<Broker>,
    /// Coordinator nodes learnt from FindCoordinator (several daemons).
    addrs: txn_log::sync::Mutex<HashMap<i32, NodeAddr>>,
    /// One connection per coordinator node asked over the wire (the Verifier sends one call
    /// per node at a time), each behind its own lock: a stopped node holds up only the calls
    /// sent to it.
    conns: txn_log::sync::Mutex<HashMap<i32, NodeConnection>>,
}

type NodeConnection = Arc<Mutex<Option<BoxedConnection>>>;

/// How often a verify call in flight to a standalone daemon checks that the daemon still
/// answers the broker's probes.
const LIVENESS_CHECK: Duration = Duration::from_millis(100);

impl BrokerVerifier {
    pub(crate) fn new(broker: Weak<Broker>) -> Self {
        Self {
            broker,
            addrs: txn_log::sync::Mutex::new(HashMap::new()),
            conns: txn_log::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Calls `node` at `addr` over the wire with the verify-only request. With several
    /// standalone daemons the call is given up as soon as `node` stops answering the broker's
    /// probes (a stopped or dead daemon), so that the producer is told to retry
    /// (COORDINATOR_NOT_AVAILABLE, Produce: NOT_ENOUGH_REPLICAS) and asks the new owner
    /// instead of waiting out the call's bound.
    async fn over_wire(
        &self,
        node: i32,
        addr: &NodeAddr,
        txns: &[VerifyTxn],
        watch_daemon: bool,
    ) -> Result<Vec<Vec<Verdict>>, CallError> {
        let slot = self.conns.lock().entry(node).or_default().clone();
        let mut slot = slot.lock().await;
        let mut conn = match slot.take() {
            Some(c) => c,
            None => {
                // The daemons' security (`coordinator.*` keys), or the inter-broker listener's
                // between the nodes of an embedded cluster.
                let connector = self
                    .broker
                    .upgrade()
                    .and_then(|b| b.txn.coordinator_connector())
                    .unwrap_or_else(|| Arc::new(PlaintextConnector));
                tokio::time::timeout(
                    CONNECT_TIMEOUT,
                    connector.connect(&addr.host, addr.port, "refbroker-verify"),
                )
                .await
                .map_err(|_| CallError::Network(format!("connecting to node {node} timed out")))?
                .map_err(|e| CallError::Network(format!("node {node}: {e}")))?
            }
        };
        // The Verifier bounds the call; a call cut short drops this connection with it.
        let request = verify_request(txns);
        let call = conn.call(&request, request_version(txns));
        let response = if watch_daemon {
            tokio::select! {
                r = call => r,
                () = self.stops_answering(node) => {
                    return Err(CallError::NoCoordinator {
                        code: codes::COORDINATOR_NOT_AVAILABLE,
                    });
                }
            }
        } else {
            call.await
        }
        .map_err(|e| CallError::Network(e.to_string()))?;
        *slot = Some(conn);
        verdicts_of(txns, &response)
    }

    /// Resolves once standalone daemon `node` is no longer among those that answered the
    /// broker's last probe.
    async fn stops_answering(&self, node: i32) {
        loop {
            let answering = self
                .broker
                .upgrade()
                .is_some_and(|b| b.txn.daemon_nodes().iter().any(|(id, _)| *id == node));
            if !answering {
                return;
            }
            tokio::time::sleep(LIVENESS_CHECK).await;
        }
    }
}

fn find_coordinator_request(transactional_id: &str) -> FindCoordinatorRequest {
    FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![StrBytes::from_string(transactional_id.to_owned())])
}

#[async_trait]
impl TxnVerifier for BrokerVerifier {
    async fn coordinator(&self, transactional_id: &str) -> Result<CoordinatorNode, CallError> {
        let unavailable = CallError::NoCoordinator {
            code: codes::COORDINATOR_NOT_AVAILABLE,
        };
        let Some(broker) = self.broker.upgrade() else {
            return Err(unavailable);
        };
        if broker.txn.is_embedded() {
            return broker
                .txn
                .coordinator_node(&broker, transactional_id)
                .map(CoordinatorNode)
                .ok_or(unavailable);
        }
        if let Some(node) = broker.txn.single_daemon() {
            return Ok(CoordinatorNode(node));
        }
        let r: FindCoordinatorResponse = broker
            .txn
            .find_coordinator(&find_coordinator_request(transactional_id), 4)
            .await
            .map_err(|e| CallError::Network(e.to_string()))?;
        let Some(c) = r.coordinators.first() else {
            return Err(unavailable);
        };
        if c.error_code != 0 {
            return Err(CallError::NoCoordinator {
                code: c.error_code.into(),
            });
        }
        let port = u16::try_from(c.port).map_err(|_| unavailable.clone())?;
        self.addrs.lock().insert(
            c.node_id.0,
            NodeAddr {
                host: c.host.to_string(),
                port,
            },
        );
        Ok(CoordinatorNode(c.node_id.0))
    }

    async fn verify(
        &self,
        node: CoordinatorNode,
        txns: &[VerifyTxn],
    ) -> Result<Vec<Vec<Verdict>>, CallError> {
        let Some(broker) = self.broker.upgrade() else {
            return Err(CallError::NoCoordinator {
                code: codes::COORDINATOR_NOT_AVAILABLE,
            });
        };
        if broker.txn.is_embedded() {
            if node.0 == broker.config.node_id {
                let Some(c) = broker.txn.embedded() else {
                    return Err(CallError::NoCoordinator {
                        code: codes::COORDINATOR_NOT_AVAILABLE,
                    });
                };
                // In process: the library's conversion (coordinator::shell::verify).
                return c.verify_txns(txns).await;
            }
            let Some(addr) = broker.cluster.addr(node.0).cloned() else {
                return Err(CallError::NoCoordinator {
                    code: codes::COORDINATOR_NOT_AVAILABLE,
                });
            };
            return self.over_wire(node.0, &addr, txns, false).await;
        }
        if broker.txn.single_daemon().is_some() {
            let response = broker
                .txn
                .forward(&verify_request(txns), request_version(txns))
                .await
                .map_err(|e| CallError::Network(e.to_string()))?;
            return verdicts_of(txns, &response);
        }
        let Some(addr) = self.addrs.lock().get(&node.0).cloned() else {
            return Err(CallError::NoCoordinator {
                code: codes::COORDINATOR_NOT_AVAILABLE,
            });
        };
        if !broker
            .txn
            .daemon_nodes()
            .iter()
            .any(|(id, _)| *id == node.0)
        {
            // Not answering the broker's probes: a dead or stopped daemon, asked no more.
            return Err(CallError::NoCoordinator {
                code: codes::COORDINATOR_NOT_AVAILABLE,
            });
        }
        self.over_wire(node.0, &addr, txns, true).await
    }
}
