//! Daemons on etcd whose only listener runs TLS: each probes the others (the members it may
//! name in FindCoordinator) on the inter-broker listener with that listener's own TLS
//! settings, so a client connected to one daemon is sent to the owner of its id on another.
//! With a plaintext probe every other member looked dead and FindCoordinator answered
//! COORDINATOR_NOT_AVAILABLE for all their partitions. A member whose certificate the probing
//! daemon does not trust stays unreachable, and the daemon's log says why. Certificates made
//! with rcgen.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coordinator::server::outgoing::ClientSecurity;
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use rcgen::DnType;
use txn_testkit::wire::free_port;
use txn_tests::etcd::{EtcdCluster, daemon_on_etcd_args, start_daemon};
use txn_tests::fault::process::Proc;

mod pki;
use pki::{Ca, write};

/// Ids asked about at once: with 8 log partitions over two members, both own some.
const IDS: usize = 32;
/// Bound on the cluster settling (both daemons joined).
const SETTLE: Duration = Duration::from_secs(45);
/// How long the answers must then hold: six probe rounds (a sixth of the 3 s lease each).
const HOLD: Duration = Duration::from_secs(3);

/// Daemon `node` on etcd with one listener (`listeners=<listener>://127.0.0.1:<port>`) and
/// `keys` (`KEY=VALUE`).
fn daemon(node: i32, port: u16, listener: &str, etcd: &str, dir: &Path, keys: &[String]) -> Proc {
    let mut args = daemon_on_etcd_args(node, etcd, dir);
    args.extend([
        "--set".to_owned(),
        "transaction.state.log.num.partitions=8".to_owned(),
        "--set".to_owned(),
        format!("listeners={listener}://127.0.0.1:{port}"),
    ]);
    for k in keys {
        args.extend(["--set".to_owned(), k.clone()]);
    }
    start_daemon(node, dir, args).expect("daemon starts")
}

fn log_path(dir: &Path, node: i32) -> PathBuf {
    dir.join(format!("daemon-{node}.log"))
}

/// FindCoordinator v4 for `IDS` ids at `127.0.0.1:port`, over `client`: per id, the error
/// code and the named node as `(node id, port)`. `None`: no connection.
async fn find_all(client: &ClientSecurity, port: u16) -> Option<Vec<(i16, i32, i32)>> {
    let connector = client.clone().connector();
    let mut conn = connector
        .connect("127.0.0.1", port, "etcd-secure-test")
        .await
        .ok()?;
    let keys = (0..IDS)
        .map(|i| StrBytes::from_string(format!("tid-{i}")))
        .collect();
    let req = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(keys);
    let r = tokio::time::timeout(Duration::from_secs(10), conn.call(&req, 4))
        .await
        .ok()?
        .ok()?;
    Some(
        r.coordinators
            .iter()
            .map(|c| (c.error_code, c.node_id.0, c.port))
            .collect(),
    )
}

/// Whether `answers` found every id, some at daemon 1 and some at daemon 2 (at its port).
fn both_named(answers: &[(i16, i32, i32)], ports: [u16; 2]) -> bool {
    let named = |node: i32, port: u16| {
        answers
            .iter()
            .any(|(_, n, p)| *n == node && *p == i32::from(port))
    };
    answers.len() == IDS
        && answers.iter().all(|(e, _, _)| *e == 0)
        && named(1, ports[0])
        && named(2, ports[1])
}

