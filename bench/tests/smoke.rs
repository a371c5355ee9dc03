//! CI smoke: a 2-second run of `txn-bench` against an embedded-mode `refbroker`.
//!
//! Asserts only that transactions committed and that the JSON output parses; no timing.
//! Skipped (with a note) when the `refbroker` binary has not been built next to `txn-bench`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn refbroker_path() -> Option<PathBuf> {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_txn-bench"));
    let p = bench.parent()?.join("refbroker");
    p.exists().then_some(p)
}

#[test]
fn two_producers_commit_against_embedded_refbroker() {
    let Some(refbroker) = refbroker_path() else {
        eprintln!("refbroker is not built next to txn-bench; skipping the smoke run");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(&refbroker)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--topics", "txn-bench:4", "--embedded-coordinator"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start refbroker");
    let stdout = child.stdout.take().expect("stdout");
    let pid = child.id();
    let _guard = KillOnDrop(child);
    let mut addr = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read refbroker stdout");
        if let Some(a) = line.strip_prefix("refbroker listening on ") {
            addr = Some(a.trim().to_owned());
            break;
        }
    }
    let addr = addr.expect("refbroker printed its address");

    let out = Command::new(env!("CARGO_BIN_EXE_txn-bench"))
        .args(["--bootstrap", &addr, "--producers", "2", "--duration", "2"])
        .args(["--warmup", "0.5", "--partitions-per-txn", "2", "--json"])
        .args(["--abort-fraction", "0.1", "--server-pid", &pid.to_string()])
        .output()
        .expect("run txn-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "txn-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    let r = &v["results"][0];
    assert!(r["committed"].as_u64().expect("committed") > 0, "{r}");
    assert_eq!(r["producers"].as_u64(), Some(2));
    assert!(r["end_txn"]["count"].as_u64().expect("count") > 0, "{r}");
    assert_eq!(r["servers"][0]["pid"].as_u64(), Some(u64::from(pid)));
}
