//! Mixed-fault run: the daemon and three refbrokers behind fault proxies, W1 + W2 +
//! W3 + W5 + W6 under kills, pauses, partitions, delays and held requests; then the checker.
//! Prints the seed (replay with `TXN_FAULT_SEED=N`).

use std::path::PathBuf;
use std::time::Duration;

use txn_log::TxnVersion;
use txn_tests::fault::cluster::ClusterOptions;
use txn_tests::fault::workload::{
    Fault, RunOptions, RunResult, W3Options, run, secs_from_env, seed_from_env,
};

fn cluster() -> ClusterOptions {
    ClusterOptions::from_env(
        PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
        3,
        "fq",
        6,
        4,
    )
}

/// The no-fault baseline: three producers, one consumer, W3, W5 every 3 s, for
/// `TXN_FAULT_BASELINE_SECS` (default 8) seconds.
fn baseline() -> RunOptions {
    RunOptions {
        seed: seed_from_env(),
        duration: secs_from_env("TXN_FAULT_BASELINE_SECS", 8),
        producers: 3,
        shared_producers: 0,
        restart_p: 0.0,
        consumers: 1,
        abort_p: 0.1,
        w5_every: Some(Duration::from_secs(3)),
        faults: vec![],
        fault_interval_ms: (1000, 2000),
        tv: TxnVersion::V2,
        txn_timeout_ms: 6000,
        cluster: cluster(),
        w3: Some(W3Options::default()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fault_baseline_is_valid() {
    let r = run(baseline()).await.expect("run");
    assert_valid_and_busy(&r, 5);
}

/// No anomaly, I10 really looked ([`assert_i10_checked`]), and the run did enough: more than
/// 10 transactions committed, more than `w3_min` W3 transforms committed and W3 input offsets
/// checked.
fn assert_valid_and_busy(r: &RunResult, w3_min: usize) {
    assert!(r.report.is_valid(), "seed {}: {}", r.seed, r.report);
    assert_i10_checked(r);
    assert!(r.report.committed > 10, "seed {}: {}", r.seed, r.report);
    assert!(
        r.report.w3.committed > w3_min,
        "seed {}: {}",
        r.seed,
        r.report
    );
    assert!(
        r.report.w3.inputs_checked > w3_min,
        "seed {}: {}",
        r.seed,
        r.report
    );
}

/// I10 really looked: every partition was read with its markers, and the daemon's transition
/// trail parsed and matched them.
fn assert_i10_checked(r: &RunResult) {
    let (d, i10) = (&r.history.decisions, &r.report.i10);
    assert!(
        d.unread.is_empty(),
        "seed {}: unread {:?}",
        r.seed,
        d.unread
    );
    assert_eq!(
        d.unparsed, 0,
        "seed {}: trail lines that did not parse",
        r.seed
    );
    println!(
        "seed {}: I10 markers per topic {:?}, Complete* checked {} on {} partitions, {} \
         unjudged (not read), {} unmatched",
        r.seed,
        i10.markers_by_topic,
        i10.completes,
        i10.complete_partitions,
        i10.unjudged_partitions,
        i10.unmatched_completes
    );
    let mut topics = vec![d.topic.as_str()];
    topics.extend(
        d.w3_topics
            .iter()
            .flat_map(|(i, o)| [i.as_str(), o.as_str()]),
    );
    for t in topics {
        let read = d.logs.keys().filter(|(lt, _)| lt == t).count();
        assert!(read > 0, "seed {}: no partition of {t} read", r.seed);
        let m = i10.markers_by_topic.get(t).copied().unwrap_or(0);
        assert!(m > 0, "seed {}: no marker on {t}: {}", r.seed, r.report);
    }
    assert_eq!(
        i10.decided_after_read, 0,
        "seed {}: the daemon stops before the read",
        r.seed
    );
    assert!(i10.markers > 10, "seed {}: {}", r.seed, r.report);
    assert!(
        i10.complete_partitions > 10,
        "seed {}: {}",
        r.seed,
        r.report
    );
}

/// The CI mixed-fault run: about 75 s of faults (`TXN_FAULT_SECS` overrides), then healing,
/// the final read, the log audit and the checker. Any anomaly fails the test with the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_faults_leave_no_anomaly() {
    let r = run(RunOptions {
        duration: secs_from_env("TXN_FAULT_SECS", 75),
        producers: 4,
        shared_producers: 2,
        restart_p: 0.1,
        consumers: 2,
        w5_every: Some(Duration::from_secs(6)),
        faults: Fault::ALL.to_vec(),
        fault_interval_ms: (1500, 4000),
        ..baseline()
    })
    .await
    .expect("run");
    let h = &r.history;
    println!("{}", h.faults_injected());
    assert_valid_and_busy(&r, 10);
    assert!(h.faults.len() > 5, "seed {}: too few faults", r.seed);
    let held: u64 = r.proxy_stats.iter().map(|(_, s)| s.held).sum();
    let dropped: u64 = r.proxy_stats.iter().map(|(_, s)| s.dropped_responses).sum();
    println!("requests held: {held}, produce responses dropped: {dropped}");
}
