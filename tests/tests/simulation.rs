//! The deterministic simulation (`txn_tests::sim`, docs/testing.md "Deterministic
//! simulation"): 10 000 seeds of the whole system under faults without a violation, a seed
//! replays exactly, and the seeded bugs are found when put back.
//!
//! `TXN_SIM_SEED=S` runs only seed S (every test, with its own options); `TXN_SIM_SEEDS=N`
//! changes the number of seeds of the main run.

use txn_tests::fault::checker::Anomaly;
use txn_tests::sim::{Mutant, Options, SEED_ENV, Summary, TvMix, run, run_seeds};

/// Seeds of the main run.
const SEEDS: u64 = 10_000;
/// Seeds within which each seeded bug must be found (and which must be clean without it).
const MUTANT_BUDGET: u64 = 200;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Runs seeds `0..count` (or only `TXN_SIM_SEED`) on `threads` threads, stopping at
/// `stop_after` failures.
fn seeds(
    count: u64,
    threads: usize,
    stop_after: usize,
    options: impl Fn(u64) -> Options + Sync,
) -> Summary {
    let (first, count) = env_u64(SEED_ENV).map_or((0, count), |s| (s, 1));
    run_seeds(first, count, threads, stop_after, options)
}

fn describe(sum: &Summary, flags: &str) -> String {
    let mut out = format!("{sum}\nunsettled at the hard stop: {:?}\n", sum.unsettled);
    let replay = |seed| {
        format!(
            "  replay: {SEED_ENV}={seed} cargo test --release -p txn-tests --test simulation, \
             or txn-sim --seeds 1 --seed {seed}{flags} --verbose\n"
        )
    };
    for (seed, msg) in &sum.panics {
        out.push_str(&format!("seed {seed} panicked: {msg}\n{}", replay(*seed)));
    }
    for (seed, r) in sum.failures.iter().take(3) {
        out.push_str(&format!(
            "seed {seed} failed:\n{}{}",
            r.report,
            replay(*seed)
        ));
    }
    out
}

/// Asserts that `sum` found no anomaly and no panic.
fn assert_clean(sum: &Summary, flags: &str) {
    println!("{}", describe(sum, flags));
    assert!(
        sum.failures.is_empty() && sum.panics.is_empty(),
        "{}",
        describe(sum, flags)
    );
}

#[test]
fn ten_thousand_seeds_without_a_violation() {
    let count = env_u64("TXN_SIM_SEEDS").unwrap_or(SEEDS);
    let sum = seeds(count, 2, 3, Options::new);
    assert_clean(&sum, "");
    assert!(sum.txns > sum.runs, "the runs ran transactions");
    assert!(sum.faults > sum.runs, "the runs injected faults");
    assert!(sum.audited > 0, "the log's durable images were audited");
}

#[test]
fn a_seed_replays_exactly() {
    let first = env_u64(SEED_ENV).unwrap_or(0);
    let mut digests = std::collections::BTreeSet::new();
    for seed in first..first + 20 {
        let (a, b) = (run(Options::new(seed)), run(Options::new(seed)));
        assert_eq!(a.digest, b.digest, "seed {seed}: two runs differ");
        assert_eq!(
            format!("{:?}", a.record),
            format!("{:?}", b.record),
            "seed {seed}"
        );
        assert_eq!((a.end_ms, a.events), (b.end_ms, b.events), "seed {seed}");
        digests.insert(a.digest);
    }
    assert_eq!(
        digests.len(),
        20,
        "different seeds give different histories"
    );
}

/// Runs the first `MUTANT_BUDGET` seeds with `options` until one fails, asserts that it shows
/// one of `expected`, and that the same seeds with `clean` options are all valid. Returns how
/// many seeds it took.
fn assert_found(
    options: impl Fn(u64) -> Options + Sync,
    clean: impl Fn(u64) -> Options + Sync,
    flags: &str,
    expected: &[Anomaly],
) -> u64 {
    // One thread, so that the first failure is the lowest failing seed.
    let sum = seeds(MUTANT_BUDGET, 1, 1, &options);
    println!("{}", describe(&sum, flags));
    assert!(sum.panics.is_empty(), "{}", describe(&sum, flags));
    let Some((seed, r)) = sum.failures.first() else {
        panic!(
            "not found in {MUTANT_BUDGET} seeds\n{}",
            describe(&sum, flags)
        );
    };
    assert!(
        expected.iter().any(|a| r.report.count(*a) > 0),
        "seed {seed}: expected one of {expected:?}:\n{}",
        r.report
    );
    let start = env_u64(SEED_ENV).unwrap_or(0);
    println!("found at seed {seed} ({} seeds run)", seed - start + 1);
    assert_clean(&seeds(MUTANT_BUDGET, 2, 1, clean), "");
    seed - start + 1
}

