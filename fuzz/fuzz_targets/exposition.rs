//! Prometheus text exposition (kubelet `/metrics/resource`, node-exporter); the first byte
//! picks the target kind.
#![no_main]

use headroom_collectors::config::ScrapeKind;
use headroom_collectors::scrape::decode_exposition;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let kind = if first % 2 == 0 {
        ScrapeKind::KubeletResource
    } else {
        ScrapeKind::NodeExporter
    };
    let _ = decode_exposition(body, kind, "node-1", "/", 1_767_225_600_000);
});
