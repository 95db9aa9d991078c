//! Prometheus text exposition (kubelet `/metrics/resource`, node-exporter); the first byte
//! picks the target kind.
//!
//! The body is `headroom::fuzzing::exposition`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::exposition(data));
