//! refbroker's connections to a standalone daemon over SASL_SSL (`--set coordinator.*`, the
//! daemon's own client code): the daemon has only a SASL_SSL listener (SCRAM-SHA-512, the
//! standard authorizer, `User:refbroker` a super user), so every forwarded coordinator request,
//! every probe and the KIP-890 verification of the first transactional Produce cross TLS as
//! `refbroker`; a transaction commits through it (markers back over plaintext). The same
//! refbroker with a wrong password gets nothing from the daemon, and the daemon counts the
//! failed authentications. Certificates made with rcgen.

mod pki;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kafka_protocol::messages::{InitProducerIdRequest, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use txn_log::TxnVersion;
use txn_testkit::process::StdoutLines;
use txn_testkit::wire::free_port;
use txn_tests::fault::client::{ClusterView, Fetcher, TxnProducer};
use txn_tests::fault::process::bin_path;
use txn_tests::refbroker::process::BrokerProcess;

const TOPIC: &str = "sd";

struct Daemon {
    child: Child,
    addr: SocketAddr,
    stderr: std::sync::Arc<txn_log::sync::Mutex<String>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon(data: &Path, keystore: &Path, broker_port: u16) -> Daemon {
    let mut child = Command::new(bin_path("txn-coordinator"))
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--bootstrap-servers", &format!("127.0.0.1:{broker_port}")])
        .args(["--set", "listeners=SASL_SSL://127.0.0.1:0"])
        .arg("--set")
        .arg(format!("ssl.keystore.location={}", keystore.display()))
        .args(["--set", "sasl.enabled.mechanisms=SCRAM-SHA-512"])
        .args([
            "--set",
            "txn.scram.credentials=SCRAM-SHA-512=[name=refbroker,password=rb-secret]",
        ])
        .args([
            "--set",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ])
        .args(["--set", "super.users=User:refbroker"])
        .args(["--set", "transaction.state.log.num.partitions=3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start txn-coordinator");
    let stderr = std::sync::Arc::new(txn_log::sync::Mutex::new(String::new()));
    let err = child.stderr.take().expect("stderr");
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let mut s = sink.lock();
            s.push_str(&line);
            s.push('\n');
        }
    });
    let out = child.stdout.take().expect("stdout");
    match StdoutLines::read(out).listening("txn-coordinator listening on ", Duration::from_secs(60))
    {
        Ok(listening) => Daemon {
            child,
            addr: listening.addr,
            stderr,
        },
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the daemon did not start: {e:#}\n{}", stderr.lock());
        }
    }
}

fn start_broker(
    data: &Path,
    port: u16,
    daemon: SocketAddr,
    ca: &Path,
    password: &str,
) -> BrokerProcess {
    let jaas = format!(
        r#"coordinator.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="refbroker" password="{password}";"#
    );
    let args: Vec<String> = vec![
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--data-dir".into(),
        data.display().to_string(),
        "--topics".into(),
        format!("{TOPIC}:1"),
        "--coordinator".into(),
        daemon.to_string(),
        "--offsets-partitions".into(),
        "2".into(),
        "--set".into(),
        "coordinator.security.protocol=SASL_SSL".into(),
        "--set".into(),
        format!("coordinator.ssl.truststore.location={}", ca.display()),
        "--set".into(),
        "coordinator.sasl.mechanism=SCRAM-SHA-512".into(),
        "--set".into(),
        jaas,
    ];
    BrokerProcess::spawn(&bin_path("refbroker"), &args, Duration::from_secs(30))
        .expect("refbroker starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refbroker_runs_transactions_through_a_sasl_ssl_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, keystore) = pki::ca_and_keystore(dir.path(), "daemon.pem");
    let port = free_port();
    let d = start_daemon(&dir.path().join("coord"), &keystore, port);
    let broker = start_broker(&dir.path().join("broker"), port, d.addr, &ca, "rb-secret");
    let rb = broker.addr();

    // Every coordinator request goes to the refbroker, which forwards it over SASL_SSL.
    let view = ClusterView {
        topic: TOPIC.to_owned(),
        leaders: [(0, rb)].into_iter().collect(),
        coordinator: rb,
        find_coordinator_at: Vec::new(),
    };
    let mut p = TxnProducer::new(view.clone(), "secure-tid", 60_000, TxnVersion::V1);
    p.init()
        .await
        .expect("InitProducerId through the refbroker");
    p.add_partitions(&[0]).await.expect("AddPartitionsToTxn");
    p.produce(0, &["v1".to_owned()], true)
        .await
        .expect("Produce (verified with the daemon over SASL_SSL)");
    p.end(true).await.expect("EndTxn commit");
    // The COMMIT marker (daemon -> refbroker) makes the record visible to read_committed.
    let mut fetcher = Fetcher::new(view, "secure-fetch");
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..200 {
        if let Ok(r) = fetcher.fetch(0, 0).await {
            seen = r.records.into_iter().map(|d| d.value).collect();
            if !seen.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, vec!["v1".to_owned()], "the committed record");
    let log = d.stderr.lock().clone();
    assert!(!log.contains("authentication failed"), "{log}");
    drop(broker);

    // The same broker with a wrong password: the daemon refuses it, the client gets an error.
    let port2 = free_port();
    let bad = start_broker(&dir.path().join("broker2"), port2, d.addr, &ca, "wrong");
    let mut c = txn_testkit::wire::connect(bad.addr(), "refused").await;
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        c.call(
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str(
                    "refused-tid",
                ))))
                .with_transaction_timeout_ms(60_000),
            4,
        ),
    )
    .await
    .expect("answered or closed in time");
    assert!(
        r.as_ref().map_or(true, |a| a.error_code != 0),
        "InitProducerId through a refused refbroker: {r:?}"
    );
    let mut seen = false;
    for _ in 0..100 {
        let log = d.stderr.lock().clone();
        if log
            .lines()
            .any(|l| l.contains("authentication failed") && l.contains("SCRAM-SHA-512"))
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen, "the daemon logs the refused authentication");
}
