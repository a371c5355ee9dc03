//! The daemon's own connections to the brokers over TLS and SASL (`broker.*` keys), against
//! the real binary and a fake broker that runs TLS (rustls) and SCRAM-SHA-512 (the security
//! crate's server) in front of the fake broker of `daemon_support`: markers are delivered over
//! SASL_SSL, a refused credential is logged with the broker's address and retried until the
//! broker accepts it, and a broker certificate from another CA, or for another host name, is
//! refused (unless host name checking is off, as Kafka's empty
//! `ssl.endpoint.identification.algorithm`).
#![cfg(feature = "daemon")]

mod daemon_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use daemon_support::*;
use kafka_protocol::messages::{self as km, RequestKind, ResponseKind};
use markers::wire::{decode_request, encode_response, read_frame, write_frame};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use security::sasl::{
    CredentialStore, SaslServer, ScramCredential, ScramMechanism, ScramServer, ScramServerOptions,
    Step,
};
use tokio::net::TcpListener;
use txn_log::sync::Mutex;
use txn_testkit::fake_broker::reply;

struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    /// For 127.0.0.1 and localhost, by the test CA.
    server: PathBuf,
    /// For localhost only, by the test CA.
    localhost_only: PathBuf,
    /// For 127.0.0.1, by another CA.
    stranger: PathBuf,
    /// The daemon's client certificate (CN=txn-coordinator), by the test CA.
    client: PathBuf,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = pki::Ca::new("brokers CA");
    let other = pki::Ca::new("other CA");
    let write = |name: &str, text: &str| pki::write(&dir.path().join(name), text);
    Pki {
        ca: write("ca.pem", &ca.pem),
        server: write("server.pem", &ca.keystore(&["localhost", "127.0.0.1"], &[])),
        localhost_only: write("localhost.pem", &ca.keystore(&["localhost"], &[])),
        stranger: write(
            "stranger.pem",
            &other.keystore(&["localhost", "127.0.0.1"], &[]),
        ),
        client: write("client.pem", &ca.keystore(&["txn-coordinator"], &[])),
        dir,
    }
}

/// The broker's TLS; with `client_ca`, a client certificate chaining to it is required.
fn server_tls(pem: &Path, client_ca: Option<&Path>) -> tokio_rustls::TlsAcceptor {
    let chain: Vec<_> = CertificateDer::pem_file_iter(pem)
        .expect("chain")
        .map(|c| c.expect("cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(pem).expect("key");
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).expect("ca") {
                roots.add(c.expect("ca cert")).expect("add");
            }
            builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("verifier"),
            )
        }
    };
    let config = builder.with_single_cert(chain, key).expect("server config");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// The fake broker's SCRAM users; `accepting` false answers every exchange with a wrong
/// credential (as after a password change the daemon does not know of yet).
struct Users {
    good: HashMap<(String, ScramMechanism), ScramCredential>,
    bad: HashMap<(String, ScramMechanism), ScramCredential>,
    accepting: AtomicBool,
}

impl CredentialStore for Users {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, security::sasl::CredentialLookupError> {
        let table = if self.accepting.load(Ordering::SeqCst) {
            &self.good
        } else {
            &self.bad
        };
        table.scram_credential(user, mechanism)
    }
}

/// A fake broker on SASL_SSL (SCRAM-SHA-512, user `coord`): nothing but ApiVersions and the
/// SASL exchange before authentication; then `daemon_support`'s fake broker.
struct SecureBroker {
    addr: SocketAddr,
    users: Arc<Users>,
    markers: Arc<Mutex<Vec<km::WriteTxnMarkersRequest>>>,
    /// Requests served after authentication.
    authenticated_requests: Arc<std::sync::atomic::AtomicUsize>,
}

impl SecureBroker {
    async fn start(cert: &Path, accepting: bool) -> Self {
        Self::start_with(cert, accepting, None, true).await
    }

