//! cargo-fuzz target: see `reins_fuzz::snapshot`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reins_fuzz::snapshot(data));
