//! `txn-faults`: a long fault run (see docs/reliability.md).
//!
//! ```text
//! txn-faults [--secs N] [--seed S] [--producers N] [--shared N] [--consumers N]
//!            [--tv 1|2] [--log-dir DIR] [--rounds N] [--cluster]
//! ```
//!
//! Starts the `txn-coordinator` daemon and three refbrokers (binaries next to this one, or
//! `TXN_COORDINATOR_BIN` / `TXN_FAULT_BIN_REFBROKER`) behind fault proxies on loopback, runs
//! W1 + W2 + W3 + W5 + W6 under every fault for `--secs` (default 300) per round, checks the
//! history, and stops at the first invalid round. Exit status 1 if an anomaly was found.
//!
//! `--cluster`: cluster mode: three etcd members (`etcd` on the PATH or
//! `TXN_ETCD_BIN`), three daemons 1001-1003 on the etcd log (2 s lease, 12 log partitions)
//! behind their own proxies, the refbrokers pointed at all three; the nemesis also kills and
//! pauses etcd members, and its daemon faults hit a daemon picked at random. Each round and
//! the total print the faults by kind.
//!
//! An invalid round keeps its temporary directory (every data directory, and the process
//! logs unless `--log-dir` is given) and prints its path with the faults, each at its offset
//! into the run and its wall-clock time, the clock the anomalies are reported in.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use txn_log::TxnVersion;
use txn_tests::fault::cluster::{ClusterOptions, EtcdOptions, daemon_bin_from_env};
use txn_tests::fault::process::bin_path;
use txn_tests::fault::workload::{Fault, Rng, RunOptions, W3Options, run_on, seed_from_env};

/// The command line; every flag may be repeated (the last one counts).
#[derive(Debug, Parser)]
#[command(
    name = "txn-faults",
    about = "Long fault-injection run of the txn-coordinator daemon and three refbrokers \
             (docs/reliability.md)",
    args_override_self = true,
    after_help = "Binaries: txn-coordinator and refbroker next to this one, or \
                  TXN_COORDINATOR_BIN / TXN_FAULT_BIN_REFBROKER; etcd on the PATH or TXN_ETCD_BIN \
                  for --cluster. Exit status 1 if an anomaly was found."
)]
struct Args {
    /// Seconds of workload per round.
    #[arg(long, default_value_t = 300)]
    secs: u64,
    /// Seed of the first round (default: TXN_FAULT_SEED, else from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// W1 producers (one transactional id each).
    #[arg(long, default_value_t = 4)]
    producers: u32,
    /// W2 producers sharing one transactional id.
    #[arg(long, default_value_t = 2)]
    shared: u32,
    /// read_committed consumers polling during the run.
    #[arg(long, default_value_t = 2)]
    consumers: u32,
    /// Transaction version of the producers: 1 (EndTxn v3) or 2.
    #[arg(long, default_value = "2", value_parser = ["1", "2"])]
    tv: String,
    /// Keep the process logs here (one directory per round).
    #[arg(long = "log-dir", value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// Rounds to run; stops at the first invalid one.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Cluster mode: 3 etcd members and 3 daemons on the etcd log.
    #[arg(long)]
    cluster: bool,
}

fn main() -> ExitCode {
    // --help exits 0 here; a malformed command line exits 2 with clap's message.
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("txn-faults: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("txn-faults: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args {
        secs,
        seed,
        producers,
        shared,
        consumers,
        tv,
        log_dir,
        rounds,
        cluster,
    } = args;
    let seed = seed.unwrap_or_else(seed_from_env);
    let tv = if tv == "1" {
        TxnVersion::V1
    } else {
        TxnVersion::V2
    };
    let daemon_bin = daemon_bin_from_env();
    let mut seeds = Rng::new(seed);
    let (mut txns, mut faults) = (0usize, 0usize);
    let (mut markers, mut completes) = (0usize, 0usize);
    let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
    let by_kind = |k: &BTreeMap<&str, usize>| {
        k.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for round in 0..rounds {
        let s = if round == 0 { seed } else { seeds.next_u64() };
        let r = run_on(
            RunOptions {
                seed: s,
                duration: Duration::from_secs(secs),
                producers,
                shared_producers: shared,
                restart_p: 0.1,
                consumers,
                abort_p: 0.1,
                w5_every: Some(Duration::from_secs(6)),
                faults: if cluster {
                    Fault::CLUSTER.to_vec()
                } else {
                    Fault::ALL.to_vec()
                },
                fault_interval_ms: (1500, 4000),
                tv,
                txn_timeout_ms: 6000,
                cluster: ClusterOptions {
                    brokers: 3,
                    topic: "fq".into(),
                    partitions: 6,
                    extra_topics: Vec::new(),
                    txn_log_partitions: if cluster { 12 } else { 4 },
                    reaper_interval_ms: 500,
                    transaction_version: 2,
                    daemon_bin: daemon_bin.clone(),
                    refbroker_bin: bin_path("refbroker"),
                    log_dir: log_dir.as_ref().map(|d| d.join(format!("round-{round}"))),
                },
                w3: Some(W3Options::default()),
            },
            cluster.then(EtcdOptions::default),
        )
        .await?;
        let w3 = &r.report.w3;
        let w3_txns = w3.committed + w3.aborted + w3.indeterminate + w3.input_txns;
        txns += r.history.txns.len() + w3_txns;
        faults += r.history.faults.len();
        markers += r.report.i10.markers;
        let mut round_kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
        for (_, k) in &r.history.fault_kinds {
            *round_kinds.entry(k).or_default() += 1;
            *kinds.entry(k).or_default() += 1;
        }
        completes += r.report.i10.completes;
        println!(
            "round {round}: seed {s}, {} transactions ({} of them W3: {} transforms committed, \
             {} inputs checked for exactly one transform), {} faults: {}",
            r.history.txns.len() + w3_txns,
            w3_txns,
            w3.committed,
            w3.inputs_checked,
            r.history.faults.len(),
            if r.report.is_valid() {
                "valid"
            } else {
                "INVALID"
            }
        );
        println!("round {round}: faults by kind: {}", by_kind(&round_kinds));
        if !r.report.is_valid() {
            let start = r.history.start_unix_ms;
            for (t, f) in &r.history.faults {
                let wall = start + i64::try_from(*t).unwrap_or(i64::MAX);
                println!("  fault at +{t} ms ({wall} ms): {f}");
            }
            if let Some(dir) = &r.kept {
                println!(
                    "  data directories and process logs of this round: {}",
                    dir.display()
                );
            }
            println!(
                "total: {txns} transactions checked, {markers} markers and {completes} \
                 Complete* records checked (I10), {faults} faults injected ({})",
                by_kind(&kinds)
            );
            return Ok(ExitCode::from(1));
        }
    }
    println!(
        "total: {txns} transactions checked, {markers} markers and {completes} Complete* \
         records checked (I10), {faults} faults injected ({}), no anomaly",
        by_kind(&kinds)
    );
    Ok(ExitCode::SUCCESS)
}
