//! cargo-fuzz target `txn_log_record`: see [`txn_fuzz::txn_log_record`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txn_fuzz::txn_log_record(data));
