//! Fuzz harnesses for the input decoders, their input formats and seed corpora.
//!
//! Three harnesses take arbitrary bytes: [`request_frame`] (what a client sends on one
//! connection, through the daemon's dispatch), [`txn_log_record`] (what recovery finds on disk,
//! through the txn-log decoders and the engine) and [`record_batch`] (produce batches and
//! partition logs, through the participant side). The cargo-fuzz targets in `libfuzzer/` call
//! them under libFuzzer (nightly); `tests/mutations.rs` calls them on mutations of the
//! [`seeds`] with the stable toolchain, as part of the normal test suite.
//!
//! Every harness drives production code only; the glue here decides nothing that the
//! production paths decide (framing of several inputs in one, fixing checksums so mutations
//! get past them, executing an engine's effects as the shell does). A panic anywhere, an
//! allocation above libFuzzer's `-malloc_limit_mb`, or a hang is a finding.

pub mod mutate;
mod record_batch;
mod request_frame;
pub mod seeds;
mod txn_log_record;

pub use record_batch::{fix_crcs, record_batch};
pub use request_frame::{LOG_PARTITIONS, MAX_FRAME_BYTES, MAX_FRAMES, request_frame};
pub use txn_log_record::{StoredEntry, StoredLog, txn_log_record};
