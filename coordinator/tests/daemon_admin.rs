//! Admin commands against the running daemon, `dump-log` offline, and the metrics endpoint.
#![cfg(feature = "daemon")]

mod daemon_support;

use std::time::Duration;

use coordinator::server::admin::{DESCRIBE_COLUMNS, LIST_COLUMNS};
use daemon_support::*;
use kafka_protocol::messages as km;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use txn_testkit::client::Features;

async fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("http url");
    let (hostport, path) = rest.split_once('/').expect("path");
    let mut sock = tokio::net::TcpStream::connect(hostport)
        .await
        .expect("connect metrics");
    sock.write_all(format!("GET /{path} HTTP/1.1\r\nHost: {hostport}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(30), sock.read_to_string(&mut out))
        .await
        .expect("metrics answered")
        .expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_describe_find_hanging_abort_and_dump_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let broker = FakeBroker::start().await;
    let bs = broker.addr.to_string();
    let mut d = Daemon::start(
        dir.path(),
        &[
            "--bootstrap-servers",
            &bs,
            "--metrics-listen",
            "127.0.0.1:0",
            "--node-id",
            "7",
            "--set",
            "transaction.state.log.num.partitions=6",
        ],
    );
    let addr = d.addr.to_string();
    let mut c = d.conn().await;
    // ApiVersions v3 advertises transaction.version as Kafka does: supported 0..2, finalized at
    // the configured level (default 2) with epoch 0, below any broker's
    let v = c
        .call(&km::ApiVersionsRequest::default(), 3)
        .await
        .expect("api versions");
    let tv = |min, max| vec![("transaction.version".to_owned(), min, max)];
    assert_eq!(
        Features::of(&v),
        Features {
            supported: tv(0, 2),
            finalized_epoch: 0,
            finalized: tv(2, 2),
        }
    );
    // "hung": timeout 1 ms, so it is open longer than its timeout at once; the reaper
    // (every 10 s) has not run yet.
    let (p_hung, e_hung) = init_ok(&mut c, "hung", 1).await;
    let r = c
        .call(&add_req_v3("hung", p_hung, e_hung, &[("t", 1)]), 0)
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    let (p_ok, e_ok) = init_ok(&mut c, "fine", 60_000).await;
    let r = c
        .call(&add_req_v3("fine", p_ok, e_ok, &[("t", 0)]), 0)
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    tokio::time::sleep(Duration::from_millis(20)).await;

    let (st, out, err) = run_admin("list", &addr, &[]);
    assert!(st.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // Kafka's kafka-transactions.sh list columns, in its order (the constant is checked
    // against Kafka's own tool by txn-tests' kafka_tools).
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        LIST_COLUMNS,
        "{out}"
    );
    let node = "7".to_owned();
    let fine_pid = p_ok.to_string();
    assert!(
        lines
            .iter()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["fine", node.as_str(), fine_pid.as_str(), "Ongoing"]),
        "{out}"
    );
    // --duration-filter (Kafka's name; --duration-ms is the same flag): nothing has run an hour
    for flag in ["--duration-filter", "--duration-ms"] {
        let (st, out, err) = run_admin("list", &addr, &[flag, "3600000"]);
        assert!(st.success(), "{err}");
        assert_eq!(out.lines().count(), 1, "{flag}: {out}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("fine ") && l.contains("Ongoing")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("hung ") && l.contains("Ongoing")),
        "{out}"
    );

    let pid_filter = p_ok.to_string();
    let (st, out, err) = run_admin("list", &addr, &["--producer-id", &pid_filter, "--json"]);
    assert!(st.success(), "{err}");
    assert!(
        out.contains("\"transactionalId\":\"fine\"") && !out.contains("hung"),
        "{out}"
    );

    let (st, out, err) = run_admin("describe", &addr, &["--transactional-id", "fine", "--json"]);
    assert!(st.success(), "{err}");
    assert!(
        out.contains("\"state\":\"Ongoing\"") && out.contains("\"partitions\":[\"t-0\"]"),
        "{out}"
    );
    let (st, out, err) = run_admin("describe", &addr, &["--transactional-id", "fine"]);
    assert!(st.success(), "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // Kafka's kafka-transactions.sh describe columns, in its order.
    assert_eq!(lines[0], DESCRIBE_COLUMNS, "{out}");
    assert_eq!(
        lines[1][..6],
        [
            node.as_str(),
            "fine",
            fine_pid.as_str(),
            &e_ok.to_string(),
            "Ongoing",
            "60000"
        ],
        "{out}"
    );
    assert_eq!(lines[1][8], "t-0", "{out}");
    let (st, _, err) = run_admin("describe", &addr, &["--transactional-id", "nobody"]);
    assert!(!st.success());
    assert!(err.contains("TRANSACTIONAL_ID_NOT_FOUND"), "{err}");

    let (st, out, err) = run_admin("find-hanging", &addr, &[]);
    assert!(st.success(), "{err}");
    let ids: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(ids.contains(&"hung") && !ids.contains(&"fine"), "{out}");

    // force-terminate (Kafka 4.1's forceTerminateTransaction, also accepted under that name
    // with --transactionalId): fences the producer and waits until the id is idle.
    let (p_ft, e_ft) = init_ok(&mut c, "ft", 60_000).await;
    let r = c
        .call(&add_req_v3("ft", p_ft, e_ft, &[("t", 2)]), 0)
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    let (st, out, err) = run_admin("force-terminate", &addr, &["--transactional-id", "ft"]);
    assert!(st.success(), "{err}");
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert!(
        row.get(1) == Some(&"ft") && matches!(row.get(4), Some(&"CompleteAbort" | &"Empty")),
        "{out}"
    );
    let r = c
        .call(&end_req("ft", p_ft, e_ft, true), 3)
        .await
        .expect("end");
    assert_ne!(r.error_code, 0, "the old producer is fenced");
    let (st, _, err) = run_admin(
        "forceTerminateTransaction",
        &addr,
        &["--transactionalId", "ft"],
    );
    assert!(!st.success(), "nothing open any more");
    assert!(err.contains("has no open transaction"), "{err}");

    let (st, out, err) = run_admin("abort", &addr, &["--transactional-id", "fine", "--json"]);
    assert!(st.success(), "{err}");
    assert!(
        out.contains("\"state\":\"CompleteAbort\"") || out.contains("\"state\":\"Empty\""),
        "{out}"
    );
    // The old producer is fenced.
    let r = c
        .call(&end_req("fine", p_ok, e_ok, true), 3)
        .await
        .expect("end");
    assert_ne!(r.error_code, 0);

    // A partly refused AddPartitionsToTxn ("t" is known, "nope" is not): counted once, under
    // its cause, not the OPERATION_NOT_ATTEMPTED of the partition listed first.
    let (p_pr, e_pr) = init_ok(&mut c, "partly", 60_000).await;
    let r = c
        .call(
            &add_req_v3("partly", p_pr, e_pr, &[("t", 0), ("nope", 0)]),
            0,
        )
        .await
        .expect("add");
    assert_eq!(
        add_errors(&r),
        vec![("nope".into(), 0, 3), ("t".into(), 0, 55)],
        "UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED"
    );

    let metrics = http_get(d.metrics_url.as_deref().expect("metrics url")).await;
    // hung, fine, ft and partly: four AddPartitionsToTxn requests, one error answer
    assert!(
        metrics.contains("txn_coordinator_requests_total{api=\"AddPartitionsToTxn\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "txn_coordinator_errors_total{api=\"AddPartitionsToTxn\",error=\"UNKNOWN_TOPIC_OR_PARTITION\"} 1"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("OPERATION_NOT_ATTEMPTED"), "{metrics}");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("txn_coordinator_requests_total{api=\"InitProducerId\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("txn_coordinator_transactions_begun_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("txn_coordinator_producers_fenced_total 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("txn_coordinator_log_append_seconds_bucket"),
        "{metrics}"
    );
    assert!(
        metrics.contains("txn_coordinator_partitions_loaded 6"),
        "{metrics}"
    );
    // Each served log partition shows its coordinator epoch (a fresh log: epoch 0).
    for p in 0..6 {
        assert!(
            metrics.contains(&format!(
                "txn_coordinator_partition_coordinator_epoch{{partition=\"{p}\"}} 0"
            )),
            "{metrics}"
        );
    }
    assert!(
        metrics.contains("# TYPE txn_coordinator_group_commit_batches counter")
            && metrics.contains("txn_coordinator_group_commit_batches_total "),
        "{metrics}"
    );
    // Per-API latency histograms, counted like the requests.
    assert!(
        metrics.contains("# TYPE txn_coordinator_request_duration_seconds histogram"),
        "{metrics}"
    );
    for api in [
        "InitProducerId",
        "AddPartitionsToTxn",
        "EndTxn",
        "ListTransactions",
    ] {
        assert!(
            metrics.lines().any(|l| l
                .starts_with("txn_coordinator_request_duration_seconds_count{")
                && l.contains(&format!("api=\"{api}\""))
                && !l.ends_with(" 0")),
            "{api}: {metrics}"
        );
    }
    // Process metrics and build information.
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name}: {metrics}"
        );
    }
    assert!(
        metrics.contains(&format!(
            "txn_coordinator_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{metrics}"
    );
    // Nothing cumulative is typed as a gauge.
    for line in metrics.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(
            !(line.ends_with(" gauge") && line.contains("_total")),
            "{line}"
        );
    }
    let nf = http_get(&format!("{}x", d.metrics_url.as_deref().expect("url"))).await;
    assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
    let base = d
        .metrics_url
        .as_deref()
        .expect("url")
        .trim_end_matches("/metrics")
        .to_owned();
    let health = http_get(&format!("{base}/health")).await;
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
        "{health}"
    );
    // Every partition is loaded (the ready line was printed).
    let ready = http_get(&format!("{base}/ready")).await;
    assert!(
        ready.starts_with("HTTP/1.1 200") && ready.ends_with("ready\n"),
        "{ready}"
    );

    // dump-log needs the daemon stopped (sled locks its directory).
    assert!(d.terminate().success());
    let data = dir.path().to_str().expect("utf8");
    let (st, out, err) = run_cli(&[
        "dump-log",
        "--data-dir",
        data,
        "--set",
        "transaction.state.log.num.partitions=6",
    ]);
    assert!(st.success(), "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("transaction_metadata::transactionalId=hung")
                && l.contains(&format!(
                    "producerId:{p_hung},producerEpoch:{e_hung},state=Ongoing,partitions=[t-1]"
                ))
                && l.contains("txnTimeoutMs=1")),
        "{out}"
    );
    let (st, out, err) = run_cli(&[
        "dump-log",
        "--data-dir",
        data,
        "--json",
        "--set",
        "transaction.state.log.num.partitions=6",
    ]);
    assert!(st.success(), "{err}");
    assert!(out.contains("\"transactionalId\":\"fine\""), "{out}");
    // Every persisted field, the two-phase-commit ones included.
    for field in [
        "\"producerId\":",
        "\"prevProducerId\":",
        "\"nextProducerId\":",
        "\"producerEpoch\":",
        "\"lastProducerEpoch\":",
        "\"sessionProducerId\":",
        "\"sessionProducerEpoch\":",
        "\"twoPhaseCommit\":",
        "\"txnTimeoutMs\":",
        "\"state\":",
        "\"partitions\":",
        "\"txnStartTimestamp\":",
        "\"txnLastUpdateTimestamp\":",
        "\"clientTransactionVersion\":",
    ] {
        assert!(out.contains(field), "{field}: {out}");
    }
    let (st, _, err) = run_cli(&["dump-log", "--data-dir", "/nonexistent/dir"]);
    assert!(!st.success());
    assert!(err.contains("holds no transaction log"), "{err}");
}

#[test]
fn help_exits_zero_and_names_the_new_flags() {
    let (st, out, err) = run_cli(&["--help"]);
    assert!(st.success(), "{err}");
    assert!(out.contains("serve") && out.contains("dump-log"), "{out}");
    let (st, out, err) = run_cli(&["serve", "--help"]);
    assert!(st.success(), "{err}");
    for flag in [
        "--listen",
        "--advertised-listener",
        "--data-dir",
        "--node-id",
        "--bootstrap-servers",
        "--config",
        "--set",
        "--metrics-listen",
        "--log-format",
        // The flags as configuration keys.
        "data-dir (default ./txn-data)",
        "log-format (default text)",
    ] {
        assert!(out.contains(flag), "{flag}: {out}");
    }
    let (st, out, err) = run_cli(&["abort", "--help"]);
    assert!(st.success(), "{err}");
    assert!(out.contains("--timeout-ms"), "{out}");
    // A bare txn-coordinator prints its usage and fails (the README says so).
    let (st, _, err) = run_cli(&[]);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("Usage: txn-coordinator"), "{err}");
}

/// `abort` gives up after --timeout-ms with exit 1 when the id does not become idle: without
/// brokers the abort markers cannot be delivered, so the fenced transaction stays in
/// PrepareAbort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_that_cannot_complete_exits_non_zero() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=2"],
    );
    let addr = d.addr.to_string();
    let mut c = d.conn().await;
    let (p, e) = init_ok(&mut c, "stuck", 60_000).await;
    let r = c
        .call(&add_req_v3("stuck", p, e, &[("t", 0)]), 0)
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    let started = std::time::Instant::now();
    let (st, out, err) = run_admin(
        "abort",
        &addr,
        &["--transactional-id", "stuck", "--timeout-ms", "1500"],
    );
    assert_eq!(st.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("gave up after 1500 ms") && err.contains("PrepareAbort"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}
