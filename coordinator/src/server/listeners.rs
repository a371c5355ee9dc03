//! The daemon's listeners, as Kafka names them: `listeners=PLAINTEXT://H:P,SSL://H:P2,...`, each
//! with a security protocol (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`), its TLS setup
//! ([`super::tls`]) and its SASL mechanisms ([`super::sasl_auth`]). Kafka:
//! [`listeners`](https://kafka.apache.org/documentation/#brokerconfigs_listeners),
//! [`listener.security.protocol.map`](https://kafka.apache.org/documentation/#brokerconfigs_listener.security.protocol.map).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use txn_log::sync::{AtomicU64, Ordering};

use anyhow::Context as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use security::sasl::{
    CredentialStore, Mechanism, PlainJaasConfig, SaslServerFactory, ScramCredential,
    ScramMechanism, ScramServerOptions, UnknownUserPolicy,
};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::session::{self, Session};
use super::settings::{Settings, SettingsError};
use super::{Context, conn, sasl_auth, tls};

/// How long a client has to finish its TLS handshake before the connection is closed.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener's security protocol (Kafka's `SecurityProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SecurityProtocol {
    /// No TLS, no authentication: every client is `User:ANONYMOUS`.
    Plaintext,
    /// TLS; with a client certificate the principal is its subject.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Every protocol.
    pub const ALL: [Self; 4] = [
        Self::Plaintext,
        Self::Ssl,
        Self::SaslPlaintext,
        Self::SaslSsl,
    ];

    /// Kafka's name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// The protocol named `name` (case-insensitive, as Kafka's `SecurityProtocol.forName`).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether connections run TLS.
    pub const fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether clients authenticate with SASL.
    pub const fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// One `NAME://HOST:PORT` of `listeners` or `advertised.listeners`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The listener name (upper case by convention: `SASL_SSL`, `INTERNAL`).
    pub name: String,
    /// The host (empty: every interface, as Kafka).
    pub host: String,
    /// The port (0: a free port).
    pub port: u16,
}

impl Endpoint {
    /// `host:port` for binding (an empty host binds every interface).
    pub fn bind_addr(&self) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        if host.contains(':') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

fn bad(key: &str, value: &str, reason: impl std::fmt::Display) -> SettingsError {
    SettingsError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_string(),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Parses `NAME://HOST:PORT,...` (`listeners`, `advertised.listeners`): names unique.
pub fn parse_endpoints(key: &str, value: &str) -> Result<Vec<Endpoint>, SettingsError> {
    let mut out: Vec<Endpoint> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, rest) = item
            .split_once("://")
            .ok_or_else(|| bad(key, value, format!("`{item}` is not NAME://HOST:PORT")))?;
        if !valid_name(name) {
            return Err(bad(key, value, format!("bad listener name `{name}`")));
        }
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| bad(key, value, format!("`{item}` has no port")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad(key, value, format!("bad port in `{item}`")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if out.iter().any(|e| e.name == name) {
            return Err(bad(
                key,
                value,
                format!("listener name `{name}` appears twice"),
            ));
        }
        out.push(Endpoint {
            name: name.to_owned(),
            host: host.to_owned(),
            port,
        });
    }
    Ok(out)
}

/// Parses `listener.security.protocol.map` (`NAME:PROTOCOL,...`).
pub fn parse_protocol_map(
    key: &str,
    value: &str,
) -> Result<BTreeMap<String, SecurityProtocol>, SettingsError> {
    let mut out = BTreeMap::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, proto) = item
            .split_once(':')
            .ok_or_else(|| bad(key, value, format!("`{item}` is not NAME:PROTOCOL")))?;
        if !valid_name(name.trim()) {
            return Err(bad(key, value, format!("bad listener name `{name}`")));
        }
        let p = SecurityProtocol::parse(proto).ok_or_else(|| {
            bad(
                key,
                value,
                format!("`{proto}` is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
            )
        })?;
        out.insert(name.trim().to_owned(), p);
    }
    Ok(out)
}

/// One configured listener: its endpoint and protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// Where it binds.
    pub endpoint: Endpoint,
    /// Its security protocol.
    pub protocol: SecurityProtocol,
    /// What Metadata and FindCoordinator give its clients (`None`: the bound address).
    pub advertised: Option<(String, u16)>,
}

