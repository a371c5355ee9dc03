//! Daemon settings: parsed from a TOML file and `--set KEY=VALUE` overrides, checked at start
//! (unknown keys and bad values are errors naming the key). Keys that Kafka also has keep
//! Kafka's names (`transaction.max.timeout.ms`, ...); our own are `txn.*`, `etcd.*`,
//! `producer.id.block.size` and the `serve` flags.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use txn_log::{SledConfig, SyncMode};

use crate::Config;

/// Everything configurable by key: the engine [`Config`] plus the daemon's own limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The engine configuration.
    pub engine: Config,
    /// `socket.request.max.bytes` (default 104857600): largest request frame accepted.
    pub socket_request_max_bytes: usize,
    /// `max.connections` (default 10000): concurrent client connections; more are closed.
    pub max_connections: usize,
    /// `request.timeout.ms` (default 30000): timeout of calls to the brokers (metadata, group
    /// coordinator lookups, markers).
    pub request_timeout_ms: u64,
    /// `metadata.max.age.ms` (default 300000): how long the brokers' topic metadata is cached
    /// for the unknown-topic check of AddPartitionsToTxn.
    pub metadata_max_age_ms: u64,
    /// `connections.max.idle.ms` (default 600000): idle client connections are closed.
    pub connections_max_idle_ms: u64,
    /// `txn.log.sync` (default `fsync`): how the transaction log makes a group commit durable
    /// before anything that depends on it is acknowledged. `os-buffered` skips the fsync
    /// (survives a process crash, **not** a power loss); for comparisons with Kafka only.
    pub txn_log_sync: SyncMode,
    /// `txn.log.cache.bytes` (default 67108864): bytes of sled's page cache
    /// ([`SledConfig::cache_capacity`]).
    pub txn_log_cache_bytes: u64,
    /// `txn.log.backend` (default `sled`): where the transaction log lives.
    pub txn_log_backend: LogBackend,
    /// `etcd.endpoints`: client URLs of the etcd members (`http://host:port`), for
    /// `txn.log.backend=etcd`.
    pub etcd_endpoints: Vec<String>,
    /// `etcd.key.prefix` (default `/txn-coordinator`): prefix of every key in etcd.
    pub etcd_key_prefix: String,
    /// `etcd.lease.ttl.ms` (default 3000): the membership lease; a daemon whose keep-alives
    /// stop is replaced by the others after about this long.
    pub etcd_lease_ttl_ms: u64,
    /// `authorizer.class.name` (default empty: no authorizer, nothing is checked): Kafka's
    /// `org.apache.kafka.metadata.authorizer.StandardAuthorizer` (or the older
    /// `kafka.security.authorizer.AclAuthorizer`) turns on authorization with
    /// [`security::acl::StandardAuthorizer`] (`docs/security.md`, "Authorization").
    pub authorizer_class_name: String,
    /// `super.users` (Kafka's `User:a;User:b`): principals allowed everything.
    pub super_users: String,
    /// `allow.everyone.if.no.acl.found` (default false): the answer for a resource no ACL
    /// applies to.
    pub allow_everyone_if_no_acl_found: bool,
    /// The listener, TLS and SASL keys as given (`listeners`, `ssl.*`, `sasl.*`,
    /// `listener.name.<listener>.*`), checked when set by
    /// [`super::listeners::check_key`] and read by [`super::listeners`] (docs/security.md).
    pub security: BTreeMap<String, String>,
}

/// The `authorizer.class.name` values that turn on the standard authorizer: Kafka's KRaft
/// authorizer and its ZooKeeper-era predecessor (same ACL semantics).
pub const AUTHORIZER_CLASS_NAMES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

/// Where the transaction log lives (`txn.log.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogBackend {
    /// sled in the data directory: the embedded single-node default.
    #[default]
    Sled,
    /// etcd (`etcd.endpoints`): the log replicated by etcd, shareable by several daemons.
    Etcd,
}

impl LogBackend {
    /// The key's value for this backend.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sled => "sled",
            Self::Etcd => "etcd",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            engine: Config {
                producer_id_start: crate::STANDALONE_PRODUCER_ID_START,
                ..Config::default()
            },
            socket_request_max_bytes: markers::wire::DEFAULT_MAX_FRAME_BYTES,
            max_connections: 10_000,
            request_timeout_ms: 30_000,
            metadata_max_age_ms: 300_000,
            connections_max_idle_ms: 600_000,
            txn_log_sync: SyncMode::Fsync,
            txn_log_cache_bytes: SledConfig::DEFAULT_CACHE_BYTES,
            txn_log_backend: LogBackend::Sled,
            etcd_endpoints: Vec::new(),
            etcd_key_prefix: "/txn-coordinator".into(),
            etcd_lease_ttl_ms: 3000,
            authorizer_class_name: String::new(),
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
            security: BTreeMap::new(),
        }
    }
}

