//! cargo-fuzz target: see `reins_fuzz::bedrock_eventstream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reins_fuzz::bedrock_eventstream(data));
