//! The fuzz harnesses on the stable toolchain, in the normal test suite: each seed of each
//! harness and every input in `fuzz/regressions/<target>/` (what fuzzing found, kept after the
//! fix) as is, then `TXN_FUZZ_ITERS` (default per harness below) seeded mutations of the
//! seeds (`txn_fuzz::mutate`). A panic in production code fails the test with the seed, the
//! case number and the input in hex; a claimed length that is allocated aborts the process.
//!
//! `TXN_FUZZ_SEED` replays a run (every run prints its seed). The cargo-fuzz targets in
//! `fuzz/libfuzzer/` run the same harnesses coverage-guided on nightly.

use std::panic::{AssertUnwindSafe, catch_unwind};

use txn_fuzz::mutate::{Rng, mutate};
use txn_fuzz::seeds;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn run(target: &str, seeds: Vec<(&'static str, Vec<u8>)>, harness: fn(&[u8]), default_iters: u64) {
    let seed = env_u64("TXN_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let iters = env_u64("TXN_FUZZ_ITERS").unwrap_or(default_iters);
    println!("{target}: TXN_FUZZ_SEED={seed} TXN_FUZZ_ITERS={iters}");
    let fail = |case: &str, input: &[u8]| {
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        panic!(
            "{target}: {case} panicked (TXN_FUZZ_SEED={seed}); input ({} bytes): {hex}",
            input.len()
        );
    };
    for (name, input) in &seeds {
        if catch_unwind(AssertUnwindSafe(|| harness(input))).is_err() {
            fail(&format!("seed {name}"), input);
        }
    }
    let regressions = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(target);
    for entry in std::fs::read_dir(&regressions).into_iter().flatten() {
        let path = entry.expect("regression entry").path();
        let input = std::fs::read(&path).expect("regression input");
        if catch_unwind(AssertUnwindSafe(|| harness(&input))).is_err() {
            fail(&format!("regression {}", path.display()), &input);
        }
    }
    let mut rng = Rng::new(seed);
    let started = std::time::Instant::now();
    for case in 0..iters {
        let (_, base) = &seeds[rng.index(seeds.len())];
        let (_, other) = &seeds[rng.index(seeds.len())];
        let input = mutate(&mut rng, base, other);
        if catch_unwind(AssertUnwindSafe(|| harness(&input))).is_err() {
            fail(&format!("case {case}"), &input);
        }
    }
    println!(
        "{target}: {} seeds and {iters} mutations in {:.1} s",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn request_frames() {
    run(
        "request_frame",
        seeds::request_frame(),
        txn_fuzz::request_frame,
        20_000,
    );
}

#[test]
fn txn_log_records() {
    run(
        "txn_log_record",
        seeds::txn_log_record(),
        txn_fuzz::txn_log_record,
        20_000,
    );
}

#[test]
fn record_batches() {
    run(
        "record_batch",
        seeds::record_batch(),
        txn_fuzz::record_batch,
        20_000,
    );
}