    /// `client_ca`: mutual TLS; `sasl` false: SSL only (no SASL exchange expected).
    async fn start_with(
        cert: &Path,
        accepting: bool,
        client_ca: Option<&Path>,
        sasl: bool,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cred = |pw: &str| {
            ScramCredential::from_password(ScramMechanism::Sha512, pw, 4096).expect("credential")
        };
        let users = Arc::new(Users {
            good: HashMap::from([(
                ("coord".to_owned(), ScramMechanism::Sha512),
                cred("coord-secret"),
            )]),
            bad: HashMap::from([(
                ("coord".to_owned(), ScramMechanism::Sha512),
                cred("changed"),
            )]),
            accepting: AtomicBool::new(accepting),
        });
        let markers = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let acceptor = server_tls(cert, client_ca);
        let (u, m, n) = (users.clone(), markers.clone(), served.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, u, m, n) = (acceptor.clone(), u.clone(), m.clone(), n.clone());
                tokio::spawn(async move {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout(Duration::from_secs(5), acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    serve(tls, addr, u, m, n, !sasl).await;
                });
            }
        });
        Self {
            addr,
            users,
            markers,
            authenticated_requests: served,
        }
    }
}

async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut sock: S,
    me: SocketAddr,
    users: Arc<Users>,
    markers: Arc<Mutex<Vec<km::WriteTxnMarkersRequest>>>,
    served: Arc<std::sync::atomic::AtomicUsize>,
    mut authenticated: bool,
) {
    let mut scram: Option<ScramServer> = None;
    loop {
        let Ok(Some(frame)) = read_frame(&mut sock, 1 << 20).await else {
            return;
        };
        let Ok(req) = decode_request(frame, all) else {
            return;
        };
        let v = req.version();
        let body = match req.body {
            RequestKind::ApiVersions(_) => {
                ResponseKind::ApiVersions(km::ApiVersionsResponse::default())
            }
            RequestKind::SaslHandshake(h) if !authenticated => {
                let ok = h.mechanism.as_str() == "SCRAM-SHA-512";
                if ok {
                    scram = Some(ScramServer::new(
                        ScramMechanism::Sha512,
                        users.clone(),
                        ScramServerOptions::with_dummy_exchange().expect("options"),
                    ));
                }
                let r = km::SaslHandshakeResponse::default()
                    .with_error_code(if ok { 0 } else { 33 })
                    .with_mechanisms(vec![s("SCRAM-SHA-512")]);
                ResponseKind::SaslHandshake(r)
            }
            RequestKind::SaslAuthenticate(a) if !authenticated => {
                let Some(server) = scram.as_mut() else {
                    return;
                };
                let r = match server.step(&a.auth_bytes) {
                    Ok(Step::Continue(bytes)) => {
                        km::SaslAuthenticateResponse::default().with_auth_bytes(bytes.into())
                    }
                    Ok(Step::Done { final_bytes, .. }) => {
                        authenticated = true;
                        km::SaslAuthenticateResponse::default().with_auth_bytes(final_bytes.into())
                    }
                    Err(e) => km::SaslAuthenticateResponse::default()
                        .with_error_code(e.error_code())
                        .with_error_message(Some(s(&e.client_message(false)))),
                };
                let failed = r.error_code != 0;
                let Ok(bytes) = encode_response(
                    req.api_key,
                    v,
                    req.header.correlation_id,
                    &ResponseKind::SaslAuthenticate(r),
                ) else {
                    return;
                };
                if write_frame(&mut sock, &bytes).await.is_err() || failed {
                    return;
                }
                continue;
            }
            other if authenticated => {
                served.fetch_add(1, Ordering::SeqCst);
                let Reply::Answer(answer) = reply(&fake_config(&markers), me, other, v) else {
                    return;
                };
                *answer
            }
            // Anything else before authentication closes the connection, as Kafka does.
            _ => return,
        };
        let Ok(bytes) = encode_response(req.api_key, v, req.header.correlation_id, &body) else {
            return;
        };
        if write_frame(&mut sock, &bytes).await.is_err() {
            return;
        }
    }
}

const SCRAM_JAAS: &str = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="coord" password="coord-secret";"#;