impl ListenerSpec {
    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }
}

/// The listeners of `listeners`, `listener.security.protocol.map` and `advertised.listeners`
/// (empty when `listeners` is not set: then `--listen` is the one PLAINTEXT listener).
pub fn listener_specs(settings: &Settings) -> Result<Vec<ListenerSpec>, SettingsError> {
    let get = |k: &str| settings.security.get(k).map(String::as_str).unwrap_or("");
    let endpoints = parse_endpoints("listeners", get("listeners"))?;
    let map = parse_protocol_map(
        "listener.security.protocol.map",
        get("listener.security.protocol.map"),
    )?;
    let advertised = parse_endpoints("advertised.listeners", get("advertised.listeners"))?;
    let mut specs = Vec::new();
    for e in endpoints {
        let protocol = match map.get(&e.name) {
            Some(p) => *p,
            None if !map.is_empty() => {
                return Err(bad(
                    "listener.security.protocol.map",
                    get("listener.security.protocol.map"),
                    format!("no security protocol for listener {}", e.name),
                ));
            }
            None => SecurityProtocol::parse(&e.name).ok_or_else(|| {
                bad(
                    "listeners",
                    get("listeners"),
                    format!(
                        "listener {} is no security protocol name; map it in listener.security.protocol.map",
                        e.name
                    ),
                )
            })?,
        };
        let adv = advertised.iter().find(|a| a.name == e.name).map(|a| {
            let host = if a.host.is_empty() {
                "127.0.0.1".to_owned()
            } else {
                a.host.clone()
            };
            (host, a.port)
        });
        specs.push(ListenerSpec {
            endpoint: e,
            protocol,
            advertised: adv,
        });
    }
    for a in &advertised {
        if !specs.iter().any(|s| s.name() == a.name) {
            return Err(bad(
                "advertised.listeners",
                get("advertised.listeners"),
                format!("{} is not in listeners", a.name),
            ));
        }
    }
    for (i, s) in specs.iter().enumerate() {
        if s.endpoint.port != 0
            && specs[..i]
                .iter()
                .any(|o| o.endpoint.port == s.endpoint.port && o.endpoint.host == s.endpoint.host)
        {
            return Err(bad(
                "listeners",
                get("listeners"),
                format!("two listeners on {}", s.endpoint.bind_addr()),
            ));
        }
    }
    Ok(specs)
}

/// The listener named by `inter.broker.listener.name` among `specs`: the one the daemons of
/// an etcd cluster probe each other on. Kafka derives its default from
/// `security.inter.broker.protocol` (PLAINTEXT: the listener named PLAINTEXT) and refuses to
/// start when no listener has that name; here the default is the first listener, so that a
/// daemon whose only listener is secured needs no extra key.
pub fn inter_broker_listener<'a>(
    settings: &Settings,
    specs: &'a [ListenerSpec],
) -> Result<&'a ListenerSpec, SettingsError> {
    match settings.security.get("inter.broker.listener.name") {
        Some(name) => specs.iter().find(|s| s.name() == name).ok_or_else(|| {
            bad(
                "inter.broker.listener.name",
                name,
                "must be the name of one of the listeners",
            )
        }),
        None => specs.first().ok_or_else(|| {
            SettingsError::Invalid("no listener for inter.broker.listener.name".into())
        }),
    }
}

/// The keys of one listener (`listener.name.<listener>.<key>`), besides
/// `<mechanism>.sasl.jaas.config`.
const LISTENER_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms",
];

/// Keys whose values stay out of logs.
fn is_secret(key: &str) -> bool {
    key.ends_with("ssl.key.password")
        || key.ends_with("sasl.jaas.config")
        || key == "txn.scram.credentials"
}

