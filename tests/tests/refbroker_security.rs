//! refbroker secured with the daemon's code (listeners, TLS, SASL, ACLs), driven by real
//! clients: librdkafka (confluent-kafka, `tests/e2e/lr.py`) and Kafka's Java client
//! (`tests/java/TxnClient.java`), each given its security settings.
//!
//! - `sasl_ssl_scram_*`: a transactional producer (commits and aborts) and a read_committed
//!   consumer over SASL_SSL with SCRAM-SHA-512, as `User:alice` holding only the ACLs it
//!   needs, read back exactly once; then `User:mallory`, without ACLs, gets
//!   TRANSACTIONAL_ID_AUTHORIZATION_FAILED from `init_transactions` and leaves nothing in the
//!   transaction log (`txn-coordinator dump-log` after the run), and reads nothing of the
//!   topic (TOPIC_AUTHORIZATION_FAILED). Embedded
//!   (`--embedded-coordinator`), standalone (a daemon with a SASL_SSL listener only: the
//!   broker reaches it as `User:refbroker` with the `coordinator.*` keys, the daemon reaches
//!   the broker as `User:daemon` with the `broker.*` keys), and on etcd (two such daemons
//!   sharing a log in a three-member etcd cluster, behind one `refbroker --coordinator
//!   H:P1,H:P2`; the daemons probe each other over TLS on their SASL_SSL listeners; the ACLs
//!   and the SCRAM credentials are written once into etcd with `txn-coordinator acl add` and
//!   `scram add`, each daemon logs mallory in and refuses its InitProducerId when asked
//!   directly, and `dump-log` reads the log from etcd).
//! - `mtls_principal_is_the_subject`: an SSL listener requiring client certificates; the
//!   principal is `User:CN=carol,O=example`, the subject of the client's certificate, and the
//!   ACLs are granted to it.
//! - `java_sasl_ssl_plain`: the Java client over SASL_SSL with PLAIN: an idempotent seed, a
//!   consume-transform-produce with `sendOffsetsToTransaction`, a read_committed read-back.
//! - `acls_created_through_the_broker_apply_and_persist`: over the wire, the broker's own
//!   checks (WriteTxnMarkers, an idempotent InitProducerId, Produce) refuse an anonymous client,
//!   CreateAcls through the broker lets it in at once, and DescribeAcls lists the same ACLs
//!   after a restart.
//!
//! ACLs are written before the start with `txn-coordinator acl add` into the log backends
//! (the broker's `<data-dir>/txn-log`, the daemon's data directory, etcd). Certificates are made
//! with rcgen. Needs `TXN_TEST_PYTHON` (and `TXN_TEST_KAFKA_CLASSPATH` for Java); without them
//! the tests say they skipped.

mod pki;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rcgen::DnType;
use txn_testkit::process::StdoutLines;
use txn_tests::e2e::Json;
use txn_tests::e2e::{self, Client, args, daemon_bin, free_port, refbroker_bin};
use txn_tests::etcd::EtcdCluster;
use txn_tests::refbroker::process::BrokerProcess;

const AUTHORIZER: &str =
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const STARTUP: Duration = Duration::from_secs(60);
const CLIENT_RUN: Duration = Duration::from_secs(120);

