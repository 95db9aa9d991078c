//! The API server's list and watch bodies as `serve`'s watches decode them (pods and nodes
//! without their managedFields), then turned into the scheduler's snapshot.
//!
//! The body is `headroom::fuzzing::watch_objects`, which CI also runs (tests/integration/fuzzing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headroom::fuzzing::watch_objects(data));
