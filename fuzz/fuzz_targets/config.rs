//! The configuration file (`--config`, `check-config`): parse and validate, then render the
//! effective configuration.
//!
//! The body is `headroom::fuzzing::config`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::config(data));
