//! Security of outgoing connections: the daemon's to the brokers (metadata, group lookups,
//! WriteTxnMarkers), and a broker's to the daemons (the reference broker's forwarded requests
//! and KIP-890 verification). Kafka's client keys under a prefix (`broker.` for the daemon):
//! `security.protocol`, `ssl.truststore.location`, `ssl.keystore.location` (mutual TLS),
//! `ssl.endpoint.identification.algorithm`, `sasl.mechanism`, `sasl.jaas.config`
//! (`docs/security.md`, "Connections to the brokers").
//!
//! TLS is rustls on the same provider and PEM reading as the listeners ([`super::tls`]); SASL
//! runs the security crate's clients over SaslHandshake v1 and SaslAuthenticate v1, as Kafka's
//! `SaslClientAuthenticator` does. Connect, TLS handshake and SASL exchange are bounded
//! together; a failure is a [`ConnectError`] (the callers retry) and a log line naming the node.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use markers::wire::{
    BoxedConnection, ConnectError, Connector, KafkaConnection, KafkaStream, PlaintextConnector,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use security::sasl::{ClientCredentials, Mechanism};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::listeners::{ListenerSpec, SecurityProtocol, listener_key};
use super::rate_limit::RateLimit;
use super::settings::Settings;
use super::tls::{pem_certificates, private_key};

/// The client keys, each under the prefix (`broker.security.protocol`).
pub const CLIENT_KEYS: &[&str] = &[
    "security.protocol",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.jaas.config",
];

/// The SASL mechanism of the connections between the nodes (Kafka's key).
pub const INTER_BROKER_MECHANISM: &str = "sasl.mechanism.inter.broker.protocol";

/// The prefix of the daemon's keys for its connections to the brokers.
pub const BROKER_PREFIX: &str = "broker.";

/// Bound on TCP connect + TLS handshake + SASL exchange of one connection, as the listeners'
/// TLS handshake bound.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `key` is one of [`CLIENT_KEYS`] under `prefix`.
pub fn is_client_key(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|k| CLIENT_KEYS.contains(&k))
}

/// Checks the value of one client key (`key` without its prefix); `Err` is the reason.
pub fn check_value(key: &str, value: &str) -> Result<(), String> {
    let v = value.trim();
    match key {
        "security.protocol" if SecurityProtocol::parse(v).is_none() => {
            Err("must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL".into())
        }
        "ssl.truststore.type" | "ssl.keystore.type" if !v.eq_ignore_ascii_case("PEM") => Err(
            "only PEM is supported (convert JKS or PKCS12 stores with keytool or openssl)".into(),
        ),
        "ssl.endpoint.identification.algorithm"
            if !(v.is_empty() || v.eq_ignore_ascii_case("https")) =>
        {
            Err("must be https (check the host name) or empty (do not)".into())
        }
        "sasl.mechanism" if !Mechanism::ALL.into_iter().any(|m| m.name() == v) => {
            Err("must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".into())
        }
        _ => Ok(()),
    }
}

/// The security of one kind of outgoing connection, read from the client keys.
#[derive(Clone)]
pub struct ClientSecurity {
    protocol: SecurityProtocol,
    tls: Option<TlsConnector>,
    sasl: Option<(Mechanism, ClientCredentials)>,
    timeout: Duration,
    failures: Arc<RateLimit>,
}

impl fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("protocol", &self.protocol.name())
            .field("sasl", &self.sasl)
            .finish_non_exhaustive()
    }
}

