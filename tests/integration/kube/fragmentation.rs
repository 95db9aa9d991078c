//! Fragmentation under `serve`: the shapes of the running builds, counted with each usage
//! view, move a small pod into the gap beside a big build instead of breaking the room a
//! 2-CPU build needs on the emptier node.

use serde_json::{Value, json};

use super::peers::placed_among;

const GI: f64 = (1u64 << 30) as f64;

/// A build (`restartPolicy: Never`: it runs to completion) `name` bound to `node`
/// requesting `cpu`.
fn build(name: &str, node: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "restartPolicy": "Never",
               "containers": [{"name": "c", "image": "x",
               "resources": {"requests": {"cpu": cpu}}}]},
           "status": {"phase": "Running"}})
}

/// node-a runs a 3-CPU build (1 CPU left: no build but the 100m pod fits there), node-b a
/// 2-CPU build (2 CPU left: room for another). Requests alone put the 100m pod on node-b;
/// Fragmentation keeps node-b's 2 CPU whole and fills node-a's gap. Services instead of
/// builds (pods that run until removed) make no shape, and requests decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmentation_keeps_room_whole_under_serve() {
    let usage = (0.5, 2.0 * GI);
    let builds = [build("a", "node-a", "3"), build("b", "node-b", "2")];
    // headroom's other plugins off: only Fragmentation and the upstream scores decide.
    let profile = |on: bool| {
        format!(
            "profiles: [{{schedulerName: headroom, plugins: {{Reservation: {{enabled: false}}, RealMemoryFit: {{enabled: false}}, RealDiskFit: {{enabled: false}}, History: {{enabled: false}}, RealHeadroom: {{enabled: false}}, Fragmentation: {{enabled: {on}}}}}}}]\n"
        )
    };
    let (on, off) = (profile(true), profile(false));
    assert_eq!(
        placed_among(&on, usage, usage, &builds, None)
            .await
            .as_deref(),
        Some("node-a")
    );
    assert_eq!(
        placed_among(&off, usage, usage, &builds, None)
            .await
            .as_deref(),
        Some("node-b")
    );
    let services: Vec<Value> = builds
        .iter()
        .map(|b| {
            let mut s = b.clone();
            s["spec"]["restartPolicy"] = json!("Always");
            s
        })
        .collect();
    assert_eq!(
        placed_among(&on, usage, usage, &services, None)
            .await
            .as_deref(),
        Some("node-b")
    );
}
