//! The transaction-coordinator APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
//! EndTxn, DescribeTransactions, ListTransactions).
//!
//! Standalone mode: clients find the daemon with FindCoordinator and talk to it directly;
//! what still reaches a broker (an idempotent producer's InitProducerId goes to any broker) is
//! forwarded to the daemon over the wire and its answer relayed.
//!
//! Embedded mode: answered by the in-process coordinator (see [`super::embedded`]).

use std::sync::{Arc, OnceLock};

use coordinator::shell::Coordinator;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::Request;
use markers::wire::KafkaConnection;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::server::Broker;
use super::{Config, CoordinatorMode, NodeAddr};

/// How this broker answers the coordinator APIs.
#[derive(Debug)]
pub(crate) struct TxnService {
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    Forward {
        addr: NodeAddr,
        conn: Mutex<Option<KafkaConnection<TcpStream>>>,
    },
    Embedded {
        coordinator: OnceLock<Coordinator>,
        partitions: u32,
    },
}

impl TxnService {
    pub(crate) fn new(config: &Config) -> anyhow::Result<Self> {
        let mode = match &config.coordinator {
            CoordinatorMode::Standalone { addr, .. } => Mode::Forward {
                addr: addr.clone(),
                conn: Mutex::new(None),
            },
            CoordinatorMode::Embedded => Mode::Embedded {
                coordinator: OnceLock::new(),
                partitions: super::embedded::coordinator_config(config)?
                    .transaction_state_log_num_partitions,
            },
        };
        Ok(Self { mode })
    }

    /// Starts the embedded coordinator, if any.
    pub(crate) async fn start(broker: &Arc<Broker>) -> anyhow::Result<()> {
        if let Mode::Embedded { coordinator, .. } = &broker.txn.mode {
            let c = super::embedded::start(broker).await?;
            let _ = coordinator.set(c);
        }
        Ok(())
    }

    pub(crate) fn is_embedded(&self) -> bool {
        matches!(self.mode, Mode::Embedded { .. })
    }

    /// The node coordinating `transactional_id` in embedded mode.
    pub(crate) fn coordinator_node(&self, broker: &Broker, transactional_id: &str) -> i32 {
        match &self.mode {
            Mode::Embedded { partitions, .. } => {
                super::embedded::coordinator_node(broker, *partitions, transactional_id)
            }
            Mode::Forward { .. } => broker.config.node_id,
        }
    }

    async fn forward<R: Request>(&self, req: &R, v: i16) -> anyhow::Result<R::Response> {
        let Mode::Forward { addr, conn } = &self.mode else {
            anyhow::bail!("not forwarding");
        };
        let mut guard = conn.lock().await;
        if guard.is_none() {
            let stream = TcpStream::connect((addr.host.as_str(), addr.port)).await?;
            let _ = stream.set_nodelay(true);
            *guard = Some(KafkaConnection::new(stream, "refbroker"));
        }
        let Some(c) = guard.as_mut() else {
            anyhow::bail!("no connection");
        };
        match c.call(req, v).await {
            Ok(r) => Ok(r),
            Err(e) => {
                *guard = None;
                Err(e.into())
            }
        }
    }
}

/// Handles a coordinator API request; `Err` closes the client connection (what a client
/// sees when the coordinator is unreachable; it retries).
pub(crate) async fn dispatch(
    broker: &Arc<Broker>,
    body: RequestKind,
    v: i16,
) -> anyhow::Result<ResponseKind> {
    let t = &broker.txn;
    if let Mode::Embedded { coordinator, .. } = &t.mode {
        let Some(c) = coordinator.get() else {
            anyhow::bail!("the embedded coordinator is not started");
        };
        return super::embedded::dispatch(c, body, v).await;
    }
    Ok(match body {
        RequestKind::InitProducerId(r) => ResponseKind::InitProducerId(t.forward(&r, v).await?),
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(t.forward(&r, v).await?)
        }
        RequestKind::AddOffsetsToTxn(r) => ResponseKind::AddOffsetsToTxn(t.forward(&r, v).await?),
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(t.forward(&r, v).await?),
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(t.forward(&r, v).await?)
        }
        RequestKind::ListTransactions(r) => ResponseKind::ListTransactions(t.forward(&r, v).await?),
        other => anyhow::bail!("request {other:?} is not served"),
    })
}
