//! The daemon's listeners with TLS and SASL, against the real binary: certificates made here
//! with rcgen (a CA, a server certificate for 127.0.0.1/localhost, client certificates, an
//! expired one, one from another CA), clients made of tokio-rustls and the security crate's
//! SASL clients. Who a client authenticated as is observed through the authorizer: the test
//! principals are super users, everyone else is denied InitProducerId.
#![cfg(feature = "daemon")]

mod daemon_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use daemon_support::*;
use kafka_protocol::messages as km;
use markers::wire::KafkaConnection;
use rcgen::DnType;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use security::sasl::{PlainClient, SaslClient, ScramClient, ScramMechanism};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

const ALICE_DN: &str = "CN=alice,OU=eng,O=example";

/// The test PKI, written as PEM files in a temporary directory.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    server: PathBuf,
    alice: PathBuf,
    expired: PathBuf,
    stranger: PathBuf,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = pki::Ca::new("test CA");
    let other = pki::Ca::new("other CA");
    let write = |name: &str, text: &str| pki::write(&dir.path().join(name), text);
    let alice_dn = [
        (DnType::OrganizationName, "example"),
        (DnType::OrganizationalUnitName, "eng"),
        (DnType::CommonName, "alice"),
    ];
    Pki {
        ca: write("ca.pem", &ca.pem),
        server: write(
            "server.pem",
            &ca.keystore(
                &["localhost", "127.0.0.1"],
                &[(DnType::CommonName, "txn-coordinator")],
            ),
        ),
        alice: write("alice.pem", &ca.keystore(&[], &alice_dn)),
        expired: write("expired.pem", &ca.expired_keystore(&[], &alice_dn)),
        stranger: write("stranger.pem", &other.keystore(&[], &alice_dn)),
        _dir: dir,
    }
}

fn set(kv: String) -> [String; 2] {
    ["--set".to_owned(), kv]
}

/// A daemon with the four listeners; `alice` (certificate), `alice` (PLAIN) and `bob`
/// (SCRAM-SHA-512) are super users.
fn start(pki: &Pki, data: &Path) -> Daemon {
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
    let mut args: Vec<String> = Vec::new();
    for kv in [
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0".to_owned(),
        format!("ssl.keystore.location={}", pki.server.display()),
        format!("ssl.truststore.location={}", pki.ca.display()),
        "listener.name.ssl.ssl.client.auth=required".to_owned(),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512".to_owned(),
        format!("sasl.jaas.config={jaas}"),
        "txn.scram.credentials=SCRAM-SHA-512=[name=bob,password=bob-secret]".to_owned(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
        format!("super.users=User:{ALICE_DN};User:alice;User:bob"),
    ] {
        args.extend(set(kv));
    }
    args.extend(["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start_listeners(data, &refs)
}

fn client_config(pki: &Pki, cert: Option<&Path>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&pki.ca).expect("ca") {
        roots.add(c.expect("ca cert")).expect("add");
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    match cert {
        None => b.with_no_client_auth(),
        Some(p) => {
            let chain: Vec<_> = CertificateDer::pem_file_iter(p)
                .expect("chain")
                .map(|c| c.expect("cert"))
                .collect();
            let key = PrivateKeyDer::from_pem_file(p).expect("key");
            b.with_client_auth_cert(chain, key).expect("client cert")
        }
    }
}

type TlsConn = KafkaConnection<tokio_rustls::client::TlsStream<TcpStream>>;

async fn tls(addr: SocketAddr, pki: &Pki, cert: Option<&Path>) -> std::io::Result<TlsConn> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(pki, cert)));
    let tcp = TcpStream::connect(addr).await?;
    let s = connector
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await?;
    Ok(KafkaConnection::new(s, "security-test"))
}

async fn init_error<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut KafkaConnection<S>,
    id: &str,
) -> Option<i16> {
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.call(&init_req(Some(id), 60_000), 4),
    )
    .await
    .ok()?
    .ok()?;
    Some(r.error_code)
}

async fn api_versions_ok<S: AsyncRead + AsyncWrite + Unpin>(c: &mut KafkaConnection<S>) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(10),
            c.call(&km::ApiVersionsRequest::default(), 3)
        )
        .await,
        Ok(Ok(r)) if r.error_code == 0
    )
}