/// The value [`Settings::effective`] shows for a listener, TLS or SASL key of `keys`.
pub(crate) fn effective(keys: &BTreeMap<String, String>, key: &str) -> String {
    match (keys.get(key), key) {
        (Some(_), k) if is_secret(k) => "[hidden]".to_owned(),
        (Some(v), _) => v.clone(),
        (
            None,
            "ssl.keystore.type"
            | "ssl.truststore.type"
            | "broker.ssl.keystore.type"
            | "broker.ssl.truststore.type",
        ) => "PEM".to_owned(),
        (None, "broker.security.protocol") => "PLAINTEXT".to_owned(),
        (
            None,
            "broker.ssl.endpoint.identification.algorithm"
            | "ssl.endpoint.identification.algorithm",
        ) => "https".to_owned(),
        (None, "ssl.client.auth") => "none".to_owned(),
        (None, "sasl.server.max.receive.size") => "524288".to_owned(),
        (None, _) => String::new(),
    }
}

/// `sasl.server.max.receive.size` (default 524288).
pub fn sasl_server_max_receive_size(settings: &Settings) -> usize {
    settings
        .security
        .get("sasl.server.max.receive.size")
        .and_then(|v| v.parse().ok())
        .unwrap_or(524_288)
}

/// Checks one listener, TLS or SASL key (`Ok(false)`: not one of them).
pub(crate) fn check_key(key: &str, value: &str) -> Result<bool, SettingsError> {
    let base = match key.strip_prefix("listener.name.") {
        Some(rest) => {
            let Some((name, k)) = rest.split_once('.') else {
                return Ok(false);
            };
            if name.is_empty() || name.chars().any(|c| c.is_ascii_uppercase()) {
                return Err(bad(key, value, "the listener name must be in lower case"));
            }
            if let Some(m) = k.strip_suffix(".sasl.jaas.config") {
                let mech = Mechanism::ALL
                    .into_iter()
                    .find(|x| x.name().eq_ignore_ascii_case(m))
                    .ok_or_else(|| bad(key, "[hidden]", format!("unknown mechanism `{m}`")))?;
                check_jaas(key, value, Some(mech))?;
                return Ok(true);
            }
            if !LISTENER_KEYS.contains(&k) {
                return Ok(false);
            }
            k
        }
        None => key,
    };
    match base {
        "listeners" | "advertised.listeners" => {
            parse_endpoints(key, value)?;
        }
        "listener.security.protocol.map" => {
            parse_protocol_map(key, value)?;
        }
        "inter.broker.listener.name" => {
            if !valid_name(value.trim()) {
                return Err(bad(key, value, "not a listener name"));
            }
        }
        "ssl.endpoint.identification.algorithm" => {
            super::outgoing::check_value(base, value).map_err(|e| bad(key, value, e))?;
        }
        super::outgoing::INTER_BROKER_MECHANISM => {
            super::outgoing::check_value("sasl.mechanism", value)
                .map_err(|e| bad(key, value, e))?;
        }
        "ssl.keystore.type" | "ssl.truststore.type" => {
            if !value.trim().eq_ignore_ascii_case("PEM") {
                return Err(bad(
                    key,
                    value,
                    "only PEM is supported (convert JKS or PKCS12 stores with keytool or openssl)",
                ));
            }
        }
        "ssl.keystore.location" | "ssl.truststore.location" => {
            if value.trim().is_empty() {
                return Err(bad(key, value, "must not be empty"));
            }
        }
        "ssl.key.password" => {}
        "ssl.client.auth" => {
            if !matches!(value.trim(), "none" | "requested" | "required") {
                return Err(bad(key, value, "must be none, requested or required"));
            }
        }
        "sasl.enabled.mechanisms" => {
            Mechanism::parse_list(value).map_err(|e| bad(key, value, e))?;
        }
        "sasl.jaas.config" => check_jaas(key, value, None)?,
        "sasl.server.max.receive.size" => match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => {}
            _ => return Err(bad(key, value, "must be a positive integer")),
        },
        "txn.scram.credentials" => {
            parse_scram_credentials(value).map_err(|e| bad(key, "[hidden]", e))?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn check_jaas(key: &str, value: &str, mechanism: Option<Mechanism>) -> Result<(), SettingsError> {
    use security::sasl::{JaasConfig, PLAIN_LOGIN_MODULE};
    // The value holds passwords: never in the error.
    let hidden = |e: &dyn std::fmt::Display| bad(key, "[hidden]", e);
    if mechanism == Some(Mechanism::Plain) || value.contains(PLAIN_LOGIN_MODULE) {
        PlainJaasConfig::parse(value).map_err(|e| hidden(&e))?;
    } else {
        JaasConfig::parse(value).map_err(|e| hidden(&e))?;
    }
    Ok(())
}

/// A key of listener `listener`: `listener.name.<listener lower case>.<key>` if set, else `<key>`.
pub fn listener_key<'a>(settings: &'a Settings, listener: &str, key: &str) -> Option<&'a str> {
    let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    settings
        .security
        .get(&prefixed)
        .or_else(|| settings.security.get(key))
        .map(String::as_str)
}

