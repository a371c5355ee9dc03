//! The broker process: state, the accept loop and per-connection request handling.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use coordinator::server::announce;
use coordinator::server::listeners::{self, Listener};
use coordinator::server::sasl_auth::{Gate, GateOut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, ResponseKind};
use kafka_protocol::protocol::VersionRange;
use markers::wire::{
    DEFAULT_MAX_FRAME_BYTES, DecodeError, RequestFrame, decode_request, encode_response,
    read_frame, write_frame,
};
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Notify};

use super::groups::Groups;
use super::journal::{Flush, Journal};
use super::partition::Partition;
use super::security::Security;
use super::txn::TxnService;
use super::verify::BrokerVerifier;
use super::{CONSUMER_OFFSETS, Cluster, Config, NodeAddr};
use markers::participant::ParticipantConfig;
use markers::verify::{VerificationConfig, Verifier};

/// A partition of a topic.
pub(crate) type Tp = (String, i32);

/// The broker's shared state.
#[derive(Debug)]
pub struct Broker {
    pub(crate) config: Config,
    pub(crate) cluster: Cluster,
    /// Every topic (user and internal) and its partition count.
    pub(crate) topics: BTreeMap<String, i32>,
    /// The partitions this node leads.
    pub(crate) partitions: BTreeMap<Tp, Arc<Mutex<Partition>>>,
    /// Woken after every append (long-polling fetches wait on it).
    pub(crate) appended: Notify,
    /// `--set log.flush`: whether appends are fsync'd.
    pub(crate) flush: Flush,
    pub(crate) groups: Groups,
    pub(crate) txn: TxnService,
    /// KIP-890 part 1: asks the coordinator before first transactional appends
    /// (`transaction.partition.verification.enable`, default true).
    pub(crate) verifier: Verifier,
    /// The `transaction.version` finalized in ApiVersions (`--set transaction.version`,
    /// default [`DEFAULT_TRANSACTION_VERSION`]).
    pub(crate) transaction_version: i16,
    /// Listeners, SASL credentials, ACLs ([`super::security`]).
    pub(crate) security: Security,
}

/// Who is on the other end of one client connection, and where it came in.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    /// The principal (after TLS / SASL) and the client's address.
    pub(crate) session: coordinator::server::session::Session,
    /// The address of this broker on the listener the client connected through (what
    /// Metadata and FindCoordinator name for this node, as Kafka answers per listener).
    pub(crate) advertised: NodeAddr,
}

impl Conn {
    /// The checks of one `api` request of this connection's client.
    pub(crate) fn authz<'a>(
        &self,
        broker: &'a Broker,
        api: &'static str,
    ) -> coordinator::server::authz::Authz<'a> {
        broker.security.authz(&self.session, api)
    }
}

/// The `transaction.version` among the `--set` values: 0, 1 or 2 (default
/// [`DEFAULT_TRANSACTION_VERSION`]).
pub(crate) fn transaction_version(config: &Config) -> anyhow::Result<i16> {
    match config.settings.get("transaction.version") {
        None => Ok(DEFAULT_TRANSACTION_VERSION),
        Some(v) => match v.trim().parse::<i16>() {
            Ok(n) if (0..=MAX_TRANSACTION_VERSION).contains(&n) => Ok(n),
            _ => anyhow::bail!("transaction.version={v:?}: expected 0, 1 or 2"),
        },
    }
}

/// The verification settings among the `--set` values.
pub(crate) fn verification_config(config: &Config) -> anyhow::Result<VerificationConfig> {
    let mut v = VerificationConfig::default();
    for (k, value) in &config.settings {
        v.set(k, value)?;
    }
    Ok(v)
}

/// The broker's journal in its data directory.
const JOURNAL_FILE: &str = "journal.log";

/// Fails on a data directory written by a refbroker that kept one segment file per partition
/// (`<topic>-<partition>/00000000000000000000.log`): this one would not read it.
fn refuse_partition_segments(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(data_dir).with_context(|| format!("reading {}", data_dir.display()))?;
    for entry in entries {
        let segment = entry?.path().join("00000000000000000000.log");
        if std::fs::metadata(&segment).is_ok_and(|m| m.len() > 0) {
            anyhow::bail!(
                "{} is a per-partition segment of an older refbroker; this one keeps every \
                 partition in {JOURNAL_FILE}: start it on an empty data directory",
                segment.display()
            );
        }
    }
    Ok(())
}

