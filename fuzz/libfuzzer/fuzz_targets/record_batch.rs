//! cargo-fuzz target `record_batch`: see [`txn_fuzz::record_batch`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txn_fuzz::record_batch(data));
