//! The transaction-coordinator APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
//! EndTxn, DescribeTransactions, ListTransactions).
//!
//! Standalone mode: clients find the daemon with FindCoordinator and talk to it directly.
//! ListTransactions, which Kafka's Admin client sends to every broker in Metadata, is
//! answered here with an empty list: the daemons list their own.
//! FindCoordinator(TRANSACTION) and what still reaches a broker (an idempotent producer's
//! InitProducerId goes to any broker) are forwarded over the wire to one of the daemons
//! (`--coordinator`, the next one when it cannot be reached) and its answer relayed: with
//! several daemons on etcd, the daemon asked names the owner of the id's log partition.
//! Every second each daemon is probed with Metadata; the ones that answer are listed in this
//! broker's Metadata under the node id they give themselves.
//!
//! Embedded mode: answered by the in-process coordinator (see [`super::embedded`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

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
    Forward(Daemons),
    Embedded {
        started: OnceLock<super::embedded::Embedded>,
        partitions: u32,
    },
}

impl TxnService {
    pub(crate) fn new(config: &Config) -> anyhow::Result<Self> {
        let mode = match &config.coordinator {
            CoordinatorMode::Standalone { addrs, node_id } => Mode::Forward(Daemons {
                addrs: addrs.clone(),
                conn: Mutex::new(None),
                next: AtomicUsize::new(0),
                // One daemon is listed under `--coordinator-node-id` until it has been probed.
                live: txn_log::sync::Mutex::new(match addrs.as_slice() {
                    [one] => vec![(*node_id, one.clone())],
                    _ => Vec::new(),
                }),
            }),
            CoordinatorMode::Embedded => Mode::Embedded {
                started: OnceLock::new(),
                partitions: super::embedded::coordinator_config(config)?
                    .transaction_state_log_num_partitions,
            },
        };
        Ok(Self { mode })
    }

    /// Starts the embedded coordinator, or the probe of the standalone daemons.
    pub(crate) async fn start(broker: &Arc<Broker>) -> anyhow::Result<()> {
        match &broker.txn.mode {
            Mode::Embedded { started, .. } => {
                let e = super::embedded::start(broker).await?;
                let _ = started.set(e);
            }
            Mode::Forward(_) => {
                tokio::spawn(probe_daemons(Arc::downgrade(broker)));
            }
        }
        Ok(())
    }

    /// The standalone daemons that answered the last probe, as (node id, address).
    pub(crate) fn daemon_nodes(&self) -> Vec<(i32, NodeAddr)> {
        match &self.mode {
            Mode::Forward(d) => d.live.lock().clone(),
            Mode::Embedded { .. } => Vec::new(),
        }
    }

    pub(crate) fn is_embedded(&self) -> bool {
        matches!(self.mode, Mode::Embedded { .. })
    }

    /// The embedded coordinator, once started.
    pub(crate) fn embedded(&self) -> Option<&coordinator::shell::Coordinator> {
        match &self.mode {
            Mode::Embedded { started, .. } => started.get().map(|e| &e.coordinator),
            Mode::Forward(_) => None,
        }
    }

    /// Standalone mode with a single daemon (`--coordinator HOST:PORT`): its node id (the one
    /// it gave itself once probed, else `--coordinator-node-id`). Every transactional id is
    /// coordinated there.
    pub(crate) fn single_daemon(&self) -> Option<i32> {
        match &self.mode {
            // Its list starts with `--coordinator-node-id` and is only ever replaced by a
            // non-empty one.
            Mode::Forward(d) if d.addrs.len() == 1 => d.live.lock().first().map(|(id, _)| *id),
            _ => None,
        }
    }

    /// The node coordinating `transactional_id` in embedded mode (`None` while unknown; in
    /// standalone mode the daemons are asked instead).
    pub(crate) fn coordinator_node(&self, broker: &Broker, transactional_id: &str) -> Option<i32> {
        match &self.mode {
            Mode::Embedded {
                partitions,
                started,
            } => super::embedded::coordinator_node(
                broker,
                *partitions,
                started.get().and_then(|e| e.membership.as_deref()),
                transactional_id,
            ),
            Mode::Forward(_) => None,
        }
    }

    /// Sends `req` to a standalone daemon and returns its answer.
    pub(crate) async fn forward<R: Request>(&self, req: &R, v: i16) -> anyhow::Result<R::Response> {
        let Mode::Forward(daemons) = &self.mode else {
            anyhow::bail!("not forwarding");
        };
        daemons.forward(req, v).await
    }
}

/// Bound on connecting to a daemon and on one forwarded call (a stopped daemon must not hold
/// a client's request forever).
const DAEMON_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the daemons are probed for the Metadata list.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The standalone daemons (`--coordinator`).
#[derive(Debug)]
struct Daemons {
    addrs: Vec<NodeAddr>,
    /// The connection to the daemon asked now, with its index in `addrs`.
    conn: Mutex<Option<(usize, KafkaConnection<TcpStream>)>>,
    /// The index of the daemon to connect to next.
    next: AtomicUsize,
    /// The daemons that answered the last probe (the previous list while none answers).
    live: txn_log::sync::Mutex<Vec<(i32, NodeAddr)>>,
}