impl ClientSecurity {
    /// Reads the keys `prefix` + [`CLIENT_KEYS`] through `get`. Errors name the key and file.
    pub fn from_keys(prefix: &str, get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let key = |k: &str| format!("{prefix}{k}");
        let value = |k: &str| -> anyhow::Result<Option<String>> {
            match get(&key(k)) {
                Some(v) => {
                    check_value(k, &v).map_err(|e| anyhow::anyhow!("{}={v:?}: {e}", key(k)))?;
                    Ok(Some(v.trim().to_owned()))
                }
                None => Ok(None),
            }
        };
        let protocol = match value("security.protocol")? {
            Some(v) => SecurityProtocol::parse(&v).unwrap_or(SecurityProtocol::Plaintext),
            None => SecurityProtocol::Plaintext,
        };
        let tls = if protocol.tls() {
            if value("ssl.key.password")?.is_some() {
                bail!(
                    "{}: encrypted private keys are not supported; give an unencrypted key in {}",
                    key("ssl.key.password"),
                    key("ssl.keystore.location")
                );
            }
            let trust_key = key("ssl.truststore.location");
            let Some(truststore) = value("ssl.truststore.location")? else {
                bail!(
                    "{}={}: needs {trust_key}, a PEM file with the CA certificates the servers' certificates chain to \
                     (no system trust store is read)",
                    key("security.protocol"),
                    protocol.name()
                );
            };
            let verify_host = value("ssl.endpoint.identification.algorithm")?
                .is_none_or(|v| v.eq_ignore_ascii_case("https"));
            let keystore = value("ssl.keystore.location")?;
            Some(tls_connector(
                &truststore,
                &trust_key,
                keystore
                    .as_deref()
                    .map(|k| (k, key("ssl.keystore.location"))),
                verify_host,
            )?)
        } else {
            None
        };
        let sasl = if protocol.sasl() {
            let mech_key = key("sasl.mechanism");
            // Kafka's client default is GSSAPI, which is not offered: the key is required.
            let Some(name) = value("sasl.mechanism")? else {
                bail!(
                    "{}={}: needs {mech_key} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)",
                    key("security.protocol"),
                    protocol.name()
                );
            };
            let mechanism = Mechanism::ALL
                .into_iter()
                .find(|m| m.name() == name)
                .with_context(|| format!("{mech_key}={name}: unknown mechanism"))?;
            let jaas_key = key("sasl.jaas.config");
            let Some(jaas) = get(&jaas_key) else {
                bail!(
                    "{mech_key}={name}: needs {jaas_key} with the login module's username and password"
                );
            };
            let creds = ClientCredentials::from_jaas(&jaas, mechanism)
                .map_err(|e| anyhow::anyhow!("{jaas_key}: {e}"))?;
            Some((mechanism, creds))
        } else {
            None
        };
        Ok(Self {
            protocol,
            tls,
            sasl,
            timeout: HANDSHAKE_TIMEOUT,
            failures: Arc::new(RateLimit::default()),
        })
    }

    /// The client side of listener `spec` for connections between the nodes on it, as a Kafka
    /// broker's inter-broker client: TLS with the listener's own truststore (to check the
    /// peer), keystore (the client certificate, sent when the peer asks for one) and
    /// `ssl.endpoint.identification.algorithm`, each read as the listener reads its keys
    /// (`listener.name.<listener>.` first). On a SASL listener, when `authenticate`: SASL with
    /// `sasl.mechanism.inter.broker.protocol` and the `username` and `password` of the
    /// listener's JAAS configuration for it (`listener.name.<listener>.<mechanism>.sasl.jaas.config`,
    /// else `sasl.jaas.config`). Without `authenticate` (the daemons' probes, which ask only
    /// ApiVersions, answered before authentication) no SASL.
    pub fn inter_broker(
        settings: &Settings,
        spec: &ListenerSpec,
        authenticate: bool,
    ) -> anyhow::Result<Self> {
        let name = spec.name();
        let sasl = authenticate && spec.protocol.sasl();
        let protocol = match (spec.protocol.tls(), sasl) {
            (true, true) => SecurityProtocol::SaslSsl,
            (true, false) => SecurityProtocol::Ssl,
            (false, true) => SecurityProtocol::SaslPlaintext,
            (false, false) => SecurityProtocol::Plaintext,
        };
        let mechanism = settings
            .security
            .get(INTER_BROKER_MECHANISM)
            .map(|m| m.trim().to_owned());
        Self::from_keys("", |k| match k {
            "security.protocol" => Some(protocol.name().to_owned()),
            "ssl.key.password" => None,
            "sasl.mechanism" => mechanism.clone(),
            "sasl.jaas.config" => {
                let lower = name.to_ascii_lowercase();
                let mech = mechanism.as_deref().unwrap_or_default().to_ascii_lowercase();
                settings
                    .security
                    .get(&format!("listener.name.{lower}.{mech}.sasl.jaas.config"))
                    .or_else(|| settings.security.get("sasl.jaas.config"))
                    .cloned()
            }
            k => listener_key(settings, name, k).map(str::to_owned),
        })
        .with_context(|| {
            if sasl {
                format!(
                    "connections to the other nodes on listener {name} (inter.broker.listener.name): \
                     sasl.mechanism stands for {INTER_BROKER_MECHANISM}, sasl.jaas.config for \
                     listener.name.{}.<mechanism>.sasl.jaas.config or sasl.jaas.config",
                    name.to_ascii_lowercase()
                )
            } else {
                format!("connections to the other nodes on listener {name} (inter.broker.listener.name)")
            }
        })
    }

