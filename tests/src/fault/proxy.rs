//! A loopback TCP fault proxy that understands Kafka framing.
//!
//! One [`FaultProxy`] fronts one upstream listener. Every accepted connection gets its own
//! upstream connection; frames are relayed whole (read with [`markers::wire::read_frame`]), so
//! faults apply per request or per response:
//!
//! - **delay**: every request waits before it is forwarded;
//! - **sever** ([`FaultProxy::sever`]): close every open connection now;
//! - **down**: new connections are accepted and closed at once, open ones severed;
//! - **blackhole**: requests and responses are swallowed, connections stay open (clients time
//!   out);
//! - **drop responses of one API** ([`FaultProxy::drop_responses`]): the next N responses to
//!   requests of that API are discarded and the client connection is closed, after the request
//!   reached the server (the "response lost" case idempotent retries must survive);
//! - **hold one request class** ([`FaultProxy::hold`]): the next N requests matching a
//!   [`RequestClass`] are kept for a while and then forwarded, while later requests on the
//!   same connection pass first. A held request is delivered even if the client has gone
//!   away: that is how a delayed EndTxn reaches a coordinator after the client moved on
//!   (KAFKA-17754).
//!
//! The proxy refuses upstreams outside 127.0.0.0/8 and binds only 127.0.0.1.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, EndTxnRequest};
use kafka_protocol::protocol::Decodable;
use markers::wire::{read_frame, write_frame};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use txn_log::sync::{Arc, Mutex};

/// Largest frame the proxy relays.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// A class of requests to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// Every request of this API.
    Api(ApiKey),
    /// EndTxn with this `committed` flag (`false` = abort).
    EndTxn {
        /// Commit (`true`) or abort (`false`).
        committed: bool,
    },
}

impl RequestClass {
    fn matches(self, frame: &Bytes) -> bool {
        let Some(key) = api_of(frame) else {
            return false;
        };
        match self {
            Self::Api(k) => key == k,
            Self::EndTxn { committed } => {
                key == ApiKey::EndTxn && end_txn_committed(frame) == Some(committed)
            }
        }
    }
}

fn api_of(frame: &Bytes) -> Option<ApiKey> {
    let raw = i16::from_be_bytes([*frame.first()?, *frame.get(1)?]);
    ApiKey::try_from(raw).ok()
}

