//! The admin commands against a secured daemon: `--command-config FILE` (a Java properties
//! file, as Kafka's tools take it) gives `list` the TLS truststore and the SASL login of a
//! daemon whose only listener is SASL_SSL (SCRAM-SHA-512) with the standard authorizer. The
//! user sees the transactional ids it may DESCRIBE; a wrong password is a clear error and a
//! failed exit, not a hang. Certificates made with rcgen.
#![cfg(feature = "daemon")]

mod daemon_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coordinator::server::outgoing::ClientSecurity;
use daemon_support::*;

fn jaas(user: &str, password: &str) -> String {
    format!(
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";"#
    )
}

/// A `--command-config` file for `user`, in the form Kafka's docs show (comments, `\`
/// continuation of the JAAS line).
fn command_config(dir: &Path, ca: &Path, user: &str, password: &str) -> PathBuf {
    let path = dir.join(format!("{user}-{password}.properties"));
    let text = format!(
        "# the admin client's security\n\
         security.protocol=SASL_SSL\n\
         ssl.truststore.type=PEM\n\
         ssl.truststore.location={}\n\
         sasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n    \
         username=\"{user}\" password=\"{password}\";\n",
        ca.display()
    );
    std::fs::write(&path, text).expect("write properties");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_over_sasl_ssl_with_command_config() {
    let dir = tempfile::tempdir().expect("tmp");
    let (ca, keystore) = pki::ca_and_keystore(dir.path(), "server.pem");
    let data = dir.path().join("data");
    let data_arg = data.to_string_lossy().into_owned();
    // alice may describe the ids starting with `visible-` (stored before the daemon runs).
    let (st, out, err) = run_cli(&[
        "acl",
        "add",
        "--principal",
        "User:alice",
        "--resource-type",
        "TransactionalId",
        "--resource-name",
        "visible-",
        "--pattern-type",
        "prefixed",
        "--operation",
        "Describe",
        "--data-dir",
        &data_arg,
    ]);
    assert!(st.success(), "{out}{err}");
    let keys = [
        "listeners=SASL_SSL://127.0.0.1:0".to_owned(),
        format!("ssl.keystore.location={}", keystore.display()),
        "sasl.enabled.mechanisms=SCRAM-SHA-512".to_owned(),
        "txn.scram.credentials=SCRAM-SHA-512=[name=admin,password=admin-secret];SCRAM-SHA-512=[name=alice,password=alice-secret]".to_owned(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
        "super.users=User:admin".to_owned(),
    ];
    let mut extra: Vec<&str> = Vec::new();
    for k in &keys {
        extra.extend(["--set", k.as_str()]);
    }
    let d = Daemon::start_listeners(&data, &extra);

    // Two transactional ids, made by the super user.
    let admin = ClientSecurity::from_keys("", |k| match k {
        "security.protocol" => Some("SASL_SSL".to_owned()),
        "ssl.truststore.location" => Some(ca.display().to_string()),
        "sasl.mechanism" => Some("SCRAM-SHA-512".to_owned()),
        "sasl.jaas.config" => Some(jaas("admin", "admin-secret")),
        _ => None,
    })
    .expect("admin settings");
    let mut c = admin
        .connector()
        .connect("127.0.0.1", d.addr.port(), "admin-test")
        .await
        .expect("admin connects");
    for id in ["visible-1", "hidden-1"] {
        let r = c
            .call(&init_req(Some(id), 60_000), 1)
            .await
            .expect("InitProducerId");
        assert_eq!(r.error_code, 0, "InitProducerId({id})");
    }

    let bootstrap = d.addr.to_string();
    let alice = command_config(dir.path(), &ca, "alice", "alice-secret");
    let alice_arg = alice.to_string_lossy().into_owned();
    let (st, out, err) = run_admin("list", &bootstrap, &["--command-config", &alice_arg]);
    assert!(st.success(), "{out}{err}");
    assert!(out.contains("visible-1"), "{out}");
    assert!(
        !out.contains("hidden-1"),
        "alice may not describe it: {out}"
    );
    let admin_file = command_config(dir.path(), &ca, "admin", "admin-secret");
    let admin_arg = admin_file.to_string_lossy().into_owned();
    let (st, out, err) = run_admin(
        "describe",
        &bootstrap,
        &[
            "--command-config",
            &admin_arg,
            "--transactional-id",
            "hidden-1",
        ],
    );
    assert!(st.success(), "{out}{err}");
    assert!(out.contains("hidden-1") && out.contains("Empty"), "{out}");

    // A wrong password: refused at once, with the server's reason.
    let wrong = command_config(dir.path(), &ca, "alice", "wrong");
    let wrong_arg = wrong.to_string_lossy().into_owned();
    let started = Instant::now();
    let (st, out, err) = run_admin("list", &bootstrap, &["--command-config", &wrong_arg]);
    assert!(!st.success(), "{out}{err}");
    assert!(
        err.contains("SASL authentication to") && err.contains("SASL_AUTHENTICATION_FAILED"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );

    // No --command-config against the SASL_SSL listener: a failed exit too, which says the
    // server speaks TLS (not that a 352518912-byte frame is too large).
    let (st, out, err) = run_admin("list", &bootstrap, &[]);
    assert!(!st.success(), "{out}{err}");
    assert!(err.contains("speaks TLS"), "{err}");
    assert!(!err.contains("352518912"), "{err}");

    // A comma-separated --bootstrap-server, as Kafka's tools take it: an address that does not
    // answer is passed over for the next.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let list = format!("{dead_addr},{bootstrap}");
    let (st, out, err) = run_admin("list", &list, &["--command-config", &alice_arg]);
    assert!(st.success(), "{out}{err}");
    assert!(out.contains("visible-1"), "{out}");
    // None answers: every address is named.
    let (st, out, err) = run_admin("list", &dead_addr.to_string(), &[]);
    assert!(!st.success(), "{out}{err}");
    assert!(err.contains(&dead_addr.to_string()), "{err}");
}
