//! kubelet `/stats/summary` bodies: parse and map into samples, as one poll does.
#![no_main]

use headroom_collectors::kubelet::decode_summary;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_summary(data, "node-1", 1_767_225_600_000);
});