/// The CA, the servers' keystore (a certificate for 127.0.0.1 and localhost with its key)
/// and a client certificate and key for `CN=carol,O=example`.
struct Pki {
    ca: PathBuf,
    keystore: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let ca = pki::Ca::new("refbroker test CA");
    // RFC 2253 names the last RDN first: O then CN in the certificate reads CN=carol,O=example.
    let carol = [
        (DnType::OrganizationName, "example"),
        (DnType::CommonName, "carol"),
    ];
    let (client_cert, client_key) = ca.sign(&[], &carol);
    Pki {
        ca: pki::write(&dir.join("ca.pem"), &ca.pem),
        keystore: pki::write(
            &dir.join("server.pem"),
            &ca.keystore(&["127.0.0.1", "localhost"], &[]),
        ),
        client_cert: pki::write(&dir.join("client.pem"), &client_cert),
        client_key: pki::write(&dir.join("client.key"), &client_key),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The arguments of an offline command (`acl add`, `scram add`, `dump-log`) naming the sled
/// log in `data_dir`.
fn sled(data_dir: &Path) -> Vec<String> {
    vec!["--data-dir".to_owned(), path(data_dir).to_owned()]
}

/// `txn-coordinator acl add` (ALLOW) into the log backend `store` names (`sled`, or the
/// `--set` keys of a log in etcd).
fn acl(store: &[String], principal: &str, resource: (&str, &str, &str), operation: &str) {
    let (rtype, name, pattern) = resource;
    let out = Command::new(daemon_bin())
        .args(["acl", "add", "--principal", principal])
        .args(["--resource-type", rtype, "--resource-name", name])
        .args(["--pattern-type", pattern, "--operation", operation])
        .args(store)
        .output()
        .expect("txn-coordinator acl add");
    assert!(
        out.status.success(),
        "acl add {principal} {rtype}:{name} {operation}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ACLs a transactional producer and a reader need: WRITE on the ids starting with
/// `ids`, WRITE and READ on `topic`, READ on the groups starting with `groups`.
fn grant_transactions(store: &[String], principal: &str, ids: &str, topic: &str, groups: &str) {
    acl(
        store,
        principal,
        ("TransactionalId", ids, "prefixed"),
        "Write",
    );
    acl(store, principal, ("Topic", topic, "prefixed"), "Write");
    acl(store, principal, ("Topic", topic, "prefixed"), "Read");
    acl(store, principal, ("Group", groups, "prefixed"), "Read");
}

/// `txn-coordinator scram add` of `user` (SCRAM-SHA-512, password `<user>-secret`) into the
/// log backend `store` names; the password file goes in `dir`.
fn scram_add(store: &[String], dir: &Path, user: &str) {
    let file = dir.join(format!("{user}.password"));
    std::fs::write(&file, format!("{user}-secret\n")).expect("write");
    let out = Command::new(daemon_bin())
        .args([
            "scram",
            "add",
            "--user",
            user,
            "--mechanism",
            "SCRAM-SHA-512",
        ])
        .args(["--password-file", path(&file)])
        .args(store)
        .output()
        .expect("txn-coordinator scram add");
    assert!(
        out.status.success(),
        "scram add {user}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The transaction records of the log backend `store` names (`dump-log --json`; no process
/// on a sled log).
fn dump_log(store: &[String]) -> String {
    let out = Command::new(daemon_bin())
        .args(["dump-log", "--json"])
        .args(store)
        .output()
        .expect("txn-coordinator dump-log");
    assert!(
        out.status.success(),
        "dump-log: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A standalone daemon, killed when dropped.
struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Starts `txn-coordinator serve` with `args` and waits (bounded) for its ready line.
    fn start(args: &[String], log: &Path) -> Self {
        let mut child = Command::new(daemon_bin())
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(log).expect("log file")))
            .spawn()
            .expect("start txn-coordinator");
        let stdout = child.stdout.take().expect("stdout");
        let listening =
            StdoutLines::read(stdout).listening("txn-coordinator listening on ", STARTUP);
        let d = Self { child };
        if let Err(e) = listening {
            panic!("the daemon did not start: {e:#}\n{}", e2e::tail(log, 40));
        }
        d
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--set KEY=VALUE` for each pair.
fn sets(pairs: &[String]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|kv| ["--set".to_owned(), kv.clone()])
        .collect()
}

/// A refbroker with `extra` arguments, waiting (bounded) for its listening line.
fn refbroker(data: &Path, topics: &str, extra: &[String]) -> BrokerProcess {
    let mut a = vec![
        "--data-dir".to_owned(),
        path(data).to_owned(),
        "--topics".to_owned(),
        topics.to_owned(),
    ];
    a.extend_from_slice(extra);
    BrokerProcess::spawn(&refbroker_bin(), &a, STARTUP).expect("refbroker starts")
}

/// librdkafka's settings for SASL_SSL with SCRAM-SHA-512 as `user`.
fn scram_client(pki: &Pki, user: &str) -> Vec<String> {
    [
        "security.protocol=SASL_SSL".to_owned(),
        format!("ssl.ca.location={}", path(&pki.ca)),
        "sasl.mechanism=SCRAM-SHA-512".to_owned(),
        format!("sasl.username={user}"),
        format!("sasl.password={user}-secret"),
    ]
    .into_iter()
    .flat_map(|kv| ["--client-config".to_owned(), kv])
    .collect()
}

/// The Kafka client keys (`PREFIX.security.protocol`, ...) of a SCRAM-SHA-512 login as `user`
/// over SASL_SSL, for the broker's and the daemon's outgoing connections.
fn scram_outgoing(prefix: &str, pki: &Pki, user: &str) -> Vec<String> {
    vec![
        format!("{prefix}security.protocol=SASL_SSL"),
        format!("{prefix}ssl.truststore.location={}", path(&pki.ca)),
        format!("{prefix}sasl.mechanism=SCRAM-SHA-512"),
        format!(
            "{prefix}sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{user}-secret\";"
        ),
    ]
}

fn scram_credentials(users: &[&str]) -> String {
    let list: Vec<String> = users
        .iter()
        .map(|u| format!("SCRAM-SHA-512=[name={u},password={u}-secret]"))
        .collect();
    format!("txn.scram.credentials={}", list.join(";"))
}

fn ev_str<'a>(e: &'a Json, key: &str) -> Option<&'a str> {
    e.get(key).and_then(Json::as_str)
}

/// The committed values of a `txns` run (from its `commit` events) and the aborted ones.
fn outcome(events: &[Json]) -> (Vec<String>, Vec<String>) {
    let (mut committed, mut aborted) = (Vec::new(), Vec::new());
    for e in events {
        let into = match ev_str(e, "ev") {
            Some("commit") => &mut committed,
            Some("abort") => &mut aborted,
            _ => continue,
        };
        if let Some(Json::Array(values)) = e.get("values") {
            for v in values {
                if let Json::Array(fields) = v
                    && let Some(s) = fields.get(1).and_then(Json::as_str)
                {
                    into.push(s.to_owned());
                }
            }
        }
    }
    committed.sort();
    aborted.sort();
    (committed, aborted)
}

/// Runs a transactional producer (`pattern`, 3 records per partition of 0,1) and a
/// read_committed reader over `client`'s settings; asserts the reader saw each committed
/// value once and no aborted one.
fn transactions_read_back_once(
    python: &Path,
    dir: &Path,
    bootstrap: &str,
    client: &[String],
    txn_id: &str,
    topic: &str,
) {
    let mut a = args(&[
        ("txns", ""),
        ("--bootstrap", bootstrap),
        ("--topic", topic),
        ("--partitions", "0,1"),
        ("--txn-id", txn_id),
        ("--pattern", "CACC"),
        ("--per-partition", "3"),
        ("--prefix", txn_id),
        ("--deadline", "90"),
    ]);
    a.extend_from_slice(client);
    let events = e2e::run(
        python,
        dir,
        &format!("{txn_id}-txns"),
        "lr.py",
        &a,
        CLIENT_RUN,
    );
    let (committed, aborted) = outcome(&events);
    assert_eq!(
        committed.len(),
        18,
        "three committed transactions: {events:?}"
    );
    assert_eq!(aborted.len(), 6, "one aborted transaction: {events:?}");
    let mut a = args(&[
        ("consume", ""),
        ("--bootstrap", bootstrap),
        ("--topic", topic),
        ("--partitions", "0,1"),
        ("--group", &format!("{txn_id}-reader")),
        ("--isolation", "read_committed"),
        ("--min-records", "18"),
        ("--deadline", "60"),
    ]);
    a.extend_from_slice(client);
    let events = e2e::run(
        python,
        dir,
        &format!("{txn_id}-read"),
        "lr.py",
        &a,
        CLIENT_RUN,
    );
    let mut read: Vec<String> = events
        .iter()
        .filter(|e| ev_str(e, "ev") == Some("record"))
        .filter_map(|e| ev_str(e, "value").map(str::to_owned))
        .collect();
    read.sort();
    assert_eq!(
        read, committed,
        "read_committed sees each committed value once"
    );
    assert!(
        events
            .iter()
            .all(|e| ev_str(e, "ev") != Some("consumer_error")),
        "{events:?}"
    );
}

/// `init_transactions` of a principal without ACLs fails with
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
fn denied_init(python: &Path, dir: &Path, bootstrap: &str, client: &[String], txn_id: &str) {
    let mut a = args(&[
        ("txns", ""),
        ("--bootstrap", bootstrap),
        ("--topic", "secured"),
        ("--partitions", "0"),
        ("--txn-id", txn_id),
        ("--deadline", "30"),
    ]);
    a.extend_from_slice(client);
    let mut c = Client::spawn(python, dir, txn_id, "lr.py", &a);
    let fatal = c.wait_event("fatal", Duration::from_secs(60));
    assert_eq!(
        ev_str(&fatal, "error"),
        Some("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        "{fatal:?}"
    );
    assert!(
        c.events.iter().all(|e| ev_str(e, "ev") != Some("init")),
        "{:?}",
        c.events
    );
}

/// A reader without DESCRIBE or READ on `topic` is told TOPIC_AUTHORIZATION_FAILED in
/// Metadata (librdkafka's metadata debug log shows the broker's answer; an assign()-based
/// consumer does not always surface it as an error event) and reads no record.
fn denied_read(python: &Path, dir: &Path, bootstrap: &str, client: &[String], topic: &str) {
    let mut a = args(&[
        ("consume", ""),
        ("--bootstrap", bootstrap),
        ("--topic", topic),
        ("--partitions", "0"),
        ("--group", "sec-denied"),
        ("--deadline", "3"),
        ("--debug", "metadata"),
    ]);
    a.extend_from_slice(client);
    let events = e2e::run(python, dir, "denied-read", "lr.py", &a, CLIENT_RUN);
    let log = std::fs::read_to_string(dir.join("client-denied-read.stderr")).unwrap_or_default();
    let told = log.contains(&format!(
        "Topic {topic} with 0 partitions: Broker: Topic authorization failed"
    ));
    let error_event = events.iter().any(|e| {
        ev_str(e, "ev") == Some("consumer_error")
            && ev_str(e, "error") == Some("TOPIC_AUTHORIZATION_FAILED")
    });
    assert!(
        told || error_event,
        "{events:?}\n{}",
        e2e::tail(&dir.join("client-denied-read.stderr"), 40)
    );
    assert!(
        events.iter().all(|e| ev_str(e, "ev") != Some("record")),
        "{events:?}"
    );
}

/// Where the coordinator of `sasl_ssl_scram` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// In the broker (`--embedded-coordinator`), its log in the broker's data directory.
    Embedded,
    /// One daemon with a sled log.
    Standalone,
    /// Two daemons sharing a log in a three-member etcd cluster.
    OnEtcd,
}

impl Setup {
    fn tag(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Standalone => "standalone",
            Self::OnEtcd => "on_etcd",
        }
    }
}

/// A three-member etcd cluster (bounded start).
fn etcd_cluster() -> EtcdCluster {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(EtcdCluster::start(3))
        .expect("etcd cluster")
}

/// The keys of a daemon whose only listener is SASL_SSL (SCRAM-SHA-512) at `port`, with the
/// authorizer, `User:refbroker` as super user, and the `broker.*` keys of its login to the
/// broker as `User:daemon`.
fn secured_daemon_keys(pki: &Pki, port: u16) -> Vec<String> {
    let mut keys = vec![
        format!("listeners=SASL_SSL://127.0.0.1:{port}"),
        format!("ssl.keystore.location={}", path(&pki.keystore)),
        "sasl.enabled.mechanisms=SCRAM-SHA-512".to_owned(),
        AUTHORIZER.to_owned(),
        "super.users=User:refbroker".to_owned(),
    ];
    keys.extend(scram_outgoing("broker.", pki, "daemon"));
    keys
}

/// InitProducerId for `txn_id` sent straight to the daemon at `127.0.0.1:port` over SASL_SSL
/// as `user` (SCRAM-SHA-512): the error code (the authorization check comes before the
/// ownership one, so any member answers it).
fn init_at_daemon(pki: &Pki, port: u16, user: &str, txn_id: &str) -> i16 {
    use coordinator::server::outgoing::ClientSecurity;
    use kafka_protocol::messages::{InitProducerIdRequest, ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;
    let keys = scram_outgoing("", pki, user);
    let client = ClientSecurity::from_keys("", |k| {
        keys.iter()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=').map(str::to_owned))
    })
    .expect("client settings");
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
            txn_id.to_owned(),
        ))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            let mut conn = client
                .connector()
                .connect("127.0.0.1", port, "refbroker-security-test")
                .await
                .expect("SASL_SSL login to the daemon");
            tokio::time::timeout(Duration::from_secs(10), conn.call(&req, 4))
                .await
                .expect("answered in time")
                .expect("answered")
                .error_code
        })
}

fn sasl_ssl_scram(setup: Setup) {
    let test = format!("sasl_ssl_scram_{}", setup.tag());
    let Some(python) = e2e::python_or_skip(&test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let pki = pki(dir);
    let (rb_data, d_data) = (dir.join("rb"), dir.join("daemon"));
    let rb_log = sled(&rb_data.join("txn-log"));
    grant_transactions(&rb_log, "User:alice", "sec-", "secured", "sec-");
    // mallory may use one group, nothing else: its reads then meet the topic's check.
    let mallory_group = ("Group", "sec-denied", "literal");
    acl(&rb_log, "User:mallory", mallory_group, "Read");
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let mut broker_keys = vec![
        format!("listeners=SASL_SSL://127.0.0.1:{port}"),
        format!("ssl.keystore.location={}", path(&pki.keystore)),
        "sasl.enabled.mechanisms=SCRAM-SHA-512".to_owned(),
        scram_credentials(&["alice", "mallory", "daemon"]),
        AUTHORIZER.to_owned(),
        "super.users=User:daemon".to_owned(),
    ];
    let mut extra = Vec::new();
    let mut daemons = Vec::new();
    let mut daemon_ports = Vec::new();
    // Kept (with its data) until the log is dumped at the end.
    let mut etcd = None;
    let log_store = match setup {
        Setup::Embedded => {
            extra.push("--embedded-coordinator".to_owned());
            rb_log.clone()
        }
        Setup::Standalone => {
            let store = sled(&d_data);
            grant_transactions(&store, "User:alice", "sec-", "secured", "sec-");
            acl(&store, "User:mallory", mallory_group, "Read");
            let dport = free_port();
            let mut keys = secured_daemon_keys(&pki, dport);
            keys.push(scram_credentials(&["alice", "mallory", "refbroker"]));
            let mut a = store.clone();
            a.extend(["--bootstrap-servers".to_owned(), bootstrap.clone()]);
            a.extend(sets(&keys));
            daemons.push(Daemon::start(&a, &dir.join("daemon.log")));
            extra.extend(["--coordinator".to_owned(), format!("127.0.0.1:{dport}")]);
            store
        }
        Setup::OnEtcd => {
            // The ACLs and the SCRAM credentials are written once, offline, into etcd, where
            // both daemons read them.
            let cluster = etcd_cluster();
            let log_keys = vec![
                "txn.log.backend=etcd".to_owned(),
                format!("etcd.endpoints={}", cluster.endpoints_arg()),
                "etcd.key.prefix=/sasl-ssl-scram".to_owned(),
                "etcd.lease.ttl.ms=2000".to_owned(),
                "transaction.state.log.num.partitions=8".to_owned(),
            ];
            etcd = Some(cluster);
            let store = sets(&log_keys);
            grant_transactions(&store, "User:alice", "sec-", "secured", "sec-");
            acl(&store, "User:mallory", mallory_group, "Read");
            for user in ["alice", "mallory", "refbroker"] {
                scram_add(&store, dir, user);
            }
            let mut coordinators = Vec::new();
            for node in [1001, 1002] {
                let dport = free_port();
                let mut keys = log_keys.clone();
                keys.extend(secured_daemon_keys(&pki, dport));
                // The inter-broker listener runs TLS: the probes of the other member check its
                // certificate against this.
                keys.push(format!("ssl.truststore.location={}", path(&pki.ca)));
                let mut a = vec![
                    "--node-id".to_owned(),
                    node.to_string(),
                    "--data-dir".to_owned(),
                    path(&dir.join(format!("daemon-{node}"))).to_owned(),
                    "--bootstrap-servers".to_owned(),
                    bootstrap.clone(),
                ];
                a.extend(sets(&keys));
                daemons.push(Daemon::start(&a, &dir.join(format!("daemon-{node}.log"))));
                coordinators.push(format!("127.0.0.1:{dport}"));
                daemon_ports.push(dport);
            }
            extra.extend(["--coordinator".to_owned(), coordinators.join(",")]);
            store
        }
    };
    if setup != Setup::Embedded {
        broker_keys.extend(scram_outgoing("coordinator.", &pki, "refbroker"));
    }
    extra.extend(sets(&broker_keys));
    let mut broker = refbroker(&rb_data, "secured:2", &extra);

    transactions_read_back_once(
        &python,
        dir,
        &bootstrap,
        &scram_client(&pki, "alice"),
        "sec-a",
        "secured",
    );
    denied_init(
        &python,
        dir,
        &bootstrap,
        &scram_client(&pki, "mallory"),
        "sec-m",
    );
    denied_read(
        &python,
        dir,
        &bootstrap,
        &scram_client(&pki, "mallory"),
        "secured",
    );

    // Each daemon on etcd logs mallory in with the credential stored in etcd and refuses its
    // InitProducerId itself (the client above may have been stopped by the broker's own check
    // of FindCoordinator first).
    for &dport in &daemon_ports {
        assert_eq!(
            init_at_daemon(&pki, dport, "mallory", "sec-m"),
            53,
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED from the daemon at {dport}"
        );
    }

    // Nothing of mallory's id in the transaction log; alice's is there.
    broker.kill();
    for d in daemons {
        d.kill();
    }
    let dumped = dump_log(&log_store);
    assert!(dumped.contains("\"sec-a\""), "{dumped}");
    assert!(!dumped.contains("sec-m"), "{dumped}");
    drop(etcd);
}

#[test]
fn sasl_ssl_scram_embedded() {
    sasl_ssl_scram(Setup::Embedded);
}

#[test]
fn sasl_ssl_scram_standalone() {
    sasl_ssl_scram(Setup::Standalone);
}

#[test]
fn sasl_ssl_scram_on_etcd() {
    sasl_ssl_scram(Setup::OnEtcd);
}

#[test]
fn mtls_principal_is_the_subject() {
    let Some(python) = e2e::python_or_skip("mtls_principal_is_the_subject") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let pki = pki(dir);
    let rb_data = dir.join("rb");
    grant_transactions(
        &sled(&rb_data.join("txn-log")),
        "User:CN=carol,O=example",
        "mtls-",
        "certs",
        "mtls-",
    );
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let keys = vec![
        format!("listeners=SSL://127.0.0.1:{port}"),
        format!("ssl.keystore.location={}", path(&pki.keystore)),
        format!("ssl.truststore.location={}", path(&pki.ca)),
        "ssl.client.auth=required".to_owned(),
        AUTHORIZER.to_owned(),
    ];
    let mut extra = vec!["--embedded-coordinator".to_owned()];
    extra.extend(sets(&keys));
    let _broker = refbroker(&rb_data, "certs:2", &extra);
    let client: Vec<String> = [
        "security.protocol=SSL".to_owned(),
        format!("ssl.ca.location={}", path(&pki.ca)),
        format!("ssl.certificate.location={}", path(&pki.client_cert)),
        format!("ssl.key.location={}", path(&pki.client_key)),
    ]
    .into_iter()
    .flat_map(|kv| ["--client-config".to_owned(), kv])
    .collect();
    transactions_read_back_once(&python, dir, &bootstrap, &client, "mtls-a", "certs");
}

#[test]
fn java_sasl_ssl_plain() {
    let Some(cp) = e2e::kafka_classpath_or_skip("java_sasl_ssl_plain") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let pki = pki(dir);
    let rb_data = dir.join("rb");
    let rb_log = sled(&rb_data.join("txn-log"));
    grant_transactions(&rb_log, "User:bob", "j-", "j", "j-");
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let keys = vec![
        format!("listeners=SASL_SSL://127.0.0.1:{port}"),
        format!("ssl.keystore.location={}", path(&pki.keystore)),
        "sasl.enabled.mechanisms=PLAIN".to_owned(),
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_bob=\"bob-secret\";".to_owned(),
        AUTHORIZER.to_owned(),
    ];
    let mut extra = vec!["--embedded-coordinator".to_owned()];
    extra.extend(sets(&keys));
    let _broker = refbroker(&rb_data, "jin:2,jout:2", &extra);
    let config = dir.join("client.properties");
    std::fs::write(
        &config,
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"bob\" password=\"bob-secret\";\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            path(&pki.ca)
        ),
    )
    .expect("write");
    let config = path(&config).to_owned();
    let java = |name: &str, a: &[(&str, &str)]| {
        let mut a = args(a);
        a.extend(["--client-config".to_owned(), config.clone()]);
        Client::spawn_java(&cp, dir, name, &a).finish(CLIENT_RUN)
    };
    let seeded = java(
        "seed",
        &[
            ("seed", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", "jin"),
            ("--partitions", "0,1"),
            ("--per-partition", "6"),
            ("--prefix", "v"),
        ],
    );
    assert!(
        seeded.iter().any(|e| ev_str(e, "ev") == Some("seeded")),
        "{seeded:?}"
    );
    let transformed = java(
        "transform",
        &[
            ("transform", ""),
            ("--bootstrap", &bootstrap),
            ("--input", "jin"),
            ("--output", "jout"),
            ("--partitions", "0,1"),
            ("--group", "j-group"),
            ("--txn-id", "j-txn"),
            ("--batch", "4"),
            ("--abort-every", "3"),
            ("--deadline", "100"),
        ],
    );
    assert!(
        transformed.iter().any(|e| ev_str(e, "ev") == Some("done")),
        "{transformed:?}"
    );
    let read = java(
        "consume",
        &[
            ("consume", ""),
            ("--bootstrap", &bootstrap),
            ("--topic", "jout"),
            ("--partitions", "0,1"),
            ("--isolation", "read_committed"),
            ("--min-records", "12"),
            ("--deadline", "60"),
        ],
    );
    let mut values: Vec<&str> = read
        .iter()
        .filter(|e| ev_str(e, "ev") == Some("record"))
        .filter_map(|e| ev_str(e, "value"))
        .collect();
    values.sort_unstable();
    let mut expected: Vec<String> = (0..2)
        .flat_map(|p| (0..6).map(move |i| format!("out-v-{p}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(values, expected, "each input transformed exactly once");
}

/// One request/response over a plain connection to `addr`.
async fn call<R: kafka_protocol::protocol::Request>(
    addr: std::net::SocketAddr,
    req: &R,
    version: i16,
) -> R::Response {
    let mut c = txn_testkit::wire::connect(addr, "refbroker-security-test").await;
    tokio::time::timeout(Duration::from_secs(10), c.call(req, version))
        .await
        .expect("answered in time")
        .expect("answered")
}

/// InitProducerId without a transactional id (an idempotent producer), retried (bounded)
/// while the coordinator loads.
async fn idempotent_init(addr: std::net::SocketAddr) -> i16 {
    use kafka_protocol::messages::InitProducerIdRequest;
    for _ in 0..100 {
        let r = call(
            addr,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await;
        if ![14, 15, 51].contains(&r.error_code) {
            return r.error_code;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("InitProducerId kept being retriable");
}

/// The ACLs the broker describes (every binding), as `resource:operation` strings.
async fn described_acls(addr: std::net::SocketAddr) -> Vec<String> {
    let r = call(addr, &txn_testkit::requests::describe_all_acls_req(), 1).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut out: Vec<String> = r
        .resources
        .iter()
        .flat_map(|res| {
            res.acls
                .iter()
                .map(move |a| format!("{}:{}:{}", res.resource_name, a.principal, a.operation))
        })
        .collect();
    out.sort();
    out
}

/// Over the wire, as `User:ANONYMOUS` on a PLAINTEXT listener holding only ALTER and
/// DESCRIBE on the Cluster: the broker refuses WriteTxnMarkers (no CLUSTER_ACTION), an
/// idempotent InitProducerId (no IDEMPOTENT_WRITE, no WRITE on a topic) and a Produce (no
/// WRITE on the topic); CreateAcls through the broker grants WRITE on the topic, which takes
/// effect at once, and the ACL is still there after a restart (the embedded coordinator's
/// log keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_created_through_the_broker_apply_and_persist() {
    use kafka_protocol::messages::{
        CreateAclsRequest, ProduceRequest, WriteTxnMarkersRequest, create_acls_request,
        produce_request, write_txn_markers_request,
    };
    use kafka_protocol::protocol::StrBytes;
    let tmp = tempfile::tempdir().expect("tmp");
    let rb_data = tmp.path().join("rb");
    let rb_log = sled(&rb_data.join("txn-log"));
    for op in ["Alter", "Describe"] {
        acl(
            &rb_log,
            "User:ANONYMOUS",
            ("Cluster", "kafka-cluster", "literal"),
            op,
        );
    }
    let start = || {
        let extra = vec![
            "--embedded-coordinator".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--set".to_owned(),
            AUTHORIZER.to_owned(),
        ];
        refbroker(&rb_data, "w:1", &extra)
    };
    let broker = start();
    let addr = broker.addr();
    let s = |v: &str| StrBytes::from_string(v.to_owned());
    let topic = || kafka_protocol::messages::TopicName(s("w"));

    let markers = WriteTxnMarkersRequest::default().with_markers(vec![
        write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(kafka_protocol::messages::ProducerId(7))
            .with_transaction_result(true)
            .with_topics(vec![
                write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(topic())
                    .with_partition_indexes(vec![0]),
            ]),
    ]);
    let r = call(addr, &markers, 1).await;
    assert_eq!(r.markers[0].topics[0].partitions[0].error_code, 31, "{r:?}");
    assert_eq!(
        idempotent_init(addr).await,
        31,
        "CLUSTER_AUTHORIZATION_FAILED"
    );
    let produce = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(topic())
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_records(Some(bytes::Bytes::new())),
                ]),
        ]);
    let r = call(addr, &produce, 7).await;
    assert_eq!(
        r.responses[0].partition_responses[0].error_code, 29,
        "{r:?}"
    );

    let create = CreateAclsRequest::default().with_creations(vec![
        create_acls_request::AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("w"))
            .with_resource_pattern_type(3)
            .with_principal(s("User:ANONYMOUS"))
            .with_host(s("*"))
            .with_operation(4)
            .with_permission_type(3),
    ]);
    let r = call(addr, &create, 1).await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    assert_eq!(idempotent_init(addr).await, 0, "WRITE on a topic allows it");
    let before = described_acls(addr).await;
    assert!(
        before.contains(&"w:User:ANONYMOUS:4".to_owned()),
        "{before:?}"
    );

    drop(broker);
    let broker = start();
    assert_eq!(
        described_acls(broker.addr()).await,
        before,
        "kept across a restart"
    );
}
