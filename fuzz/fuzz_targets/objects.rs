//! Node/Pod manifests (`place --cluster/--pod`): read, then place every pod on the nodes and
//! render the decisions as text and JSON, as `headroom place` does.
//!
//! The body is `headroom::fuzzing::objects`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::objects(data));