/// The listener-prefixed key only (Kafka reads `ssl.client.auth` of a SASL_SSL listener only
/// from its prefix, KIP-684).
pub fn prefixed_key<'a>(settings: &'a Settings, listener: &str, key: &str) -> Option<&'a str> {
    let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    settings.security.get(&prefixed).map(String::as_str)
}

/// The SCRAM credentials of the daemon until the log backend keeps them: in memory, empty at
/// start. The daemon reads credentials through [`CredentialSlot`], which a persistent store
/// replaces.
#[derive(Debug, Default)]
pub struct MemoryCredentials {
    creds: crate::sync::Mutex<BTreeMap<(String, ScramMechanism), ScramCredential>>,
}

impl MemoryCredentials {
    /// Sets `user`'s credential for `mechanism`.
    pub fn insert(&self, user: &str, mechanism: ScramMechanism, credential: ScramCredential) {
        self.creds
            .lock()
            .insert((user.to_owned(), mechanism), credential);
    }
}

impl CredentialStore for MemoryCredentials {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, security::sasl::CredentialLookupError> {
        Ok(self
            .creds
            .lock()
            .get(&(user.to_owned(), mechanism))
            .cloned())
    }
}

/// Two stores: a credential of `first` wins over one of `then`.
pub struct Layered {
    /// Looked up first (`txn.scram.credentials`).
    pub first: Arc<MemoryCredentials>,
    /// Looked up when `first` has none (the log backend's credentials).
    pub then: Arc<dyn CredentialStore>,
}

impl CredentialStore for Layered {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, security::sasl::CredentialLookupError> {
        match self.first.scram_credential(user, mechanism)? {
            Some(c) => Ok(Some(c)),
            None => self.then.scram_credential(user, mechanism),
        }
    }
}

/// Where the SCRAM servers of every SASL listener read credentials: a store that can be
/// replaced while the daemon runs (the log backend's store once it is open), read on each
/// lookup.
pub struct CredentialSlot {
    store: crate::sync::Mutex<Arc<dyn CredentialStore>>,
}

impl std::fmt::Debug for CredentialSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialSlot").finish_non_exhaustive()
    }
}

impl CredentialSlot {
    /// A slot holding `store`.
    pub fn new(store: Arc<dyn CredentialStore>) -> Self {
        Self {
            store: crate::sync::Mutex::new(store),
        }
    }

    /// Replaces the store.
    pub fn set(&self, store: Arc<dyn CredentialStore>) {
        *self.store.lock() = store;
    }

    fn current(&self) -> Arc<dyn CredentialStore> {
        self.store.lock().clone()
    }
}

impl CredentialStore for CredentialSlot {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, security::sasl::CredentialLookupError> {
        self.current().scram_credential(user, mechanism)
    }
}

/// One credential of `txn.scram.credentials`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramEntry {
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// The user name.
    pub name: String,
    /// The password.
    pub password: String,
    /// The iteration count (default 4096).
    pub iterations: u32,
}

