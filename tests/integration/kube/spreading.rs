//! PodTopologySpread's default constraints under `headroom serve`: the Services (and
//! ReplicationControllers, ReplicaSets, StatefulSets) are listed and watched, and a Service
//! created while headroom runs changes where the next pods of its selector go.

use serde_json::{Value, json};

use super::fake::Fake;
use super::{BASE, assert_calls_allowed, node, serve};

fn web(name: &str, node: Option<&str>) -> Value {
    let mut p = super::pod(name, "headroom", "10m");
    p["metadata"]["labels"]["app"] = json!("web");
    p["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("16Mi");
    match node {
        Some(n) => super::running_on(p, n),
        None => p,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_a_watched_service_spreads_its_pods_with_system_defaults() {
    let fake = Fake::start().await;
    fake.put("namespaces", json!({"metadata": {"name": "default"}}));
    fake.put("nodes", node("node-a", "8"));
    fake.put("nodes", node("node-b", "4"));
    // node-b is half full with another app: without spreading, node-a scores higher on
    // resources (LeastAllocated, BalancedAllocation) for these small pods.
    let mut filler = web("filler", Some("node-b"));
    filler["metadata"]["labels"] = json!({"app": "other"});
    filler["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("2");
    fake.put("pods", filler);
    fake.put("pods", web("w1", Some("node-a")));
    fake.put("pods", web("w2", Some("node-a")));
    let config = format!(
        "{BASE}profiles: [{{schedulerName: headroom, pluginArgs: {{podTopologySpread: {{defaultingType: System}}}}}}]\n"
    );
    let s = serve(&fake, &config, "a").await;

    // No Service yet: nothing selects the pods, no default spreading.
    fake.put("pods", web("p0", None));
    fake.wait_for(15, "p0 bound", |f| f.node_of("default", "p0").is_some())
        .await;
    assert_eq!(fake.node_of("default", "p0").as_deref(), Some("node-a"));

    // A Service selecting them, created while serving: the watch delivers it, and the
    // next pods spread to node-b (hostname maxSkew 3, ScheduleAnyway). Pods are created
    // one at a time until one lands there, so the test does not race the watch.
    fake.put(
        "services",
        json!({"metadata": {"name": "web", "namespace": "default"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    );
    let mut landed = None;
    for i in 1..=8 {
        let name = format!("p{i}");
        fake.put("pods", web(&name, None));
        fake.wait_for(15, "pod bound", |f| f.node_of("default", &name).is_some())
            .await;
        if fake.node_of("default", &name).as_deref() == Some("node-b") {
            landed = Some(i);
            break;
        }
    }
    assert!(
        landed.is_some(),
        "no pod spread to node-b once the Service existed"
    );
    assert!(
        fake.calls()
            .iter()
            .any(|(g, r, v)| g.is_empty() && r == "services" && v == "watch"),
        "services are watched"
    );
    for (group, resource) in [
        ("", "replicationcontrollers"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
    ] {
        assert!(
            fake.calls()
                .iter()
                .any(|(g, r, v)| g == group && r == resource && v == "list"),
            "{resource} are listed"
        );
    }
    assert_calls_allowed(&fake);
    s.stop().await;
}