/// The I10 ordering bug (loom mutant 4a, which the fault harness caught in a daemon built with
/// it): the marker delivery reports a decision complete while one partition still waits for
/// its marker, so Complete* is appended before the markers are acknowledged. Found as
/// `I10 complete-before-ack`; the same seeds without it are valid.
#[test]
fn early_complete_mutant_is_found() {
    assert_found(
        |seed| Options {
            mutant: Some(Mutant::EarlyComplete),
            ..Options::new(seed)
        },
        Options::new,
        " --mutant early-complete",
        &[Anomaly::CompleteBeforeAck],
    );
}

/// A participant that refuses markers for good while the faults last, with
/// INVALID_PRODUCER_EPOCH (its producer state is at a newer epoch) or
/// TRANSACTION_COORDINATOR_FENCED (while the log still says the coordinator epoch is ours):
/// the coordinators hold those transactions decided, keep serving every other id (no unload:
/// before, a refusal unloaded the log partition), and deliver them again once it is fixed.
/// Every invariant holds, with and without the other faults.
#[test]
fn a_refusing_participant_holds_only_the_refused_transactions() {
    for code in [
        txn_log::ErrorCode::INVALID_PRODUCER_EPOCH,
        txn_log::ErrorCode::TRANSACTION_COORDINATOR_FENCED,
    ] {
        let flags = format!(" --refuse-markers {}", code.code());
        let only = seeds(MUTANT_BUDGET, 2, 1, |seed| Options {
            refusing_participant: Some(code),
            faults: false,
            ..Options::new(seed)
        });
        assert_clean(&only, &format!("{flags} --no-faults"));
        assert!(
            only.faults > MUTANT_BUDGET,
            "markers were refused: {}",
            describe(&only, &flags)
        );
        let with_faults = seeds(MUTANT_BUDGET, 2, 1, |seed| Options {
            refusing_participant: Some(code),
            ..Options::new(seed)
        });
        assert_clean(&with_faults, &flags);
    }
}

fn tv(tv: TvMix) -> impl Fn(u64) -> Options + Sync {
    move |seed| Options {
        tv,
        ..Options::new(seed)
    }
}

/// The hanging transaction of TV1 (what KIP-890 part 1 closes), the late produce: a produce held past the client's timeout lands
/// after its transaction's abort marker at the same epoch (TV1 markers keep it) and opens a
/// transaction no coordinator knows; it hangs, or the producer's next marker closes it with a
/// value the client saw aborted. The same seeds without the held produce are valid.
#[test]
fn tv1_late_produce_hanging_transaction_is_found() {
    assert_found(
        |seed| Options {
            hold_tv1_produce: true,
            ..tv(TvMix::Tv1)(seed)
        },
        tv(TvMix::Tv1),
        " --tv 1 --hold-tv1-produce",
        &[Anomaly::AbortedRead, Anomaly::HangingTransaction],
    );
}

/// KAFKA-17754 under TV1, the delayed EndTxn (the form of `fault_kafka17754`): an EndTxn held
/// past the client's timeout, retried, and delivered after the client began its next
/// transaction, ends that transaction. The same seeds without the held EndTxn are valid.
#[test]
fn kafka_17754_delayed_end_txn_is_found_under_tv1() {
    assert_found(
        |seed| Options {
            hold_tv1_end_txn: true,
            ..tv(TvMix::Tv1)(seed)
        },
        tv(TvMix::Tv1),
        " --tv 1 --hold-tv1-end-txn",
        &[
            Anomaly::AbortedRead,
            Anomaly::WrongDecision,
            Anomaly::LostCommit,
        ],
    );
}

/// The same network under TV2 (whose EndTxn and produce requests are held by default): every
/// EndTxn bumps the epoch, so a held EndTxn or late produce carries an old epoch and is refused.
#[test]
fn tv2_refuses_late_produce_and_delayed_end_txn() {
    let sum = seeds(MUTANT_BUDGET * 5, 2, 1, tv(TvMix::Tv2));
    assert_clean(&sum, " --tv 2");
    assert!(
        sum.faults > MUTANT_BUDGET,
        "requests were held: {}",
        describe(&sum, " --tv 2")
    );
}
