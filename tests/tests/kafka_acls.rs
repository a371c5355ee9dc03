//! Apache Kafka's own `kafka-acls.sh` (`org.apache.kafka.tools.AclCommand`, in the
//! `kafka-tools` 4.4 jar `tests/java/pom.xml` resolves) against the daemon with Kafka's standard
//! authorizer: `--add` (a prefixed ALLOW, a literal DENY), `--list`, `--remove --force`, each
//! checked through the daemon's answers to InitProducerId of `User:ANONYMOUS` (PLAINTEXT).
//! The administrator's rights (ALTER and DESCRIBE on the cluster) are bootstrapped offline with
//! `txn-coordinator acl add`. Skipped (and passing) without `TXN_TEST_KAFKA_CLASSPATH`, as
//! `kafka_tools.rs`.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use kafka_protocol::messages as km;
use kafka_protocol::protocol::StrBytes;
use txn_testkit::wire::connect;
use txn_tests::fault::cluster::daemon_bin_from_env;
use txn_tests::fault::process::{Proc, Spec};
use txn_tests::kafka_tool::ACLS;

/// The daemon with Kafka's standard authorizer, on a free port; killed on drop.
fn start(data: &str) -> Proc {
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data,
        "--set",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--set",
        "transaction.state.log.num.partitions=5",
    ];
    Proc::start(
        Spec {
            name: "daemon".into(),
            bin: daemon_bin_from_env(),
            args: args.map(str::to_owned).to_vec(),
            ready_prefix: "txn-coordinator listening on ".into(),
            log_file: None,
            env: Vec::new(),
        },
        Duration::from_secs(30),
    )
    .expect("start txn-coordinator (cargo build -p coordinator first)")
}

async fn init(addr: SocketAddr, id: &str) -> i16 {
    let mut c = connect(addr, "kafka-acls-test").await;
    for _ in 0..100 {
        let r = c
            .call(
                &km::InitProducerIdRequest::default()
                    .with_transactional_id(Some(km::TransactionalId(StrBytes::from_string(
                        id.to_owned(),
                    ))))
                    .with_transaction_timeout_ms(60_000),
                4,
            )
            .await
            .expect("InitProducerId");
        if r.error_code != 14 && r.error_code != 51 {
            return r.error_code;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("InitProducerId kept being retriable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_acls_sh_adds_lists_and_removes() {
    let Ok(classpath) = std::env::var("TXN_TEST_KAFKA_CLASSPATH") else {
        eprintln!(
            "kafka_acls_sh_adds_lists_and_removes: skipped: TXN_TEST_KAFKA_CLASSPATH not set"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().to_str().expect("utf-8");
    for op in ["Alter", "Describe"] {
        let st = Command::new(daemon_bin_from_env())
            .args(["acl", "add", "--principal", "User:ANONYMOUS"])
            .args([
                "--resource-type",
                "Cluster",
                "--resource-name",
                "kafka-cluster",
            ])
            .args(["--operation", op, "--data-dir", data])
            .args(["--set", "transaction.state.log.num.partitions=5"])
            .status()
            .expect("acl add");
        assert!(st.success());
    }
    let daemon = start(data);
    let addr = daemon.addr().expect("the daemon's address");
    let bootstrap = addr.to_string();
    let (cp, bs) = (classpath.as_str(), bootstrap.as_str());

    assert_eq!(init(addr, "app-1").await, 53, "no ACL yet");
    ACLS.run(
        cp,
        bs,
        &[
            "--add",
            "--allow-principal",
            "User:ANONYMOUS",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--transactional-id",
            "app-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    // The DENY that is added, then removed.
    let deny_blocked = [
        "--deny-principal",
        "User:ANONYMOUS",
        "--operation",
        "Write",
        "--transactional-id",
        "app-blocked",
    ];
    ACLS.run(cp, bs, &[&["--add"][..], &deny_blocked].concat());
    assert_eq!(init(addr, "app-1").await, 0, "prefixed ALLOW");
    assert_eq!(init(addr, "app-blocked").await, 53, "DENY wins");

    let listed = ACLS.run(cp, bs, &["--list", "--transactional-id", "app-blocked"]);
    assert!(
        listed.contains("operation=WRITE") && listed.contains("permissionType=DENY"),
        "{listed}"
    );
    let all = ACLS.run(cp, bs, &["--list"]);
    assert!(all.contains("name=app-, patternType=PREFIXED"), "{all}");

    ACLS.run(
        cp,
        bs,
        &[&["--remove", "--force"][..], &deny_blocked].concat(),
    );
    assert_eq!(init(addr, "app-blocked").await, 0, "the DENY is gone");
    ACLS.run(
        cp,
        bs,
        &[
            "--remove",
            "--force",
            "--transactional-id",
            "app-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    assert_eq!(init(addr, "app-2").await, 53, "the ALLOW is gone");
}
