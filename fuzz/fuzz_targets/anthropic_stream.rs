//! cargo-fuzz target: see `reins_fuzz::anthropic_stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reins_fuzz::anthropic_stream(data));