impl Broker {
    /// Opens every partition this node leads (replaying its log) and prepares the services.
    pub async fn open(config: Config, bound: NodeAddr) -> anyhow::Result<Arc<Self>> {
        let security = Security::new(&config)?;
        Self::open_secured(config, bound, security, false).await
    }

    /// [`Self::open`] with the security read from the configuration already; `sasl`: a SASL
    /// listener needs the SCRAM credentials of the log backend.
    pub(crate) async fn open_secured(
        mut config: Config,
        bound: NodeAddr,
        security: Security,
        sasl: bool,
    ) -> anyhow::Result<Arc<Self>> {
        if config.cluster.is_empty() {
            config.cluster.insert(config.node_id, bound);
        }
        let cluster = Cluster::new(config.cluster.clone());
        let mut topics: BTreeMap<String, i32> = config.topics.iter().cloned().collect();
        topics.insert(CONSUMER_OFFSETS.to_owned(), config.offsets_partitions);
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating {}", config.data_dir.display()))?;
        let flush = match config.settings.get("log.flush") {
            None => Flush::default(),
            Some(v) => {
                Flush::parse(v).with_context(|| format!("log.flush={v}: expected fsync or none"))?
            }
        };
        let verification = verification_config(&config)?;
        let transaction_version = transaction_version(&config)?;
        let participant = verification.participant(ParticipantConfig::default());
        refuse_partition_segments(&config.data_dir)?;
        let journal_path = config.data_dir.join(JOURNAL_FILE);
        let (journal, mut recovered) = Journal::open(&journal_path, flush)
            .with_context(|| format!("opening {}", journal_path.display()))?;
        let mut partitions = BTreeMap::new();
        for (topic, &count) in &topics {
            for p in 0..count {
                if cluster.leader(topic, p) != config.node_id {
                    continue;
                }
                let batches = recovered.remove(&(topic.clone(), p)).unwrap_or_default();
                let part = Partition::open(
                    Arc::clone(&journal),
                    (topic, p),
                    batches,
                    topic == CONSUMER_OFFSETS,
                    participant,
                )
                .with_context(|| format!("opening {topic}-{p} from {}", journal_path.display()))?;
                partitions.insert((topic.clone(), p), Arc::new(Mutex::new(part)));
            }
        }
        for ((topic, p), batches) in &recovered {
            tracing::warn!(
                topic,
                partition = p,
                batches = batches.len(),
                "the journal holds batches of a partition this node does not lead; kept, not served"
            );
        }
        let groups = Groups::new(&config);
        let txn = TxnService::new(&config)?;
        let broker = Arc::new_cyclic(|weak| Self {
            config,
            cluster,
            topics,
            partitions,
            appended: Notify::new(),
            flush,
            groups,
            txn,
            verifier: Verifier::new(Arc::new(BrokerVerifier::new(weak.clone())), verification),
            transaction_version,
            security,
        });
        TxnService::start(&broker).await?;
        // Embedded, the coordinator's log holds the ACLs (installed by its start).
        broker
            .security
            .open_standalone(&broker.config, sasl)
            .await?;
        Groups::start(&broker);
        Ok(broker)
    }

    /// The partition `topic`/`partition` if this node leads it.
    pub(crate) fn partition(&self, topic: &str, partition: i32) -> Option<&Arc<Mutex<Partition>>> {
        self.partitions.get(&(topic.to_owned(), partition))
    }

