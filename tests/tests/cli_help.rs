//! `refbroker` and `txn-faults` have real command lines: `--help` exits 0 and names every
//! flag; a bad argument exits 2 with a message, no backtrace.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("spawn");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(bin: &str, flags: &[&str]) {
    let (code, out, err) = run(bin, &["--help"]);
    assert_eq!(code, Some(0), "{bin} --help: {err}");
    for f in flags {
        assert!(out.contains(f), "{bin} --help lacks {f}:\n{out}");
    }
    let (code, _, err) = run(bin, &["--no-such-flag"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--no-such-flag"), "{err}");
    assert!(
        !err.contains("backtrace") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn refbroker_help() {
    check(
        env!("CARGO_BIN_EXE_refbroker"),
        &[
            "--listen",
            "--data-dir",
            "--topics",
            "--node-id",
            "--cluster",
            "--embedded-coordinator",
            "--coordinator ",
            "--coordinator-node-id",
            "--offsets-partitions",
            "--set",
        ],
    );
    // A flag combination that is refused after parsing: exit 2 and one line naming it.
    let (code, _, err) = run(
        env!("CARGO_BIN_EXE_refbroker"),
        &["--listen", "127.0.0.1:0", "--data-dir", "/nonexistent"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.starts_with("refbroker: give exactly one of"), "{err}");
}

#[test]
fn txn_faults_help() {
    check(
        env!("CARGO_BIN_EXE_txn-faults"),
        &[
            "--secs",
            "--seed",
            "--producers",
            "--shared",
            "--consumers",
            "--tv",
            "--log-dir",
            "--rounds",
            "--cluster",
        ],
    );
}
