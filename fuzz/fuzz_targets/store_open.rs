//! Opening a damaged store: a directory whose sled `db` file is the input.
//!
//! The body is `headroom::fuzzing::store_open`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::store_open(data));
