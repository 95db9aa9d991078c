//! Synthetic clusters with realistic labels, taints and pods, for benchmarks and tests.

use k8s_openapi::api::core::v1::{Node, Pod};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

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

/// A replica of workload `api-0` with two topology spread constraints over its own
/// workload: at most 2 more replicas in one zone than in the emptiest (`DoNotSchedule`), and
/// one replica per node preferred (`ScheduleAnyway` over `kubernetes.io/hostname`).
pub fn spread_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "api-0"}},
        "spec": {
            "topologySpreadConstraints": [
                {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "api-0"}}},
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"app": "api-0"}}}],
            "containers": [{"name": "main", "image": "registry.example/img-3:v1",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
    }))
    .expect("spread pod")
}

/// Upstream's `PreemptionBasic` cluster (scheduler_perf's `node-default.yaml` and
/// `pod-low-priority.yaml`): `nodes` nodes of 4 CPU / 32 GiB / 110 pods, each running four
/// pods of 900m CPU / 500 MiB at priority 0 (grace period 0), so 3.6 CPU of 4 is taken.
pub fn preemption_cluster(nodes: usize) -> (Vec<Node>, Vec<Pod>) {
    let mut out_nodes = Vec::with_capacity(nodes);
    let mut out_pods = Vec::with_capacity(nodes * 4);
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        out_nodes.push(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
            }))
            .expect("synthetic node"),
        );
        for j in 0..4 {
            out_pods.push(
                serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("low-{i}-{j}"), "namespace": "default",
                        "uid": format!("uid-low-{i}-{j}")},
                    "spec": {"nodeName": name, "priority": 0, "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                            "resources": {"requests": {"cpu": "900m", "memory": "500Mi"},
                                "limits": {"cpu": "900m", "memory": "500Mi"}}}]}
                }))
                .expect("synthetic pod"),
            );
        }
    }
    (out_nodes, out_pods)
}

/// The middle of upstream's `PreemptionBasic` run, on a [`preemption_cluster`]: every
/// other node has lost three of its pods to a preemptor nominated there and not yet bound
/// (so it looks free to the filters until the nominated pod is counted).
fn preempt_half(snap: &mut crate::snapshot::Snapshot, nodes: usize) {
    use crate::key::PodKey;
    use crate::snapshot::PodInfo;
    for i in (0..nodes).step_by(2) {
        for j in 1..4 {
            snap.remove_pod(
                &PodKey::new("default", format!("low-{i}-{j}")),
                &format!("uid-low-{i}-{j}"),
            );
        }
        let p = PodInfo::new(std::sync::Arc::new(preemptor_pod(&format!(
            "preemptor-{i}"
        ))));
        snap.policy_mut()
            .nominate(std::sync::Arc::new(p), &format!("node-{i:05}"));
    }
}

/// Upstream's `pod-high-priority.yaml`: 3 CPU / 500 MiB at priority 10. On a
/// [`preemption_cluster`] it fits only after three of a node's four pods are evicted.
pub fn preemptor_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"priority": 10, "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
            "resources": {"requests": {"cpu": "3", "memory": "500Mi"},
                "limits": {"cpu": "3", "memory": "500Mi"}}}]}
    }))
    .expect("preemptor pod")
}

/// The builder of [`usage_pod`] (the collectors' identity of a pod owned by Job `ci-build`).
pub const USAGE_BUILDER: &str = "default/Job/ci-build";

/// A CI build pod of builder [`USAGE_BUILDER`] (owned by Job `ci-build`): 2 CPU, 4 GiB
/// requested, a node selector on `kubernetes.io/os`, and a preferred node affinity for one
/// instance type. With [`usage_view`] its builder has a profile and a placement history.
pub fn usage_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": {"app": "ci-build"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "ci-build",
                "uid": "uid-job", "controller": true}]},
        "spec": {
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.4xlarge"]}]}}]}},
            "containers": [{"name": "main", "image": "registry.example/img-7:v1",
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}
    }))
    .expect("usage pod")
}