/// A configuration error, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The key is not one we know.
    #[error("unknown configuration key `{0}` (see docs/operations.md for the keys)")]
    UnknownKey(String),
    /// The value does not parse or is out of range.
    #[error("invalid value `{value}` for `{key}`: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// The TOML file does not parse.
    #[error("configuration file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// A `--set` argument is not `KEY=VALUE`.
    #[error("--set expects KEY=VALUE, got `{0}`")]
    NotKeyValue(String),
    /// The combination of values is invalid.
    #[error("{0}")]
    Invalid(String),
}

/// The `serve` flags as configuration keys: the flag `--NAME` is the key `NAME` (in the file,
/// `data-dir = "/var/lib/txn"`, or `--set data-dir=...`). A flag given on the command line
/// wins over `--set`, which wins over the file. Key, default (empty: none) and description.
pub const SERVE_KEYS: &[(&str, &str, &str)] = &[
    (
        "listen",
        super::DEFAULT_LISTEN,
        "address to accept Kafka clients on (HOST:PORT)",
    ),
    (
        "advertised-listener",
        "",
        "address Metadata and FindCoordinator give clients (none: the bound address)",
    ),
    (
        "data-dir",
        super::DEFAULT_DATA_DIR,
        "directory of the sled transaction log",
    ),
    (
        "node-id",
        "1000",
        "broker id of this node in Metadata and FindCoordinator answers",
    ),
    (
        "bootstrap-servers",
        "",
        "brokers leading the data partitions (HOST:PORT,...; a TOML array works too)",
    ),
    (
        "metrics-listen",
        "",
        "serve /metrics, /health and /ready on HOST:PORT (none: off)",
    ),
    (
        "log-format",
        "text",
        "text, or json (one JSON object per line)",
    ),
];

/// How the daemon writes its log lines (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (tracing-subscriber's default format).
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

impl LogFormat {
    /// The value naming this format.
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }

    /// Parses `text` or `json`.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "text" => Some(Self::Text),
            "json" => Some(Self::Json),
            _ => None,
        }
    }
}

/// The `serve` flags read from the configuration file or `--set` ([`SERVE_KEYS`]); `None`:
/// not given there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeKeys {
    /// `listen`.
    pub listen: Option<String>,
    /// `advertised-listener`.
    pub advertised_listener: Option<String>,
    /// `data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `node-id`.
    pub node_id: Option<i32>,
    /// `bootstrap-servers`.
    pub bootstrap_servers: Option<Vec<String>>,
    /// `metrics-listen` (`Some(None)`: given empty, i.e. off).
    pub metrics_listen: Option<Option<String>>,
    /// `log-format`.
    pub log_format: Option<LogFormat>,
}

fn host_port(key: &str, value: &str) -> Result<String, SettingsError> {
    let v = value.trim();
    super::split_host_port(v).map_err(|e| bad(key, value, format!("{e:#}")))?;
    Ok(v.to_owned())
}

