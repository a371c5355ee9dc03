//! Deterministic simulation of the whole system on one thread and a seeded clock (in the
//! manner of FoundationDB's simulator and TigerBeetle's VOPR), judged by the fault harness's
//! checker (`fault::checker`, I1-I14 of `docs/reliability.md`).
//!
//! - **coordinators**: `nodes` of them, each the pure [`coordinator::Engine`] per owned log
//!   partition plus the marker writer's pure planner ([`markers::writer::MarkerPlanner`]);
//! - **the log**: one shared [`txn_log::MemTxnLog`] in manual durability (what an etcd log
//!   is to the daemons): writes become durable in prefixes at random flushes; a crash drops
//!   what was not durable; ownership moves by `claim_next` (coordinator epochs);
//! - **participants**: one [`markers::participant::PartitionState`] per partition with its log;
//! - **clients**: [`client::Client`] state machines, TV1 and TV2;
//! - **network**: every message is delayed (reordering), some dropped, some held past the
//!   client's timeout (EndTxn and Produce of TV2 clients; of TV1 clients only when asked),
//!   and a node can be cut off for a while;
//! - **faults**: coordinator crashes (with the log's crash image), log partitions moved,
//!   cuts, partial flushes; then the world heals and settles.
//!
//! Everything random comes from one [`txn_log::rng::Rng`] seeded by the run's seed, so a seed
//! replays exactly. See `docs/testing.md`, "Deterministic simulation".

pub mod client;
mod world;

pub use world::{Mutant, Options, RunResult, TvMix, run};

use std::time::{Duration, Instant};

/// The environment variable that replays one seed in `tests/tests/simulation.rs`.
pub const SEED_ENV: &str = "TXN_SIM_SEED";

/// What [`run_seeds`] found.
#[derive(Debug)]
pub struct Summary {
    /// Seeds run.
    pub runs: u64,
    /// The failing seeds, with their result, in seed order.
    pub failures: Vec<(u64, RunResult)>,
    /// Seeds whose run panicked, with the panic message.
    pub panics: Vec<(u64, String)>,
    /// Transactions in all histories.
    pub txns: u64,
    /// Faults injected in all runs.
    pub faults: u64,
    /// Persisted log records audited in all runs.
    pub audited: u64,
    /// Seeds whose run reached the hard stop instead of settling (their histories are judged
    /// all the same), in seed order.
    pub unsettled: Vec<u64>,
    /// Wall-clock time spent.
    pub elapsed: Duration,
}

impl std::fmt::Display for Summary {
    /// One line: seeds, time, seeds per second and what the runs did and found.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} seeds in {:.2} s: {:.0} seeds/s; {} transactions, {} faults, {} log records \
             audited, {} runs unsettled at the hard stop; {} failed, {} panicked",
            self.runs,
            self.elapsed.as_secs_f64(),
            self.seeds_per_sec(),
            self.txns,
            self.faults,
            self.audited,
            self.unsettled.len(),
            self.failures.len(),
            self.panics.len()
        )
    }
}

impl Summary {
    /// Seeds per second of wall-clock time.
    pub fn seeds_per_sec(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What one thread of [`run_seeds`] counted.
#[derive(Default)]
struct Counts {
    runs: u64,
    txns: u64,
    faults: u64,
    audited: u64,
    unsettled: Vec<u64>,
}

impl Counts {
    fn add(&mut self, seed: u64, r: &RunResult) {
        self.txns += r.record.txns.len() as u64;
        self.faults += r.record.faults.len() as u64;
        self.audited += r.record.log_records_checked as u64;
        if r.unsettled.is_some() {
            self.unsettled.push(seed);
        }
    }
}

/// Runs seeds `first..first + count` with `options(seed)` on `threads` threads (seed `i` goes
/// to thread `i % threads`); stops early once `stop_after` failures were found.
pub fn run_seeds(
    first: u64,
    count: u64,
    threads: usize,
    stop_after: usize,
    options: impl Fn(u64) -> Options + Sync,
) -> Summary {
    let start = Instant::now();
    let threads = threads.max(1) as u64;
    let found = std::sync::atomic::AtomicUsize::new(0);
    type Part = (Counts, Vec<(u64, RunResult)>, Vec<(u64, String)>);
    let parts: Vec<Part> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (options, found) = (&options, &found);
                s.spawn(move || {
                    let mut n = Counts::default();
                    let (mut failures, mut panics) = (Vec::new(), Vec::new());
                    let mut i = t;
                    while i < count && found.load(std::sync::atomic::Ordering::Relaxed) < stop_after
                    {
                        let seed = first.wrapping_add(i);
                        let o = options(seed);
                        n.runs += 1;
                        i += threads;
                        let r = match std::panic::catch_unwind(|| run(o)) {
                            Ok(r) => r,
                            Err(p) => {
                                found.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let msg = p
                                    .downcast_ref::<String>()
                                    .cloned()
                                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                                    .unwrap_or_default();
                                panics.push((seed, msg));
                                continue;
                            }
                        };
                        n.add(seed, &r);
                        if !r.is_valid() {
                            found.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            failures.push((seed, r));
                        }
                    }
                    (n, failures, panics)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut sum = Summary {
        runs: 0,
        failures: Vec::new(),
        panics: Vec::new(),
        txns: 0,
        faults: 0,
        audited: 0,
        unsettled: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for (n, failures, panics) in parts {
        sum.panics.extend(panics);
        sum.runs += n.runs;
        sum.txns += n.txns;
        sum.faults += n.faults;
        sum.audited += n.audited;
        sum.unsettled.extend(n.unsettled);
        sum.failures.extend(failures);
    }
    sum.failures.sort_by_key(|(s, _)| *s);
    sum.panics.sort_by_key(|(s, _)| *s);
    sum.unsettled.sort_unstable();
    sum.elapsed = start.elapsed();
    sum
}