/// SaslHandshake v1 then SaslAuthenticate v2 with `client`: the error of the handshake or of
/// the failing step (code, message), or `None` when authenticated.
async fn sasl<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut KafkaConnection<S>,
    mut client: Box<dyn SaslClient>,
) -> Option<(i16, String)> {
    let hs = c
        .call(
            &km::SaslHandshakeRequest::default().with_mechanism(s(client.mechanism().name())),
            1,
        )
        .await
        .expect("handshake");
    if hs.error_code != 0 {
        return Some((hs.error_code, String::new()));
    }
    let mut token = client.initial_response().expect("first token");
    loop {
        let r = c
            .call(
                &km::SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
                2,
            )
            .await
            .expect("authenticate");
        if r.error_code != 0 {
            return Some((
                r.error_code,
                r.error_message.map(|m| m.to_string()).unwrap_or_default(),
            ));
        }
        assert_eq!(r.session_lifetime_ms, 0);
        match client.step(&r.auth_bytes).expect("client step") {
            Some(next) => token = next,
            None => return None,
        }
    }
}

const DENIED: i16 = 53; // TRANSACTIONAL_ID_AUTHORIZATION_FAILED

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mtls_listeners() {
    let pki = pki();
    let data = tempfile::tempdir().expect("data");
    let d = start(&pki, data.path());
    let ssl = d.listener("SSL");
    let sasl_ssl = d.listener("SASL_SSL");
    assert_eq!(
        d.addr,
        d.listener("PLAINTEXT"),
        "the first line is the first listener"
    );

    // mTLS: the principal is the certificate's subject in RFC 2253 form (a super user).
    let mut alice = tls(ssl, &pki, Some(&pki.alice)).await.expect("mTLS");
    assert!(api_versions_ok(&mut alice).await);
    assert_eq!(init_error(&mut alice, "tx-alice").await, Some(0));
    // Metadata names this node at the address of the listener the client came through.
    let m = alice
        .call(&km::MetadataRequest::default().with_topics(Some(vec![])), 9)
        .await
        .expect("metadata");
    assert!(
        m.brokers
            .iter()
            .any(|b| b.port == i32::from(ssl.port()) && b.host.as_str() == "127.0.0.1"),
        "{:?}",
        m.brokers
    );
    let f = alice
        .call(
            &km::FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_key(s("tx-alice")),
            3,
        )
        .await
        .expect("find");
    assert_eq!(f.port, i32::from(ssl.port()));

    // PLAINTEXT: anonymous, denied.
    let mut plain = d.conn().await;
    assert_eq!(init_error(&mut plain, "tx-anon").await, Some(DENIED));

    // Required client auth: no certificate, an untrusted one, an expired one are closed.
    for (what, cert) in [
        ("no certificate", None),
        ("another CA", Some(pki.stranger.as_path())),
        ("expired", Some(pki.expired.as_path())),
    ] {
        let closed = match tls(ssl, &pki, cert).await {
            Err(_) => true,
            Ok(mut c) => !api_versions_ok(&mut c).await,
        };
        assert!(closed, "{what}: the connection must be refused");
    }

    // PLAINTEXT bytes on a TLS port: closed, and the daemon keeps serving.
    let raw = raw_request(18, 3, 1, &[0, 0, 0]);
    assert!(roundtrip_raw(ssl, &raw).await.is_none());
    let mut again = tls(ssl, &pki, Some(&pki.alice)).await.expect("mTLS again");
    assert!(api_versions_ok(&mut again).await);

    // SASL_SSL without SASL: only ApiVersions before authentication.
    let mut c = tls(sasl_ssl, &pki, None).await.expect("TLS");
    assert!(api_versions_ok(&mut c).await);
    assert_eq!(init_error(&mut c, "tx-early").await, None, "closed");

    // SCRAM-SHA-512 over SASL_SSL with the in-memory credential.
    let mut bob = tls(sasl_ssl, &pki, None).await.expect("TLS");
    let scram = ScramClient::new(ScramMechanism::Sha512, "bob", "bob-secret");
    assert_eq!(sasl(&mut bob, Box::new(scram)).await, None);
    assert_eq!(init_error(&mut bob, "tx-bob").await, Some(0));
    // After authentication another handshake is ILLEGAL_SASL_STATE, as Kafka answers.
    let hs = bob
        .call(
            &km::SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
            1,
        )
        .await
        .expect("late handshake");
    assert_eq!(hs.error_code, 34);

    let url = d.metrics_url.clone().expect("metrics");
    let text = http_get(&url).await;
    for needle in [
        "txn_coordinator_authentications_total{listener=\"SSL\",mechanism=\"SSL\",result=\"success\"}",
        "txn_coordinator_authentications_total{listener=\"SSL\",mechanism=\"SSL\",result=\"failure\"}",
        "txn_coordinator_authentications_total{listener=\"SASL_SSL\",mechanism=\"SCRAM-SHA-512\",result=\"success\"} 1",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plaintext_listener() {
    let pki = pki();
    let data = tempfile::tempdir().expect("data");
    let d = start(&pki, data.path());
    let addr = d.listener("SASL_PLAINTEXT");
    let conn = || txn_testkit::wire::connect(addr, "t");

    // A request before authentication closes the connection.
    let mut c = conn().await;
    assert_eq!(init_error(&mut c, "tx-early").await, None);

    // PLAIN, good password.
    let mut c = conn().await;
    assert!(api_versions_ok(&mut c).await);
    assert_eq!(
        sasl(&mut c, Box::new(PlainClient::new("alice", "alice-secret"))).await,
        None
    );
    assert_eq!(init_error(&mut c, "tx-plain").await, Some(0));

    // PLAIN, bad password: Kafka's code and message, then closed.
    let mut c = conn().await;
    assert_eq!(
        sasl(&mut c, Box::new(PlainClient::new("alice", "wrong"))).await,
        Some((
            58,
            "Authentication failed: Invalid username or password".to_owned()
        ))
    );
    assert!(!api_versions_ok(&mut c).await, "closed after the failure");

    // A mechanism that is not enabled.
    let mut c = conn().await;
    let sha256 = ScramClient::new(ScramMechanism::Sha256, "bob", "bob-secret");
    assert_eq!(
        sasl(&mut c, Box::new(sha256)).await,
        Some((33, String::new()))
    );

    // An oversized token is refused without being parsed.
    let mut c = conn().await;
    let big = PlainClient::new("alice", "x".repeat(10_000));
    let (code, message) = sasl(&mut c, Box::new(big)).await.expect("refused");
    assert_eq!(code, 58);
    assert_eq!(
        message,
        "Failing SASL authentication due to invalid receive size"
    );

    // An exchange cut after the handshake leaves the daemon serving.
    let mut c = conn().await;
    let hs = c
        .call(
            &km::SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-512")),
            1,
        )
        .await
        .expect("handshake");
    assert_eq!(hs.error_code, 0);
    drop(c);
    let mut c = conn().await;
    let scram = ScramClient::new(ScramMechanism::Sha512, "bob", "bob-secret");
    assert_eq!(sasl(&mut c, Box::new(scram)).await, None);

    // Wrong SCRAM password.
    let mut c = conn().await;
    let scram = ScramClient::new(ScramMechanism::Sha512, "bob", "nope");
    let (code, message) = sasl(&mut c, Box::new(scram)).await.expect("refused");
    assert_eq!(code, 58);
    assert_eq!(
        message,
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    );
}

#[test]
fn bad_tls_configuration_refuses_to_start() {
    let pki = pki();
    let data = tempfile::tempdir().expect("data");
    for (kv, needle) in [
        (
            "ssl.keystore.location=/nonexistent/server.pem".to_owned(),
            "ssl.keystore.location: cannot read /nonexistent/server.pem",
        ),
        (
            format!("ssl.keystore.location={}", pki.ca.display()),
            "holds no PRIVATE KEY",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(data.path())
            .args(["--set", "listeners=SSL://127.0.0.1:0", "--set", &kv])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{kv}");
        assert!(err.contains(needle), "{kv}: {err}");
    }
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .args(["--set", "listeners=PLAINTEXT://127.0.0.1:0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("both --listen"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http url");
    let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = TcpStream::connect(hostport).await.expect("connect");
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}
