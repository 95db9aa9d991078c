//! Simulation scenarios: load (with every check), then simulate the small ones, so a
//! scenario that passes the checks cannot make the simulation fail on its values.
//!
//! The body is `headroom::fuzzing::scenario`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::scenario(data));
