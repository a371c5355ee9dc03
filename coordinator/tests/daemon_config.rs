//! Configuration errors are refused at start naming the key; a valid file is applied and the
//! effective configuration is logged.
#![cfg(feature = "daemon")]

mod daemon_support;

use std::path::Path;

use daemon_support::*;

/// Runs the binary with `args`, asserts that it refuses them (exit code 2, as for a usage or
/// configuration error) and returns its stderr.
fn refused(args: &[&str]) -> String {
    let (st, _, err) = run_cli(args);
    assert_eq!(st.code(), Some(2), "{args:?}: {err}");
    err
}

/// [`refused`] for `serve` on a free port over `data` with `--set setting`.
fn serve_refused_with_set(data: &str, setting: &str) -> String {
    refused(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data,
        "--set",
        setting,
    ])
}

/// [`refused`] for `serve` over `data` with `--config file`.
fn serve_refused_with_config(data: &str, file: &Path) -> String {
    refused(&[
        "serve",
        "--data-dir",
        data,
        "--config",
        file.to_str().expect("utf8"),
    ])
}

#[test]
fn unknown_key_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let err = serve_refused_with_set(data.to_str().expect("utf8"), "transaction.max.timeout=5");
    assert!(
        err.contains("unknown configuration key `transaction.max.timeout`"),
        "{err}"
    );
    assert!(
        !data.exists(),
        "nothing is created for a refused configuration"
    );
}

#[test]
fn bad_values_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf8");
    for (kv, key) in [
        ("transaction.version=3", "transaction.version"),
        (
            "transaction.state.log.num.partitions=0",
            "transaction.state.log.num.partitions",
        ),
        (
            "transaction.max.timeout.ms=ten",
            "transaction.max.timeout.ms",
        ),
        ("socket.request.max.bytes=-5", "socket.request.max.bytes"),
    ] {
        let err = serve_refused_with_set(data, kv);
        assert!(err.contains(key), "{kv}: {err}");
    }
    let err = refused(&["serve", "--data-dir", data, "--set", "novalue"]);
    assert!(err.contains("KEY=VALUE"), "{err}");
}

#[test]
fn config_file_errors_name_the_key_or_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf8");
    let bad_key = dir.path().join("bad.toml");
    std::fs::write(
        &bad_key,
        "\"transaction.max.timeout.ms\" = 1000\nbogus.key = 1\n",
    )
    .expect("write");
    let err = serve_refused_with_config(data, &bad_key);
    assert!(err.contains("`bogus.key`"), "{err}");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "transaction.version = = 2\n").expect("write");
    let err = serve_refused_with_config(data, &broken);
    assert!(err.contains("broken.toml"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_file_and_overrides_apply_and_are_logged() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "transaction.state.log.num.partitions = 7\n\"transaction.max.timeout.ms\" = 5000\n",
    )
    .expect("write");
    let data = dir.path().join("data");
    let d = Daemon::start(
        &data,
        &[
            "--config",
            file.to_str().expect("utf8"),
            "--set",
            "transaction.max.timeout.ms=6000",
        ],
    );
    let mut c = d.conn().await;
    // The override wins over the file: 6000 is allowed, 6001 is not.
    let r = c.call(&init_req(Some("x"), 6001), 4).await.expect("init");
    assert_eq!(r.error_code, 50);
    let (_, e) = init_ok(&mut c, "x", 6000).await;
    assert_eq!(e, 0);
    let log = d.stderr();
    assert!(
        log.contains("transaction.state.log.num.partitions") && log.contains("value=7"),
        "{log}"
    );
    assert!(
        log.contains("all transaction log partitions loaded"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_partition_count_of_an_existing_log_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=4"],
    );
    let mut c = d.conn().await;
    init_ok(&mut c, "x", 1000).await;
    assert!(d.terminate().success());
    let data = dir.path().to_str().expect("utf8");
    let err = serve_refused_with_set(data, "transaction.state.log.num.partitions=5");
    assert!(
        err.contains("transaction.state.log.num.partitions is 5") && err.contains("written with 4"),
        "{err}"
    );
    // dump-log finds the recorded count by itself.
    let (st, out, err) = run_cli(&["dump-log", "--data-dir", data]);
    assert!(st.success(), "{err}");
    assert!(out.contains("transactionalId=x "), "{out}");
    let d2 = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=4"],
    );
    let mut c = d2.conn().await;
    assert_eq!(
        describe(&mut c, "x").await.transaction_state.as_str(),
        "Empty"
    );
}

/// Every `serve` flag is also a key of the file (`--flag` is the key `flag`); the command
/// line wins. Here the file sets the node id, the metrics endpoint and JSON logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_flags_from_the_config_file_and_json_logs() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "node-id = 4242\nmetrics-listen = \"127.0.0.1:0\"\nlog-format = \"json\"\n\
         listen = \"127.0.0.1:1\"\n",
    )
    .expect("write");
    // The fixture's --listen 127.0.0.1:0 wins over the file's listen.
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", file.to_str().expect("utf8")],
    );
    assert!(d.metrics_url.is_some(), "metrics-listen from the file");
    let mut c = d.conn().await;
    let r = c
        .call(
            &kafka_protocol::messages::FindCoordinatorRequest::default()
                .with_key(s("x"))
                .with_key_type(1),
            3,
        )
        .await
        .expect("find coordinator");
    assert_eq!(r.node_id.0, 4242);
    let log = d.stderr();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert!(
            l.starts_with('{') && l.ends_with('}') && l.contains("\"level\":"),
            "not a JSON log line: {l}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("effective configuration") && l.contains("\"fields\"")),
        "{log}"
    );
}

/// `dump-log --config FILE` reads the partition count the log was written with when the file
/// does not set it (it used to read 50 whenever --config was given), takes the data directory
/// from the file, and refuses a count that contradicts the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dump_log_with_a_config_file_uses_the_recorded_partition_count() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let mut d = Daemon::start(&data, &["--set", "transaction.state.log.num.partitions=60"]);
    let mut c = d.conn().await;
    // Ids in log partitions 50..60 are the ones a 50-partition read misses.
    let ids: Vec<String> = (0..200)
        .map(|i| format!("id-{i}"))
        .filter(|id| txn_log::kafka_partition_for(txn_log::java_string_hash(id), 60) >= 50)
        .take(3)
        .collect();
    assert_eq!(ids.len(), 3);
    for id in &ids {
        init_ok(&mut c, id, 1000).await;
    }
    assert!(d.terminate().success());
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        format!(
            "data-dir = \"{}\"\n\"transaction.max.timeout.ms\" = 60000\n",
            data.display()
        ),
    )
    .expect("write");
    let conf = file.to_str().expect("utf8");
    let (st, out, err) = run_cli(&["dump-log", "--config", conf]);
    assert!(st.success(), "{err}");
    for id in &ids {
        assert!(
            out.contains(&format!("transactionalId={id} ")),
            "{id}: {out}"
        );
    }
    assert!(out.contains("# __transaction_state-5"), "{out}");
    let err = refused(&[
        "dump-log",
        "--config",
        conf,
        "--set",
        "transaction.state.log.num.partitions=50",
    ]);
    assert!(
        err.contains("is 50") && err.contains("written with 60"),
        "{err}"
    );
}
