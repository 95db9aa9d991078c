//! The usage file (`place --usage`).
//!
//! The body is `headroom::fuzzing::usage_file`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::usage_file(data));