    /// The security protocol.
    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// The same, with connect and handshakes bounded by `timeout` (default
    /// [`HANDSHAKE_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A connector for these settings: plain TCP for PLAINTEXT, else this.
    pub fn connector(self) -> Arc<dyn Connector> {
        if self.protocol == SecurityProtocol::Plaintext {
            Arc::new(PlaintextConnector)
        } else {
            Arc::new(self)
        }
    }

    async fn open(
        &self,
        host: &str,
        port: u16,
        client_id: &str,
    ) -> Result<BoxedConnection, ConnectError> {
        let addr = format!("{host}:{port}");
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| ConnectError::Network {
                addr: addr.clone(),
                reason: e.to_string(),
            })?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn KafkaStream> = match &self.tls {
            Some(tls) => {
                let name =
                    ServerName::try_from(host.to_owned()).map_err(|e| ConnectError::Tls {
                        addr: addr.clone(),
                        reason: format!("bad server name {host:?}: {e}"),
                    })?;
                let tls = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| ConnectError::Tls {
                        addr: addr.clone(),
                        reason: e.to_string(),
                    })?;
                Box::new(tls)
            }
            None => Box::new(tcp),
        };
        let mut conn = KafkaConnection::new(stream, client_id);
        if self.tls.is_some() {
            // Under TLS 1.3 a server refuses a client certificate (or its absence) only after
            // the client's side of the handshake is done: the refusal arrives with the first
            // answer. Ask for one here (ApiVersions, as Kafka's clients do first), so that it
            // is this connection's TLS error and not a failure of the caller's first request.
            // The answer stays with the connection: the marker transport reads the broker's
            // WriteTxnMarkers version from it instead of asking a second time.
            conn.api_versions().await.map_err(|e| ConnectError::Tls {
                addr: addr.clone(),
                reason: format!("the session failed at its first request: {e}"),
            })?;
        }
        if let Some((mechanism, creds)) = &self.sasl {
            authenticate(&mut conn, *mechanism, creds)
                .await
                .map_err(|reason| ConnectError::Authentication {
                    addr: addr.clone(),
                    reason,
                })?;
        }
        Ok(conn)
    }
}

#[async_trait::async_trait]
impl Connector for ClientSecurity {
    async fn connect(
        &self,
        host: &str,
        port: u16,
        client_id: &str,
    ) -> Result<BoxedConnection, ConnectError> {
        let result =
            match tokio::time::timeout(self.timeout, self.open(host, port, client_id)).await {
                Ok(r) => r,
                Err(_) => Err(ConnectError::TimedOut {
                    addr: format!("{host}:{port}"),
                    after: self.timeout,
                    stage: "TCP connect, TLS handshake or SASL authentication",
                }),
            };
        if let Err(e) = &result {
            let protocol = self.protocol.name();
            match self.failures.allow() {
                Some(suppressed) => tracing::warn!(
                    node = %format!("{host}:{port}"),
                    protocol,
                    suppressed,
                    "outgoing connection failed: {e}"
                ),
                None => tracing::debug!(
                    node = %format!("{host}:{port}"),
                    protocol,
                    "outgoing connection failed: {e}"
                ),
            }
        }
        result
    }
}

