//! The deterministic simulation (`txn_tests::sim`, docs/testing.md "Deterministic
//! simulation"): 10 000 seeds of the whole system under faults without a violation, and the
//! two bugs the real-process fault harness found are found again when put back.
//!
//! `TXN_SIM_SEED=S` runs only seed S (every test, with its own options); `TXN_SIM_SEEDS=N`
//! changes the number of seeds of the main run.

use txn_tests::fault::checker::Anomaly;
use txn_tests::sim::{Mutant, Options, SEED_ENV, Summary, TvMix, run, run_seeds};

/// Seeds of the main run.
const SEEDS: u64 = 10_000;
/// Seeds within which each seeded bug must be found.
const MUTANT_BUDGET: u64 = 500;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Runs `count` seeds from `first` (or only `TXN_SIM_SEED`), stopping at `stop_after` failures.
fn seeds(first: u64, count: u64, stop_after: usize, options: impl Fn(u64) -> Options + Sync) -> Summary {
    match env_u64(SEED_ENV) {
        Some(s) => run_seeds(s, 1, 1, stop_after, options),
        None => run_seeds(first, count, 2, stop_after, options),
    }
}

fn describe(sum: &Summary, flags: &str) -> String {
    let mut out = format!(
        "{} seeds in {:.1} s ({:.0} seeds/s), {} transactions, {} faults\n",
        sum.runs,
        sum.elapsed.as_secs_f64(),
        sum.seeds_per_sec(),
        sum.txns,
        sum.faults
    );
    for (seed, msg) in &sum.panics {
        out.push_str(&format!(
            "seed {seed} panicked: {msg}\n  replay: {SEED_ENV}={seed} cargo test --release -p \
             txn-tests --test simulation, or txn-sim --seeds 1 --seed {seed}{flags}\n"
        ));
    }
    for (seed, r) in sum.failures.iter().take(3) {
        out.push_str(&format!(
            "seed {seed} failed:\n{}  replay: {SEED_ENV}={seed} cargo test --release -p txn-tests \
             --test simulation, or txn-sim --seeds 1 --seed {seed}{flags}\n",
            r.report
        ));
    }
    out
}

#[test]
fn ten_thousand_seeds_without_a_violation() {
    let count = env_u64("TXN_SIM_SEEDS").unwrap_or(SEEDS);
    let sum = seeds(0, count, 3, Options::new);
    println!("{}", describe(&sum, ""));
    assert!(
        sum.failures.is_empty() && sum.panics.is_empty(),
        "{}",
        describe(&sum, "")
    );
    assert!(sum.txns > sum.runs, "the runs ran transactions");
    assert!(sum.faults > sum.runs, "the runs injected faults");
}

/// The first failing seed of `options` within the budget, and how many seeds it took.
fn first_failure(options: impl Fn(u64) -> Options + Sync) -> (Summary, u64) {
    let sum = seeds(0, MUTANT_BUDGET, 1, options);
    let first = sum
        .failures
        .first()
        .map(|(s, _)| *s)
        .or_else(|| sum.panics.first().map(|(s, _)| *s))
        .unwrap_or(u64::MAX);
    (sum, first)
}

/// The I10 ordering bug (loom mutant 4a, which the fault harness caught in a daemon built with
/// it): the marker delivery reports a decision complete while one partition still waits for
/// its marker. The simulation finds it as `I10 complete-before-ack`; the same seed without the
/// mutant is valid.
#[test]
fn early_complete_mutant_is_found() {
    let mutant = |seed| Options {
        mutant: Some(Mutant::EarlyComplete),
        ..Options::new(seed)
    };
    let (sum, seed) = first_failure(mutant);
    let flags = " --mutant early-complete";
    println!("{}", describe(&sum, flags));
    let Some((_, r)) = sum.failures.first() else {
        panic!("the mutant survived {MUTANT_BUDGET} seeds\n{}", describe(&sum, flags));
    };
    println!("found at seed {seed}");
    assert!(
        r.report.count(Anomaly::CompleteBeforeAck) > 0,
        "seed {seed}: {}",
        r.report
    );
    let clean = run(Options::new(seed));
    assert!(clean.is_valid(), "seed {seed} without the mutant:\n{}", clean.report);
}

fn held_end_txn(tv: TvMix) -> impl Fn(u64) -> Options + Sync {
    move |seed| Options {
        tv,
        hold_tv1_end_txn: true,
        ..Options::new(seed)
    }
}

/// KAFKA-17754 under TV1: an EndTxn held in the network past the client's timeout, retried,
/// and delivered after the client began its next transaction, ends that transaction (as in
/// Apache Kafka). The checker sees a value of a transaction the client aborted closed by the
/// stale COMMIT.
#[test]
fn kafka_17754_is_found_under_tv1() {
    let (sum, seed) = first_failure(held_end_txn(TvMix::Tv1));
    let flags = " --tv 1 --hold-tv1-end-txn";
    println!("{}", describe(&sum, flags));
    let Some((_, r)) = sum.failures.first() else {
        panic!("no anomaly in {MUTANT_BUDGET} seeds\n{}", describe(&sum, flags));
    };
    println!("found at seed {seed}");
    assert!(
        r.report.count(Anomaly::WrongDecision) + r.report.count(Anomaly::AbortedRead) > 0,
        "seed {seed}: {}",
        r.report
    );
}

/// The same network under TV2: every EndTxn bumps the epoch, the stale one is refused.
#[test]
fn kafka_17754_is_refused_under_tv2() {
    let sum = seeds(0, MUTANT_BUDGET, 1, held_end_txn(TvMix::Tv2));
    let flags = " --tv 2 --hold-tv1-end-txn";
    println!("{}", describe(&sum, flags));
    assert!(
        sum.failures.is_empty() && sum.panics.is_empty(),
        "{}",
        describe(&sum, flags)
    );
}
