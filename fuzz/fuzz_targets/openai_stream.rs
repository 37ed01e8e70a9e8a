//! cargo-fuzz target: see `reins_fuzz::openai_stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reins_fuzz::openai_stream(data));
