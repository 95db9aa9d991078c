//! The fuzz targets: one function per parser of untrusted bytes, each taking the raw input
//! and driving it the way headroom's own code path does (parse, then use what parsed).
//!
//! They live in the library, not in `fuzz/`, so that two drivers run the very same code:
//! - `fuzz/` (cargo-fuzz, libFuzzer, coverage-guided) for the long runs, `scripts/fuzz.sh`;
//! - the CI test `tests/integration/fuzzing.rs`, which runs every target over its seed corpus
//!   (`fuzz/seeds.txt` and `fuzz/seeds/`) and a bounded number of deterministic mutations of it. Building libFuzzer's
//!   instrumented copy of headroom takes ~49 min on two cores, over CI's budget; the
//!   mutation run catches the shallow panics and keeps every target compiling and exercised.
//!
//! A target returns normally on any input; a panic (or, in debug builds, an overflow) is
//! the bug both drivers look for.

use std::sync::{Arc, OnceLock};

use crate::config::Config;

/// A fuzz target: runs one input.
pub type Target = fn(&[u8]);

/// Every target by name (the names of `fuzz/Cargo.toml`'s binaries and of the corpus
/// folders).
pub const TARGETS: [(&str, Target); 12] = [
    ("quantity", quantity),
    ("objects", objects),
    ("usage_file", usage_file),
    ("scenario", scenario),
    ("family", family),
    ("config", config),
    ("kubelet_summary", kubelet_summary),
    ("prometheus_response", prometheus_response),
    ("exposition", exposition),
    ("extender_args", extender_args),
    ("store_open", store_open),
    ("watch_objects", watch_objects),
];

/// Kubernetes quantities: parse, then every conversion and rendering.
pub fn quantity(data: &[u8]) {
    use headroom_scheduler::quantity::{Quantity, format_bytes, format_milli};
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = Quantity::parse(s) {
        let _ = (q.value(), q.milli_value(), q.nano_value(), q.to_string());
        let _ = (format_bytes(q.value()), format_milli(q.milli_value()));
    }
}

/// Node/Pod manifests (`place --cluster/--pod`): read, then place every pod on the nodes
/// and render the decisions as text and JSON, as `headroom place` does.
pub fn objects(data: &[u8]) {
    use crate::place::{PlaceOptions, place_objects};
    use headroom_scheduler::objects::Objects;
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
}

/// The usage file (`place --usage`).
pub fn usage_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ =
            headroom_scheduler::usage::file::UsageFile::parse(text, "fuzz.yaml", 1_767_225_600_000);
    }
}

/// Simulation scenarios: load (with every check), then simulate the small ones, so a
/// scenario that passes the checks cannot make the simulation fail on its values.
pub fn scenario(data: &[u8]) {
    use crate::simulate::{self, Options, Policy, Scenario};
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
        act_on_advice: false,
        tuned: Default::default(),
    };
    let Some(rt) = runtime() else {
        return;
    };
    if let Ok(r) = rt.block_on(simulate::run(&scenario, &Config::default(), &options)) {
        let _ = r.to_text();
    }
}

/// Farm families (`headroom sweep FAMILY`): parse with every check, then generate the
/// farms of the small ones, so a family that passes the checks cannot make a farm fail to
/// generate or to load as a scenario. Nothing is read from disk: families with a load curve
/// or included files stop after the checks (those name files, and a fuzzed path may name
/// any, `/dev/zero` included).
pub fn family(data: &[u8]) {
    use crate::simulate::families::Family;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(family) = Family::parse_unloaded(text, "fuzz.yaml") else {
        return;
    };
    let b = &family.builders;
    let small = family.nodes.count[1] <= 64
        && b.families[1] * b.builders_per_family[1] <= 256
        && family.services[1] + family.databases[1] <= 64
        && family.bursts.count[1] * family.bursts.size[1] <= 256
        && family.duration[1].as_secs() / family.step.as_secs().max(1) <= 10_000;
    if !small || b.load_curve.is_some() || !family.include.is_empty() {
        return;
    }
    for i in 0..family.farms.min(3) {
        if let Err(e) = family.generate(i) {
            panic!("a family that passed its checks failed to generate farm {i}: {e}");
        }
    }
}

/// One current-thread runtime on tokio's paused clock for every simulated scenario.
fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .ok()
    })
    .as_ref()
}

/// Small enough to simulate within a fuzz run: few steps, nodes and pods.
fn small(s: &crate::simulate::Scenario) -> bool {
    use crate::simulate::Kind;
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

/// The configuration file (`--config`, `check-config`): parse and validate, then render
/// the effective configuration.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(c) = crate::config::config_from_yaml(text, "fuzz.yaml")
    {
        let _ = c.to_yaml();
    }
}

/// kubelet `/stats/summary` bodies: parse and map into samples, as one poll does.
pub fn kubelet_summary(data: &[u8]) {
    let _ = headroom_collectors::kubelet::decode_summary(data, "node-1", 1_767_225_600_000);
}