impl ServeKeys {
    /// Sets `key` if it is one of [`SERVE_KEYS`]; `Ok(false)` if it is not.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, SettingsError> {
        match key {
            "listen" => self.listen = Some(host_port(key, value)?),
            "advertised-listener" => {
                self.advertised_listener = if value.trim().is_empty() {
                    None
                } else {
                    Some(host_port(key, value)?)
                };
            }
            "data-dir" => {
                if value.trim().is_empty() {
                    return Err(bad(key, value, "must not be empty"));
                }
                self.data_dir = Some(PathBuf::from(value.trim()));
            }
            "node-id" => self.node_id = Some(int(key, value, false)?),
            "bootstrap-servers" => {
                let mut servers = Vec::new();
                for b in value.split(',').map(str::trim).filter(|b| !b.is_empty()) {
                    servers.push(host_port(key, b)?);
                }
                self.bootstrap_servers = Some(servers);
            }
            "metrics-listen" => {
                self.metrics_listen = Some(if value.trim().is_empty() {
                    None
                } else {
                    Some(host_port(key, value)?)
                });
            }
            "log-format" => {
                self.log_format = Some(
                    LogFormat::parse(value)
                        .ok_or_else(|| bad(key, value, "must be text or json"))?,
                );
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// What `serve` (and `dump-log`) read from `--config FILE` and `--set`: the [`Settings`] and
/// the [`ServeKeys`], and which keys were given at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeConfig {
    /// The keys of [`KEYS`].
    pub settings: Settings,
    /// The keys of [`SERVE_KEYS`].
    pub flags: ServeKeys,
    /// Every key given in the file or with `--set`.
    pub given: BTreeSet<String>,
}

impl ServeConfig {
    /// Sets `key` (of [`SERVE_KEYS`] or [`KEYS`]) to `value`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), SettingsError> {
        if !self.flags.set(key, value)? {
            self.settings.set(key, value)?;
        }
        self.given.insert(key.to_owned());
        Ok(())
    }

    /// Applies a TOML document (see [`Settings::apply_toml`]).
    pub fn apply_toml(&mut self, path: &str, text: &str) -> Result<(), SettingsError> {
        apply_toml_with(path, text, |k, v| self.set(k, v))
    }

    /// Applies one `KEY=VALUE` override.
    pub fn apply_override(&mut self, kv: &str) -> Result<(), SettingsError> {
        apply_override_with(kv, |k, v| self.set(k, v))
    }

    /// Whether `key` was given in the file or with `--set`.
    pub fn is_given(&self, key: &str) -> bool {
        self.given.contains(key)
    }
}

/// The keys, their defaults and a one-line description (for docs and `--help`).
pub const KEYS: &[(&str, &str, &str)] = &[
    (
        "transaction.max.timeout.ms",
        "900000",
        "largest transaction.timeout.ms a producer may ask for",
    ),
    (
        "transactional.id.expiration.ms",
        "604800000",
        "idle time after which a transactional id is removed",
    ),
    (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "10000",
        "period of the timeout reaper",
    ),
    (
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "3600000",
        "period of transactional id expiry",
    ),
    (
        "transaction.state.log.num.partitions",
        "50",
        "partitions of the transaction log (never change after first start)",
    ),
    (
        "transaction.version",
        "2",
        "cluster transaction version (0, 1, 2); 2 enables KIP-890 EndTxn v5 semantics",
    ),
    (
        "offsets.topic.num.partitions",
        "50",
        "partitions of __consumer_offsets (AddOffsetsToTxn mapping)",
    ),
    (
        "producer.id.block.size",
        "1000",
        "producer ids reserved durably per block",
    ),
    (
        "producer.id.start",
        "1000000000000000",
        "lowest producer id handed out; keeps the daemon's ids out of the brokers' own (Kafka's start at 0)",
    ),
    (
        "transaction.two.phase.commit.enable",
        "false",
        "whether producers may use two-phase commit (KIP-939 Enable2Pc / KeepPreparedTxn)",
    ),
    (
        "txn.park.max.ms",
        "1000",
        "how long a request that meets its id's transaction completing waits for it (0: answer CONCURRENT_TRANSACTIONS at once, as Kafka)",
    ),
    (
        "socket.request.max.bytes",
        "104857600",
        "largest request frame; larger ones close the connection",
    ),
    ("max.connections", "10000", "concurrent client connections"),
    (
        "request.timeout.ms",
        "30000",
        "timeout of calls to the brokers",
    ),
    (
        "metadata.max.age.ms",
        "300000",
        "cache lifetime of the brokers' topic metadata",
    ),
    (
        "connections.max.idle.ms",
        "600000",
        "idle client connections are closed after this",
    ),
    (
        "txn.log.sync",
        "fsync",
        "fsync (durable) or os-buffered (no fsync: NOT durable against power loss; benchmarks only)",
    ),
    (
        "txn.log.cache.bytes",
        "67108864",
        "bytes of the transaction log's page cache (sled cache_capacity)",
    ),
    (
        "txn.log.backend",
        "sled",
        "where the transaction log lives: sled (the data directory, one node) or etcd (etcd.endpoints)",
    ),
    (
        "etcd.endpoints",
        "",
        "client URLs of the etcd members for txn.log.backend=etcd (http://host:port,...)",
    ),
    (
        "etcd.key.prefix",
        "/txn-coordinator",
        "prefix of every key the coordinators write in etcd",
    ),
    (
        "etcd.lease.ttl.ms",
        "3000",
        "membership lease: a daemon that stops refreshing it is replaced after about this long",
    ),
    (
        "authorizer.class.name",
        "",
        "empty: no authorization; org.apache.kafka.metadata.authorizer.StandardAuthorizer (or kafka.security.authorizer.AclAuthorizer): Kafka's ACLs",
    ),
    (
        "super.users",
        "",
        "principals allowed everything, User:a;User:b",
    ),
    (
        "allow.everyone.if.no.acl.found",
        "false",
        "allow an action on a resource no ACL applies to",
    ),
    // Listeners, TLS and SASL: parsed and checked in `super::listeners`.
    (
        "listeners",
        "",
        "NAME://HOST:PORT,... with names PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (or mapped by listener.security.protocol.map); none: --listen, one PLAINTEXT listener",
    ),
    (
        "advertised.listeners",
        "",
        "NAME://HOST:PORT,... Metadata and FindCoordinator give the clients of each listener (none: the bound address)",
    ),
    (
        "listener.security.protocol.map",
        "",
        "NAME:PROTOCOL,... for listener names other than the protocols' own",
    ),
    (
        "inter.broker.listener.name",
        "",
        "the listener the daemons of an etcd cluster probe each other on, with its TLS settings as a client (none: the first listener)",
    ),
    (
        "sasl.mechanism.inter.broker.protocol",
        "",
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512: how the nodes of a refbroker cluster authenticate to each other on a SASL inter-broker listener (the daemons' probes do not authenticate)",
    ),
    (
        "ssl.keystore.type",
        "PEM",
        "format of ssl.keystore.location: PEM only",
    ),
    (
        "ssl.keystore.location",
        "",
        "PEM file with the listener's certificate chain and its unencrypted private key (SSL, SASL_SSL)",
    ),
    (
        "ssl.key.password",
        "",
        "password of an encrypted private key: not supported (encrypted keys are refused); hidden in logs",
    ),
    (
        "ssl.truststore.type",
        "PEM",
        "format of ssl.truststore.location: PEM only",
    ),
    (
        "ssl.truststore.location",
        "",
        "PEM file with the CA certificates client certificates must chain to, and the other daemons' certificates on the inter-broker listener",
    ),
    (
        "ssl.endpoint.identification.algorithm",
        "https",
        "https: another daemon's certificate must name the host its inter-broker listener advertises; empty: not checked (the chain still is)",
    ),
    (
        "ssl.client.auth",
        "none",
        "none, requested or required: client certificates (principal User:<subject DN>); on SASL_SSL only from the listener.name prefix (KIP-684)",
    ),
    (
        "sasl.enabled.mechanisms",
        "",
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (none: both SCRAM mechanisms, and PLAIN where a PLAIN JAAS configuration is given)",
    ),
    (
        "sasl.jaas.config",
        "",
        "JAAS configuration of the SASL listeners (PlainLoginModule user_NAME=\"PASSWORD\" options: the PLAIN users); hidden in logs",
    ),
    (
        "sasl.server.max.receive.size",
        "524288",
        "largest request frame before a SASL client has authenticated",
    ),
    (
        "txn.scram.credentials",
        "",
        "SCRAM credentials kept in memory, as kafka-storage --add-scram: SCRAM-SHA-512=[name=alice,password=alice-secret];... (tests and trials); hidden in logs",
    ),
    (
        "broker.security.protocol",
        "PLAINTEXT",
        "security of the connections to the brokers (metadata, WriteTxnMarkers): PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    ),
    (
        "broker.ssl.truststore.type",
        "PEM",
        "format of broker.ssl.truststore.location: PEM only",
    ),
    (
        "broker.ssl.truststore.location",
        "",
        "PEM file with the CA certificates the brokers' certificates chain to (required by SSL and SASL_SSL)",
    ),
    (
        "broker.ssl.keystore.type",
        "PEM",
        "format of broker.ssl.keystore.location: PEM only",
    ),
    (
        "broker.ssl.keystore.location",
        "",
        "PEM file with this daemon's client certificate chain and unencrypted private key (mutual TLS)",
    ),
    (
        "broker.ssl.key.password",
        "",
        "password of an encrypted private key: not supported (refused); hidden in logs",
    ),
    (
        "broker.ssl.endpoint.identification.algorithm",
        "https",
        "https: the broker's certificate must name the host connected to; empty: not checked (the chain still is)",
    ),
    (
        "broker.sasl.mechanism",
        "",
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (required by SASL_PLAINTEXT and SASL_SSL)",
    ),
    (
        "broker.sasl.jaas.config",
        "",
        "PlainLoginModule or ScramLoginModule with username and password, as a Kafka client's; hidden in logs",
    ),
    (
        "listener.name.<listener>.<key>",
        "",
        "the ssl.* and sasl.enabled.mechanisms keys for one listener (lower-case name), and <mechanism>.sasl.jaas.config (plain.sasl.jaas.config, ...)",
    ),
];

fn bad(key: &str, value: &str, reason: impl fmt::Display) -> SettingsError {
    SettingsError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_string(),
    }
}

fn int<T: std::str::FromStr + PartialOrd + Default>(
    key: &str,
    value: &str,
    positive: bool,
) -> Result<T, SettingsError>
where
    T::Err: fmt::Display,
{
    let v: T = value.trim().parse().map_err(|e| bad(key, value, e))?;
    if positive && v <= T::default() {
        return Err(bad(key, value, "must be positive"));
    }
    Ok(v)
}

/// Kafka's boolean: `true` or `false`, any case.
fn boolean(key: &str, value: &str) -> Result<bool, SettingsError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(bad(key, value, "must be true or false")),
    }
}