/// The correlation id of a request frame (after api key and version).
fn correlation_of(frame: &Bytes) -> Option<i32> {
    let b = frame.get(4..8)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The correlation id of a response frame (its first field).
fn response_correlation_of(frame: &Bytes) -> Option<i32> {
    let b = frame.get(0..4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The `committed` flag of an EndTxn request frame, if it decodes.
fn end_txn_committed(frame: &Bytes) -> Option<bool> {
    let mut buf = frame.clone();
    let version = i16::from_be_bytes([*frame.get(2)?, *frame.get(3)?]);
    kafka_protocol::protocol::decode_request_header_from_buffer(&mut buf).ok()?;
    EndTxnRequest::decode(&mut buf, version)
        .ok()
        .map(|r| r.committed)
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    class: RequestClass,
    duration: Duration,
    remaining: u32,
}

#[derive(Debug, Default)]
struct Faults {
    delay: Duration,
    blackhole: bool,
    down: bool,
    hold: Option<Hold>,
    drop_responses: Option<(ApiKey, u32)>,
}

/// Counters of what the proxy did (for the run report).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Requests forwarded.
    pub requests: u64,
    /// Requests held and later forwarded.
    pub held: u64,
    /// Responses dropped on purpose.
    pub dropped_responses: u64,
    /// Frames swallowed by a blackhole.
    pub blackholed: u64,
    /// Connections severed or refused.
    pub severed: u64,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    faults: Mutex<Faults>,
    stats: Mutex<ProxyStats>,
    sever: watch::Sender<u64>,
}

/// A running proxy (stops when dropped).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// Refuses anything that is not a loopback IPv4 address.
pub fn check_loopback(addr: SocketAddr) -> anyhow::Result<()> {
    match addr {
        SocketAddr::V4(v4) if v4.ip().octets()[0] == 127 => Ok(()),
        other => bail!("refusing non-loopback address {other} (only 127.0.0.0/8 is allowed)"),
    }
}

impl FaultProxy {
    /// Starts a proxy on a free 127.0.0.1 port forwarding to `upstream` (must be in
    /// 127.0.0.0/8).
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        Self::start_on(upstream, 0).await
    }

    /// Like [`FaultProxy::start`] on a chosen port (0 = any).
    pub async fn start_on(upstream: SocketAddr, port: u16) -> anyhow::Result<Self> {
        check_loopback(upstream)?;
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .context("binding the proxy")?;
        let addr = listener.local_addr()?;
        let (sever, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::new(Faults::default()),
            stats: Mutex::new(ProxyStats::default()),
            sever,
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                s.stats.lock().connections += 1;
                if s.faults.lock().down {
                    s.stats.lock().severed += 1;
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(s.clone(), client));
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Delays every request by `d` (zero = no delay).
    pub fn set_delay(&self, d: Duration) {
        self.shared.faults.lock().delay = d;
    }

    /// Swallows every frame in both directions while `on`.
    pub fn set_blackhole(&self, on: bool) {
        self.shared.faults.lock().blackhole = on;
    }

    /// While `on`, open connections are severed and new ones refused.
    pub fn set_down(&self, on: bool) {
        self.shared.faults.lock().down = on;
        if on {
            self.sever();
        }
    }

    /// Closes every open connection now.
    pub fn sever(&self) {
        self.shared.sever.send_modify(|g| *g += 1);
    }

    /// Holds the next `count` requests of `class` for `duration` each; later requests pass.
    pub fn hold(&self, class: RequestClass, duration: Duration, count: u32) {
        self.shared.faults.lock().hold = Some(Hold {
            class,
            duration,
            remaining: count,
        });
    }

    /// Drops the responses to the next `count` requests of `api` (closing the connection).
    pub fn drop_responses(&self, api: ApiKey, count: u32) {
        self.shared.faults.lock().drop_responses = Some((api, count));
    }

    /// Removes every fault (held requests still get delivered when their time comes).
    pub fn heal(&self) {
        *self.shared.faults.lock() = Faults::default();
    }

    /// What the proxy did so far.
    pub fn stats(&self) -> ProxyStats {
        *self.shared.stats.lock()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.sever();
    }
}

type Writer = Arc<tokio::sync::Mutex<OwnedWriteHalf>>;

async fn relay(s: Arc<Shared>, client: TcpStream) {
    let Ok(upstream) = TcpStream::connect(s.upstream).await else {
        s.stats.lock().severed += 1;
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut cr, cw) = client.into_split();
    let (mut ur, uw) = upstream.into_split();
    let uw: Writer = Arc::new(tokio::sync::Mutex::new(uw));
    let cw: Writer = Arc::new(tokio::sync::Mutex::new(cw));
    // correlation id -> API of requests in flight on this connection
    let inflight: Arc<Mutex<HashMap<i32, ApiKey>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut sever = s.sever.subscribe();
    let mut held: JoinSet<()> = JoinSet::new();

    let s2c = {
        let s = s.clone();
        let cw = cw.clone();
        let inflight = inflight.clone();
        async move {
            loop {
                let Ok(Some(frame)) = read_frame(&mut ur, MAX_FRAME).await else {
                    return;
                };
                let api = response_correlation_of(&frame).and_then(|c| inflight.lock().remove(&c));
                let drop_it = {
                    let mut f = s.faults.lock();
                    if f.blackhole {
                        s.stats.lock().blackholed += 1;
                        continue;
                    }
                    match (&mut f.drop_responses, api) {
                        (Some((k, n)), Some(a)) if *k == a && *n > 0 => {
                            *n -= 1;
                            true
                        }
                        _ => false,
                    }
                };
                if drop_it {
                    s.stats.lock().dropped_responses += 1;
                    let _ = cw.lock().await.shutdown().await;
                    return;
                }
                if write_frame(&mut *cw.lock().await, &frame).await.is_err() {
                    return;
                }
            }
        }
    };

    let c2s = {
        let s = s.clone();
        let uw = uw.clone();
        let inflight = inflight.clone();
        let held = &mut held;
        async move {
            loop {
                let Ok(Some(frame)) = read_frame(&mut cr, MAX_FRAME).await else {
                    return;
                };
                let (delay, hold, blackhole) = {
                    let mut f = s.faults.lock();
                    let hold = match &mut f.hold {
                        Some(h) if h.remaining > 0 && h.class.matches(&frame) => {
                            h.remaining -= 1;
                            Some(h.duration)
                        }
                        _ => None,
                    };
                    (f.delay, hold, f.blackhole)
                };
                if blackhole {
                    s.stats.lock().blackholed += 1;
                    continue;
                }
                if let (Some(c), Some(a)) = (correlation_of(&frame), api_of(&frame)) {
                    inflight.lock().insert(c, a);
                }
                if let Some(d) = hold {
                    s.stats.lock().held += 1;
                    let uw = uw.clone();
                    held.spawn(async move {
                        tokio::time::sleep(d).await;
                        let _ = write_frame(&mut *uw.lock().await, &frame).await;
                    });
                    continue;
                }
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                s.stats.lock().requests += 1;
                if write_frame(&mut *uw.lock().await, &frame).await.is_err() {
                    return;
                }
            }
        }
    };

    let severed = async move {
        let _ = sever.changed().await;
    };
    tokio::select! {
        () = c2s => {}
        () = s2c => {}
        () = severed => { s.stats.lock().severed += 1; }
    }
    let _ = cw.lock().await.shutdown().await;
    // Held requests are still delivered (bounded by their hold time), then the upstream
    // connection closes.
    while held.join_next().await.is_some() {}
    let _ = uw.lock().await.shutdown().await;
}
