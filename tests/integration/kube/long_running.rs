//! RealHeadroom's strategies under `serve`: with `longRunningStrategy`, services pack
//! beside another workload's long-running pod, a replica keeps off its sibling's node, and a
//! build (a pod that runs to completion) is still spread; `fill` gathers pods on the node in
//! use up to its level. Usage comes from a fake kubelet per node, through the collectors
//! and analytics.

use serde_json::{Value, json};

use super::fake::Fake;
use super::kubelet::{FakeKubelet, collectors_yaml};
use super::sections::{SERVE_BASE, config, start, until_measured};
use super::{namespace, node};

const GI: f64 = (1u64 << 30) as f64;

/// A bare pod `name` labelled `app`, pending for headroom unless `on` names its node;
/// `restart` sets its `restartPolicy`.
fn app_pod(name: &str, app: &str, on: Option<&str>, restart: Option<&str>) -> Value {
    let mut p = super::pod(name, "headroom", "100m");
    p["metadata"]["labels"]["app"] = json!(app);
    if let Some(r) = restart {
        p["spec"]["restartPolicy"] = json!(r);
    }
    match on {
        Some(n) => super::running_on(p, n),
        None => p,
    }
}

/// Two 4-CPU / 16 GiB nodes: node-a runs the database `db-0` and 6 GiB are in use there,
/// node-b has 2 GiB in use. Creates `pods` one after the other under `pluginArgs: {args}`
/// and returns the node each was bound to.
async fn placements(args: &str, pods: &[Value]) -> Vec<String> {
    let fake = Fake::start().await;
    let ka = FakeKubelet::start("node-a", 0.5, 6.0 * GI).await;
    let kb = FakeKubelet::start("node-b", 0.5, 2.0 * GI).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    fake.put("pods", app_pod("db-0", "db", Some("node-a"), None));
    let base = format!(
        "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
        collectors_yaml(&[("node-a", &ka), ("node-b", &kb)])
    );
    let section = format!("profiles: [{{schedulerName: headroom, pluginArgs: {{{args}}}}}]\n");
    let s = start(&fake, config(&base, &section), None).await;
    until_measured(&s, &["node-a", "node-b"]).await;
    let mut got = Vec::new();
    for p in pods {
        let name = p["metadata"]["name"].as_str().unwrap().to_string();
        fake.put("pods", p.clone());
        fake.wait_for(15, "pod bound", |f| f.node_of("default", &name).is_some())
            .await;
        got.push(fake.node_of("default", &name).unwrap());
    }
    s.stop().await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_running_pods_pack_apart_from_their_replicas_under_serve() {
    let pods = [
        app_pod("svc-1", "svc", None, None),
        app_pod("svc-2", "svc", None, None),
        app_pod("build-1", "build", None, Some("Never")),
    ];
    // Packed: svc-1 beside the database on the fuller node, its replica svc-2 not beside
    // it, the build spread to the emptier node.
    let packed = placements("realHeadroom: {longRunningStrategy: binpack}", &pods).await;
    assert_eq!(packed, ["node-a", "node-b", "node-b"]);
    // Unset: every pod spread, as the builds.
    let spread = placements("", &pods[..1]).await;
    assert_eq!(spread, ["node-b"]);
}

/// `strategy: fill`: node-a (6 GiB of 16 in use) takes the pod while it stays under the
/// level (70 %), leaving node-b (2 GiB) free; with a level of 30 % node-a would pass it,
/// so node-b wins, as it does under `spread`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fill_gathers_pods_on_the_node_in_use_up_to_its_level_under_serve() {
    let pods = [app_pod("build-1", "build", None, Some("Never"))];
    let filled = placements("realHeadroom: {strategy: fill}", &pods).await;
    assert_eq!(filled, ["node-a"]);
    let low = placements("realHeadroom: {strategy: fill, targetPercent: 30}", &pods).await;
    assert_eq!(low, ["node-b"]);
}
