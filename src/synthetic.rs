//! Synthetic clusters with realistic labels, taints and pods, for benchmarks and tests.

use k8s_openapi::api::core::v1::{Node, Pod};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// Zones nodes are spread over.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// Workload names pods are labelled with (`app`).
pub const APPS: [&str; 12] = [
    "api", "web", "cache", "builder", "worker", "db", "queue", "search", "auth", "cron", "etl",
    "ml",
];

/// A cluster of `nodes` nodes with `pods_per_node` running pods each.
///
/// Nodes: 3 zones, 4 instance types, `kubernetes.io/hostname`, 10 % tainted
/// `dedicated=db:NoSchedule`, 5 % with a `PreferNoSchedule` taint, 2 % cordoned, 20 images each.
/// Pods: requests under 70 % of the node, labels `app` (one of `nodes × pods_per_node / 40`
/// workloads, so about 40 replicas each, as deployments are) and `tier`; every tenth pod has a
/// required anti-affinity against its own workload per hostname.
pub fn cluster(nodes: usize, pods_per_node: usize, seed: u64) -> (Vec<Node>, Vec<Pod>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let types = [
        ("m5.xlarge", 4, 16),
        ("m5.2xlarge", 8, 32),
        ("m5.4xlarge", 16, 64),
        ("c5.9xlarge", 36, 72),
    ];
    let mut out_nodes = Vec::with_capacity(nodes);
    let mut out_pods = Vec::with_capacity(nodes * pods_per_node);
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        let (itype, cpu, mem) = types[i % types.len()];
        let mut taints = Vec::new();
        if i % 10 == 3 {
            taints.push(json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"}));
        }
        if i % 20 == 7 {
            taints.push(json!({"key": "spot", "value": "true", "effect": "PreferNoSchedule"}));
        }
        let images: Vec<_> = (0..20)
            .map(|k| {
                let img = (i * 7 + k * 13) % 60;
                json!({"names": [format!("registry.example/img-{img}:v1")], "sizeBytes": (50 + img * 20) * 1024 * 1024})
            })
            .collect();
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": ZONES[i % ZONES.len()],
                "node.kubernetes.io/instance-type": itype,
                "kubernetes.io/os": "linux",
                "node-role/worker": "true",
            }},
            "spec": {"taints": taints, "unschedulable": i % 50 == 11},
            "status": {
                "allocatable": {"cpu": cpu.to_string(), "memory": format!("{mem}Gi"), "pods": "110", "ephemeral-storage": "200Gi"},
                "images": images,
            }
        }))
        .expect("synthetic node");
        out_nodes.push(node);
        // Keep requests under ~70 % of the node so the cluster stays schedulable.
        let budget_cpu = cpu as f64 * 1000.0 * 0.7 / pods_per_node.max(1) as f64;
        for j in 0..pods_per_node {
            let workloads = (nodes * pods_per_node / 40).max(1);
            let w = rng.random_range(0..workloads);
            let app = format!("{}-{w}", APPS[w % APPS.len()]);
            let app = app.as_str();
            let cpu_m = rng.random_range(50..=(budget_cpu as i64).max(60));
            let mem_mi =
                rng.random_range(64..=(mem * 1024 * 6 / 10 / pods_per_node.max(1) as i64).max(65));
            let mut spec = json!({
                "nodeName": name,
                "containers": [{"name": "main", "image": format!("registry.example/img-{}:v1", rng.random_range(0..60)),
                    "resources": {"requests": {"cpu": format!("{cpu_m}m"), "memory": format!("{mem_mi}Mi")}}}]
            });
            if j % 10 == 0 {
                spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}});
            }
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{app}-{i}-{j}"), "namespace": "default", "uid": format!("uid-{i}-{j}"),
                    "labels": {"app": app, "tier": if j % 2 == 0 { "frontend" } else { "backend" }}},
                "spec": spec,
            }))
            .expect("synthetic pod");
            out_pods.push(pod);
        }
    }
    (out_nodes, out_pods)
}

/// A plain pod: 500m CPU, 1 GiB, no constraints.
pub fn plain_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/img-3:v1",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
    }))
    .expect("plain pod")
}

/// A pod of workload `api-0` (about 40 replicas in a synthetic cluster) with a required
/// anti-affinity against its own workload per hostname: one replica per node.
pub fn anti_affinity_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "api-0"}},
        "spec": {
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "api-0"}}, "topologyKey": "kubernetes.io/hostname"}]}},
            "containers": [{"name": "main", "image": "registry.example/img-3:v1",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
    }))
    .expect("anti-affinity pod")
}