/// The Kafka error name of a SASL error code (Kafka's `Errors`).
fn sasl_error_name(code: i16) -> String {
    match code {
        33 => "UNSUPPORTED_SASL_MECHANISM".into(),
        34 => "ILLEGAL_SASL_STATE".into(),
        58 => "SASL_AUTHENTICATION_FAILED".into(),
        other => format!("error code {other}"),
    }
}

/// SaslHandshake v1 then SaslAuthenticate v1 until the client is done. `Err`: why, with the
/// node's message.
async fn authenticate<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut KafkaConnection<S>,
    mechanism: Mechanism,
    creds: &ClientCredentials,
) -> Result<(), String> {
    let handshake = conn
        .call(
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(mechanism.name())),
            1,
        )
        .await
        .map_err(|e| format!("SaslHandshake: {e}"))?;
    if handshake.error_code != 0 {
        let enabled: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(format!(
            "{}: the node does not enable {} (it enables {})",
            sasl_error_name(handshake.error_code),
            mechanism.name(),
            enabled.join(", ")
        ));
    }
    let mut client = creds.client(mechanism);
    let mut token = client.initial_response().map_err(|e| e.to_string())?;
    loop {
        let answer = conn
            .call(
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
                1,
            )
            .await
            .map_err(|e| format!("SaslAuthenticate: {e}"))?;
        if answer.error_code != 0 {
            return Err(format!(
                "{} as {}: {}",
                sasl_error_name(answer.error_code),
                creds.username,
                answer.error_message.as_deref().unwrap_or("(no message)")
            ));
        }
        match client.step(&answer.auth_bytes).map_err(|e| e.to_string())? {
            Some(next) => token = next,
            None => break,
        }
    }
    if client.is_complete() {
        Ok(())
    } else {
        Err(format!("{} exchange ended early", mechanism.name()))
    }
}

