//! cargo-fuzz target: see `reins_fuzz::sse_parser`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reins_fuzz::sse_parser(data));