fn daemon(dir: &Path, broker: SocketAddr, keys: &[String]) -> Daemon {
    let bs = broker.to_string();
    let mut args: Vec<String> = vec!["--bootstrap-servers".into(), bs];
    for kv in keys {
        args.push("--set".into());
        args.push(kv.clone());
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start(dir, &refs)
}

fn sasl_ssl_keys(pki: &Pki) -> Vec<String> {
    vec![
        "broker.security.protocol=SASL_SSL".into(),
        format!("broker.ssl.truststore.location={}", pki.ca.display()),
        "broker.sasl.mechanism=SCRAM-SHA-512".into(),
        format!("broker.sasl.jaas.config={SCRAM_JAAS}"),
    ]
}

/// Begins a transaction on `t-0` and commits it; returns once the daemon acknowledged EndTxn.
async fn commit_one(c: &mut markers::wire::KafkaConnection<tokio::net::TcpStream>, id: &str) {
    let (pid, epoch) = init_ok(c, id, 60_000).await;
    let r = c
        .call(&add_req_v3(id, pid, epoch, &[("t", 0)]), 3)
        .await
        .expect("add");
    assert!(
        add_errors(&r).iter().all(|(_, _, e)| *e == 0),
        "{:?}",
        add_errors(&r)
    );
    let r = c
        .call(&end_req(id, pid, epoch, true), 3)
        .await
        .expect("end");
    assert_eq!(r.error_code, 0);
}

/// Waits (bounded) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test]
async fn markers_reach_a_broker_over_sasl_ssl_and_a_refused_password_is_retried() {
    let pki = pki();
    let broker = SecureBroker::start(&pki.server, true).await;
    let data = tempfile::tempdir().expect("tmp");
    let d = daemon(data.path(), broker.addr, &sasl_ssl_keys(&pki));
    let mut c = d.conn().await;

    // Topic check (Metadata), then the markers, all over TLS as the SCRAM user.
    commit_one(&mut c, "secure-1").await;
    wait_state(&mut c, "secure-1", "CompleteCommit").await;
    assert_eq!(broker.markers.lock().len(), 1);
    assert!(broker.authenticated_requests.load(Ordering::SeqCst) >= 2);

    // A fresh daemon (the first one keeps its authenticated connections): its topic check
    // authenticates, then the broker stops taking the password (as after a change the daemon
    // does not know of yet), so the marker connections fail authentication.
    drop(c);
    drop(d);
    let data2 = tempfile::tempdir().expect("tmp");
    let d = daemon(data2.path(), broker.addr, &sasl_ssl_keys(&pki));
    let mut c = d.conn().await;
    let (pid, epoch) = init_ok(&mut c, "secure-2", 60_000).await;
    let r = c
        .call(&add_req_v3("secure-2", pid, epoch, &[("t", 1)]), 3)
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    broker.users.accepting.store(false, Ordering::SeqCst);
    let r = c
        .call(&end_req("secure-2", pid, epoch, true), 3)
        .await
        .expect("end");
    assert_eq!(r.error_code, 0);
    let addr = broker.addr.to_string();
    eventually(
        "the refused authentication is logged with the broker",
        || {
            let log = d.stderr();
            log.lines().any(|l| {
                l.contains(&addr)
                    && l.contains("SASL authentication")
                    && l.contains("SASL_AUTHENTICATION_FAILED")
            })
        },
    )
    .await;
    assert_eq!(
        describe(&mut c, "secure-2")
            .await
            .transaction_state
            .as_str(),
        "PrepareCommit",
        "no marker without authentication"
    );
    assert_eq!(broker.markers.lock().len(), 1);
    // The broker takes the password again: the writer's retry delivers the markers.
    broker.users.accepting.store(true, Ordering::SeqCst);
    wait_state(&mut c, "secure-2", "CompleteCommit").await;
    assert_eq!(broker.markers.lock().len(), 2);
    assert!(!d.stderr().contains("panicked"));
}

#[tokio::test]
async fn an_untrusted_or_misnamed_broker_certificate_is_refused() {
    let pki = pki();
    let metadata_t = km::MetadataRequest::default().with_topics(Some(vec![
        km::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(km::TopicName(s("t")))),
    ]));

    // Another CA's certificate: refused, logged, the topic is not available.
    let stranger = SecureBroker::start(&pki.stranger, true).await;
    let data = tempfile::tempdir().expect("tmp");
    let d = daemon(data.path(), stranger.addr, &sasl_ssl_keys(&pki));
    let mut c = d.conn().await;
    let m = c.call(&metadata_t, 12).await.expect("metadata");
    assert_eq!(m.topics[0].error_code, 5, "LEADER_NOT_AVAILABLE");
    let addr = stranger.addr.to_string();
    eventually("the unknown issuer is logged with the broker", || {
        d.stderr().lines().any(|l| {
            l.contains(&format!("TLS handshake with {addr} failed")) && l.contains("UnknownIssuer")
        })
    })
    .await;
    assert_eq!(stranger.authenticated_requests.load(Ordering::SeqCst), 0);
    drop(c);
    drop(d);

    // A certificate for localhost only, reached at 127.0.0.1: refused with host name checking
    // (Kafka's default https), accepted without it.
    let misnamed = SecureBroker::start(&pki.localhost_only, true).await;
    let data = tempfile::tempdir().expect("tmp");
    let d = daemon(data.path(), misnamed.addr, &sasl_ssl_keys(&pki));
    let mut c = d.conn().await;
    let m = c.call(&metadata_t, 12).await.expect("metadata");
    assert_eq!(m.topics[0].error_code, 5);
    eventually("the name mismatch is logged", || {
        d.stderr().contains("not valid for name")
    })
    .await;
    drop(c);
    drop(d);
    let data = tempfile::tempdir().expect("tmp");
    let mut keys = sasl_ssl_keys(&pki);
    keys.push("broker.ssl.endpoint.identification.algorithm=".into());
    let d = daemon(data.path(), misnamed.addr, &keys);
    let mut c = d.conn().await;
    let m = c.call(&metadata_t, 12).await.expect("metadata");
    assert_eq!(m.topics[0].error_code, 0, "{m:?}");
    assert_eq!(m.topics[0].partitions.len(), 3);
    let _ = &pki.dir;
}