/// Asks daemon 1 until every id is answered, some by daemon 2 at its own port; then for
/// `HOLD` (several probe rounds: a member not probed yet counts as reachable) every answer
/// must still be so.
async fn both_members_named(client: &ClientSecurity, ports: [u16; 2]) {
    let deadline = Instant::now() + SETTLE;
    let mut last = None;
    loop {
        assert!(
            Instant::now() < deadline,
            "daemon 1 never named daemon 2 for its ids: last answer (error, node, port) {last:?}"
        );
        if let Some(answers) = find_all(client, ports[0]).await {
            if both_named(&answers, ports) {
                break;
            }
            last = Some(answers);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let until = Instant::now() + HOLD;
    while Instant::now() < until {
        let answers = find_all(client, ports[0]).await;
        assert!(
            answers.as_deref().is_some_and(|a| both_named(a, ports)),
            "daemon 1 stopped naming daemon 2 (error 15: COORDINATOR_NOT_AVAILABLE): {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes a keystore at `path`: a certificate for 127.0.0.1 and localhost with common name
/// `cn`, signed by `ca`, then its key.
fn keystore(path: &Path, cn: &str, ca: &Ca) -> PathBuf {
    write(
        path,
        &ca.keystore(&["127.0.0.1", "localhost"], &[(DnType::CommonName, cn)]),
    )
}

/// Two daemons on `etcd`, each with one `listener` whose keystore (`d<node>.pem` in `dir`) is
/// signed by `ca` and whose truststore is `truststore`, and the listener `keys`; returns them
/// and their ports.
fn two_daemons(
    etcd: &EtcdCluster,
    dir: &Path,
    ca: &Ca,
    truststore: &Path,
    listener: &str,
    keys: &[String],
) -> (Vec<Proc>, [u16; 2]) {
    let ports = [free_port(), free_port()];
    let daemons = [(1, ports[0]), (2, ports[1])]
        .into_iter()
        .map(|(node, port)| {
            let ks = keystore(
                &dir.join(format!("d{node}.pem")),
                &format!("daemon-{node}"),
                ca,
            );
            let mut all = vec![
                key("ssl.keystore.location", &ks),
                key("ssl.truststore.location", truststore),
            ];
            all.extend_from_slice(keys);
            daemon(node, port, listener, &etcd.endpoints_arg(), dir, &all)
        })
        .collect();
    (daemons, ports)
}

fn key(k: &str, v: impl AsRef<Path>) -> String {
    format!("{k}={}", v.as_ref().display())
}

/// Mutual TLS: the listeners require client certificates, so a probe must present the
/// listener's keystore and check the peer against its truststore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_coordinator_names_the_other_member_over_mutual_tls() {
    let etcd = EtcdCluster::start(1).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let ca = Ca::new("test CA");
    let ca_path = write(&dir.path().join("ca.pem"), &ca.pem);
    let keys = ["ssl.client.auth=required".to_owned()];
    let (daemons, ports) = two_daemons(&etcd, dir.path(), &ca, &ca_path, "SSL", &keys);
    let client_ks = keystore(&dir.path().join("client.pem"), "client", &ca);
    let client = ClientSecurity::from_keys("", |k| match k {
        "security.protocol" => Some("SSL".to_owned()),
        "ssl.truststore.location" => Some(ca_path.display().to_string()),
        "ssl.keystore.location" => Some(client_ks.display().to_string()),
        _ => None,
    })
    .expect("client settings");
    both_members_named(&client, ports).await;
    drop(daemons);
}

/// SASL_SSL: the probe runs TLS and asks ApiVersions before any SASL exchange, as Kafka allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_coordinator_names_the_other_member_over_sasl_ssl() {
    let etcd = EtcdCluster::start(1).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let ca = Ca::new("test CA");
    let ca_path = write(&dir.path().join("ca.pem"), &ca.pem);
    let keys = [
        "sasl.enabled.mechanisms=SCRAM-SHA-256".to_owned(),
        "txn.scram.credentials=SCRAM-SHA-256=[name=app,password=app-secret]".to_owned(),
    ];
    let (daemons, ports) = two_daemons(&etcd, dir.path(), &ca, &ca_path, "SASL_SSL", &keys);
    let client = ClientSecurity::from_keys("", |k| match k {
        "security.protocol" => Some("SASL_SSL".to_owned()),
        "ssl.truststore.location" => Some(ca_path.display().to_string()),
        "sasl.mechanism" => Some("SCRAM-SHA-256".to_owned()),
        "sasl.jaas.config" => Some(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="app-secret";"#
                .to_owned(),
        ),
        _ => None,
    })
    .expect("client settings");
    both_members_named(&client, ports).await;
    drop(daemons);
}

/// Daemon 2's certificate chains to a CA daemon 1 does not trust: daemon 1 never names it
/// (COORDINATOR_NOT_AVAILABLE for its ids) and logs the failed TLS handshake of its probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_member_is_unreachable_and_the_log_says_why() {
    let etcd = EtcdCluster::start(1).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let (ca1, ca2) = (Ca::new("CA one"), Ca::new("CA two"));
    let trust1 = write(&dir.path().join("ca1.pem"), &ca1.pem);
    let trust_both = write(
        &dir.path().join("both.pem"),
        &format!("{}{}", ca1.pem, ca2.pem),
    );
    let ports = [free_port(), free_port()];
    let ks1 = keystore(&dir.path().join("d1.pem"), "daemon-1", &ca1);
    let ks2 = keystore(&dir.path().join("d2.pem"), "daemon-2", &ca2);
    let etcd_arg = etcd.endpoints_arg();
    let _d1 = daemon(
        1,
        ports[0],
        "SSL",
        &etcd_arg,
        dir.path(),
        &[
            key("ssl.keystore.location", &ks1),
            key("ssl.truststore.location", &trust1),
        ],
    );
    let _d2 = daemon(
        2,
        ports[1],
        "SSL",
        &etcd_arg,
        dir.path(),
        &[
            key("ssl.keystore.location", &ks2),
            key("ssl.truststore.location", &trust_both),
        ],
    );
    let client = ClientSecurity::from_keys("", |k| match k {
        "security.protocol" => Some("SSL".to_owned()),
        "ssl.truststore.location" => Some(trust1.display().to_string()),
        _ => None,
    })
    .expect("client settings");
    let deadline = Instant::now() + SETTLE;
    loop {
        let log = std::fs::read_to_string(log_path(dir.path(), 1)).unwrap_or_default();
        let answers = find_all(&client, ports[0]).await.unwrap_or_default();
        // Daemon 1 owns some ids and refuses the others (daemon 2's) once both are members.
        let found = answers.iter().filter(|(e, _, _)| *e == 0).count();
        let unavailable = answers.iter().filter(|(e, _, _)| *e == 15).count();
        let logged = log.contains("outgoing connection failed")
            && log.contains("member does not answer")
            && log.contains("UnknownIssuer");
        if logged && found > 0 && unavailable > 0 && found + unavailable == IDS {
            assert!(
                answers.iter().all(|(e, n, _)| *e != 0 || *n == 1),
                "{answers:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled: {answers:?}\ndaemon 1's log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