/// A usage view for a cluster made by [`cluster`] with `nodes` nodes, as of `now_ms`: every
/// node measured (CPU 10–80 % and memory 20–85 % of the synthetic capacity, the newest
/// sample 5–60 s old, 2 % of the nodes stale), a profile for [`USAGE_BUILDER`] and a
/// placement history of three nodes for it.
pub fn usage_view(nodes: usize, now_ms: i64, seed: u64) -> crate::view::UsageView {
    use crate::view::{BuilderProfile, NodeUsage, Percentiles, Stat, UsageView};
    let mut rng = SmallRng::seed_from_u64(seed);
    let types = [(4.0, 16.0), (8.0, 32.0), (16.0, 64.0), (36.0, 72.0)];
    let gib = (1u64 << 30) as f64;
    let mut view = UsageView {
        generated_ms: now_ms,
        ..Default::default()
    };
    for i in 0..nodes {
        let (cpu, mem) = types[i % types.len()];
        let c = cpu * rng.random_range(0.10..0.80);
        let m = mem * gib * rng.random_range(0.20..0.85);
        let age = if i % 50 == 17 {
            600_000
        } else {
            rng.random_range(5_000..60_000)
        };
        let name = format!("node-{i:05}");
        view.nodes.insert(
            name.clone(),
            NodeUsage {
                node: name,
                cpu_cores: Stat {
                    current: c,
                    windowed: c * 1.1,
                },
                memory_working_set_bytes: Stat {
                    current: m,
                    windowed: m * 1.05,
                },
                fs_available_bytes: Some(Stat {
                    current: 120.0 * gib,
                    windowed: 110.0 * gib,
                }),
                fs_capacity_bytes: Some(200.0 * gib),
                newest_ms: now_ms - age,
                window: None,
            },
        );
    }
    let p = |v: f64| Percentiles {
        p50: v * 0.7,
        p90: v * 0.9,
        p95: v,
        p99: v * 1.1,
        max: v * 1.2,
    };
    view.builders.insert(
        USAGE_BUILDER.to_string(),
        BuilderProfile {
            builder: USAGE_BUILDER.to_string(),
            runs: 20,
            cpu: p(1.5),
            memory: p(3.0 * gib),
            newest_ms: now_ms - 60_000,
            cold_run_s: None,
            warm_run_s: None,
        },
    );
    let n = nodes.max(1);
    view.placements.insert(
        USAGE_BUILDER.to_string(),
        [17 % n, 42 % n, 333 % n]
            .iter()
            .map(|i| format!("node-{i:05}"))
            .collect(),
    );
    view
}

/// The scheduling benchmarks' cases (`benches/scheduler.rs`, `examples/cycle.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// [`plain_pod`] on a cluster without usage data.
    Plain,
    /// [`anti_affinity_pod`] on a cluster without usage data.
    AntiAffinity,
    /// [`spread_pod`] on a cluster without usage data.
    Spread,
    /// [`usage_pod`] on a cluster with a [`usage_view`]: every real-usage plugin of the
    /// default profile is active.
    Usage,
    /// [`usage_pod`] on the same cluster without usage data: [`Case::Usage`]'s decision
    /// with nothing measured (the real-usage plugins skip, requests decide), the reference
    /// its cost is judged against.
    UsageNone,
    /// Upstream's `PreemptionBasic` (scheduler_perf) half-way: a [`preemption_cluster`]
    /// where every other node holds a nominated preemptor (its victims gone), and
    /// [`preemptor_pod`], which fits nowhere until DefaultPreemption evicts three pods.
    Preemption,
}

impl Case {
    /// Every case.
    pub const ALL: [Case; 6] = [
        Case::Plain,
        Case::AntiAffinity,
        Case::Spread,
        Case::Usage,
        Case::UsageNone,
        Case::Preemption,
    ];

