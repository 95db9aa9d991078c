//! Farm families (`headroom sweep FAMILY`): load (with every check), then generate the
//! farms of the small ones, so a family that passes the checks cannot make a farm fail.
//!
//! The body is `headroom::fuzzing::family`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::family(data));
