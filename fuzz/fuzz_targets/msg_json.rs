//! cargo-fuzz target: see `reins_fuzz::msg_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reins_fuzz::msg_json(data));
