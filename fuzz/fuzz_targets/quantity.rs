//! Kubernetes quantities: parse, then every conversion and rendering.
//!
//! The body is `headroom::fuzzing::quantity`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::quantity(data));