    /// Whether `topic`/`partition` exists in the cluster.
    pub(crate) fn exists(&self, topic: &str, partition: i32) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|&n| (0..n).contains(&partition))
    }

    /// The APIs and versions this broker serves.
    ///
    /// Embedded mode serves the coordinator APIs at the daemon's versions
    /// (`coordinator::server::protocol::SUPPORTED`: TV2's EndTxn v5 included); standalone mode
    /// forwards what reaches it at the versions below, except ListTransactions, which it
    /// answers itself with an empty list.
    ///
    /// With `transaction.version` 2 finalized, the versions of KIP-890 part 2 are served too:
    /// Produce v12 and TxnOffsetCommit v5 (the broker adds the partition to the transaction),
    /// and, standalone, EndTxn v5 forwarded to the daemon (the epoch bump per transaction).
    /// Below 2 they are not listed, so no client takes this broker for a TV2 one.
    pub(crate) fn supported(&self, key: ApiKey) -> Option<VersionRange> {
        if self.txn.is_embedded() && is_coordinator_api(key) {
            return super::embedded::supported(key);
        }
        // SASL and the ACL / SCRAM admin APIs: the daemon's versions (the same code answers).
        if matches!(
            key,
            ApiKey::SaslHandshake
                | ApiKey::SaslAuthenticate
                | ApiKey::CreateAcls
                | ApiKey::DescribeAcls
                | ApiKey::DeleteAcls
                | ApiKey::DescribeUserScramCredentials
                | ApiKey::AlterUserScramCredentials
        ) {
            return coordinator::server::protocol::supported(key);
        }
        let tv2 = self.transaction_version >= 2;
        let (min, max) = match key {
            ApiKey::Produce if tv2 => (3, 12),
            ApiKey::TxnOffsetCommit if tv2 => (0, 5),
            ApiKey::EndTxn if tv2 => (0, 5),
            ApiKey::Produce => (3, 10),
            ApiKey::Fetch => (4, 12),
            ApiKey::ListOffsets => (1, 7),
            ApiKey::Metadata => (0, 12),
            ApiKey::OffsetCommit => (2, 8),
            ApiKey::OffsetFetch => (1, 7),
            ApiKey::FindCoordinator => (0, 4),
            ApiKey::JoinGroup => (0, 7),
            ApiKey::Heartbeat => (0, 4),
            ApiKey::LeaveGroup => (0, 4),
            ApiKey::SyncGroup => (0, 5),
            ApiKey::ApiVersions => (0, 4),
            // v2 (Kafka 4.2, KIP-1228): the marker's transaction version, which the handler
            // hands to the participant's epoch rule.
            ApiKey::WriteTxnMarkers => (1, 2),
            ApiKey::TxnOffsetCommit => (0, 3),
            // Forwarded to the daemon, which serves v6 (KIP-939's two-phase commit).
            ApiKey::InitProducerId => (0, 6),
            ApiKey::AddPartitionsToTxn => (0, 3),
            ApiKey::AddOffsetsToTxn => (0, 3),
            ApiKey::EndTxn => (0, 3),
            // Standalone: no transactional id is coordinated here, so the list is empty (the
            // Admin client asks every broker in Metadata; the daemons answer for theirs). The
            // daemon's versions.
            ApiKey::ListTransactions => (0, 2),
            ApiKey::DescribeProducers => (0, 0),
            _ => return None,
        };
        let codec = key.valid_versions();
        let range = VersionRange {
            min: min.max(codec.min),
            max: max.min(codec.max),
        };
        (range.min <= range.max).then_some(range)
    }

    /// The ApiVersions table.
    pub(crate) fn api_versions(&self, error_code: i16) -> ApiVersionsResponse {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        let api_keys = ApiKey::iter()
            .filter_map(|k| {
                self.supported(k).map(|r| {
                    ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(r.min)
                        .with_max_version(r.max)
                })
            })
            .collect();
        // Features (ApiVersions v3+), as a Kafka broker lists them: `transaction.version`
        // supported up to 2 and finalized at the `transaction.version` setting (not listed at
        // 0, as Kafka lists no feature at level 0). At 2 Kafka's Java client 4.x stops sending
        // AddPartitionsToTxn and relies on Produce v12 / TxnOffsetCommit v5, which add the
        // partition here (KIP-890 part 2). Epoch 1, above the standalone daemon's 0: a client
        // takes the finalized features of the highest epoch, so the brokers decide, not the
        // daemon.
        use kafka_protocol::messages::api_versions_response::{
            FinalizedFeatureKey, SupportedFeatureKey,
        };
        let name = || kafka_protocol::protocol::StrBytes::from_static_str("transaction.version");
        let level = self.transaction_version;
        let finalized = if level > 0 {
            vec![
                FinalizedFeatureKey::default()
                    .with_name(name())
                    .with_min_version_level(level)
                    .with_max_version_level(level),
            ]
        } else {
            Vec::new()
        };
        ApiVersionsResponse::default()
            .with_error_code(error_code)
            .with_api_keys(api_keys)
            .with_supported_features(vec![
                SupportedFeatureKey::default()
                    .with_name(name())
                    .with_min_version(0)
                    .with_max_version(MAX_TRANSACTION_VERSION),
            ])
            .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
            .with_finalized_features(finalized)
    }
}

/// The highest `transaction.version` refbroker supports: 2 (KIP-890 part 2, the broker adds
/// the partition on a Produce v12 / TxnOffsetCommit v5).
pub(crate) const MAX_TRANSACTION_VERSION: i16 = 2;