async fn connect(addr: &NodeAddr) -> anyhow::Result<KafkaConnection<TcpStream>> {
    let stream = tokio::time::timeout(
        DAEMON_TIMEOUT,
        TcpStream::connect((addr.host.as_str(), addr.port)),
    )
    .await
    .map_err(|_| anyhow::anyhow!("connecting to {}:{} timed out", addr.host, addr.port))??;
    let _ = stream.set_nodelay(true);
    Ok(KafkaConnection::new(stream, "refbroker"))
}

impl Daemons {
    /// Sends `req` to the current daemon, moving on to the next one while a daemon cannot be
    /// connected to. A call that fails after it was sent is not repeated elsewhere: its error
    /// closes the client's connection and the client retries.
    async fn forward<R: Request>(&self, req: &R, v: i16) -> anyhow::Result<R::Response> {
        let mut guard = self.conn.lock().await;
        for _ in 0..self.addrs.len() {
            let (i, mut c) = match guard.take() {
                Some(current) => current,
                None => {
                    let i = self.next.load(Ordering::Relaxed) % self.addrs.len();
                    match connect(&self.addrs[i]).await {
                        Ok(c) => (i, c),
                        Err(e) => {
                            tracing::warn!(error = %e, "coordinator daemon unreachable; trying the next");
                            self.next.store(i + 1, Ordering::Relaxed);
                            continue;
                        }
                    }
                }
            };
            return match tokio::time::timeout(DAEMON_TIMEOUT, c.call(req, v)).await {
                Ok(Ok(r)) => {
                    *guard = Some((i, c));
                    Ok(r)
                }
                Ok(Err(e)) => {
                    self.next.store(i + 1, Ordering::Relaxed);
                    Err(e.into())
                }
                Err(_) => {
                    self.next.store(i + 1, Ordering::Relaxed);
                    Err(anyhow::anyhow!(
                        "the coordinator daemon did not answer in time"
                    ))
                }
            };
        }
        anyhow::bail!("no coordinator daemon reachable")
    }
}

/// Probes every daemon with Metadata each [`PROBE_INTERVAL`] and keeps the list of those that
/// answered, under the node id each lists for its own address; ends with the broker.
async fn probe_daemons(broker: std::sync::Weak<Broker>) {
    use kafka_protocol::messages::MetadataRequest;
    let Some(addrs) = broker.upgrade().and_then(|b| match &b.txn.mode {
        Mode::Forward(d) => Some(d.addrs.clone()),
        Mode::Embedded { .. } => None,
    }) else {
        return;
    };
    let mut conns: Vec<Option<KafkaConnection<TcpStream>>> = addrs.iter().map(|_| None).collect();
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    loop {
        let mut live = Vec::new();
        for (addr, slot) in addrs.iter().zip(conns.iter_mut()) {
            if slot.is_none() {
                *slot = connect(addr).await.ok();
            }
            let Some(c) = slot.as_mut() else { continue };
            match tokio::time::timeout(DAEMON_TIMEOUT, c.call(&request, 4)).await {
                Ok(Ok(m)) => {
                    let me = m
                        .brokers
                        .iter()
                        .find(|b| b.host.as_str() == addr.host && b.port == i32::from(addr.port));
                    if let Some(b) = me {
                        live.push((b.node_id.0, addr.clone()));
                    }
                }
                _ => *slot = None,
            }
        }
        let Some(b) = broker.upgrade() else { return };
        if let Mode::Forward(d) = &b.txn.mode
            && !live.is_empty()
        {
            *d.live.lock() = live;
        }
        drop(b);
        tokio::time::sleep(PROBE_INTERVAL).await;
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
    if let Mode::Embedded { started, .. } = &t.mode {
        let Some(e) = started.get() else {
            anyhow::bail!("the embedded coordinator is not started");
        };
        return super::embedded::dispatch(&e.coordinator, body, v).await;
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
        // This broker coordinates no transactional id: nothing to list (no error, as a Kafka
        // broker that leads no `__transaction_state` partition answers). Forwarding would
        // list the daemon's transactions twice, once under this broker's id.
        RequestKind::ListTransactions(r) => {
            use coordinator::server::protocol as p;
            let req = p::list(v, &r);
            p::list_response(&coordinator::ListTransactionsResponse {
                error: coordinator::ErrorCode::NONE,
                unknown_state_filters: coordinator::unknown_state_filters(&req.state_filters),
                transactions: Vec::new(),
            })
        }
        other => anyhow::bail!("request {other:?} is not served"),
    })
}