/// Parses `txn.scram.credentials`: entries as `kafka-storage format --add-scram` takes them,
/// `SCRAM-SHA-512=[name=alice,password=alice-secret]` (optionally `,iterations=8192`),
/// separated by `;` or `,`.
pub fn parse_scram_credentials(value: &str) -> Result<Vec<ScramEntry>, String> {
    let mut out = Vec::new();
    let mut rest = value.trim();
    while !rest.is_empty() {
        let (mech, after) = rest
            .split_once("=[")
            .ok_or("expected MECHANISM=[name=NAME,password=PASSWORD]")?;
        let mechanism: ScramMechanism = mech
            .trim()
            .parse()
            .map_err(|_| format!("`{}` is not SCRAM-SHA-256 or SCRAM-SHA-512", mech.trim()))?;
        let (inner, after) = after.split_once(']').ok_or("missing `]`")?;
        let (mut name, mut password, mut iterations) = (None, None, ScramMechanism::MIN_ITERATIONS);
        for kv in inner.split(',') {
            match kv.split_once('=') {
                Some(("name", v)) => name = Some(v.to_owned()),
                Some(("password", v)) => password = Some(v.to_owned()),
                Some(("iterations", v)) => {
                    iterations = v.parse().map_err(|_| "bad iterations".to_owned())?;
                }
                _ => return Err("expected name=, password= and iterations= only".to_owned()),
            }
        }
        let (Some(name), Some(password)) = (name, password) else {
            return Err("each entry needs name= and password=".to_owned());
        };
        if name.is_empty() {
            return Err("empty name".to_owned());
        }
        if !(ScramMechanism::MIN_ITERATIONS..=ScramMechanism::MAX_ITERATIONS).contains(&iterations)
        {
            return Err(format!(
                "iterations must be {} to {}",
                ScramMechanism::MIN_ITERATIONS,
                ScramMechanism::MAX_ITERATIONS
            ));
        }
        out.push(ScramEntry {
            mechanism,
            name,
            password,
            iterations,
        });
        rest = after.trim_start_matches([',', ';', ' ']);
    }
    Ok(out)
}

/// Puts the credentials of `txn.scram.credentials` into `store`.
pub fn load_scram_credentials(
    settings: &Settings,
    store: &MemoryCredentials,
) -> anyhow::Result<()> {
    let Some(value) = settings.security.get("txn.scram.credentials") else {
        return Ok(());
    };
    for e in
        parse_scram_credentials(value).map_err(|e| anyhow::anyhow!("txn.scram.credentials: {e}"))?
    {
        let c = ScramCredential::from_password(e.mechanism, &e.password, e.iterations)
            .map_err(|err| anyhow::anyhow!("txn.scram.credentials: {}: {err}", e.name))?;
        store.insert(&e.name, e.mechanism, c);
    }
    Ok(())
}

/// Labels of `txn_coordinator_authentications_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct AuthLabels {
    /// The listener name.
    pub listener: String,
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, or `SSL` for a TLS handshake on an SSL
    /// listener.
    pub mechanism: String,
    /// `success` or `failure`.
    pub result: &'static str,
}

/// The listeners' metrics.
#[derive(Debug, Clone, Default)]
pub struct ListenerMetrics {
    /// Authentications by listener, mechanism and result.
    pub authentications: Family<AuthLabels, Counter>,
}