/// The `transaction.version` refbroker finalizes when no `--set transaction.version` is
/// given: 2, Apache Kafka 4.x's default.
pub(crate) const DEFAULT_TRANSACTION_VERSION: i16 = 2;

/// The epoch of refbroker's finalized features: above the standalone daemon's
/// (`coordinator::server::protocol::FINALIZED_FEATURES_EPOCH`, 0), so clients follow the
/// brokers.
pub(crate) const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// The transaction-coordinator APIs (answered by [`super::txn`]).
fn is_coordinator_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::InitProducerId
            | ApiKey::AddPartitionsToTxn
            | ApiKey::AddOffsetsToTxn
            | ApiKey::EndTxn
            | ApiKey::DescribeTransactions
            | ApiKey::ListTransactions
    )
}

/// Binds the listeners (`listeners`, else `--listen`), prints `refbroker listening on ADDR`
/// (the first listener) and `refbroker listening on NAME://ADDR` (each), and serves until the
/// process ends.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let security = Security::new(&config)?;
    let specs = security.specs(config.listen)?;
    let built = security.build(&specs)?;
    let sasl = built.iter().any(|l| l.spec().protocol.sasl());
    let mut bound_listeners = Vec::new();
    for l in built {
        let addr = l.spec().endpoint.bind_addr();
        let tcp = TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr} (listener {})", l.spec().name()))?;
        let local = tcp.local_addr()?;
        // The address clients are told: `advertised.listeners`; else, for the listener of
        // `--listen`, this node's `--cluster` entry (a proxy in front of the broker, as the fault
        // harness runs it, is what the other nodes and clients reach); else the bound address.
        let own_cluster_entry = config
            .listen
            .and_then(|_| config.cluster.get(&config.node_id).cloned());
        let advertised = match (&l.spec().advertised, own_cluster_entry) {
            (Some((host, port)), _) => NodeAddr {
                host: host.clone(),
                port: *port,
            },
            (None, Some(entry)) => entry,
            (None, None) => NodeAddr {
                host: if local.ip().is_unspecified() {
                    "127.0.0.1".to_owned()
                } else {
                    local.ip().to_string()
                },
                port: local.port(),
            },
        };
        bound_listeners.push((tcp, local, advertised, l));
    }
    let (first_local, first_advertised) = (bound_listeners[0].1, bound_listeners[0].2.clone());
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --metrics-listen {addr}"))?,
        ),
        None => None,
    };
    let broker = Broker::open_secured(config, first_advertised, security, sasl).await?;
    if let Some(l) = metrics_listener {
        tracing::info!(addr = %l.local_addr()?, "serving /metrics");
        super::metrics::serve(l, &broker);
    }
    announce(&format!("refbroker listening on {first_local}"));
    for (_, local, _, l) in &bound_listeners {
        announce(&format!(
            "refbroker listening on {}://{local}",
            l.spec().name()
        ));
    }
    tracing::info!(node = broker.config.node_id, %first_local, "refbroker listening");
    let mut accepting = tokio::task::JoinSet::new();
    for (tcp, _, advertised, listener) in bound_listeners {
        let broker = Arc::clone(&broker);
        accepting.spawn(accept_loop(broker, tcp, advertised, listener));
    }
    match accepting.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(e.into()),
        None => Ok(()),
    }
}

/// Accepts the connections of one listener.
async fn accept_loop(
    broker: Arc<Broker>,
    tcp: TcpListener,
    advertised: NodeAddr,
    listener: Arc<Listener>,
) -> anyhow::Result<()> {
    loop {
        let (sock, peer) = tcp.accept().await?;
        let _ = sock.set_nodelay(true);
        let broker = Arc::clone(&broker);
        let (advertised, listener) = (advertised.clone(), listener.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_connection(&broker, sock, peer, advertised, listener).await {
                tracing::debug!(%peer, error = %e, "connection closed");
            }
        });
    }
}

async fn serve_connection(
    broker: &Arc<Broker>,
    sock: TcpStream,
    peer: SocketAddr,
    advertised: NodeAddr,
    listener: Arc<Listener>,
) -> anyhow::Result<()> {
    let gate = listeners::sasl_gate(&listener, peer);
    if listener.spec().protocol.tls() {
        let Some((tls, session)) = listeners::tls_accept(&listener, sock, peer).await else {
            return Ok(());
        };
        let conn = Conn {
            session,
            advertised,
        };
        let (mut rd, mut wr) = tokio::io::split(tls);
        return serve_stream(broker, conn, gate, &mut rd, &mut wr).await;
    }
    let conn = Conn {
        session: coordinator::server::session::Session::anonymous(peer.ip()),
        advertised,
    };
    let (mut rd, mut wr) = sock.into_split();
    serve_stream(broker, conn, gate, &mut rd, &mut wr).await
}