    /// Its name in benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            Case::Plain => "plain",
            Case::AntiAffinity => "anti-affinity",
            Case::Spread => "spread",
            Case::Usage => "usage",
            Case::UsageNone => "usage-none",
            Case::Preemption => "preemption",
        }
    }

    /// The case named `name`.
    pub fn from_name(name: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The pod the case schedules.
    pub fn pod(self) -> Pod {
        match self {
            Case::Plain => plain_pod("bench"),
            Case::AntiAffinity => anti_affinity_pod("bench-anti"),
            Case::Spread => spread_pod("bench-spread"),
            Case::Usage | Case::UsageNone => usage_pod("bench-usage"),
            Case::Preemption => preemptor_pod("bench-preemptor"),
        }
    }

    /// The snapshot of a [`cluster`] of `nodes` nodes with 30 pods each (seed 42), with a
    /// [`usage_view`] for [`Case::Usage`]; a [`preemption_cluster`] for
    /// [`Case::Preemption`].
    pub fn snapshot(self, nodes: usize) -> crate::snapshot::Snapshot {
        let (n, p) = match self {
            Case::Preemption => preemption_cluster(nodes),
            _ => cluster(nodes, 30, 42),
        };
        let mut snap = crate::snapshot::Snapshot::build(n, p);
        if self == Case::Preemption {
            preempt_half(&mut snap, nodes);
        }
        if self == Case::Usage {
            let now_ms = 1_790_000_000_000;
            let u = snap.usage_mut();
            u.view = std::sync::Arc::new(usage_view(nodes, now_ms, 7));
            u.now_ms = now_ms;
        }
        snap
    }
}

/// A [`cluster`] with more variety, for tests that compare code paths over many random
/// clusters: a random number of pods per node (0–8); a numeric `gpu-count` label and an
/// `example.com/gpu` resource on every seventh node; no zone label on every thirteenth;
/// `InternalIP` addresses; some pods with host ports, with preferred (anti-)affinity or in
/// namespace `team-a`.
pub fn random_cluster(nodes: usize, seed: u64) -> (Vec<Node>, Vec<Pod>) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let per_node = rng.random_range(0..=8);
    let (mut ns, mut ps) = cluster(nodes, per_node, seed);
    for (i, n) in ns.iter_mut().enumerate() {
        let labels = n.metadata.labels.get_or_insert_with(Default::default);
        if i % 7 == 2 {
            labels.insert("gpu-count".into(), (i % 4).to_string());
            if let Some(a) = n.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
                a.insert(
                    "example.com/gpu".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity((i % 4).to_string()),
                );
            }
        }
        if i % 13 == 5 {
            labels.remove("topology.kubernetes.io/zone");
        }
        if let Some(s) = n.status.as_mut() {
            s.addresses = Some(vec![k8s_openapi::api::core::v1::NodeAddress {
                type_: "InternalIP".into(),
                address: format!("10.0.{}.{}", i / 250, i % 250),
            }]);
        }
    }
    for (j, p) in ps.iter_mut().enumerate() {
        let spec = p.spec.as_mut().expect("synthetic pod spec");
        if j % 17 == 3 {
            spec.containers[0].ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
                container_port: 80,
                host_port: Some(8080 + (j % 3) as i32),
                ..Default::default()
            }]);
        }
        if j % 11 == 2 {
            let app = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .cloned()
                .unwrap_or_default();
            spec.affinity = serde_json::from_value(json!({
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 20, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}},
                        "topologyKey": "topology.kubernetes.io/zone"}}]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 30, "podAffinityTerm": {"labelSelector": {"matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["frontend"]}]},
                        "topologyKey": "kubernetes.io/hostname"}}]}
            }))
            .ok();
        }
        if j % 19 == 4 {
            p.metadata.namespace = Some("team-a".into());
        }
    }
    (ns, ps)
}

