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
//! Every half second each daemon is probed with Metadata; the ones that answer are listed in this
//! broker's Metadata under the node id they give themselves.
//!
//! Embedded mode: answered by the in-process coordinator (see [`super::embedded`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::{Request, StrBytes};
use markers::wire::{BoxedConnection, Connector};
use tokio::sync::{Mutex, MutexGuard};

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
            CoordinatorMode::Standalone { addrs, node_id } => Mode::Forward(Daemons::new(
                addrs.clone(),
                // One daemon is listed under `--coordinator-node-id` until it has been probed.
                match addrs.as_slice() {
                    [one] => vec![(*node_id, one.clone())],
                    _ => Vec::new(),
                },
                daemon_connector(config)?,
            )),
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

    /// The connector to the other coordinators: the standalone daemons' (`coordinator.*`
    /// keys), or embedded the other nodes' (the inter-broker listener's client side; `None`
    /// until the coordinator has started).
    pub(crate) fn coordinator_connector(&self) -> Option<Arc<dyn Connector>> {
        match &self.mode {
            Mode::Forward(d) => Some(d.connector.clone()),
            Mode::Embedded { started, .. } => started.get().map(|e| e.inter_broker.clone()),
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

    /// Relays FindCoordinator to the standalone daemons (see [`Daemons::find_coordinator`]).
    pub(crate) async fn find_coordinator(
        &self,
        req: &FindCoordinatorRequest,
        v: i16,
    ) -> anyhow::Result<FindCoordinatorResponse> {
        let Mode::Forward(daemons) = &self.mode else {
            anyhow::bail!("not forwarding");
        };
        daemons.find_coordinator(req, v).await
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
/// Bound on one probe, and on one daemon's answer to a FindCoordinator relayed to it (then the
/// next daemon is asked).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the daemons are probed (Metadata) for the list of those that answer.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// The standalone daemons (`--coordinator`).
#[derive(Debug)]
struct Daemons {
    addrs: Vec<NodeAddr>,
    /// One connection per daemon; calls to one daemon go one at a time, so a stopped daemon
    /// holds up only the calls sent to it.
    conns: Vec<Mutex<Option<BoxedConnection>>>,
    /// Opens them (`coordinator.security.protocol`, ...).
    connector: Arc<dyn Connector>,
    /// The index of the daemon to ask first.
    next: AtomicUsize,
    /// Whether each daemon answered its last probe, or since then a relayed FindCoordinator
    /// (true until probed).
    answering: Vec<AtomicBool>,
    /// The daemons that answered the last probe (the previous list while none answers).
    live: txn_log::sync::Mutex<Vec<(i32, NodeAddr)>>,
    /// Bound on one forwarded call ([`DAEMON_TIMEOUT`]).
    forward_timeout: Duration,
    /// Bound on one daemon's answer to a relayed FindCoordinator ([`PROBE_TIMEOUT`]).
    relay_timeout: Duration,
}

/// The prefix of the keys securing the broker's connections to the daemons
/// (`coordinator.security.protocol`, ...; `coordinator::server::outgoing`).
pub(crate) const DAEMON_KEY_PREFIX: &str = "coordinator.";

/// The connector to the daemons, from the `coordinator.*` client keys.
pub(crate) fn daemon_connector(config: &Config) -> anyhow::Result<Arc<dyn Connector>> {
    Ok(
        coordinator::server::outgoing::ClientSecurity::from_keys(DAEMON_KEY_PREFIX, |k| {
            config.settings.get(k).cloned()
        })?
        .with_timeout(DAEMON_TIMEOUT)
        .connector(),
    )
}

async fn connect(connector: &dyn Connector, addr: &NodeAddr) -> anyhow::Result<BoxedConnection> {
    tokio::time::timeout(
        DAEMON_TIMEOUT,
        connector.connect(&addr.host, addr.port, "refbroker"),
    )
    .await
    .map_err(|_| anyhow::anyhow!("connecting to {}:{} timed out", addr.host, addr.port))?
    .map_err(anyhow::Error::from)
}

impl Daemons {
    fn new(
        addrs: Vec<NodeAddr>,
        live: Vec<(i32, NodeAddr)>,
        connector: Arc<dyn Connector>,
    ) -> Self {
        Self {
            connector,
            conns: addrs.iter().map(|_| Mutex::new(None)).collect(),
            answering: addrs.iter().map(|_| AtomicBool::new(true)).collect(),
            next: AtomicUsize::new(0),
            live: txn_log::sync::Mutex::new(live),
            addrs,
            forward_timeout: DAEMON_TIMEOUT,
            relay_timeout: PROBE_TIMEOUT,
        }
    }

    /// Every daemon's index, in the order to ask them: from the current one on, those that
    /// answered their last probe first.
    fn order(&self) -> Vec<usize> {
        let n = self.addrs.len();
        let first = self.next.load(Ordering::Relaxed) % n;
        let (mut up, down): (Vec<usize>, Vec<usize>) = (0..n)
            .map(|k| (first + k) % n)
            .partition(|&i| self.answering[i].load(Ordering::Relaxed));
        up.extend(down);
        up
    }

    /// One call to daemon `i`, bounded by `timeout` from now: waiting for the daemon's
    /// connection (taken by another call to it) counts, so a call queued behind one to a
    /// stopped daemon gives up by its own bound, not that one's bound later. Given up before
    /// the request went out, it was not sent: another daemon may be asked.
    async fn call<R: Request>(
        &self,
        i: usize,
        req: &R,
        v: i16,
        timeout: Duration,
    ) -> Result<R::Response, CallFailure> {
        let deadline = tokio::time::Instant::now() + timeout;
        let Ok(slot) = tokio::time::timeout_at(deadline, self.conns[i].lock()).await else {
            let a = &self.addrs[i];
            return Err(CallFailure::NotSent(anyhow::anyhow!(
                "the connection to the coordinator daemon at {}:{} stayed busy for {timeout:?}",
                a.host,
                a.port
            )));
        };
        self.call_on(slot, i, req, v, deadline).await
    }

    /// The call of [`Daemons::call`] on daemon `i`'s connection `slot` (held), bounded by
    /// `deadline`; a failed call drops the connection.
    async fn call_on<R: Request>(
        &self,
        mut slot: MutexGuard<'_, Option<BoxedConnection>>,
        i: usize,
        req: &R,
        v: i16,
        deadline: tokio::time::Instant,
    ) -> Result<R::Response, CallFailure> {
        let mut c = match slot.take() {
            Some(c) => c,
            None => {
                tokio::time::timeout_at(deadline, connect(self.connector.as_ref(), &self.addrs[i]))
                    .await
                    .unwrap_or_else(|_| {
                        Err(anyhow::anyhow!(
                            "connecting to {}:{} timed out",
                            self.addrs[i].host,
                            self.addrs[i].port
                        ))
                    })
                    .map_err(CallFailure::NotSent)?
            }
        };
        match tokio::time::timeout_at(deadline, c.call(req, v)).await {
            Ok(Ok(r)) => {
                *slot = Some(c);
                Ok(r)
            }
            Ok(Err(e)) => Err(CallFailure::Sent(e.into())),
            Err(_) => Err(CallFailure::Sent(anyhow::anyhow!(
                "the coordinator daemon did not answer in time"
            ))),
        }
    }

    /// Sends `req` to the current daemon, moving on to the next one while a daemon cannot be
    /// connected to (or its connection stays taken by another call for the whole bound). A
    /// call that fails after it was sent is not repeated elsewhere: its error closes the
    /// client's connection and the client retries.
    async fn forward<R: Request>(&self, req: &R, v: i16) -> anyhow::Result<R::Response> {
        for i in self.order() {
            match self.call(i, req, v, self.forward_timeout).await {
                Ok(r) => {
                    self.next.store(i, Ordering::Relaxed);
                    return Ok(r);
                }
                Err(CallFailure::NotSent(e)) => {
                    tracing::warn!(error = %e, "coordinator daemon unreachable; trying the next");
                }
                Err(CallFailure::Sent(e)) => {
                    self.next.store(i + 1, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        anyhow::bail!("no coordinator daemon reachable")
    }

    /// Relays a FindCoordinator (read only, so asked again of the next daemon when one fails
    /// or is slow). Any daemon can answer, and every verification of a first transactional
    /// append asks, so a lookup must not queue behind a call that waits out its bound on a
    /// stopped daemon (that would stall, a bound per lookup queued, Produce requests of
    /// producers the daemon does not coordinate). So the daemons that answer are asked first:
    /// those whose connection is free, in order, then the first whose connection another call
    /// gives back; a daemon that did not answer its last probe (or a relay since) is asked only
    /// after all of them. A coordinator named that did not answer its last probe (or relay) is
    /// answered as COORDINATOR_NOT_AVAILABLE: a client sent to a dead daemon only backs off
    /// its reconnects, while one told "not available" asks again soon.
    async fn find_coordinator(
        &self,
        req: &FindCoordinatorRequest,
        v: i16,
    ) -> anyhow::Result<FindCoordinatorResponse> {
        let mut last = anyhow::anyhow!("no coordinator daemon reachable");
        let (mut busy, mut silent) = (Vec::new(), Vec::new());
        for i in self.order() {
            if !self.answering[i].load(Ordering::Relaxed) {
                silent.push(i);
                continue;
            }
            let Ok(slot) = self.conns[i].try_lock() else {
                busy.push(i);
                continue;
            };
            let until = tokio::time::Instant::now() + self.relay_timeout;
            match self.call_on(slot, i, req, v, until).await {
                Ok(r) => return Ok(self.relayed(i, r)),
                Err(e) => last = self.missed(i, e),
            }
        }
        let deadline = tokio::time::Instant::now() + self.relay_timeout;
        while !busy.is_empty() {
            let freed = busy
                .iter()
                .map(|&i| Box::pin(async move { (i, self.conns[i].lock().await) }));
            let Ok(((i, slot), ..)) =
                tokio::time::timeout_at(deadline, futures_util::future::select_all(freed)).await
            else {
                last = anyhow::anyhow!(
                    "the connections to the coordinator daemons stayed busy for {:?}",
                    self.relay_timeout
                );
                break;
            };
            busy.retain(|&b| b != i);
            let until = tokio::time::Instant::now() + self.relay_timeout;
            match self.call_on(slot, i, req, v, until).await {
                Ok(r) => return Ok(self.relayed(i, r)),
                Err(e) => last = self.missed(i, e),
            }
        }
        for i in silent {
            match self.call(i, req, v, self.relay_timeout).await {
                Ok(r) => return Ok(self.relayed(i, r)),
                Err(e) => last = self.missed(i, e),
            }
        }
        Err(last)
    }

    /// Daemon `i` did not answer a relayed FindCoordinator (`e`): it is asked last, and not
    /// named, until it answers a probe or relay again.
    fn missed(&self, i: usize, e: CallFailure) -> anyhow::Error {
        self.answering[i].store(false, Ordering::Relaxed);
        match e {
            CallFailure::NotSent(e) | CallFailure::Sent(e) => e,
        }
    }

    /// Daemon `i`'s answer `r` to a relayed FindCoordinator, as the client gets it.
    fn relayed(&self, i: usize, mut r: FindCoordinatorResponse) -> FindCoordinatorResponse {
        self.next.store(i, Ordering::Relaxed);
        self.answering[i].store(true, Ordering::Relaxed);
        self.hide_silent(&mut r);
        r
    }

    /// Whether the daemon at `host:port` did not answer its last probe (or a relay since).
    fn silent(&self, host: &str, port: i32) -> bool {
        self.addrs.iter().zip(&self.answering).any(|(a, ok)| {
            a.host == host && i32::from(a.port) == port && !ok.load(Ordering::Relaxed)
        })
    }

    fn hide_silent(&self, r: &mut FindCoordinatorResponse) {
        let unavailable = i16::from(txn_log::ErrorCode::COORDINATOR_NOT_AVAILABLE);
        if r.error_code == 0 && self.silent(r.host.as_str(), r.port) {
            r.error_code = unavailable;
            r.node_id = BrokerId(-1);
            r.host = StrBytes::default();
            r.port = -1;
        }
        for c in &mut r.coordinators {
            if c.error_code == 0 && self.silent(c.host.as_str(), c.port) {
                c.error_code = unavailable;
                c.node_id = BrokerId(-1);
                c.host = StrBytes::default();
                c.port = -1;
            }
        }
    }
}

/// How a call to one daemon failed.
enum CallFailure {
    /// Before the request was sent (no connection): another daemon may be asked.
    NotSent(anyhow::Error),
    /// After: the daemon may have acted on it.
    Sent(anyhow::Error),
}

/// Probes every daemon with Metadata each [`PROBE_INTERVAL`], all at once and each bounded by
/// [`PROBE_TIMEOUT`], and keeps the list of those that answered, under the node id each lists
/// for its own address; ends with the broker.
async fn probe_daemons(broker: std::sync::Weak<Broker>) {
    use kafka_protocol::messages::MetadataRequest;
    let Some((addrs, connector)) = broker.upgrade().and_then(|b| match &b.txn.mode {
        Mode::Forward(d) => Some((d.addrs.clone(), d.connector.clone())),
        Mode::Embedded { .. } => None,
    }) else {
        return;
    };
    let mut conns: Vec<Option<BoxedConnection>> = addrs.iter().map(|_| None).collect();
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    loop {
        let probes = addrs.iter().zip(conns.iter_mut()).map(|(addr, slot)| {
            let request = &request;
            let connector = &connector;
            async move {
                let probe = async {
                    let mut c = match slot.take() {
                        Some(c) => c,
                        None => connect(connector.as_ref(), addr).await.ok()?,
                    };
                    let m = c.call(request, 4).await.ok()?;
                    *slot = Some(c);
                    Some(m)
                };
                let m = tokio::time::timeout(PROBE_TIMEOUT, probe)
                    .await
                    .ok()
                    .flatten()?;
                m.brokers
                    .iter()
                    .find(|b| b.host.as_str() == addr.host && b.port == i32::from(addr.port))
                    .map(|b| (b.node_id.0, addr.clone()))
            }
        });
        let answers = futures_util::future::join_all(probes).await;
        let Some(b) = broker.upgrade() else { return };
        if let Mode::Forward(d) = &b.txn.mode {
            for (ok, answer) in d.answering.iter().zip(&answers) {
                ok.store(answer.is_some(), Ordering::Relaxed);
            }
            let live: Vec<(i32, NodeAddr)> = answers.into_iter().flatten().collect();
            if !live.is_empty() {
                *d.live.lock() = live;
            }
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
            coordinator::server::protocol::list_response_owning_nothing(v, &r)
        }
        other => anyhow::bail!("request {other:?} is not served"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
    use kafka_protocol::protocol::VersionRange;
    use markers::wire::{
        ConnectError, DEFAULT_MAX_FRAME_BYTES, KafkaConnection, decode_request,
        encode_response_frame, read_frame,
    };
    use tokio::io::AsyncWriteExt;
    use tokio::sync::mpsc;

    /// The port of the stopped daemon; a daemon at any other port answers as node `port`.
    const STOPPED: u16 = 1;
    const LIVE: u16 = 2;
    /// A bound no test waits out: each fails its own bounded wait ([`WAIT`]) first.
    const NEVER: Duration = Duration::from_secs(3600);
    const WAIT: Duration = Duration::from_secs(30);

    /// Daemons in memory: the one at [`STOPPED`] reads requests (reporting each) and never
    /// answers, as a SIGSTOPped daemon whose kernel still accepts connections and data; the
    /// others answer FindCoordinator and InitProducerId with their port as node and producer id.
    #[derive(Debug)]
    struct InMemory {
        stopped_read: mpsc::UnboundedSender<ApiKey>,
    }

    #[async_trait::async_trait]
    impl Connector for InMemory {
        async fn connect(
            &self,
            _host: &str,
            port: u16,
            client_id: &str,
        ) -> Result<BoxedConnection, ConnectError> {
            let (client, mut server) = tokio::io::duplex(1 << 16);
            let stopped_read = self.stopped_read.clone();
            tokio::spawn(async move {
                let node = i32::from(port);
                let any = |_| Some(VersionRange { min: 0, max: 20 });
                while let Ok(Some(frame)) = read_frame(&mut server, DEFAULT_MAX_FRAME_BYTES).await {
                    let req = decode_request(frame, any).expect("a request");
                    if port == STOPPED {
                        let _ = stopped_read.send(req.api_key);
                        continue;
                    }
                    let body = match &req.body {
                        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
                            FindCoordinatorResponse::default().with_coordinators(
                                r.coordinator_keys
                                    .iter()
                                    .map(|k| coordinator(node).with_key(k.clone()))
                                    .collect(),
                            ),
                        ),
                        RequestKind::InitProducerId(_) => ResponseKind::InitProducerId(
                            InitProducerIdResponse::default().with_producer_id(
                                kafka_protocol::messages::ProducerId(i64::from(node)),
                            ),
                        ),
                        other => panic!("unexpected request {other:?}"),
                    };
                    let out = encode_response_frame(
                        req.api_key,
                        req.version(),
                        req.header.correlation_id,
                        &body,
                    )
                    .expect("encoded");
                    if server.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
            Ok(KafkaConnection::new(Box::new(client), client_id))
        }
    }

    /// Node `node` at port `node`, as a FindCoordinator answer names it.
    fn coordinator(node: i32) -> Coordinator {
        Coordinator::default()
            .with_node_id(BrokerId(node))
            .with_host(StrBytes::from_static_str("daemon"))
            .with_port(node)
    }

    /// The stopped daemon (asked first) and the live one, with these bounds, and what the
    /// stopped one reads.
    fn daemons(
        relay: Duration,
        forward: Duration,
    ) -> (Arc<Daemons>, mpsc::UnboundedReceiver<ApiKey>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let addr = |port| NodeAddr {
            host: "daemon".into(),
            port,
        };
        let mut d = Daemons::new(
            vec![addr(STOPPED), addr(LIVE)],
            Vec::new(),
            Arc::new(InMemory { stopped_read: tx }),
        );
        d.relay_timeout = relay;
        d.forward_timeout = forward;
        (Arc::new(d), rx)
    }

    fn lookup() -> FindCoordinatorRequest {
        FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![StrBytes::from_static_str("txn-a")])
    }

    /// Waits (bounded) until the stopped daemon has read a request of `api`.
    async fn reached_stopped(rx: &mut mpsc::UnboundedReceiver<ApiKey>, api: ApiKey) {
        let got = tokio::time::timeout(WAIT, rx.recv()).await;
        assert_eq!(
            got.ok().flatten(),
            Some(api),
            "the stopped daemon got the call"
        );
    }

    #[tokio::test]
    async fn a_relay_is_not_queued_behind_a_call_to_a_stopped_daemon() {
        let (d, mut rx) = daemons(NEVER, NEVER);
        let first = tokio::spawn({
            let d = d.clone();
            async move { d.find_coordinator(&lookup(), 4).await }
        });
        reached_stopped(&mut rx, ApiKey::FindCoordinator).await;
        // Another lookup meanwhile (each verification of a first append makes one): the live
        // daemon answers it while the first still waits on the stopped one.
        let second = tokio::time::timeout(WAIT, d.find_coordinator(&lookup(), 4))
            .await
            .expect("not queued behind the call to the stopped daemon")
            .expect("answered");
        assert_eq!(second.coordinators[0].node_id, BrokerId(i32::from(LIVE)));
        assert!(!first.is_finished());
        first.abort();
    }

    #[tokio::test]
    async fn with_every_connection_taken_a_relay_uses_the_first_given_back() {
        let (d, mut rx) = daemons(NEVER, NEVER);
        let first = tokio::spawn({
            let d = d.clone();
            async move { d.find_coordinator(&lookup(), 4).await }
        });
        reached_stopped(&mut rx, ApiKey::FindCoordinator).await;
        // The live daemon's connection is taken too (a call in flight there) when the next
        // lookup comes, and given back a moment later.
        let live = d.conns[1].lock().await;
        let second = tokio::spawn({
            let d = d.clone();
            async move { d.find_coordinator(&lookup(), 4).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(live);
        let second = tokio::time::timeout(WAIT, second)
            .await
            .expect("not queued behind the call to the stopped daemon")
            .expect("joined")
            .expect("answered");
        assert_eq!(second.coordinators[0].node_id, BrokerId(i32::from(LIVE)));
        assert!(!first.is_finished());
        first.abort();
    }

    #[tokio::test]
    async fn a_daemon_that_missed_a_relay_is_asked_last_and_not_named() {
        let (mut d, mut rx) = daemons(Duration::from_millis(50), NEVER);
        let r = tokio::time::timeout(WAIT, d.find_coordinator(&lookup(), 4))
            .await
            .expect("bounded")
            .expect("answered by the live daemon");
        reached_stopped(&mut rx, ApiKey::FindCoordinator).await;
        assert_eq!(r.coordinators[0].node_id, BrokerId(i32::from(LIVE)));
        assert_eq!(d.order(), vec![1, 0], "the stopped daemon is asked last");
        let mut named = FindCoordinatorResponse::default()
            .with_coordinators(vec![coordinator(i32::from(STOPPED))]);
        d.hide_silent(&mut named);
        assert_eq!(
            named.coordinators[0].node_id,
            BrokerId(-1),
            "not handed out"
        );
        // While the live daemon's connection is taken, the next lookup waits for it (however
        // long) rather than ask the stopped daemon: that one reads nothing more.
        Arc::get_mut(&mut d).expect("one handle").relay_timeout = NEVER;
        let live = d.conns[1].lock().await;
        let next = tokio::spawn({
            let d = d.clone();
            async move { d.find_coordinator(&lookup(), 4).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(live);
        let r = tokio::time::timeout(WAIT, next)
            .await
            .expect("bounded")
            .expect("joined")
            .expect("answered");
        assert_eq!(r.coordinators[0].node_id, BrokerId(i32::from(LIVE)));
        assert!(rx.try_recv().is_err(), "the stopped daemon was asked again");
    }

    #[tokio::test]
    async fn a_forward_waits_for_a_taken_connection_no_longer_than_its_bound() {
        let (d, mut rx) = daemons(NEVER, Duration::from_millis(50));
        let init = InitProducerIdRequest::default().with_transaction_timeout_ms(60_000);
        // A call to the stopped daemon holds its connection.
        let first = tokio::spawn({
            let (d, init) = (d.clone(), init.clone());
            async move { d.call(0, &init, 4, NEVER).await.is_ok() }
        });
        reached_stopped(&mut rx, ApiKey::InitProducerId).await;
        // A forward cannot have that connection within its bound: not sent there, it goes to
        // the next daemon.
        let r = tokio::time::timeout(WAIT, d.forward(&init, 4))
            .await
            .expect("not held up until the first call ends")
            .expect("answered by the live daemon");
        assert_eq!(r.producer_id.0, i64::from(LIVE));
        assert!(!first.is_finished());
        first.abort();
    }
}