fn tls_connector(
    truststore: &str,
    trust_key: &str,
    keystore: Option<(&str, String)>,
    verify_host: bool,
) -> anyhow::Result<TlsConnector> {
    // The listeners' provider (see `super::tls`).
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in pem_certificates(truststore, trust_key)? {
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("{trust_key}: {truststore}: {e}"))?;
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| anyhow::anyhow!("{trust_key}: {truststore}: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if verify_host {
        webpki
    } else {
        Arc::new(AnyHostName(webpki))
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match keystore {
        Some((path, key)) => {
            let chain = pem_certificates(path, &key)?;
            let private = private_key(path, &key)?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| anyhow::anyhow!("{key}: {path}: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain is checked, the name is not.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain (and its validity dates) before the name, so a name error
        // means everything else held.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{
        ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::VersionRange;
    use markers::wire::{decode_request, encode_response, read_frame, write_frame};
    use security::sasl::{PlainServer, PlainUsers, SaslServer, Step};

    use super::*;

    /// A server end that enables PLAIN (user `coord`, password `right`) when `plain`, else
    /// only SCRAM-SHA-256, and answers the SASL requests of one exchange.
    async fn sasl_server(mut sock: tokio::io::DuplexStream, plain: bool) {
        let mut users = PlainUsers::new();
        users.insert("coord", "right");
        let mut server = PlainServer::new(Arc::new(users));
        let all = |_: ApiKey| Some(VersionRange { min: 0, max: 4 });
        while let Ok(Some(frame)) = read_frame(&mut sock, 1 << 16).await {
            let Ok(req) = decode_request(frame, all) else {
                return;
            };
            let (api_key, version, correlation_id) =
                (req.api_key, req.version(), req.header.correlation_id);
            let body = match req.body {
                RequestKind::SaslHandshake(h) => {
                    let ok = plain && h.mechanism.as_str() == "PLAIN";
                    let enabled = if plain { "PLAIN" } else { "SCRAM-SHA-256" };
                    ResponseKind::SaslHandshake(
                        SaslHandshakeResponse::default()
                            .with_error_code(if ok { 0 } else { 33 })
                            .with_mechanisms(vec![StrBytes::from_static_str(enabled)]),
                    )
                }
                RequestKind::SaslAuthenticate(a) => {
                    ResponseKind::SaslAuthenticate(match server.step(&a.auth_bytes) {
                        Ok(Step::Done { final_bytes, .. }) => {
                            SaslAuthenticateResponse::default().with_auth_bytes(final_bytes.into())
                        }
                        Ok(Step::Continue(b)) => {
                            SaslAuthenticateResponse::default().with_auth_bytes(b.into())
                        }
                        Err(e) => SaslAuthenticateResponse::default()
                            .with_error_code(e.error_code())
                            .with_error_message(Some(StrBytes::from_string(
                                e.client_message(false),
                            ))),
                    })
                }
                _ => return,
            };
            let Ok(out) = encode_response(api_key, version, correlation_id, &body) else {
                return;
            };
            if write_frame(&mut sock, &out).await.is_err() {
                return;
            }
        }
    }

    async fn plain_login(password: &str, server_has_plain: bool) -> Result<(), String> {
        let (client, server) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(sasl_server(server, server_has_plain));
        let mut conn = KafkaConnection::new(client, "test");
        let creds = ClientCredentials::new("coord", password);
        let r = authenticate(&mut conn, Mechanism::Plain, &creds).await;
        drop(conn);
        let _ = task.await;
        r
    }

    #[tokio::test]
    async fn plain_exchange_and_its_refusals() {
        plain_login("right", true).await.expect("PLAIN accepted");
        let e = plain_login("wrong", true)
            .await
            .expect_err("wrong password");
        assert!(
            e.starts_with("SASL_AUTHENTICATION_FAILED as coord: "),
            "{e}"
        );
        let e = plain_login("right", false)
            .await
            .expect_err("PLAIN not enabled");
        assert!(
            e.contains("UNSUPPORTED_SASL_MECHANISM") && e.contains("it enables SCRAM-SHA-256"),
            "{e}"
        );
    }

    fn keys(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn plaintext_by_default_and_errors_name_the_key() {
        let s = ClientSecurity::from_keys("broker.", keys(&[])).expect("plaintext");
        assert_eq!(s.protocol(), SecurityProtocol::Plaintext);
        let e = ClientSecurity::from_keys("broker.", keys(&[("broker.security.protocol", "SSL")]))
            .expect_err("no truststore");
        assert!(
            e.to_string().contains("broker.ssl.truststore.location"),
            "{e}"
        );
        let e = ClientSecurity::from_keys(
            "coordinator.",
            keys(&[("coordinator.security.protocol", "SASL_PLAINTEXT")]),
        )
        .expect_err("no mechanism");
        assert!(e.to_string().contains("coordinator.sasl.mechanism"), "{e}");
        let e = ClientSecurity::from_keys(
            "broker.",
            keys(&[
                ("broker.security.protocol", "SASL_PLAINTEXT"),
                ("broker.sasl.mechanism", "SCRAM-SHA-512"),
                (
                    "broker.sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b\";",
                ),
            ]),
        )
        .expect_err("PLAIN module for SCRAM");
        assert!(e.to_string().contains("broker.sasl.jaas.config"), "{e}");
        assert!(!e.to_string().contains("\"b\""), "password in {e}");
        let ok = ClientSecurity::from_keys(
            "broker.",
            keys(&[
                ("broker.security.protocol", "sasl_plaintext"),
                ("broker.sasl.mechanism", "SCRAM-SHA-512"),
                (
                    "broker.sasl.jaas.config",
                    "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"b\";",
                ),
            ]),
        )
        .expect("SASL_PLAINTEXT");
        assert!(!format!("{ok:?}").contains("\"b\""));
        assert!(check_value("ssl.endpoint.identification.algorithm", "").is_ok());
        assert!(check_value("ssl.endpoint.identification.algorithm", "ldap").is_err());
        assert!(is_client_key("broker.", "broker.sasl.mechanism"));
        assert!(!is_client_key("broker.", "sasl.mechanism"));
    }
}
