//! Our crates as a broker outside the workspace meets them: `tests/embedder/` (a crate with its
//! own `[workspace]`, depending on `txn-log`, `coordinator` with `embed` and `markers` by path,
//! with no kafka-protocol dependency and no `[patch]`) is copied to a temp dir, built offline
//! into this workspace's target dir (so the dependencies are mostly reused), inspected with
//! `cargo tree` and run. It proves that the bounded decoders reach an embedder (the 14-byte
//! frame claiming `i32::MAX` topics is an error, not an abort), that `embed` compiles none of
//! the daemon's crates, that the re-exports are enough to implement our traits, and that the
//! public API alone hosts a coordinator the way `coordinator/examples/embed_minimal.rs` does
//! (`Coordinator::builder`, markers applied in process to a participant partition, no test
//! double) and commits a transaction through it: the LSO moves past the COMMIT marker. Its
//! requests are authorized first with a broker-made `Authorizer` through `server::authz`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The target dir this test was built into (`<target>/release/deps/embedder_crate-*`), whatever
/// `CARGO_TARGET_DIR` says, so the scratch build reuses its artifacts.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<exe>")
        .to_path_buf()
}

fn cargo(dir: &Path, target: &Path, args: &[&str]) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .expect("spawn cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_crate_outside_the_workspace_gets_the_bounded_decoders_and_the_embed_feature() {
    let root = root();
    let src = root.join("tests/embedder");
    let dir = tempfile::tempdir().expect("temp dir");
    // Paths made absolute; the workspace's lock copied in so it resolves offline (CI has no
    // registry index beyond what the workspace locked and fetched).
    let manifest = std::fs::read_to_string(src.join("Cargo.toml"))
        .expect("manifest")
        .replace("path = \"../../", &format!("path = \"{}/", root.display()));
    assert!(!manifest.contains("../../"), "{manifest}");
    std::fs::write(dir.path().join("Cargo.toml"), manifest).expect("write manifest");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    std::fs::copy(src.join("src/main.rs"), dir.path().join("src/main.rs")).expect("main.rs");
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).expect("Cargo.lock");
    let target = target_dir();

    let started = Instant::now();
    cargo(dir.path(), &target, &["build", "--release", "--offline"]);
    eprintln!(
        "scratch crate built in {:.1}s (target dir {})",
        started.elapsed().as_secs_f64(),
        target.display()
    );

    // Its dependency graph: our copy of the protocol library, not crates.io's, and none of the
    // daemon's crates.
    let tree = cargo(
        dir.path(),
        &target,
        &[
            "tree",
            "--offline",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
        ],
    );
    let tree = String::from_utf8_lossy(&tree.stdout);
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains(&"txn-kafka-protocol"), "{tree}");
    for banned in [
        "kafka-protocol",
        "clap",
        "toml",
        "tracing-subscriber",
        "sled",
    ] {
        assert!(
            !names.contains(&banned),
            "{banned} in the embedder's tree:\n{tree}"
        );
    }

    let exe = target.join("release/txn-embedder-check");
    let out = Command::new(&exe).output().expect("run the scratch binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} exited with {:?} (an abort is the unbounded decoder):\n{stdout}\n{stderr}",
        exe.display(),
        out.status
    );
    assert!(
        stdout.contains("refused the 14-byte frame"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("authorized first: User:bob may not use alice-orders"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("committed in process: last stable offset of orders-0 is 3"),
        "{stdout}\n{stderr}"
    );
    // The markers reached the participant through the library, not through a test double.
    let main = std::fs::read_to_string(src.join("src/main.rs")).expect("main.rs");
    assert!(!main.contains("RecordingMarkerSink"), "{main}");
    assert!(stdout.lines().last() == Some("embedder ok"), "{stdout}");
}