/// A random pod for [`random_cluster`]s: random requests (sometimes none, sometimes GPUs),
/// node selector, required and preferred node affinity (every operator, `matchFields`),
/// tolerations, required and preferred pod (anti-)affinity, topology spread constraints
/// (both actions, `minDomains`, `matchLabelKeys`, inclusion policies), host ports, a node
/// name, the history and real-resources annotations, and a Job owner.
pub fn random_pod(nodes: usize, seed: u64) -> Pod {
    let mut d = Dice {
        coin: SmallRng::seed_from_u64(seed),
        rng: SmallRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(7)),
        nodes: nodes.max(1),
    };
    let w = d.rng.random_range(0..(d.nodes * 8 / 40).clamp(1, 30));
    let app = format!("{}-{w}", APPS[w % APPS.len()]);
    let zone = ZONES[d.rng.random_range(0..ZONES.len())];
    let key = if d.chance(0.5) {
        "topology.kubernetes.io/zone"
    } else {
        "kubernetes.io/hostname"
    };
    let mut spec = json!({"containers": [{"name": "main",
        "image": format!("registry.example/img-{}:v1", d.rng.random_range(0..70))}]});
    if !d.chance(0.1) {
        let mut req = json!({"cpu": format!("{}m", d.rng.random_range(1..6000)),
            "memory": format!("{}Mi", d.rng.random_range(1..20000))});
        if d.chance(0.1) {
            req["ephemeral-storage"] = json!(format!("{}Gi", d.rng.random_range(1..300)));
        }
        if d.chance(0.1) {
            req["example.com/gpu"] = json!(d.rng.random_range(1..3).to_string());
        }
        spec["containers"][0]["resources"] = json!({"requests": req});
    }
    if d.chance(0.2) {
        spec["nodeSelector"] = if d.chance(0.5) {
            json!({"topology.kubernetes.io/zone": zone})
        } else {
            json!({"node.kubernetes.io/instance-type": "m5.2xlarge", "kubernetes.io/os": "linux"})
        };
    }
    let affinity = d.affinity(zone, &app, w, key);
    if affinity != json!({}) {
        spec["affinity"] = affinity;
    }
    if d.chance(0.3) {
        let all = [
            json!({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}),
            json!({"key": "dedicated", "operator": "Exists"}),
            json!({"key": "spot", "operator": "Equal", "value": "true", "effect": "PreferNoSchedule"}),
            json!({"operator": "Exists"}),
            json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
        ];
        let k = d.rng.random_range(0..all.len());
        spec["tolerations"] = json!([all[k].clone()]);
    }
    if d.chance(0.25) {
        spec["topologySpreadConstraints"] = d.spread(&app);
    }
    if d.chance(0.1) {
        spec["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
    }
    if d.chance(0.03) {
        spec["nodeName"] = json!(d.node());
    }
    let meta = d.metadata(seed, app);
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}),
    )
    .expect("random pod")
}

/// [`random_pod`]'s two random streams: `coin` decides whether a feature is there, `rng`
/// draws its values (two streams, so adding a value draw does not reshuffle which pods
/// have which features).
struct Dice {
    coin: SmallRng,
    rng: SmallRng,
    nodes: usize,
}

impl Dice {
    fn chance(&mut self, p: f64) -> bool {
        self.coin.random_bool(p)
    }

    fn node(&mut self) -> String {
        format!("node-{:05}", self.rng.random_range(0..self.nodes))
    }

