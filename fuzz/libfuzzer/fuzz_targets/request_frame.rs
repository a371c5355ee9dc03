//! cargo-fuzz target `request_frame`: see [`txn_fuzz::request_frame`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txn_fuzz::request_frame(data));
