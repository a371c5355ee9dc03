//! `txn-sim`: the deterministic simulation (see docs/testing.md, "Deterministic simulation").
//!
//! ```text
//! txn-sim [--seeds N] [--seed S] [--threads N] [--tv 1|2|mixed] [--hold-tv1-end-txn]
//!         [--hold-tv1-produce] [--refuse-markers CODE] [--mutant early-complete] [--no-faults]
//!         [--verbose]
//! ```
//!
//! Runs seeds `S..S+N` (S defaults to `TXN_SIM_SEED`, else the clock), prints seeds per
//! second and every failing seed with its anomalies and the command that replays it. Exit
//! status 1 if a seed failed.

use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use txn_log::ErrorCode;
use txn_tests::sim::{Mutant, Options, RunResult, SEED_ENV, TvMix, run, run_seeds};

/// Transaction versions of the clients.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum TvArg {
    /// Every client TV1 (EndTxn v3).
    #[value(name = "1")]
    One,
    /// Every client TV2 (EndTxn v5).
    #[value(name = "2")]
    Two,
    /// Each client picks one.
    Mixed,
}

/// A bug put back into the simulation's components.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum MutantArg {
    /// The I10 ordering bug: Complete* before the last participant has its marker.
    EarlyComplete,
}

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "txn-sim",
    about = "Deterministic simulation of coordinators, log, participants, clients and network \
             on one seeded clock, judged by the fault harness's checker (docs/testing.md)",
    args_override_self = true,
    after_help = "Exit status 1 if a seed failed. Replay one seed with --seeds 1 --seed S \
                  (add --verbose for the history)."
)]
struct Args {
    /// Seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed (default: TXN_SIM_SEED, else from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Transaction versions of the clients.
    #[arg(long, value_enum, default_value_t = TvArg::Mixed)]
    tv: TvArg,
    /// Hold TV1 clients' EndTxn past their timeout too (KAFKA-17754 under TV1: a stale
    /// EndTxn ends the next transaction).
    #[arg(long)]
    hold_tv1_end_txn: bool,
    /// Hold TV1 clients' produce requests past their timeout too (the hanging transaction of
    /// TV1: a late produce lands after the abort marker).
    #[arg(long)]
    hold_tv1_produce: bool,
    /// Partition 0's leader refuses half its markers with this Kafka error code (47
    /// INVALID_PRODUCER_EPOCH, 52 TRANSACTION_COORDINATOR_FENCED) until the world heals.
    #[arg(long, value_name = "CODE")]
    refuse_markers: Option<i16>,
    /// Put a bug back.
    #[arg(long, value_enum)]
    mutant: Option<MutantArg>,
    /// No faults at all.
    #[arg(long)]
    no_faults: bool,
    /// Print the faults and transactions of a failing seed.
    #[arg(long)]
    verbose: bool,
}

impl Args {
    fn options(&self, seed: u64) -> Options {
        let mut o = Options::new(seed);
        o.tv = match self.tv {
            TvArg::One => TvMix::Tv1,
            TvArg::Two => TvMix::Tv2,
            TvArg::Mixed => TvMix::Mixed,
        };
        o.hold_tv1_end_txn = self.hold_tv1_end_txn;
        o.hold_tv1_produce = self.hold_tv1_produce;
        o.faults = !self.no_faults;
        o.refusing_participant = self.refuse_markers.map(ErrorCode::from);
        o.mutant = self.mutant.map(|m| match m {
            MutantArg::EarlyComplete => Mutant::EarlyComplete,
        });
        o
    }

    fn replay_flags(&self) -> String {
        let mut f = String::new();
        match self.tv {
            TvArg::One => f.push_str(" --tv 1"),
            TvArg::Two => f.push_str(" --tv 2"),
            TvArg::Mixed => {}
        }
        if self.hold_tv1_end_txn {
            f.push_str(" --hold-tv1-end-txn");
        }
        if self.hold_tv1_produce {
            f.push_str(" --hold-tv1-produce");
        }
        if let Some(code) = self.refuse_markers {
            f.push_str(&format!(" --refuse-markers {code}"));
        }
        if self.mutant.is_some() {
            f.push_str(" --mutant early-complete");
        }
        if self.no_faults {
            f.push_str(" --no-faults");
        }
        f
    }
}

/// Prints the faults and transactions of a run.
fn print_history(r: &RunResult) {
    for (ms, f) in &r.record.faults {
        println!("  fault at {ms} ms: {f}");
    }
    for t in &r.record.txns {
        println!(
            "  txn {} {} pid {} epoch {} {:?} writes {:?} ({}..{} ms) {}",
            t.id, t.tid, t.pid, t.epoch, t.outcome, t.writes, t.invoke_ms, t.complete_ms, t.note
        );
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let first = args.seed.unwrap_or_else(|| {
        std::env::var(SEED_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            })
    });
    let sum = run_seeds(first, args.seeds, args.threads, usize::MAX, |s| {
        args.options(s)
    });
    println!("from seed {first}: {sum}");
    if !sum.unsettled.is_empty() {
        println!("unsettled at the hard stop: seeds {:?}", sum.unsettled);
    }
    for (seed, msg) in &sum.panics {
        println!("seed {seed} panicked: {msg}");
        println!(
            "  replay: txn-sim --seeds 1 --seed {seed}{}",
            args.replay_flags()
        );
    }
    if args.verbose && args.seeds == 1 {
        let r = run(args.options(first));
        println!(
            "seed {first}: {} ms simulated, {} events, digest {:016x}",
            r.end_ms, r.events, r.digest
        );
        if let Some(why) = &r.unsettled {
            println!("  unsettled at the hard stop: {why}");
        }
        print_history(&r);
    }
    for (seed, r) in sum.failures.iter().take(5) {
        println!(
            "seed {seed} FAILED ({} ms simulated):\n{}",
            r.end_ms, r.report
        );
        println!(
            "  replay: txn-sim --seeds 1 --seed {seed}{}",
            args.replay_flags()
        );
        if args.verbose && args.seeds > 1 {
            print_history(r);
        }
    }
    if sum.failures.is_empty() && sum.panics.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