    /// A node selector term: one or two expressions, sometimes a `matchFields`.
    fn node_term(&mut self, zone: &str) -> Value {
        let ops = [
            json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone, "zone-x"]}),
            json!({"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": [zone]}),
            json!({"key": "gpu-count", "operator": "Exists"}),
            json!({"key": "gpu-count", "operator": "DoesNotExist"}),
            json!({"key": "gpu-count", "operator": "Gt", "values": ["1"]}),
            json!({"key": "gpu-count", "operator": "Lt", "values": ["2"]}),
            json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge", "c5.9xlarge"]}),
            json!({"key": "no-such-label", "operator": "NotIn", "values": ["x"]}),
        ];
        let r = &mut self.rng;
        let mut t = json!({"matchExpressions": [ops[r.random_range(0..ops.len())].clone()]});
        if r.random_bool(0.3) {
            t["matchExpressions"]
                .as_array_mut()
                .expect("array")
                .push(ops[r.random_range(0..ops.len())].clone());
        }
        if self.rng.random_bool(0.1) {
            t["matchFields"] =
                json!([{"key": "metadata.name", "operator": "In", "values": [self.node()]}]);
        }
        t
    }

    fn pod_term(&mut self, app: &str, key: &str) -> Value {
        let mut t = json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key});
        if self.rng.random_bool(0.2) {
            t["namespaceSelector"] = json!({});
        }
        t
    }

    /// Node affinity (required, preferred) and pod (anti-)affinity; `{}` when none.
    fn affinity(&mut self, zone: &str, app: &str, w: usize, key: &str) -> Value {
        let mut affinity = json!({});
        if self.chance(0.2) {
            let terms: Vec<_> = (0..self.rng.random_range(1..3))
                .map(|_| self.node_term(zone))
                .collect();
            affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                json!({"nodeSelectorTerms": terms});
        }
        if self.chance(0.3) {
            let terms: Vec<_> = (0..self.rng.random_range(1..3))
                .map(|_| json!({"weight": self.rng.random_range(1..100), "preference": self.node_term(zone)}))
                .collect();
            affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
                json!(terms);
        }
        if self.chance(0.1) {
            affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                json!([self.pod_term(app, "topology.kubernetes.io/zone")]);
        }
        if self.chance(0.2) {
            affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                json!([self.pod_term(app, key)]);
        }
        if self.chance(0.2) {
            let other = format!("{}-{}", APPS[(w + 1) % APPS.len()], w + 1);
            affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([
                {"weight": self.rng.random_range(1..100), "podAffinityTerm": self.pod_term(&other, key)}]);
            affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([
                {"weight": self.rng.random_range(1..100), "podAffinityTerm": self.pod_term(app, "kubernetes.io/hostname")}]);
        }
        affinity
    }

    /// One or two topology spread constraints over `app`'s pods.
    fn spread(&mut self, app: &str) -> Value {
        let r = &mut self.rng;
        let mut cs = Vec::new();
        for _ in 0..r.random_range(1..3) {
            let mut c = json!({
                "maxSkew": r.random_range(1..4),
                "topologyKey": if r.random_bool(0.5) { "topology.kubernetes.io/zone" } else { "kubernetes.io/hostname" },
                "whenUnsatisfiable": if r.random_bool(0.5) { "DoNotSchedule" } else { "ScheduleAnyway" },
                "labelSelector": {"matchLabels": {"app": app}},
            });
            if r.random_bool(0.2) {
                c["minDomains"] = json!(r.random_range(1..5));
                c["whenUnsatisfiable"] = json!("DoNotSchedule");
            }
            if r.random_bool(0.2) {
                c["matchLabelKeys"] = json!(["tier"]);
            }
            if r.random_bool(0.2) {
                c["nodeAffinityPolicy"] = json!("Ignore");
            }
            if r.random_bool(0.2) {
                c["nodeTaintsPolicy"] = json!("Honor");
            }
            cs.push(c);
        }
        json!(cs)
    }

    /// Name, namespace, labels, the history and real-resources annotations, an owner.
    fn metadata(&mut self, seed: u64, app: String) -> Value {
        let mut annotations = json!({});
        if self.chance(0.1) {
            let history = [
                self.node(),
                format!("10.0.0.{}", self.rng.random_range(0..9)),
            ];
            annotations["bkci.dispatch.kubenetes/builder-history-nodes"] =
                json!(serde_json::to_string(&history).unwrap_or_default());
        }
        if self.chance(0.1) {
            annotations["bkci.dispatch.kubenetes/builder-real-resources"] =
                json!(r#"[{"cpu":"1","memory":"2Gi"},{"cpu":"2","memory":"3Gi"}]"#);
        }
        let namespace = if self.chance(0.8) {
            "default"
        } else {
            "team-a"
        };
        let tier = if self.chance(0.5) {
            "frontend"
        } else {
            "backend"
        };
        let mut meta = json!({"name": format!("random-{seed}"), "namespace": namespace,
            "uid": format!("uid-random-{seed}"),
            "labels": {"app": app, "tier": tier},
            "annotations": annotations});
        if self.chance(0.3) {
            meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "ci-build",
                "uid": "uid-job", "controller": true}]);
        }
        meta
    }
}
