//! Prometheus HTTP API answers (`/api/v1/query`, `/api/v1/query_range`); the first byte
//! picks the HTTP status the body came with.
//!
//! The body is `headroom::fuzzing::prometheus_response`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::prometheus_response(data));