impl Settings {
    /// Sets `key` to `value` (a string as given on the command line or in the file).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), SettingsError> {
        let e = &mut self.engine;
        match key {
            "transaction.max.timeout.ms" => e.transaction_max_timeout_ms = int(key, value, true)?,
            "transactional.id.expiration.ms" => {
                e.transactional_id_expiration_ms = int(key, value, true)?;
            }
            "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                e.abort_timed_out_transaction_cleanup_interval_ms = int(key, value, true)?;
            }
            "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                e.remove_expired_transaction_cleanup_interval_ms = int(key, value, true)?;
            }
            "transaction.state.log.num.partitions" => {
                let n: u32 = int(key, value, true)?;
                if n > 10_000 {
                    return Err(bad(key, value, "at most 10000"));
                }
                e.transaction_state_log_num_partitions = n;
            }
            "transaction.version" => {
                let v: u8 = int(key, value, false)?;
                if v > 2 {
                    return Err(bad(key, value, "must be 0, 1 or 2"));
                }
                e.transaction_version = txn_log::TxnVersion::from(v);
            }
            "offsets.topic.num.partitions" => {
                e.offsets_topic_num_partitions = int(key, value, true)?
            }
            "producer.id.block.size" => e.producer_id_block_size = int(key, value, true)?,
            "producer.id.start" => e.producer_id_start = int(key, value, false)?,
            "txn.park.max.ms" => e.park_max_ms = int(key, value, false)?,
            "transaction.two.phase.commit.enable" => {
                e.transaction_two_phase_commit_enable = boolean(key, value)?;
            }
            "socket.request.max.bytes" => {
                let n: i32 = int(key, value, true)?;
                self.socket_request_max_bytes =
                    usize::try_from(n).map_err(|e| bad(key, value, e))?;
            }
            "max.connections" => self.max_connections = int(key, value, true)?,
            "request.timeout.ms" => self.request_timeout_ms = int(key, value, true)?,
            "metadata.max.age.ms" => self.metadata_max_age_ms = int(key, value, false)?,
            "connections.max.idle.ms" => self.connections_max_idle_ms = int(key, value, true)?,
            "txn.log.sync" => {
                self.txn_log_sync = match value.trim() {
                    "fsync" => SyncMode::Fsync,
                    "os-buffered" => SyncMode::OsBuffered,
                    _ => return Err(bad(key, value, "must be fsync or os-buffered")),
                };
            }
            "txn.log.cache.bytes" => {
                let n: u64 = int(key, value, true)?;
                if n < 1024 * 1024 {
                    return Err(bad(key, value, "at least 1048576 (1 MiB)"));
                }
                self.txn_log_cache_bytes = n;
            }
            "txn.log.backend" => {
                self.txn_log_backend = match value.trim() {
                    "sled" => LogBackend::Sled,
                    "etcd" => LogBackend::Etcd,
                    _ => return Err(bad(key, value, "must be sled or etcd")),
                };
            }
            "etcd.endpoints" => {
                let mut endpoints = Vec::new();
                for e in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                    let hostport = e
                        .strip_prefix("http://")
                        .ok_or_else(|| bad(key, value, format!("`{e}` is not http://host:port")))?;
                    match hostport.rsplit_once(':') {
                        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => {}
                        _ => return Err(bad(key, value, format!("`{e}` is not http://host:port"))),
                    }
                    endpoints.push(e.to_owned());
                }
                self.etcd_endpoints = endpoints;
            }
            "etcd.key.prefix" => {
                let p = value.trim();
                if !p.starts_with('/') || p.len() < 2 || p.ends_with('/') {
                    return Err(bad(key, value, "must start with / and not end with /"));
                }
                self.etcd_key_prefix = p.to_owned();
            }
            "etcd.lease.ttl.ms" => {
                let n: u64 = int(key, value, true)?;
                if n < 1000 {
                    return Err(bad(
                        key,
                        value,
                        "at least 1000 (etcd leases count whole seconds)",
                    ));
                }
                self.etcd_lease_ttl_ms = n;
            }
            "authorizer.class.name" => {
                let v = value.trim();
                if !v.is_empty() && !AUTHORIZER_CLASS_NAMES.contains(&v) {
                    return Err(bad(
                        key,
                        value,
                        format!(
                            "the authorizers are {} (empty: none)",
                            AUTHORIZER_CLASS_NAMES.join(", ")
                        ),
                    ));
                }
                self.authorizer_class_name = v.to_owned();
            }
            "super.users" => {
                security::acl::StandardAuthorizerConfig::parse_super_users(value)
                    .map_err(|e| bad(key, value, e))?;
                self.super_users = value.trim().to_owned();
            }
            "allow.everyone.if.no.acl.found" => {
                self.allow_everyone_if_no_acl_found =
                    security::acl::StandardAuthorizerConfig::parse_allow_everyone_if_no_acl_found(
                        value,
                    );
            }
            other if super::outgoing::is_client_key(super::outgoing::BROKER_PREFIX, other) => {
                let base = &other[super::outgoing::BROKER_PREFIX.len()..];
                let shown = if base == "sasl.jaas.config" || base == "ssl.key.password" {
                    "[hidden]"
                } else {
                    value
                };
                super::outgoing::check_value(base, value).map_err(|e| bad(key, shown, e))?;
                self.security
                    .insert(other.to_owned(), value.trim().to_owned());
            }
            other => {
                if !super::listeners::check_key(other, value)? {
                    return Err(SettingsError::UnknownKey(other.to_owned()));
                }
                self.security
                    .insert(other.to_owned(), value.trim().to_owned());
            }
        }
        Ok(())
    }

    /// Applies a TOML document. Keys may be written quoted (`"transaction.version" = 2`) or as
    /// TOML dotted keys (`transaction.version = 2`); both name the same Kafka key.
    pub fn apply_toml(&mut self, path: &str, text: &str) -> Result<(), SettingsError> {
        apply_toml_with(path, text, |k, v| self.set(k, v))
    }

    /// Applies one `KEY=VALUE` override.
    pub fn apply_override(&mut self, kv: &str) -> Result<(), SettingsError> {
        apply_override_with(kv, |k, v| self.set(k, v))
    }

    /// Checks the whole configuration.
    pub fn validate(self) -> Result<Self, SettingsError> {
        let engine = self
            .engine
            .clone()
            .validate()
            .map_err(|e| SettingsError::Invalid(e.to_string()))?;
        if self.socket_request_max_bytes < 64 {
            return Err(bad(
                "socket.request.max.bytes",
                &self.socket_request_max_bytes.to_string(),
                "must be at least 64",
            ));
        }
        let specs = super::listeners::listener_specs(&self)?;
        if !specs.is_empty() {
            super::listeners::inter_broker_listener(&self, &specs)?;
        }
        if self.txn_log_backend == LogBackend::Etcd && self.etcd_endpoints.is_empty() {
            return Err(SettingsError::Invalid(
                "txn.log.backend=etcd needs etcd.endpoints (http://host:port,...)".into(),
            ));
        }
        Ok(Self { engine, ..self })
    }

    /// Every key with its effective value, in [`KEYS`] order.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let e = &self.engine;
        KEYS.iter()
            .map(|(k, _, _)| {
                let v = match *k {
                    "transaction.max.timeout.ms" => e.transaction_max_timeout_ms.to_string(),
                    "transactional.id.expiration.ms" => {
                        e.transactional_id_expiration_ms.to_string()
                    }
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms" => e
                        .abort_timed_out_transaction_cleanup_interval_ms
                        .to_string(),
                    "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                        e.remove_expired_transaction_cleanup_interval_ms.to_string()
                    }
                    "transaction.state.log.num.partitions" => {
                        e.transaction_state_log_num_partitions.to_string()
                    }
                    "transaction.version" => e.transaction_version.0.to_string(),
                    "offsets.topic.num.partitions" => e.offsets_topic_num_partitions.to_string(),
                    "producer.id.block.size" => e.producer_id_block_size.to_string(),
                    "producer.id.start" => e.producer_id_start.to_string(),
                    "txn.park.max.ms" => e.park_max_ms.to_string(),
                    "transaction.two.phase.commit.enable" => {
                        e.transaction_two_phase_commit_enable.to_string()
                    }
                    "socket.request.max.bytes" => self.socket_request_max_bytes.to_string(),
                    "max.connections" => self.max_connections.to_string(),
                    "request.timeout.ms" => self.request_timeout_ms.to_string(),
                    "metadata.max.age.ms" => self.metadata_max_age_ms.to_string(),
                    "connections.max.idle.ms" => self.connections_max_idle_ms.to_string(),
                    "txn.log.sync" => sync_mode_name(self.txn_log_sync).to_owned(),
                    "txn.log.cache.bytes" => self.txn_log_cache_bytes.to_string(),
                    "txn.log.backend" => self.txn_log_backend.name().to_owned(),
                    "etcd.endpoints" => self.etcd_endpoints.join(","),
                    "etcd.key.prefix" => self.etcd_key_prefix.clone(),
                    "etcd.lease.ttl.ms" => self.etcd_lease_ttl_ms.to_string(),
                    "authorizer.class.name" => self.authorizer_class_name.clone(),
                    "super.users" => self.super_users.clone(),
                    "allow.everyone.if.no.acl.found" => {
                        self.allow_everyone_if_no_acl_found.to_string()
                    }
                    k => super::listeners::effective(&self.security, k),
                };
                (*k, v)
            })
            .collect()
    }
}

