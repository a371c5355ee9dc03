//! Apache Kafka's own `kafka-configs.sh` (`org.apache.kafka.tools.ConfigCommand`, in the
//! `kafka-tools` 4.4 jar `tests/java/pom.xml` resolves) managing SCRAM users on the daemon: `--alter
//! --add-config 'SCRAM-SHA-256=[iterations=4096,password=...]'`, `--describe`, `--alter
//! --delete-config SCRAM-SHA-256`, each followed by a SCRAM-SHA-256 login on the daemon's
//! SASL_PLAINTEXT listener (through the daemon's own SASL client connector,
//! `coordinator::server::outgoing`): the new password works, a wrong one and the deleted
//! credential fail. The tool talks to the PLAINTEXT listener (no authorizer: the SCRAM APIs are
//! open, as on a Kafka cluster without one). Skipped (and passing) without
//! `TXN_TEST_KAFKA_CLASSPATH`, as `kafka_acls.rs`.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use coordinator::server::outgoing::ClientSecurity;
use markers::wire::{ConnectError, Connector};
use txn_testkit::process::StdoutLines;
use txn_tests::fault::cluster::daemon_bin_from_env;
use txn_tests::kafka_tool::CONFIGS;

/// The daemon with a PLAINTEXT and a SASL_PLAINTEXT (SCRAM-SHA-256) listener; killed on drop.
struct Daemon {
    child: Child,
    plaintext: SocketAddr,
    sasl: SocketAddr,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(data: &str) -> Daemon {
    let mut child = Command::new(daemon_bin_from_env())
        .args(["serve", "--data-dir", data])
        .args([
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=SCRAM-SHA-256",
            "--set",
            "transaction.state.log.num.partitions=5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start txn-coordinator (cargo build -p coordinator first)");
    let lines = StdoutLines::read(child.stdout.take().expect("stdout"));
    let prefix = "txn-coordinator listening on ";
    let listeners = lines
        .listening(prefix, Duration::from_secs(60))
        .and_then(|_| lines.listeners(prefix));
    let (plaintext, sasl) = match &listeners {
        Ok(l) => (l.get("PLAINTEXT"), l.get("SASL_PLAINTEXT")),
        Err(_) => (None, None),
    };
    let (Some(plaintext), Some(sasl)) = (plaintext, sasl) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the daemon did not start: {listeners:?}");
    };
    Daemon {
        child,
        plaintext,
        sasl,
    }
}

/// A SCRAM-SHA-256 login as `user` with `password` on `addr`.
async fn login(addr: SocketAddr, user: &str, password: &str) -> Result<(), ConnectError> {
    let jaas = format!(
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";"#
    );
    let keys = [
        ("t.security.protocol", "SASL_PLAINTEXT".to_owned()),
        ("t.sasl.mechanism", "SCRAM-SHA-256".to_owned()),
        ("t.sasl.jaas.config", jaas),
    ];
    let connector: Arc<dyn Connector> = ClientSecurity::from_keys("t.", |k| {
        keys.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .expect("client keys")
    .connector();
    connector
        .connect(&addr.ip().to_string(), addr.port(), "kafka-configs-test")
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_configs_sh_adds_describes_and_deletes_scram_users() {
    let Ok(classpath) = std::env::var("TXN_TEST_KAFKA_CLASSPATH") else {
        eprintln!(
            "kafka_configs_sh_adds_describes_and_deletes_scram_users: skipped: TXN_TEST_KAFKA_CLASSPATH not set"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let d = start(dir.path().to_str().expect("utf-8"));
    let bootstrap = d.plaintext.to_string();
    let (cp, bs) = (classpath.as_str(), bootstrap.as_str());
    let alice = ["--entity-type", "users", "--entity-name", "alice"];

    let e = login(d.sasl, "alice", "alice-secret")
        .await
        .expect_err("no credential yet");
    assert!(matches!(e, ConnectError::Authentication { .. }), "{e}");

    let out = CONFIGS.run(
        cp,
        bs,
        &[
            &["--alter", "--add-config"][..],
            &["SCRAM-SHA-256=[iterations=4096,password=alice-secret]"],
            &alice,
        ]
        .concat(),
    );
    assert!(
        out.contains("Completed updating config for user alice"),
        "{out}"
    );
    login(d.sasl, "alice", "alice-secret")
        .await
        .expect("the new password logs in");
    let e = login(d.sasl, "alice", "wrong")
        .await
        .expect_err("a wrong password");
    assert!(e.to_string().contains("SASL_AUTHENTICATION_FAILED"), "{e}");

    let out = CONFIGS.run(cp, bs, &[&["--describe"][..], &alice].concat());
    assert!(
        out.contains(
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096"
        ),
        "{out}"
    );

    // A new password replaces the old one.
    CONFIGS.run(
        cp,
        bs,
        &[
            &["--alter", "--add-config"][..],
            &["SCRAM-SHA-256=[iterations=8192,password=alice-2]"],
            &alice,
        ]
        .concat(),
    );
    login(d.sasl, "alice", "alice-2")
        .await
        .expect("the changed password logs in");
    assert!(login(d.sasl, "alice", "alice-secret").await.is_err());

    let out = CONFIGS.run(
        cp,
        bs,
        &[&["--alter", "--delete-config", "SCRAM-SHA-256"][..], &alice].concat(),
    );
    assert!(
        out.contains("Completed updating config for user alice"),
        "{out}"
    );
    let e = login(d.sasl, "alice", "alice-2")
        .await
        .expect_err("the credential is gone");
    assert!(matches!(e, ConnectError::Authentication { .. }), "{e}");
    let out = CONFIGS.run(cp, bs, &[&["--describe"][..], &alice].concat());
    assert!(!out.contains("SCRAM-SHA-256=iterations"), "{out}");
}
