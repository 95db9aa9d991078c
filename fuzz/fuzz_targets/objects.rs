//! Node/Pod manifests (`place --cluster/--pod`): read, then place every pod on the nodes and
//! render the decisions as text and JSON, as `headroom place` does.
#![no_main]

use headroom::config::Config;
use headroom::objects::Objects;
use headroom::place::{PlaceOptions, place_objects};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(objects) = Objects::parse(text, "fuzz.yaml") else {
        return;
    };
    let mut config = Config::default();
    config.scheduler.seed = Some(1);
    if let Ok(report) = place_objects(&config, &objects, &objects, &PlaceOptions::default()) {
        let _ = report.to_text();
        let _ = serde_json::to_string(&report.results);
    }
});