#[test]
fn bad_broker_security_keys_stop_the_daemon_at_start() {
    let data = tempfile::tempdir().expect("tmp");
    let cases: [(&[&str], &str); 4] = [
        (
            &["broker.security.protocol=SSL"],
            "broker.ssl.truststore.location",
        ),
        (
            &["broker.security.protocol=SASL_PLAINTEXT"],
            "broker.sasl.mechanism",
        ),
        (
            &["broker.security.protocol=TLS"],
            "broker.security.protocol",
        ),
        (
            &[
                "broker.security.protocol=SASL_PLAINTEXT",
                "broker.sasl.mechanism=PLAIN",
                "broker.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"topsecret\";",
            ],
            "broker.sasl.jaas.config",
        ),
    ];
    for (keys, named) in cases {
        let mut args = vec![
            "serve".to_owned(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data.path().display().to_string(),
        ];
        for k in keys {
            args.push("--set".into());
            args.push((*k).to_owned());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, _out, err) = run_cli(&refs);
        assert!(!status.success(), "{keys:?} started");
        assert!(err.contains(named), "{keys:?}: {err}");
        assert!(!err.contains("topsecret"), "password in {err}");
    }
}

#[tokio::test]
async fn mutual_tls_to_an_ssl_broker() {
    let pki = pki();
    let broker = SecureBroker::start_with(&pki.server, true, Some(&pki.ca), false).await;
    let metadata_t = km::MetadataRequest::default().with_topics(Some(vec![
        km::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(km::TopicName(s("t")))),
    ]));
    let ssl = |keystore: bool| {
        let mut keys = vec![
            "broker.security.protocol=SSL".to_owned(),
            format!("broker.ssl.truststore.location={}", pki.ca.display()),
        ];
        if keystore {
            keys.push(format!(
                "broker.ssl.keystore.location={}",
                pki.client.display()
            ));
        }
        keys
    };

    // Without a client certificate the broker refuses the handshake.
    let data = tempfile::tempdir().expect("tmp");
    let d = daemon(data.path(), broker.addr, &ssl(false));
    let mut c = d.conn().await;
    let m = c.call(&metadata_t, 12).await.expect("metadata");
    assert_eq!(m.topics[0].error_code, 5, "{m:?}\n{}", d.stderr());
    eventually("the refused handshake is logged with the broker", || {
        d.stderr()
            .contains(&format!("TLS handshake with {} failed", broker.addr))
    })
    .await;
    drop(c);
    drop(d);

    // With it (broker.ssl.keystore.location), metadata and markers go through, no SASL.
    let data = tempfile::tempdir().expect("tmp");
    let d = daemon(data.path(), broker.addr, &ssl(true));
    let mut c = d.conn().await;
    commit_one(&mut c, "mtls-1").await;
    wait_state(&mut c, "mtls-1", "CompleteCommit").await;
    assert_eq!(broker.markers.lock().len(), 1);
}