/// Serves requests from `rd` one at a time, in order (as Kafka does per connection); with
/// `gate`, the client authenticates first (the daemon's SASL exchange).
pub(crate) async fn serve_stream<R, W>(
    broker: &Arc<Broker>,
    mut conn: Conn,
    mut gate: Option<Gate>,
    rd: &mut R,
    wr: &mut W,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let record = |api: &'static str, code: coordinator::ErrorCode| {
        broker.security.metrics.record(api, code);
    };
    loop {
        let pending = gate.as_mut().filter(|g| !g.is_done());
        let max = pending
            .as_ref()
            .map_or(DEFAULT_MAX_FRAME_BYTES, |g| g.max_frame());
        let Some(frame) = read_frame(rd, max).await? else {
            return Ok(());
        };
        let reply = match pending {
            None => handle_frame(broker, &conn, frame).await,
            Some(g) => match g.on_frame(&record, frame) {
                GateOut::Pass(frame) => handle_frame(broker, &conn, frame).await,
                GateOut::Respond(bytes) => {
                    wr.write_all(&bytes).await?;
                    continue;
                }
                GateOut::Authenticated(bytes, principal) => {
                    conn.session.principal = principal;
                    wr.write_all(&bytes).await?;
                    continue;
                }
                GateOut::RespondAndClose(bytes, why) => {
                    wr.write_all(&bytes).await?;
                    wr.flush().await?;
                    tracing::debug!(%why, "SASL authentication failed; closing connection");
                    return Ok(());
                }
                GateOut::Close(why) => {
                    tracing::debug!(%why, "closing connection before SASL authentication");
                    return Ok(());
                }
            },
        };
        match reply {
            Reply::Send(bytes) => write_frame(wr, &bytes).await?,
            Reply::Nothing => {}
            Reply::Close(why) => {
                tracing::debug!(%why, "closing connection");
                return Ok(());
            }
        }
    }
}

/// What to do after one request.
pub(crate) enum Reply {
    /// Send this response frame.
    Send(Bytes),
    /// No response (Produce with acks=0).
    Nothing,
    /// Close the connection (what Kafka does with a request it cannot parse).
    Close(String),
}

async fn handle_frame(broker: &Arc<Broker>, conn: &Conn, frame: Bytes) -> Reply {
    let req = match decode_request(frame, |k| broker.supported(k)) {
        Ok(req) => req,
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => {
            // KIP-511: answer a too-new ApiVersions with v0 and UNSUPPORTED_VERSION.
            let body = ResponseKind::ApiVersions(
                broker.api_versions(kafka_protocol::ResponseError::UnsupportedVersion.code()),
            );
            return match encode_response(ApiKey::ApiVersions, 0, correlation_id, &body) {
                Ok(b) => Reply::Send(b),
                Err(e) => Reply::Close(e.to_string()),
            };
        }
        Err(e) => return Reply::Close(e.to_string()),
    };
    let api_key = req.api_key;
    let version = req.version();
    let correlation_id = req.header.correlation_id;
    match super::handlers::dispatch(broker, conn, req).await {
        Ok(Some(body)) => match encode_response(api_key, version, correlation_id, &body) {
            Ok(b) => Reply::Send(b),
            Err(e) => {
                tracing::error!(?api_key, version, error = %e, "cannot encode response");
                Reply::Close(e.to_string())
            }
        },
        Ok(None) => Reply::Nothing,
        Err(e) => Reply::Close(e.to_string()),
    }
}

/// A decoded request, for handlers.
pub(crate) type Req = RequestFrame;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_with_per_partition_segments_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(JOURNAL_FILE), b"").unwrap();
        std::fs::create_dir(dir.path().join("t-0")).unwrap();
        let segment = dir.path().join("t-0").join("00000000000000000000.log");
        std::fs::write(&segment, b"").unwrap();
        refuse_partition_segments(dir.path()).expect("an empty segment holds nothing to lose");
        std::fs::write(&segment, b"batches").unwrap();
        let err = refuse_partition_segments(dir.path()).unwrap_err();
        assert!(err.to_string().contains("older refbroker"), "{err}");
    }
}
