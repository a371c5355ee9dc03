//! The fault harness in cluster mode: three etcd members, three daemons
//! (1001-1003) sharing the transaction log in etcd with a 2 s lease, each behind its own
//! proxy, three refbrokers pointed at all of them; W1 + W2 + W3 + W5 + W6 under every fault
//! of the single-daemon run (the daemon faults hit a daemon picked at random; half the pauses
//! outlast the lease) plus SIGKILL / SIGSTOP of etcd members. The producers follow their
//! coordinator (FindCoordinator again after NOT_COORDINATOR and friends or a lost
//! connection). Then the checker: no anomaly, at least one daemon and one etcd member killed,
//! and transactions committed after both.
//!
//! Everything starts on free loopback ports; the workload runs `TXN_FAULT_SECS` (default 70)
//! seconds. Prints the seed (replay with `TXN_FAULT_SEED=N`).

use std::path::PathBuf;
use std::time::Duration;

use txn_log::TxnVersion;
use txn_tests::fault::cluster::{ClusterOptions, EtcdOptions};
use txn_tests::fault::history::Outcome;
use txn_tests::fault::workload::{
    Fault, RunOptions, W3Options, run_on, secs_from_env, seed_from_env,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_faults_leave_no_anomaly() {
    // Every cluster fault, the daemon and etcd kills twice per deck, so that both occur in a
    // CI-sized run.
    let mut faults = Fault::CLUSTER.to_vec();
    faults.extend([Fault::KillCoordinator, Fault::KillEtcd]);
    let r = run_on(
        RunOptions {
            seed: seed_from_env(),
            duration: secs_from_env("TXN_FAULT_SECS", 70),
            producers: 4,
            shared_producers: 2,
            restart_p: 0.1,
            consumers: 2,
            abort_p: 0.1,
            w5_every: Some(Duration::from_secs(6)),
            faults,
            fault_interval_ms: (1000, 3000),
            tv: TxnVersion::V2,
            txn_timeout_ms: 6000,
            cluster: ClusterOptions::from_env(
                PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
                3,
                "fq",
                6,
                12,
            ),
            w3: Some(W3Options::default()),
        },
        Some(EtcdOptions::default()),
    )
    .await
    .expect("run");
    let (h, seed) = (&r.history, r.seed);
    println!("{}", h.faults_injected());
    assert!(r.report.is_valid(), "seed {seed}: {}", r.report);

    // The faults that matter here happened, and transactions committed after them.
    // ("kill-etcd" also matches "kill-etcd-2", two members down for a short while)
    let first = |kind: &str| {
        h.fault_kinds
            .iter()
            .find(|(_, k)| k.starts_with(kind))
            .map(|(t, _)| *t)
    };
    let committed_after = |t: u64| {
        h.txns
            .iter()
            .filter(|x| x.outcome == Outcome::Committed && x.invoke_ms > t)
            .count()
    };
    for kind in ["kill-daemon", "kill-etcd"] {
        let t = first(kind).unwrap_or_else(|| panic!("seed {seed}: no {kind} fault"));
        let n = committed_after(t);
        println!("{kind} first at +{t} ms; {n} transactions began after it and committed");
        assert!(
            n > 0,
            "seed {seed}: nothing committed after the {kind} at {t} ms"
        );
    }
    assert!(r.report.committed > 10, "seed {seed}: {}", r.report);
    assert!(r.report.w3.committed > 10, "seed {seed}: {}", r.report);

    // I10 really looked: every partition read, every trail line of the three daemons parsed.
    let (d, i10) = (&h.decisions, &r.report.i10);
    assert!(d.unread.is_empty(), "seed {seed}: unread {:?}", d.unread);
    assert_eq!(d.unparsed, 0, "seed {seed}: trail lines that did not parse");
    assert_eq!(i10.decided_after_read, 0, "seed {seed}: daemons stop first");
    assert!(i10.complete_partitions > 10, "seed {seed}: {}", r.report);
    println!(
        "seed {seed}: {} transactions ({} committed), W3 {} committed; I10 markers {}, \
         Complete* {} ({} unmatched: their Prepare* acknowledged to no daemon's trail); {} \
         persisted records audited",
        h.txns.len(),
        r.report.committed,
        r.report.w3.committed,
        i10.markers,
        i10.completes,
        i10.unmatched_completes,
        h.log_records_checked
    );
}