impl Settings {
    /// The standard authorizer's settings, `None` without `authorizer.class.name`.
    pub fn authorizer_config(&self) -> Option<security::acl::StandardAuthorizerConfig> {
        if self.authorizer_class_name.is_empty() {
            return None;
        }
        Some(security::acl::StandardAuthorizerConfig {
            // Checked by `set`.
            super_users: security::acl::StandardAuthorizerConfig::parse_super_users(
                &self.super_users,
            )
            .unwrap_or_default(),
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
        })
    }

    /// The [`SledConfig`] of a transaction log in `path` under these settings (`txn.log.sync`,
    /// `txn.log.cache.bytes`),
    /// for [`txn_log::SledTxnLog::open`]. The daemon and embedders that parse the daemon's keys
    /// (the refbroker's embedded coordinator) open their log with it. Both load every partition
    /// their log holds right after opening it, so the log is read once at open
    /// ([`SledConfig::preload`]) and sled does not keep the pages that read used.
    pub fn sled_config(&self, path: impl Into<PathBuf>) -> SledConfig {
        let mut c = SledConfig::new(path);
        c.sync_mode = self.txn_log_sync;
        c.cache_capacity = self.txn_log_cache_bytes;
        c.preload = true;
        c
    }
}

fn sync_mode_name(m: SyncMode) -> &'static str {
    match m {
        SyncMode::Fsync => "fsync",
        SyncMode::OsBuffered => "os-buffered",
    }
}

