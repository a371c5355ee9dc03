//! Many concurrent transactional clients against the real daemon (sled, fsync): every cycle
//! (InitProducerId once, then AddPartitionsToTxn + EndTxn per transaction) must succeed and
//! end in CompleteCommit. Throughput and the group-commit batch size are printed, not asserted.
#![cfg(feature = "daemon")]

mod daemon_support;

use std::time::{Duration, Instant};

use daemon_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLIENTS: usize = 16;
const TXNS_PER_CLIENT: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_commit_and_group_commit_batches() {
    run("50 log partitions", 50).await;
}

/// Every id in one log partition: the appends of one partition are pipelined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_one_hot_log_partition() {
    run("1 log partition", 1).await;
}

async fn run(label: &str, partitions: u32) {
    let dir = tempfile::tempdir().expect("tmp");
    let broker = FakeBroker::start().await;
    let bs = broker.addr.to_string();
    let set = format!("transaction.state.log.num.partitions={partitions}");
    let d = Daemon::start(
        dir.path(),
        &[
            "--bootstrap-servers",
            &bs,
            "--metrics-listen",
            "127.0.0.1:0",
            "--set",
            &set,
        ],
    );
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let addr = d.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = txn_testkit::wire::connect(addr, "bench").await;
            let id = format!("bench-{i}");
            let (pid, epoch) = init_ok(&mut c, &id, 60_000).await;
            for n in 0..TXNS_PER_CLIENT {
                let part = i32::try_from(n % 3).expect("small");
                // CONCURRENT_TRANSACTIONS while the previous commit's markers complete: retry.
                let mut added = false;
                for _ in 0..400 {
                    let r = c
                        .call(&add_req_v3(&id, pid, epoch, &[("t", part)]), 3)
                        .await
                        .expect("add");
                    match add_errors(&r)[0].2 {
                        0 => {
                            added = true;
                            break;
                        }
                        51 => tokio::time::sleep(Duration::from_millis(2)).await,
                        e => panic!("{id}: AddPartitionsToTxn error {e}"),
                    }
                }
                assert!(added, "{id}: never added");
                let r = c
                    .call(&end_req(&id, pid, epoch, true), 3)
                    .await
                    .expect("end");
                assert_eq!(r.error_code, 0, "{id}");
            }
            wait_state(&mut c, &id, "CompleteCommit").await;
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let secs = started.elapsed().as_secs_f64();
    let txns = CLIENTS * TXNS_PER_CLIENT;
    let url = d.metrics_url.clone().expect("metrics");
    let hostport = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host")
        .to_owned();
    let mut sock = tokio::net::TcpStream::connect(&hostport)
        .await
        .expect("metrics");
    sock.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    sock.read_to_string(&mut text).await.expect("read");
    let gauge = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let batches = gauge("txn_coordinator_group_commit_batches_total");
    let requests = gauge("txn_coordinator_group_commit_requests_total");
    assert!(gauge("txn_coordinator_transactions_committed_total") >= txns as f64);
    println!(
        "{label}: {CLIENTS} clients x {TXNS_PER_CLIENT} transactions: {txns} committed in {secs:.2} s = {:.0} txn/s; \
         group commit: {requests} writes in {batches} batches (mean {:.2}, largest {})",
        txns as f64 / secs,
        if batches > 0.0 {
            requests / batches
        } else {
            0.0
        },
        gauge("txn_coordinator_group_commit_largest_batch"),
    );
}
