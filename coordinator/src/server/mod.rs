//! The `txn-coordinator` daemon: the Kafka wire server over the [`crate::shell::Coordinator`],
//! its configuration, the metrics endpoint and the admin commands.

pub mod admin;
pub mod authz;
mod backend;
mod brokers;
mod conn;
pub mod http;
mod keepalive;
pub mod listeners;
#[cfg(feature = "etcd")]
pub mod membership;
pub mod outgoing;
#[cfg(feature = "etcd")]
pub mod peers;
pub mod process;
pub mod protocol;
pub mod rate_limit;
pub mod sasl_auth;
pub mod security_apis;
pub mod security_store;
pub mod session;
pub mod settings;
pub mod tls;
pub mod txn_apis;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use markers::writer::{
    KafkaWireTransport, MetadataLeaderResolver, WireTransportConfig, WriterConfig,
};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

pub use backend::DaemonLog;
pub use brokers::{BrokerError, Brokers};
pub use settings::{
    KEYS, LogBackend, LogFormat, SERVE_KEYS, ServeConfig, ServeKeys, Settings, SettingsError,
};

use crate::shell::{
    Coordinator, CoordinatorOptions, MARKER_COMPLETIONS_CAPACITY, Metrics, SystemClock, WriterSink,
};

/// Default `--listen` address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9093";
/// Default `--data-dir`.
pub const DEFAULT_DATA_DIR: &str = "./txn-data";
/// Default `--node-id`: above the ids Kafka assigns by hand in small clusters, so it does not
/// collide with the brokers' ids.
pub const DEFAULT_NODE_ID: i32 = 1000;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `--listen` (the one PLAINTEXT listener when the key `listeners` is not set).
    pub listen: String,
    /// Whether `--listen` (flag or key) was given: refused together with `listeners`.
    pub listen_given: bool,
    /// `--advertised-listener` (default: the bound address).
    pub advertised_listener: Option<String>,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--node-id`.
    pub node_id: i32,
    /// `--bootstrap-servers`.
    pub bootstrap_servers: Vec<String>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// The checked settings.
    pub settings: Settings,
}

/// What the connection tasks share.
pub(crate) struct Context {
    pub(crate) coordinator: Coordinator,
    pub(crate) brokers: Arc<Brokers>,
    pub(crate) node_id: i32,
    pub(crate) advertised_host: String,
    pub(crate) advertised_port: u16,
    /// The name of the listener this context serves (for the other members' addresses on it).
    #[cfg_attr(
        not(feature = "etcd"),
        expect(dead_code, reason = "only the etcd membership has other members")
    )]
    pub(crate) listener: String,
    pub(crate) settings: Settings,
    pub(crate) metrics: Metrics,
    /// The ACLs (and the authorizer, if any) and SCRAM credentials of the log backend.
    pub(crate) security: Arc<security_store::SecurityState>,
    /// `txn_coordinator_authorization_denials_total`.
    pub(crate) denials: authz::Denials,
    /// The other daemons on the log in etcd and who owns which log partition (`None`: this
    /// daemon owns every partition).
    #[cfg(feature = "etcd")]
    pub(crate) membership: Option<Arc<membership::Membership>>,
}

impl Context {
    /// Whether this daemon shares the log partitions with other daemons (etcd membership).
    pub(crate) fn is_member(&self) -> bool {
        #[cfg(feature = "etcd")]
        {
            self.membership.is_some()
        }
        #[cfg(not(feature = "etcd"))]
        {
            false
        }
    }

    /// Whether this daemon may answer from its state: always alone; on etcd while its
    /// membership lease is known to hold ([`membership::Membership::serving`]).
    pub(crate) fn serving(&self) -> bool {
        #[cfg(feature = "etcd")]
        if let Some(m) = &self.membership {
            return m.serving();
        }
        true
    }
}

/// What the daemon does with one request frame (the message after its length prefix).
#[derive(Debug)]
pub enum Dispatched {
    /// Send these bytes (a whole response frame, length prefix included).
    Respond(bytes::Bytes),
    /// Send nothing and read the next frame (Produce with acks=0).
    Silent,
    /// Close the connection (malformed frame, unknown API, unencodable answer), for this reason.
    Close(String),
}

/// The daemon's request path without the socket: [`markers::wire::decode_request`] against
/// [`protocol::supported`], the answers to refused frames (KIP-511 ApiVersions fallback,
/// UNSUPPORTED_VERSION), and decoded requests through the [`protocol`] conversions and the
/// [`Coordinator`], exactly as a connection of [`serve`] does with each frame it reads. Exposed
/// so that the fuzz target `request_frame` (`fuzz/`) runs the production dispatch on arbitrary
/// bytes.
pub struct Dispatcher {
    ctx: Context,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("node_id", &self.ctx.node_id)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher over `coordinator`, answering Metadata and FindCoordinator as node
    /// `node_id` at `advertised_host:advertised_port`, with `brokers` for the forwarded parts
    /// (no servers: nothing is forwarded).
    pub fn new(
        coordinator: Coordinator,
        brokers: Brokers,
        node_id: i32,
        advertised_host: String,
        advertised_port: u16,
        settings: Settings,
        metrics: Metrics,
    ) -> Self {
        Self {
            ctx: Context {
                coordinator,
                brokers: Arc::new(brokers),
                node_id,
                advertised_host,
                advertised_port,
                listener: "PLAINTEXT".to_owned(),
                security: security_store::SecurityState::in_memory(settings.authorizer_config()),
                denials: authz::Denials::default(),
                settings,
                metrics,
                #[cfg(feature = "etcd")]
                membership: None,
            },
        }
    }

    /// Answers one request frame (without its length prefix), from an unauthenticated client
    /// on the loopback address.
    pub async fn dispatch(&self, frame: bytes::Bytes) -> Dispatched {
        let session = session::Session::anonymous(std::net::Ipv4Addr::LOCALHOST.into());
        conn::dispatch(&self.ctx, &session, frame).await
    }
}

/// Splits `host:port` (IPv6 hosts in brackets).
pub fn split_host_port(s: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = s
        .rsplit_once(':')
        .with_context(|| format!("`{s}` is not HOST:PORT"))?;
    let port: u16 = port.parse().with_context(|| format!("bad port in `{s}`"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    anyhow::ensure!(!host.is_empty(), "`{s}` has no host");
    Ok((host.to_owned(), port))
}

/// Starts the daemon and runs until SIGINT/SIGTERM (then drains and returns `Ok`), or until the
/// log fails (then returns the error).
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let settings = opts.settings.clone();
    // With the key `listeners` set, --listen is not used: say what will be bound.
    let listen = match settings.security.get("listeners") {
        Some(listeners) if !listeners.is_empty() => listeners.clone(),
        _ => opts.listen.clone(),
    };
    tracing::info!(
        listen = %listen,
        advertised = ?opts.advertised_listener,
        data_dir = %opts.data_dir.display(),
        node_id = opts.node_id,
        bootstrap_servers = ?opts.bootstrap_servers,
        metrics_listen = ?opts.metrics_listen,
        "starting txn-coordinator"
    );
    for (k, v) in settings.effective() {
        tracing::info!(key = k, value = %v, "effective configuration");
    }
    for b in &opts.bootstrap_servers {
        split_host_port(b).with_context(|| format!("--bootstrap-servers {b}"))?;
    }

    // The listeners: the key `listeners`, else --listen as one PLAINTEXT listener. Their TLS
    // files and SASL settings are read before anything binds.
    let mut specs = listeners::listener_specs(&settings)?;
    if specs.is_empty() {
        let (host, port) = split_host_port(&opts.listen).context("--listen")?;
        let advertised = match &opts.advertised_listener {
            Some(a) => Some(split_host_port(a).context("--advertised-listener")?),
            None => None,
        };
        specs.push(listeners::ListenerSpec {
            endpoint: listeners::Endpoint {
                name: listeners::SecurityProtocol::Plaintext.name().to_owned(),
                host,
                port,
            },
            protocol: listeners::SecurityProtocol::Plaintext,
            advertised,
        });
    } else if opts.listen_given || opts.advertised_listener.is_some() {
        anyhow::bail!(
            "both --listen/--advertised-listener and the key listeners are given: \
             set the listeners (and advertised.listeners) keys only"
        );
    }
    // The daemons of an etcd cluster probe each other on the inter-broker listener, with its
    // TLS settings as a client (read now: a missing truststore fails the start).
    #[cfg(feature = "etcd")]
    let probe = match settings.txn_log_backend {
        LogBackend::Etcd => {
            let inter_broker = listeners::inter_broker_listener(&settings, &specs)?;
            Some(peers::Probe {
                listener: inter_broker.name().to_owned(),
                connector: outgoing::ClientSecurity::inter_broker(&settings, inter_broker, false)?
                    .connector(),
            })
        }
        LogBackend::Sled => None,
    };
    let memory = Arc::new(listeners::MemoryCredentials::default());
    listeners::load_scram_credentials(&settings, &memory)?;
    let credentials = Arc::new(listeners::CredentialSlot::new(memory.clone()));
    let listener_metrics = listeners::ListenerMetrics::default();
    let built = listeners::build(&settings, &specs, credentials.clone(), &listener_metrics)?;

    // Bind first so that a busy port fails fast, before the log is opened.
    let mut bound_listeners = Vec::new();
    for l in built {
        let addr = l.spec.endpoint.bind_addr();
        let tcp = TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (listener {})", l.spec.name()))?;
        let bound = tcp.local_addr()?;
        let advertised = match &l.spec.advertised {
            Some(a) => a.clone(),
            None => {
                let ip = if bound.ip().is_unspecified() {
                    tracing::warn!(
                        listener = l.spec.name(),
                        "listening on a wildcard address; advertising 127.0.0.1 (set advertised.listeners or --advertised-listener)"
                    );
                    "127.0.0.1".to_owned()
                } else {
                    bound.ip().to_string()
                };
                (ip, bound.port())
            }
        };
        bound_listeners.push((tcp, bound, advertised, Arc::new(l)));
    }
    let bound = bound_listeners[0].1;
    #[cfg(feature = "etcd")]
    let (advertised_host, advertised_port) = bound_listeners[0].2.clone();

    let log = DaemonLog::open(&settings, &opts.data_dir).await?;
    let security =
        security_store::SecurityState::open(log.as_security_store(), settings.authorizer_config())
            .await
            .context("reading the ACLs and SCRAM credentials from the transaction log")?;
    // The SASL listeners now read the log's SCRAM credentials (txn.scram.credentials first).
    credentials.set(Arc::new(listeners::Layered {
        first: memory.clone(),
        then: security_store::credentials(&security),
    }));
    let denials = authz::Denials::default();

    let metrics = Metrics::new();
    let timeout = Duration::from_millis(settings.request_timeout_ms);
    let bootstrap: Vec<(String, u16)> = opts
        .bootstrap_servers
        .iter()
        .filter_map(|b| split_host_port(b).ok())
        .collect();
    let connector = outgoing::ClientSecurity::from_keys(outgoing::BROKER_PREFIX, |k| {
        settings.security.get(k).cloned()
    })
    .context("the connections to the brokers (broker.* keys)")?
    .connector();
    let (done_tx, done_rx) = mpsc::channel(MARKER_COMPLETIONS_CAPACITY);
    let sink = Arc::new(WriterSink::spawn(
        Arc::new(MetadataLeaderResolver::with_connector(
            bootstrap,
            "txn-coordinator",
            timeout,
            connector.clone(),
        )),
        Arc::new(KafkaWireTransport::with_connector(
            WireTransportConfig::default(),
            connector.clone(),
        )),
        WriterConfig {
            request_timeout: timeout,
            ..WriterConfig::default()
        },
        done_tx,
    ));
    let brokers = Arc::new(Brokers::with_connector(
        opts.bootstrap_servers.clone(),
        timeout,
        Duration::from_millis(settings.metadata_max_age_ms),
        connector,
    ));
    let coordinator = Coordinator::start(CoordinatorOptions {
        config: settings.engine.clone(),
        log: log.as_txn_log(),
        clock: Arc::new(SystemClock::new()),
        markers: sink,
        marker_completions: done_rx,
        catalog: brokers.clone(),
        metrics: metrics.clone(),
    });

    // Metrics endpoint, with /health and /ready.
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    registry
        .sub_registry_with_prefix("txn_coordinator")
        .register(
            "authorization_denials",
            "Requests (or parts of requests) denied by the authorizer, by API and operation",
            denials.family().clone(),
        );
    listener_metrics.register(&mut registry);
    registry.register_collector(Box::new(process::ProcessCollector));
    let registry = Arc::new(registry);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    if settings.txn_log_backend == LogBackend::Etcd {
        // Other daemons on the same prefix change ACLs and credentials too.
        security.spawn_refresh(security_store::REFRESH_INTERVAL, shutdown_rx.clone());
    }
    // Set once the membership runs (etcd): until then this daemon owns nothing yet.
    #[cfg(feature = "etcd")]
    let member_cell: Arc<std::sync::OnceLock<Arc<membership::Membership>>> = Arc::default();
    if let Some(addr) = &opts.metrics_listen {
        let l = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on --metrics-listen {addr}"))?;
        let maddr = l.local_addr()?;
        announce(&format!(
            "txn-coordinator metrics on http://{maddr}/metrics"
        ));
        let (c, log2, reg) = (coordinator.clone(), log.clone(), registry.clone());
        let refresh = move || {
            c.refresh_marker_gauges();
            let Some(s) = log2.group_commit_stats() else {
                return;
            };
            let m = c.metrics();
            m.group_commit_batches
                .set(i64::try_from(s.batches).unwrap_or(i64::MAX));
            m.group_commit_requests
                .set(i64::try_from(s.requests).unwrap_or(i64::MAX));
            m.group_commit_largest_batch
                .set(i64::try_from(s.largest_batch).unwrap_or(i64::MAX));
        };
        let c = coordinator.clone();
        let backend = settings.txn_log_backend;
        #[cfg(feature = "etcd")]
        let cell = member_cell.clone();
        let ready = move || {
            let owned: Vec<u32> = match backend {
                LogBackend::Sled => (0..c.config().transaction_state_log_num_partitions).collect(),
                #[cfg(feature = "etcd")]
                LogBackend::Etcd => match cell.get().map(|m| m.owned_partitions()) {
                    None => return Err("joining the daemons on etcd".to_owned()),
                    Some(None) => {
                        return Err(
                            "not a live member on etcd (membership lease not held)".to_owned()
                        );
                    }
                    Some(Some(owned)) => owned,
                },
                #[cfg(not(feature = "etcd"))]
                LogBackend::Etcd => return Err("built without etcd".to_owned()),
            };
            partitions_ready(&owned, |p| {
                c.metrics().is_partition_loaded(txn_log::LogPartition(p))
            })
        };
        tokio::spawn(http::serve_metrics(
            l,
            reg,
            refresh,
            ready,
            shutdown_rx.clone(),
        ));
    }

    #[cfg(feature = "etcd")]
    let membership = match (settings.txn_log_backend, probe) {
        (LogBackend::Etcd, Some(probe)) => Some(
            membership::start(
                &settings,
                membership::Member {
                    node_id: opts.node_id,
                    host: advertised_host.clone(),
                    port: advertised_port,
                    listeners: bound_listeners
                        .iter()
                        .map(|(_, _, (host, port), l)| membership::MemberListener {
                            name: l.spec.name().to_owned(),
                            protocol: l.spec.protocol.name().to_owned(),
                            host: host.clone(),
                            port: *port,
                        })
                        .collect(),
                },
                coordinator.clone(),
                probe,
            )
            .await?,
        ),
        _ => None,
    };
    #[cfg(feature = "etcd")]
    if let Some(m) = &membership {
        let _ = member_cell.set(m.clone());
    }
    // One context per listener: Metadata and FindCoordinator advertise the address of the
    // listener the client connected through.
    let contexts: Vec<Arc<Context>> = bound_listeners
        .iter()
        .map(|(_, _, (host, port), l)| {
            Arc::new(Context {
                coordinator: coordinator.clone(),
                brokers: brokers.clone(),
                node_id: opts.node_id,
                advertised_host: host.clone(),
                advertised_port: *port,
                listener: l.spec.name().to_owned(),
                settings: settings.clone(),
                metrics: metrics.clone(),
                security: security.clone(),
                denials: denials.clone(),
                #[cfg(feature = "etcd")]
                membership: membership.clone(),
            })
        })
        .collect();
    let ctx = contexts[0].clone();

    // Connections are accepted while the partitions load (requests then get
    // COORDINATOR_LOAD_IN_PROGRESS); the ready line is printed once every partition is loaded.
    // On etcd the membership loads what this daemon owns (and loads again a partition lost
    // to an unavailable log); on sled this daemon owns every partition.
    let c2 = coordinator.clone();
    let owns_all = !ctx.is_member();
    let loading = async move {
        if owns_all {
            c2.load_all_partitions().await
        } else {
            Ok(())
        }
    };
    tokio::pin!(loading);
    let mut loaded = false;
    tracing::info!(%bound, advertised = %format!("{}:{}", ctx.advertised_host, ctx.advertised_port), "accepting connections; loading the transaction log");

    let mut conns = tokio::task::JoinSet::new();
    let limit = Arc::new(Semaphore::new(settings.max_connections));
    let stop = shutdown_signal();
    tokio::pin!(stop);
    let outcome: anyhow::Result<()> = loop {
        tokio::select! {
            () = &mut stop => break Ok(()),
            r = &mut loading, if !loaded => {
                if let Err(e) = r {
                    break Err(anyhow::Error::new(e).context("loading the transaction log"));
                }
                loaded = true;
                // Tests and scripts read this line to learn the bound port.
                announce(&format!("txn-coordinator listening on {bound}"));
                for (_, b, _, l) in &bound_listeners {
                    announce(&format!("txn-coordinator listening on {}://{b}", l.spec.name()));
                }
                tracing::info!(%bound, listeners = bound_listeners.len(), "serving");
            }
            reason = coordinator.log_failure() => {
                break Err(anyhow::anyhow!("the transaction log failed: {reason}"));
            }
            (i, accepted) = accept_any(&bound_listeners) => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    metrics.connections_rejected.inc();
                    tracing::warn!(%peer, max = settings.max_connections, "connection limit reached; closing");
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (ctx, rx, m) = (contexts[i].clone(), shutdown_rx.clone(), metrics.clone());
                let listener = bound_listeners[i].3.clone();
                m.connections.inc();
                conns.spawn(async move {
                    listeners::serve_accepted(stream, peer, ctx, listener, rx).await;
                    m.connections.dec();
                    drop(permit);
                });
                // Reap finished connection tasks so the set does not grow.
                while conns.try_join_next().is_some() {}
            }
        }
    };

    tracing::info!("shutting down: no new connections; finishing requests in progress");
    drop(bound_listeners);
    let _ = shutdown_tx.send(true);
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = conns.len(),
            "connections still busy after 10 s; closing them"
        );
        conns.abort_all();
    }
    coordinator.shutdown().await;
    log.close().await?;
    outcome
}

/// The next connection accepted on any of `listeners`, with the listener's index.
async fn accept_any<A, B, C>(
    listeners: &[(TcpListener, A, B, C)],
) -> (
    usize,
    std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)>,
) {
    std::future::poll_fn(|cx| {
        for (i, (l, ..)) in listeners.iter().enumerate() {
            if let std::task::Poll::Ready(r) = l.poll_accept(cx) {
                return std::task::Poll::Ready((i, r));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// `/ready`'s verdict: `Ok` when every partition in `owned` is loaded, else one short line
/// naming (up to 20 of) those still loading.
pub(crate) fn partitions_ready(owned: &[u32], loaded: impl Fn(u32) -> bool) -> Result<(), String> {
    let loading: Vec<u32> = owned.iter().copied().filter(|&p| !loaded(p)).collect();
    if loading.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = loading.iter().take(20).map(u32::to_string).collect();
    if loading.len() > 20 {
        names.push("...".to_owned());
    }
    Err(format!(
        "{} of {} owned log partitions not loaded yet: {}",
        loading.len(),
        owned.len(),
        names.join(",")
    ))
}

/// File in the data directory recording `transaction.state.log.num.partitions`: the partition
/// of every id depends on it, so it must never change once the log holds data.
pub const PARTITIONS_FILE: &str = "txn-coordinator.partitions";

/// The partition count recorded in `data_dir`, if any.
pub fn recorded_partition_count(data_dir: &Path) -> anyhow::Result<Option<u32>> {
    match std::fs::read_to_string(data_dir.join(PARTITIONS_FILE)) {
        Ok(text) => {
            let n = text
                .trim()
                .strip_prefix("transaction.state.log.num.partitions=")
                .and_then(|v| v.parse().ok())
                .with_context(|| {
                    format!("{} is unreadable", data_dir.join(PARTITIONS_FILE).display())
                })?;
            Ok(Some(n))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => {
            Err(e).with_context(|| format!("reading {}", data_dir.join(PARTITIONS_FILE).display()))
        }
    }
}

/// Refuses a `transaction.state.log.num.partitions` other than the one the log was written
/// with (Kafka refuses to load in that case too); records it on first start.
pub(crate) fn check_partition_count(data_dir: &Path, n: u32) -> anyhow::Result<()> {
    match recorded_partition_count(data_dir)? {
        Some(stored) if stored != n => Err(anyhow::Error::new(SettingsError::Invalid(format!(
            "transaction.state.log.num.partitions is {n}, but the log in {} was written with {stored}; \
             it cannot change once the log holds data",
            data_dir.display()
        )))),
        Some(_) => Ok(()),
        None => {
            std::fs::create_dir_all(data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            let path = data_dir.join(PARTITIONS_FILE);
            let tmp = data_dir.join(format!("{PARTITIONS_FILE}.tmp"));
            std::fs::write(&tmp, format!("transaction.state.log.num.partitions={n}\n"))
                .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}

/// Prints one of the lines scripts read on stdout (the bound addresses). A stdout nobody reads
/// any more (a script that took the first line and closed the pipe) loses the line; it must not
/// stop the server, as `println!` would by panicking. The refbroker announces through it too.
pub fn announce(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_owned_partition_is_loaded() {
        assert_eq!(partitions_ready(&[], |_| false), Ok(()));
        assert_eq!(partitions_ready(&[0, 1, 2], |_| true), Ok(()));
        assert_eq!(
            partitions_ready(&[0, 1, 2, 5], |p| p == 1),
            Err("3 of 4 owned log partitions not loaded yet: 0,2,5".to_owned())
        );
        let many: Vec<u32> = (0..50).collect();
        let e = partitions_ready(&many, |_| false).expect_err("none loaded");
        assert!(
            e.starts_with("50 of 50 owned") && e.ends_with(",19,..."),
            "{e}"
        );
    }
}