impl ListenerMetrics {
    /// Registers under the `txn_coordinator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry
            .sub_registry_with_prefix("txn_coordinator")
            .register(
                "authentications",
                "Authentications by listener, mechanism (SSL: a TLS handshake) and result",
                self.authentications.clone(),
            );
    }

    /// Counts one authentication.
    pub fn count(&self, listener: &str, mechanism: &str, ok: bool) {
        self.authentications
            .get_or_create(&AuthLabels {
                listener: listener.to_owned(),
                mechanism: mechanism.to_owned(),
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }
}

/// At most one warning a second for failed authentications; the others go to debug.
#[derive(Debug, Default)]
pub struct RateLimit {
    last_second: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// `Some(suppressed since the last warning)` when a warning may be logged now.
    pub fn allow(&self) -> Option<u64> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.last_second.load(Ordering::Relaxed);
        if last != now
            && self
                .last_second
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// A listener ready to accept: its spec, TLS acceptor and SASL mechanisms. Made by [`build`];
/// a server accepts on it with [`tls_accept`] and [`sasl_gate`].
pub struct Listener {
    pub(crate) spec: ListenerSpec,
    pub(crate) tls: Option<tls::TlsSetup>,
    pub(crate) sasl: Option<Arc<SaslServerFactory>>,
    pub(crate) max_receive: usize,
    pub(crate) metrics: ListenerMetrics,
    pub(crate) failures: RateLimit,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// What it was built from.
    pub fn spec(&self) -> &ListenerSpec {
        &self.spec
    }

    /// Logs a failed authentication (rate-limited) and counts it.
    pub(crate) fn auth_failed(&self, peer: SocketAddr, mechanism: &str, reason: &str) {
        self.metrics.count(self.spec.name(), mechanism, false);
        match self.failures.allow() {
            Some(suppressed) => tracing::warn!(
                listener = self.spec.name(),
                %peer,
                mechanism,
                %reason,
                suppressed,
                "authentication failed"
            ),
            None => tracing::debug!(
                listener = self.spec.name(),
                %peer,
                mechanism,
                %reason,
                "authentication failed"
            ),
        }
    }
}

/// The default of `sasl.enabled.mechanisms`: PLAIN when the listener has a PLAIN JAAS
/// configuration, and both SCRAM mechanisms.
fn default_mechanisms(plain: bool) -> Vec<Mechanism> {
    let mut m = Vec::new();
    if plain {
        m.push(Mechanism::Plain);
    }
    m.extend([Mechanism::ScramSha256, Mechanism::ScramSha512]);
    m
}

/// The PLAIN users of listener `name`: `listener.name.<l>.plain.sasl.jaas.config`, else a
/// `sasl.jaas.config` with a `PlainLoginModule`.
fn plain_users(settings: &Settings, name: &str) -> anyhow::Result<Option<PlainJaasConfig>> {
    let prefixed = format!(
        "listener.name.{}.plain.sasl.jaas.config",
        name.to_ascii_lowercase()
    );
    if let Some(text) = settings.security.get(&prefixed) {
        return PlainJaasConfig::parse(text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{prefixed}: {e}"));
    }
    match settings.security.get("sasl.jaas.config") {
        Some(text) if text.contains(security::sasl::PLAIN_LOGIN_MODULE) => {
            PlainJaasConfig::parse(text)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("sasl.jaas.config: {e}"))
        }
        _ => Ok(None),
    }
}

/// Builds every listener of `specs`: reads the TLS files and sets up the SASL mechanisms.
/// Errors name the key and the file.
pub fn build(
    settings: &Settings,
    specs: &[ListenerSpec],
    credentials: Arc<dyn CredentialStore>,
    metrics: &ListenerMetrics,
) -> anyhow::Result<Vec<Listener>> {
    let mut out = Vec::new();
    for spec in specs {
        let name = spec.name();
        let tls = if spec.protocol.tls() {
            Some(tls::TlsSetup::new(settings, name, spec.protocol)?)
        } else {
            None
        };
        let sasl = if spec.protocol.sasl() {
            let plain = plain_users(settings, name)?;
            let enabled = match listener_key(settings, name, "sasl.enabled.mechanisms") {
                Some(v) => Mechanism::parse_list(v).map_err(|e| anyhow::anyhow!("{e}"))?,
                None => default_mechanisms(plain.is_some()),
            };
            let options = ScramServerOptions::new(
                UnknownUserPolicy::dummy_exchange().context("random source")?,
            );
            let factory = SaslServerFactory::new(
                &enabled,
                plain.map(|p| Arc::new(p.users)),
                Some(credentials.clone()),
                options,
            )
            .map_err(|e| {
                anyhow::anyhow!(
                    "listener {name}: {e} (PLAIN needs listener.name.{}.plain.sasl.jaas.config \
                     or sasl.jaas.config with the PlainLoginModule)",
                    name.to_ascii_lowercase()
                )
            })?;
            Some(Arc::new(factory))
        } else {
            None
        };
        out.push(Listener {
            spec: spec.clone(),
            tls,
            sasl,
            max_receive: sasl_server_max_receive_size(settings),
            metrics: metrics.clone(),
            failures: RateLimit::default(),
        });
    }
    Ok(out)
}

/// The SASL exchange a connection of `listener` from `peer` goes through first (`None` on
/// listeners without SASL).
pub fn sasl_gate(listener: &Arc<Listener>, peer: SocketAddr) -> Option<sasl_auth::Gate> {
    listener
        .sasl
        .clone()
        .map(|f| sasl_auth::Gate::new(f, listener.clone(), peer))
}

/// The TLS side of an accepted connection of a TLS listener: the handshake (bounded by
/// [`TLS_HANDSHAKE_TIMEOUT`]) and, on an SSL listener, the principal of the client
/// certificate (`User:ANONYMOUS` without one). `None`: the handshake failed (counted and
/// logged), or the listener runs no TLS; the connection is dropped.
pub async fn tls_accept(
    listener: &Listener,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, Session)> {
    let setup = listener.tls.as_ref()?;
    let accepted = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, setup.acceptor.accept(stream)).await;
    let tls_stream = match accepted {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            listener.auth_failed(peer, "SSL", &format!("TLS handshake failed: {e}"));
            return None;
        }
        Err(_) => {
            listener.auth_failed(peer, "SSL", "TLS handshake timed out");
            return None;
        }
    };
    let mut session = Session::anonymous(peer.ip());
    if listener.spec.protocol == SecurityProtocol::Ssl {
        let certs = tls_stream.get_ref().1.peer_certificates();
        session.principal = match certs.and_then(|c| c.first()) {
            Some(cert) => match tls::principal_of(cert) {
                Ok(p) => p,
                Err(e) => {
                    listener.auth_failed(peer, "SSL", &format!("client certificate: {e}"));
                    return None;
                }
            },
            None => session::anonymous(),
        };
        listener.metrics.count(listener.spec.name(), "SSL", true);
        tracing::debug!(%peer, principal = %session.principal, "TLS client authenticated");
    }
    Some((tls_stream, session))
}

