//! Writes the seed corpora of the cargo-fuzz targets (`fuzz/libfuzzer/corpus/<target>/seed-*`)
//! from [`txn_fuzz::seeds`]: `cargo run --release -p txn-fuzz --bin fuzz-seeds` (stable is
//! enough). Each seed is also run through its harness once, so a seed that fails is noticed here.

use std::path::Path;

use txn_fuzz::seeds;

fn write(dir: &Path, target: &str, seeds: Vec<(&str, Vec<u8>)>, run: fn(&[u8])) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("mkdir");
    for (name, bytes) in seeds {
        run(&bytes);
        let path = d.join(format!("seed-{name}"));
        std::fs::write(&path, &bytes).expect("write seed");
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("libfuzzer")
        .join("corpus");
    write(
        &dir,
        "request_frame",
        seeds::request_frame(),
        txn_fuzz::request_frame,
    );
    write(
        &dir,
        "txn_log_record",
        seeds::txn_log_record(),
        txn_fuzz::txn_log_record,
    );
    write(
        &dir,
        "record_batch",
        seeds::record_batch(),
        txn_fuzz::record_batch,
    );
}