/// Prometheus HTTP API answers (`/api/v1/query`, `/api/v1/query_range`); the first byte
/// picks the HTTP status the body came with.
pub fn prometheus_response(data: &[u8]) {
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let status = [200, 400, 422, 503][usize::from(*first) % 4];
    let _ = headroom_collectors::prometheus::decode_response(
        "http://p/api/v1/query",
        status,
        "sig",
        "up",
        body,
    );
}

/// Prometheus text exposition (kubelet `/metrics/resource`, node-exporter); the first byte
/// picks the target kind.
pub fn exposition(data: &[u8]) {
    use headroom_collectors::config::ScrapeKind;
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let kind = if first % 2 == 0 {
        ScrapeKind::KubeletResource
    } else {
        ScrapeKind::NodeExporter
    };
    let _ = headroom_collectors::scrape::decode_exposition(
        body,
        kind,
        "node-1",
        "/",
        1_767_225_600_000,
    );
}

/// kube-scheduler extender requests: parse `ExtenderArgs` and answer filter and prioritize
/// over a small cluster, parse `ExtenderBindingArgs`.
pub fn extender_args(data: &[u8]) {
    use crate::kube::extender::{ExtenderArgs, ExtenderBindingArgs, parse};
    if let Some(state) = extender_state()
        && let Ok(args) = parse::<ExtenderArgs>("ExtenderArgs", data)
    {
        let _ = state.filter(args.clone());
        let _ = state.prioritize(args);
    }
    let _ = parse::<ExtenderBindingArgs>("ExtenderBindingArgs", data);
}

/// The extender over 8 synthetic nodes, built once.
fn extender_state() -> Option<&'static crate::kube::extender::ExtenderState> {
    use crate::config::serve::ExtenderConfig;
    use crate::kube::extender::ExtenderState;
    use headroom_scheduler::plugins::{PluginDeps, build_framework_with};
    use headroom_scheduler::snapshot::Snapshot;
    static STATE: OnceLock<Option<ExtenderState>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let (nodes, pods) = headroom_scheduler::synthetic::cluster(8, 4, 1);
            let snap = Arc::new(Snapshot::build(nodes, pods));
            let cfg: ExtenderConfig = serde_json::from_str(
                r#"{"plugins": {"TaintToleration": {"enabled": true}, "NodeResourcesFit": {"enabled": true}}}"#,
            )
            .ok()?;
            let fw = build_framework_with(&cfg.profile(), &PluginDeps::default()).ok()?;
            Some(ExtenderState {
                framework: Arc::new(fw),
                snapshot: Arc::new(move || snap.clone()),
                binder: None,
        settle: None,
                recent: Default::default(),
                metrics: Default::default(),
            })
        })
        .as_ref()
}

/// The API server's list and watch bodies as `serve`'s watches decode them: a `PodList` or
/// `NodeList` (the first byte even) or one watch event, of pods or nodes by the first
/// byte's second bit, each object read without its managedFields
/// ([`crate::kube::lean::Lean`]); then what decoded becomes the scheduler's snapshot, as
/// the cluster feed hands it over.
pub fn watch_objects(data: &[u8]) {
    use crate::kube::lean::Lean;
    use headroom_scheduler::snapshot::Snapshot;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::core::{ObjectList, WatchEvent};
    let Some((first, body)) = data.split_first() else {
        return;
    };
    fn object<K>(e: WatchEvent<Lean<K>>) -> Option<K> {
        match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o.0),
            WatchEvent::Bookmark(_) | WatchEvent::Error(_) => None,
        }
    }
    let (nodes, pods): (Vec<Node>, Vec<Pod>) = match (first % 2 == 0, first & 2 == 0) {
        (true, true) => match serde_json::from_slice::<ObjectList<Lean<Pod>>>(body) {
            Ok(l) => (Vec::new(), l.items.into_iter().map(|p| p.0).collect()),
            Err(_) => return,
        },
        (true, false) => match serde_json::from_slice::<ObjectList<Lean<Node>>>(body) {
            Ok(l) => (l.items.into_iter().map(|n| n.0).collect(), Vec::new()),
            Err(_) => return,
        },
        (false, true) => match serde_json::from_slice::<WatchEvent<Lean<Pod>>>(body) {
            Ok(e) => (Vec::new(), object(e).into_iter().collect()),
            Err(_) => return,
        },
        (false, false) => match serde_json::from_slice::<WatchEvent<Lean<Node>>>(body) {
            Ok(e) => (object(e).into_iter().collect(), Vec::new()),
            Err(_) => return,
        },
    };
    let _ = Snapshot::build(nodes, pods);
}

/// Opening a damaged store: a directory whose sled `db` file is the input.
pub fn store_open(data: &[u8]) {
    use headroom_storage::{Store, StoreConfig};
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    if std::fs::write(dir.path().join("db"), data).is_err() {
        return;
    }
    if let Ok(store) = Store::open(dir.path(), StoreConfig::default()) {
        let _ = store.flush();
    }
}
