//! Simulation scenarios: load (with every check), then simulate the small ones, so a
//! scenario that passes the checks cannot make the simulation fail on its values.
#![no_main]

use std::sync::OnceLock;

use headroom::config::Config;
use headroom::simulate::{self, Kind, Options, Policy, Scenario};
use libfuzzer_sys::fuzz_target;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a tokio runtime")
    })
}

/// Small enough to simulate within a fuzz run: few steps, nodes and pods.
fn small(s: &Scenario) -> bool {
    let ticks = s.duration.as_millis() / s.step.as_millis().max(1);
    let nodes: usize = s
        .nodes
        .iter()
        .chain(s.events.iter().filter_map(|e| e.add_nodes.as_ref()))
        .map(|n| if n.node.is_some() { 1 } else { n.count })
        .sum();
    let hours = s.duration.as_secs_f64() / 3600.0;
    let pods: f64 = s
        .workloads
        .iter()
        .map(|w| match w.kind {
            Kind::Builder => w.arrivals_per_hour * hours + w.builders as f64 / 100.0,
            _ => w.count as f64,
        })
        .sum::<f64>()
        + s.events
            .iter()
            .filter_map(|e| e.burst.as_ref())
            .map(|b| b.count as f64)
            .sum::<f64>();
    ticks <= 40 && nodes <= 8 && pods <= 40.0
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(scenario) = Scenario::parse(text, "fuzz.yaml") else {
        return;
    };
    if !small(&scenario) {
        return;
    }
    let options = Options {
        seed: Some(1),
        policies: vec![Policy::Headroom],
        data_dir: None,
        progress: false,
    };
    let report = runtime().block_on(simulate::run(&scenario, &Config::default(), &options));
    if let Ok(r) = report {
        let _ = r.to_text();
    }
});
