//! The I10 anomaly of a long fault run ("CompleteAbort durable while w3-out-0 holds
//! no ABORT marker") was the harness reading the partitions before every transaction was
//! decided. A W3 transaction still open when the workload ended (its EndTxn(abort) held by
//! the proxy, or abandoned and left to the reaper) was aborted after the read of W3's output,
//! and its Complete* was then judged against a log read before its marker was written.
//!
//! This reproduces it without faults or timing luck: a transaction left open on `w3-out-0`
//! with a 3 s timeout, so the reaper aborts it only after the end of the workload. The run's
//! end must read the partitions after that decision (and judge it), not before.

use std::path::PathBuf;
use std::time::Duration;

use txn_log::TxnVersion;
use txn_tests::fault::client::TxnProducer;
use txn_tests::fault::cluster::ClusterOptions;
use txn_tests::fault::history::History;
use txn_tests::fault::workload::{RunOptions, Setup, W3Options, seed_from_env};

const STRAY_TIMEOUT_MS: i32 = 3000;

fn options() -> RunOptions {
    RunOptions {
        seed: seed_from_env(),
        duration: Duration::ZERO,
        producers: 0,
        shared_producers: 0,
        restart_p: 0.0,
        consumers: 0,
        abort_p: 0.0,
        w5_every: None,
        faults: Vec::new(),
        fault_interval_ms: (1000, 2000),
        tv: TxnVersion::V2,
        txn_timeout_ms: STRAY_TIMEOUT_MS,
        cluster: ClusterOptions {
            reaper_interval_ms: 200,
            ..ClusterOptions::from_env(
                PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
                2,
                "fq",
                2,
                2,
            )
        },
        w3: Some(W3Options {
            transformers: 1,
            output_partitions: 1,
            abort_p: 0.0,
            restart_p: 0.0,
            crash_p: 0.0,
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_decided_after_the_workload_is_judged_against_its_markers() {
    let opts = options();
    let setup = Setup::start(&opts).await.expect("cluster");
    let output = setup.w3_output().expect("W3 runs").clone();
    let mut stray = TxnProducer::new(output, "w3-stray", STRAY_TIMEOUT_MS, TxnVersion::V2);
    stray.init().await.expect("InitProducerId");
    stray
        .add_partitions(&[0])
        .await
        .expect("AddPartitionsToTxn");
    stray
        .produce(0, &["stray-1".to_owned()], true)
        .await
        .expect("Produce");
    // No EndTxn: the reaper aborts the transaction about STRAY_TIMEOUT_MS from now, while the
    // run is ending.
    let r = setup.finish(History::new(), &opts).await.expect("finish");
    assert!(r.report.is_valid(), "seed {}: {}", r.seed, r.report);
    let i10 = &r.report.i10;
    assert_eq!(
        i10.completes, 1,
        "the reaper's CompleteAbort is in the trail and judged: {}",
        r.report
    );
    assert_eq!(i10.complete_partitions, 1, "{}", r.report);
    assert_eq!(i10.decided_after_read, 0, "{}", r.report);
    assert_eq!(
        i10.markers_by_topic.get("w3-out").copied(),
        Some(1),
        "{}",
        r.report
    );
}
