//! Configuration errors are refused at start naming the key; a valid file is applied and the
//! effective configuration is logged.
#![cfg(feature = "shell")]

mod daemon_support;

use daemon_support::*;

#[test]
fn unknown_key_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let (st, _, err) = run_cli(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("utf8"),
        "--set",
        "transaction.max.timeout=5",
    ]);
    assert_eq!(st.code(), Some(2), "{err}");
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
        let (st, _, err) = run_cli(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data,
            "--set",
            kv,
        ]);
        assert_eq!(st.code(), Some(2), "{kv}: {err}");
        assert!(err.contains(key), "{kv}: {err}");
    }
    let (st, _, err) = run_cli(&["serve", "--data-dir", data, "--set", "novalue"]);
    assert_eq!(st.code(), Some(2), "{err}");
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
    let (st, _, err) = run_cli(&[
        "serve",
        "--data-dir",
        data,
        "--config",
        bad_key.to_str().expect("utf8"),
    ]);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("`bogus.key`"), "{err}");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "transaction.version = = 2\n").expect("write");
    let (st, _, err) = run_cli(&[
        "serve",
        "--data-dir",
        data,
        "--config",
        broken.to_str().expect("utf8"),
    ]);
    assert_eq!(st.code(), Some(2), "{err}");
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
    let (st, _, err) = run_cli(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data,
        "--set",
        "transaction.state.log.num.partitions=5",
    ]);
    assert_eq!(st.code(), Some(2), "{err}");
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
