//! History's band under `serve`: by default it judges every warm node; with
//! `headroomBandScope: sameBuilder` only a warm node that another run of the pod's builder
//! is on. `coldCpuGuard` judges CPU too for a pod known only by its requests.

use serde_json::{Value, json};

use super::peers::placed_pod;

const GI: f64 = (1u64 << 30) as f64;

/// A pod of builder `builder` (the `headroom.io/builder` annotation) running on `node`.
fn run_of(name: &str, builder: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default",
               "annotations": {"headroom.io/builder": builder}},
           "spec": {"nodeName": node, "restartPolicy": "Never",
               "containers": [{"name": "c", "image": "x",
               "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]},
           "status": {"phase": "Running"}})
}

/// The next run of builder `b`, whose bk-ci history lists node-a, requesting `cpu`.
fn next_run_of(cpu: &str) -> Value {
    json!({"metadata": {"name": "p", "namespace": "default",
               "annotations": {"headroom.io/builder": "b",
                   "bkci.dispatch.kubenetes/builder-history-nodes": r#"["node-a"]"#}},
           "spec": {"schedulerName": "headroom", "containers": [{"name": "c", "image": "x",
               "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
           "status": {"phase": "Pending"}})
}

/// [`next_run_of`] at 100m.
fn next_run() -> Value {
    next_run_of("100m")
}

/// node-a, the builder's warm node, uses 9 of 16 GiB; node-b 1 GiB. After the pod node-a
/// has about 43 % free, far below the band's floor (node-b's 92 % less 10 points). Under
/// `sameBuilder`, with a pod of another builder on node-a History keeps node-a's 60 and the
/// pod goes warm; with another run of `b` there, the band takes the score and RealHeadroom
/// sends the pod to node-b. By default (every warm node judged) it goes to node-b either
/// way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_band_judges_warm_nodes_running_the_same_builder_under_serve() {
    let (a, b) = ((0.5, 9.0 * GI), (0.5, 1.0 * GI));
    let other = [run_of("c-1", "c", "node-a")];
    let sibling = [run_of("b-1", "b", "node-a")];
    let same = "profiles: [{schedulerName: headroom, pluginArgs: {history: {headroomBandScope: sameBuilder}}}]\n";
    let default = "";
    for (section, existing, want) in [
        (same, &other, "node-a"),
        (same, &sibling, "node-b"),
        (default, &other, "node-b"),
    ] {
        let got = placed_pod(section, a, b, existing, next_run()).await;
        assert_eq!(
            got.as_deref(),
            Some(want),
            "{section:?} with {}",
            existing[0]["metadata"]["name"]
        );
    }
}

/// `coldCpuGuard` (on by default): node-a, the builder's warm node, uses 3 of its 4 CPU,
/// node-b 0.5; both 2 GiB of memory, so the memory band takes nothing. The builder has no
/// profile and nothing calibrates it, so its 2-CPU run is predicted by its requests and
/// would take node-a's real CPU past capacity: History gives node-a nothing and the pod goes
/// to node-b. With `coldCpuGuard: false` History's 600 points send it to node-a; a run of
/// 100m fits node-a either way and goes warm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_cpu_guard_keeps_an_unknown_run_off_a_busy_warm_node_under_serve() {
    let (a, b) = ((3.0, 2.0 * GI), (0.5, 2.0 * GI));
    let off =
        "profiles: [{schedulerName: headroom, pluginArgs: {history: {coldCpuGuard: false}}}]\n";
    for (section, cpu, want) in [
        ("", "2", "node-b"),
        (off, "2", "node-a"),
        ("", "100m", "node-a"),
    ] {
        let got = placed_pod(section, a, b, &[], next_run_of(cpu)).await;
        assert_eq!(got.as_deref(), Some(want), "{section:?} at {cpu} CPU");
    }
}
