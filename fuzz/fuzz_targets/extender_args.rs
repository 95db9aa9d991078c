//! kube-scheduler extender requests: parse `ExtenderArgs` and answer filter and prioritize
//! over a small cluster, parse `ExtenderBindingArgs`.
#![no_main]

use std::sync::{Arc, OnceLock};

use headroom::kube::config::ExtenderConfig;
use headroom::kube::extender::{ExtenderArgs, ExtenderBindingArgs, ExtenderState, parse};
use headroom::plugins::{PluginDeps, build_framework_with};
use headroom::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fn state() -> &'static ExtenderState {
    static STATE: OnceLock<ExtenderState> = OnceLock::new();
    STATE.get_or_init(|| {
        let (nodes, pods) = headroom::synthetic::cluster(8, 4, 1);
        let snap = Arc::new(Snapshot::build(nodes, pods));
        let cfg: ExtenderConfig = serde_json::from_str(
            r#"{"plugins": {"TaintToleration": {"enabled": true}, "NodeResourcesFit": {"enabled": true}}}"#,
        )
        .expect("extender config");
        let fw = build_framework_with(&cfg.profile(), &PluginDeps::default()).expect("framework");
        ExtenderState {
            framework: Arc::new(fw),
            snapshot: Arc::new(move || snap.clone()),
            binder: None,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(args) = parse::<ExtenderArgs>("ExtenderArgs", data) {
        let _ = state().filter(args.clone());
        let _ = state().prioritize(args);
    }
    let _ = parse::<ExtenderBindingArgs>("ExtenderBindingArgs", data);
});
