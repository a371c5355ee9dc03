//! Append throughput and latency of `SledTxnLog`: group commit vs one fsync per append.
//!
//! `cargo run --release -p txn-log --example bench [-- --secs S] [--dir PATH]`
//!
//! For 1, 16 and 256 concurrent writers (tokio tasks on a 2-worker runtime), each appending
//! one-record batches in a loop for S seconds (default 2), it prints appends/s, p50/p99
//! append latency, and the mean group-commit batch size, for:
//! - `group`: the default configuration (group commit, fsync per batch);
//! - `per-append`: `max_batch = 1`, i.e. one sled flush + fsync per append;
//! - `group-osbuf`: group commit without fsync (`SyncMode::OsBuffered`), for reference only.
//!
//! Then the ratio group / per-append per writer count. Prints numbers, asserts nothing.
//! The data directory defaults to a fresh temporary directory (`--dir` to pick the disk).

use std::sync::Arc;
use std::time::{Duration, Instant};

use txn_log::suite::{record, tid};
use txn_log::{
    CoordinatorEpoch, LogEntry, LogPartition, SledConfig, SledTxnLog, SyncMode, TxnLog, TxnState,
};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Group,
    PerAppend,
    GroupOsBuffered,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Group => "group",
            Self::PerAppend => "per-append",
            Self::GroupOsBuffered => "group-osbuf",
        }
    }
}

struct Outcome {
    appends_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    mean_batch: f64,
}

const PARTITIONS: u32 = 4;

async fn run(dir: &std::path::Path, mode: Mode, writers: usize, secs: f64) -> Outcome {
    let sub = tempfile::tempdir_in(dir).expect("tempdir");
    let mut config = SledConfig::new(sub.path());
    match mode {
        Mode::Group => {}
        Mode::PerAppend => config.max_batch = 1,
        Mode::GroupOsBuffered => config.sync_mode = SyncMode::OsBuffered,
    }
    let log = Arc::new(SledTxnLog::open(config).expect("open"));
    for p in 0..PARTITIONS {
        log.claim(LogPartition(p), CoordinatorEpoch(1))
            .await
            .expect("claim");
    }
    // Warm up briefly so the first measurement does not include file creation.
    for i in 0..20 {
        log.append(
            LogPartition(0),
            CoordinatorEpoch(1),
            vec![LogEntry::upsert(
                tid("warmup"),
                record(i, TxnState::Ongoing, 3),
            )],
        )
        .await
        .expect("append");
    }
    let before = log.stats();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let id = tid(&format!("bench-w{w}"));
            let p = LogPartition(u32::try_from(w).unwrap() % PARTITIONS);
            let mut lat = Vec::new();
            let mut i = 0i64;
            while Instant::now() < deadline {
                let t = Instant::now();
                log.append(
                    p,
                    CoordinatorEpoch(1),
                    vec![LogEntry::upsert(
                        id.clone(),
                        record(i, TxnState::Ongoing, 3),
                    )],
                )
                .await
                .expect("append");
                lat.push(t.elapsed());
                i += 1;
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = log.stats();
    lat.sort();
    let pct = |q: f64| {
        let i = ((lat.len() as f64 - 1.0) * q).round() as usize;
        lat.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let batches = after.batches - before.batches;
    let requests = after.requests - before.requests;
    Outcome {
        appends_per_s: lat.len() as f64 / elapsed,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        mean_batch: if batches == 0 {
            0.0
        } else {
            requests as f64 / batches as f64
        },
    }
}

fn main() {
    let mut secs = 2.0;
    let mut dir = std::env::temp_dir();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|s| s.parse().ok()).expect("--secs S"),
            "--dir" => dir = args.next().expect("--dir PATH").into(),
            other => panic!("unknown argument {other}"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "txn-log bench: {secs} s per run, one-record appends over {PARTITIONS} partitions, dir {}",
        dir.display()
    );
    println!(
        "{:>7}  {:<12} {:>11} {:>10} {:>10} {:>10}",
        "writers", "mode", "appends/s", "p50 µs", "p99 µs", "batch avg"
    );
    for writers in [1usize, 16, 256] {
        let mut rates = Vec::new();
        for mode in [Mode::Group, Mode::PerAppend, Mode::GroupOsBuffered] {
            let o = rt.block_on(run(&dir, mode, writers, secs));
            println!(
                "{:>7}  {:<12} {:>11.0} {:>10.0} {:>10.0} {:>10.1}",
                writers,
                mode.name(),
                o.appends_per_s,
                o.p50_us,
                o.p99_us,
                o.mean_batch
            );
            rates.push((mode, o.appends_per_s));
        }
        let rate = |m| rates.iter().find(|(x, _)| *x == m).map_or(0.0, |r| r.1);
        println!(
            "{:>7}  ratio group / per-append (both fsync): {:.1}x",
            writers,
            rate(Mode::Group) / rate(Mode::PerAppend)
        );
    }
}
