//! PodTopologySpread's default constraints through `headroom place`, as users run it: the
//! Services, ReplicaSets, StatefulSets and ReplicationControllers of `--cluster` give a pod
//! without constraints of its own the selector upstream's `DefaultSelector` computes, and
//! `defaultingType: System` spreads it (hostname `maxSkew: 3`, zone `maxSkew: 5`,
//! `ScheduleAnyway`).

use serde_json::{Value, json};

use super::run;

fn write(dir: &tempfile::TempDir, name: &str, v: &Value) -> String {
    super::write(dir, name, serde_json::to_string(v).unwrap())
}

fn node(name: &str, zone: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}})
}

fn pod(name: &str, node: Option<&str>, owner: Option<(&str, &str)>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"schedulerName": "headroom", "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    if let Some((api, kind)) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": api, "kind": kind,
            "name": "web", "uid": "u1", "controller": true}]);
    }
    p
}

/// Runs `place` on `cluster` with `incoming` and `config`; the decision.
fn place(cluster: &[Value], incoming: &Value, config: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let cluster = write(
        &dir,
        "cluster.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": cluster}),
    );
    let incoming = write(&dir, "pod.json", incoming);
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let o = run(&[
        "place",
        "--output",
        "json",
        "--config",
        config_path.to_str().unwrap(),
        "--cluster",
        &cluster,
        "--pod",
        &incoming,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let mut d: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    d.remove(0)
}

/// The PodTopologySpread normalized score of each node in a decision (None: the plugin
/// did not score).
fn scores_of(decision: &Value) -> Vec<(String, Option<i64>)> {
    decision["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let s = n["scores"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["plugin"] == "PodTopologySpread")
                .map(|s| s["normalized"].as_i64().unwrap());
            (n["name"].as_str().unwrap().to_string(), s)
        })
        .collect()
}

/// The scores for a pod without owner.
fn spread_scores(cluster: &[Value], config: &str) -> Vec<(String, Option<i64>)> {
    scores_of(&place(cluster, &pod("new", None, None), config))
}

fn cluster(extra: &[Value]) -> Vec<Value> {
    let mut c = vec![
        node("h1", "za"),
        node("h2", "za"),
        node("h3", "zb"),
        pod("a", Some("h1"), None),
        pod("b", Some("h1"), None),
        pod("c", Some("h2"), None),
    ];
    c.extend_from_slice(extra);
    c
}

const SYSTEM: &str = "profiles: [{schedulerName: headroom, pluginArgs: {podTopologySpread: {defaultingType: System}}}]\n";

/// Upstream's arithmetic for these nodes (scoring.go): hostname weight ln(3+2), zone weight
/// ln(2+2); raw = Σ count·weight + (maxSkew−1): h1 2·1.609+2 + 3·1.386+4 = 13.38 → 13,
/// h2 1.609+2 + 4.159+4 = 11.77 → 12, h3 0+2 + 0+4 = 6; normalized
/// 100·(max+min−raw)/max: 600/13 = 46, 700/13 = 53, 1300/13 = 100.
const SPREAD: [(&str, Option<i64>); 3] = [("h1", Some(46)), ("h2", Some(53)), ("h3", Some(100))];

fn expect(want: [(&str, Option<i64>); 3]) -> Vec<(String, Option<i64>)> {
    want.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

#[test]
fn a_service_selecting_the_pod_spreads_it_with_system_defaults() {
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}});
    assert_eq!(
        spread_scores(&cluster(std::slice::from_ref(&service)), SYSTEM),
        expect(SPREAD)
    );
    // No workload selects the pod: no default constraints, PodTopologySpread skips.
    let none = expect([("h1", None), ("h2", None), ("h3", None)]);
    assert_eq!(spread_scores(&cluster(&[]), SYSTEM), none);
    // A Service in another namespace does not select it.
    let mut elsewhere = service.clone();
    elsewhere["metadata"]["namespace"] = json!("other");
    assert_eq!(spread_scores(&cluster(&[elsewhere]), SYSTEM), none);
    // headroom's default (`List`, no constraints): no default spreading either.
    let default = "profiles: [{schedulerName: headroom}]\n";
    assert_eq!(spread_scores(&cluster(&[service]), default), none);
}

#[test]
fn list_default_constraints_use_the_owners_selector() {
    // Only the ReplicaSet owning the incoming pod selects it (its selector is the
    // pods' label), through the pod's controller reference.
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}});
    let config = "profiles: [{schedulerName: headroom, pluginArgs: {podTopologySpread: {defaultConstraints: [\
        {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}]}}}]\n";
    let owned = pod("new", None, Some(("apps/v1", "ReplicaSet")));
    let d = place(&cluster(&[rs]), &owned, config);
    // Hostname only, weight ln(5) = 1.609, maxSkew 1: raw h1 3.22 → 3, h2 1.61 → 2,
    // h3 0; normalized 100·(3+0−raw)/3: 0, 33, 100.
    assert_eq!(
        scores_of(&d),
        expect([("h1", Some(0)), ("h2", Some(33)), ("h3", Some(100))])
    );
    assert_eq!(d["node"], "h3");
    // The same pod without the owner reference: nothing selects it.
    assert_eq!(
        spread_scores(&cluster(&[]), config),
        expect([("h1", None), ("h2", None), ("h3", None)])
    );
}

#[test]
fn bad_args_are_refused_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        "profiles: [{schedulerName: headroom, pluginArgs: {interPodAffinity: {hardPodAffinityWeight: 500}}}]\n",
    )
    .unwrap();
    let o = run(&["check-config", config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("profiles[headroom].pluginArgs.interPodAffinity.hardPodAffinityWeight: 500 is not in 0..=100"),
        "{err}"
    );
}