/// Serves one accepted connection of `listener`: [`tls_accept`] on TLS listeners, then the
/// requests (after SASL on SASL listeners, [`sasl_gate`]).
pub(crate) async fn serve_accepted(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Context>,
    listener: Arc<Listener>,
    shutdown: watch::Receiver<bool>,
) {
    let sasl = sasl_gate(&listener, peer);
    if listener.tls.is_none() {
        let session = Session::anonymous(peer.ip());
        conn::serve_connection(stream, peer, ctx, session, sasl, shutdown).await;
        return;
    }
    let Some((tls_stream, session)) = tls_accept(&listener, stream, peer).await else {
        return;
    };
    conn::serve_connection(tls_stream, peer, ctx, session, sasl, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_parse_as_kafka() {
        let mut s = Settings::default();
        s.set(
            "listeners",
            "PLAINTEXT://127.0.0.1:0, SASL_SSL://:9094,INTERNAL://[::1]:9095",
        )
        .expect("parses");
        let e = listener_specs(&s).expect_err("INTERNAL has no protocol");
        assert!(e.to_string().contains("INTERNAL"), "{e}");
        s.set(
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL",
        )
        .expect("map");
        s.set("advertised.listeners", "SASL_SSL://coord.example:19094")
            .expect("advertised");
        let specs = listener_specs(&s).expect("valid");
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(specs[1].endpoint.bind_addr(), "0.0.0.0:9094");
        assert_eq!(
            specs[1].advertised,
            Some(("coord.example".to_owned(), 19094))
        );
        assert_eq!(specs[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(specs[2].endpoint.bind_addr(), "[::1]:9095");
        s.set("advertised.listeners", "OTHER://h:1")
            .expect("syntax");
        assert!(listener_specs(&s).is_err());
        for bad in ["PLAINTEXT:127.0.0.1:1", "A://h:1,A://h:2", "X Y://h:1"] {
            assert!(Settings::default().set("listeners", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listener_prefix_wins() {
        let mut s = Settings::default();
        s.set("ssl.client.auth", "required").expect("set");
        s.set("listener.name.sasl_ssl.ssl.client.auth", "none")
            .expect("set");
        assert_eq!(
            listener_key(&s, "SASL_SSL", "ssl.client.auth"),
            Some("none")
        );
        assert_eq!(listener_key(&s, "SSL", "ssl.client.auth"), Some("required"));
        assert_eq!(prefixed_key(&s, "SSL", "ssl.client.auth"), None);
    }

    #[test]
    fn rate_limit_lets_one_through_a_second() {
        let r = RateLimit::default();
        assert_eq!(r.allow(), Some(0));
        assert_eq!(r.allow(), None);
    }
}
