//! kube-scheduler extender requests: parse `ExtenderArgs` and answer filter and prioritize
//! over a small cluster, parse `ExtenderBindingArgs`.
//!
//! The body is `headroom::fuzzing::extender_args`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::extender_args(data));