/// Every key of a TOML document with its value as a string: dotted keys joined with `.`,
/// arrays joined with `,`.
/// Calls `set` for every key of a TOML document, in key order.
fn apply_toml_with(
    path: &str,
    text: &str,
    mut set: impl FnMut(&str, &str) -> Result<(), SettingsError>,
) -> Result<(), SettingsError> {
    for (k, v) in toml_pairs(path, text)? {
        set(&k, &v)?;
    }
    Ok(())
}

/// Calls `set` for one `KEY=VALUE` override (both sides trimmed).
fn apply_override_with(
    kv: &str,
    set: impl FnOnce(&str, &str) -> Result<(), SettingsError>,
) -> Result<(), SettingsError> {
    let Some((k, v)) = kv.split_once('=') else {
        return Err(SettingsError::NotKeyValue(kv.to_owned()));
    };
    set(k.trim(), v.trim())
}

fn toml_pairs(path: &str, text: &str) -> Result<BTreeMap<String, String>, SettingsError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| SettingsError::File {
            path: path.to_owned(),
            reason: e.message().to_owned(),
        })?;
    let mut flat = BTreeMap::new();
    flatten("", &toml::Value::Table(table), &mut flat);
    Ok(flat)
}

fn scalar(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(a) => a.iter().map(scalar).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), scalar(other));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_key_table() {
        let s = Settings::default();
        for ((k, v), (k2, default, _)) in s.effective().into_iter().zip(KEYS) {
            assert_eq!(k, *k2);
            assert_eq!(v, *default, "{k}");
        }
    }

    #[test]
    fn toml_accepts_quoted_and_dotted_keys() {
        let mut s = Settings::default();
        s.apply_toml(
            "x.toml",
            "\"transaction.max.timeout.ms\" = 1000\ntransaction.state.log.num.partitions = 3\n",
        )
        .expect("parses");
        assert_eq!(s.engine.transaction_max_timeout_ms, 1000);
        assert_eq!(s.engine.transaction_state_log_num_partitions, 3);
    }

    #[test]
    fn two_phase_commit_is_a_kafka_boolean() {
        let mut s = Settings::default();
        assert!(!s.engine.transaction_two_phase_commit_enable);
        s.apply_toml("x.toml", "transaction.two.phase.commit.enable = true\n")
            .expect("parses");
        assert!(s.engine.transaction_two_phase_commit_enable);
        s.apply_override("transaction.two.phase.commit.enable=FALSE")
            .expect("any case");
        assert!(!s.engine.transaction_two_phase_commit_enable);
        let e = s
            .apply_override("transaction.two.phase.commit.enable=yes")
            .expect_err("not a boolean");
        assert!(e.to_string().contains("two.phase"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let mut s = Settings::default();
        let e = s
            .apply_override("transaction.max.timeout=5")
            .expect_err("unknown");
        assert!(e.to_string().contains("transaction.max.timeout"), "{e}");
        let e = s
            .apply_override("transaction.version=7")
            .expect_err("range");
        assert!(e.to_string().contains("transaction.version"), "{e}");
        let e = s.apply_override("max.connections=lots").expect_err("parse");
        assert!(e.to_string().contains("max.connections"), "{e}");
        let e = s
            .apply_toml("c.toml", "transaction.max.timeout.ms = -1")
            .expect_err("negative");
        assert!(e.to_string().contains("transaction.max.timeout.ms"), "{e}");
        assert!(matches!(
            s.apply_override("novalue"),
            Err(SettingsError::NotKeyValue(_))
        ));
        s.apply_override("transaction.version = 1")
            .expect("spaces are fine");
        assert_eq!(s.engine.transaction_version, txn_log::TxnVersion::V1);
        let e = s.apply_override("txn.log.sync=never").expect_err("mode");
        assert!(e.to_string().contains("txn.log.sync"), "{e}");
    }

    #[test]
    fn every_serve_flag_is_a_key() {
        let mut c = ServeConfig::default();
        c.apply_toml(
            "c.toml",
            "listen = \"0.0.0.0:9094\"\nadvertised-listener = \"coord.example:9094\"\n\
             data-dir = \"/var/lib/txn\"\nnode-id = 7\n\
             bootstrap-servers = [\"b1:9092\", \"b2:9092\"]\nmetrics-listen = \"127.0.0.1:9100\"\n\
             log-format = \"json\"\n\"transaction.version\" = 1\n\
             etcd.endpoints = [\"http://e1:2379\", \"http://e2:2379\"]\n",
        )
        .expect("parses");
        let f = &c.flags;
        assert_eq!(f.listen.as_deref(), Some("0.0.0.0:9094"));
        assert_eq!(f.advertised_listener.as_deref(), Some("coord.example:9094"));
        assert_eq!(
            f.data_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/txn"))
        );
        assert_eq!(f.node_id, Some(7));
        assert_eq!(
            f.bootstrap_servers.as_deref(),
            Some(&["b1:9092".to_owned(), "b2:9092".to_owned()][..])
        );
        assert_eq!(f.metrics_listen, Some(Some("127.0.0.1:9100".to_owned())));
        assert_eq!(f.log_format, Some(LogFormat::Json));
        assert_eq!(
            c.settings.engine.transaction_version,
            txn_log::TxnVersion::V1
        );
        assert_eq!(c.settings.etcd_endpoints.len(), 2);
        assert!(c.is_given("node-id") && !c.is_given("transaction.state.log.num.partitions"));
        c.apply_override("bootstrap-servers=b3:9092").expect("set");
        assert_eq!(f_servers(&c), ["b3:9092"]);
        for bad in [
            "listen=nowhere",
            "log-format=xml",
            "node-id=x",
            "bootstrap-servers=a:1,b",
        ] {
            let e = c.apply_override(bad).expect_err(bad);
            let key = bad.split('=').next().unwrap_or_default();
            assert!(e.to_string().contains(key), "{e}");
        }
        // Every key of the table is accepted, and is no engine key.
        for (k, default, _) in SERVE_KEYS {
            assert!(!KEYS.iter().any(|(k2, _, _)| k2 == k), "{k}");
            if !default.is_empty() {
                ServeConfig::default()
                    .set(k, default)
                    .expect("default parses");
            }
        }
    }

    fn f_servers(c: &ServeConfig) -> Vec<String> {
        c.flags.bootstrap_servers.clone().unwrap_or_default()
    }

    #[test]
    fn txn_log_sync_maps_to_the_sled_config() {
        let mut s = Settings::default();
        assert_eq!(s.sled_config("/x").sync_mode, SyncMode::Fsync);
        s.apply_override("txn.log.sync=os-buffered").expect("valid");
        let c = s.sled_config("/x");
        assert_eq!(c.sync_mode, SyncMode::OsBuffered);
        assert_eq!(c.path, PathBuf::from("/x"));
        s.apply_toml("c.toml", "\"txn.log.sync\" = \"fsync\"")
            .expect("toml");
        assert_eq!(s.txn_log_sync, SyncMode::Fsync);
        s.apply_override("txn.log.cache.bytes=16777216")
            .expect("valid");
        assert_eq!(s.sled_config("/x").cache_capacity, 16 * 1024 * 1024);
        let e = s
            .apply_override("txn.log.cache.bytes=1000")
            .expect_err("too small");
        assert!(e.to_string().contains("txn.log.cache.bytes"), "{e}");
    }
}
