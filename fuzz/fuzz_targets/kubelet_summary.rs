//! kubelet `/stats/summary` bodies: parse and map into samples, as one poll does.
//!
//! The body is `headroom::fuzzing::kubelet_summary`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::kubelet_summary(data));
