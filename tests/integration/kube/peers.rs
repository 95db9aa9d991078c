//! The peers' plugins under `serve` (issue #21): each enabled in a profile with its own
//! args, fed by a fake kubelet per node through headroom's collectors and analytics, moves
//! a pod from where the request-based plugins alone put it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::fake::Fake;
use super::kubelet::{FakeKubelet, collectors_yaml};
use super::sections::{SERVE_BASE, config, get_json, start, until_measured, within};
use super::{namespace, node};

const GI: f64 = (1u64 << 30) as f64;

/// headroom's own plugins off, `extra` plugin settings on top (YAML flow map entries),
/// with `args` as the profile's `pluginArgs`.
fn profile_with(extra: &str, args: &str) -> String {
    format!(
        "profiles: [{{schedulerName: headroom, plugins: {{Reservation: {{enabled: false}}, RealMemoryFit: {{enabled: false}}, RealDiskFit: {{enabled: false}}, History: {{enabled: false}}, RealHeadroom: {{enabled: false}}, Fragmentation: {{enabled: false}}{extra}}}, pluginArgs: {{{args}}}}}]\n"
    )
}

fn profile(extra: &str) -> String {
    profile_with(extra, "")
}

/// A pod `name` bound to `node` requesting `cpu`.
fn running(name: &str, node: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
               "resources": {"requests": {"cpu": cpu}}}]},
           "status": {"phase": "Running"}})
}

/// Two 4-CPU / 16 GiB nodes whose kubelets report `a` and `b` (cores, bytes) in use, with
/// `existing` pods `(node, cpu request)`; the pod `p` (100m CPU requested, `limit` if any)
/// is created once both nodes are measured. The node it was bound to.
async fn placed(
    section: &str,
    a: (f64, f64),
    b: (f64, f64),
    existing: &[(&str, &str)],
    limit: Option<&str>,
) -> Option<String> {
    let existing: Vec<Value> = existing
        .iter()
        .enumerate()
        .map(|(i, (n, cpu))| running(&format!("e{i}"), n, cpu))
        .collect();
    placed_among(section, a, b, &existing, limit).await
}

/// [`placed`] with the existing pods as given (bound to `node-a` or `node-b`).
pub(super) async fn placed_among(
    section: &str,
    a: (f64, f64),
    b: (f64, f64),
    existing: &[Value],
    limit: Option<&str>,
) -> Option<String> {
    let mut p = json!({"metadata": {"name": "p", "namespace": "default"},
        "spec": {"schedulerName": "headroom", "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]},
        "status": {"phase": "Pending"}});
    if let Some(l) = limit {
        p["spec"]["containers"][0]["resources"]["limits"] = json!({"cpu": l});
    }
    placed_pod(section, a, b, existing, p).await
}

/// [`placed_among`] for the pod `p` as given (named `p`, in `default`).
pub(super) async fn placed_pod(
    section: &str,
    a: (f64, f64),
    b: (f64, f64),
    existing: &[Value],
    p: Value,
) -> Option<String> {
    let fake = Fake::start().await;
    let ka = FakeKubelet::start("node-a", a.0, a.1).await;
    let kb = FakeKubelet::start("node-b", b.0, b.1).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    for p in existing {
        fake.put("pods", p.clone());
    }
    let base = format!(
        "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
        collectors_yaml(&[("node-a", &ka), ("node-b", &kb)])
    );
    let s = start(&fake, config(&base, section), None).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in ["node-a", "node-b"] {
        while get_json(&s.url(&format!("/nodes/{n}"))).await["headroom"]["basis"] != "measured" {
            assert!(Instant::now() < deadline, "no usage for {n}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // What a new view derives from the cached pods (Fragmentation's shapes, the
    // calibration) is derived when the view is set, after it is generated: wait for the
    // existing pods in the cache, then for a view generated after that moment, so the pod
    // is decided on both.
    let cached = || async {
        let list = get_json(&s.url("/nodes")).await;
        let pods: u64 = list["nodes"]
            .as_array()
            .map(|ns| ns.iter().filter_map(|n| n["pods"].as_u64()).sum())
            .unwrap_or(0);
        let ms = |k: &str| list[k].as_i64().unwrap_or(0);
        (pods, ms("nowMs"), ms("usageGeneratedMs"))
    };
    let seen = loop {
        let (pods, now, _) = cached().await;
        if pods >= existing.len() as u64 {
            break now;
        }
        assert!(Instant::now() < deadline, "existing pods not in the cache");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    while cached().await.2 <= seen {
        assert!(
            Instant::now() < deadline,
            "no usage view after the pods were cached"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fake.put("pods", p);
    let decided = within(10.0, || {
        fake.node_of("default", "p").is_some()
            || fake.get("pods", "default", "p").unwrap()["status"]["conditions"].is_array()
    })
    .await;
    assert!(decided, "no decision for p");
    let node = fake.node_of("default", "p");
    s.stop().await;
    node
}

/// Koordinator's filter: node-a's 3 of 4 cores (75 % > 65 %) reject it, though requests
/// (2 cores requested on node-b) prefer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_load_aware_filter_under_serve() {
    let (a, b) = ((3.0, 2.0 * GI), (0.5, 2.0 * GI));
    let got = with_and_without("LoadAwareScheduling", a, b, &[("node-b", "2")], None).await;
    assert_eq!(got, both("node-b", "node-a"));
    // node-b full by requests: at the default 65 % node-a is rejected too, and the pod
    // waits; with the user's own threshold (80 %), node-a's 75 % + the pod's estimate
    // passes.
    let full = [("node-b", "3950m")];
    let on = profile(", LoadAwareScheduling: {enabled: true}");
    assert_eq!(placed(&on, a, b, &full, None).await, None);
    let tuned = profile_with(
        ", LoadAwareScheduling: {enabled: true}",
        "loadAwareScheduling: {usageThresholds: {cpu: 80}}",
    );
    assert_eq!(
        placed(&tuned, a, b, &full, None).await.as_deref(),
        Some("node-a")
    );
}

/// Where the pod goes with `plugin` enabled, and without it (requests alone decide).
async fn with_and_without(
    plugin: &str,
    a: (f64, f64),
    b: (f64, f64),
    existing: &[(&str, &str)],
    limit: Option<&str>,
) -> (Option<String>, Option<String>) {
    let on = profile(&format!(", {plugin}: {{enabled: true}}"));
    let with = placed(&on, a, b, existing, limit).await;
    let without = placed(&profile(""), a, b, existing, limit).await;
    (with, without)
}

fn both(a: &str, b: &str) -> (Option<String>, Option<String>) {
    (Some(a.to_string()), Some(b.to_string()))
}

/// crane's filter: node-a's 5-minute CPU mean, 0.75, is above 0.65.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crane_dynamic_filter_under_serve() {
    let (a, b) = ((3.0, 2.0 * GI), (0.5, 2.0 * GI));
    let got = with_and_without("Dynamic", a, b, &[("node-b", "2")], None).await;
    assert_eq!(got, both("node-b", "node-a"));
}

/// Trimaran's LoadVariationRiskBalancing: node-a's 90 % CPU outweighs node-b's 1 core of
/// requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimaran_lvrb_score_under_serve() {
    let (a, b) = ((3.6, 2.0 * GI), (0.2, 2.0 * GI));
    let got = with_and_without("LoadVariationRiskBalancing", a, b, &[("node-b", "1")], None).await;
    assert_eq!(got, both("node-b", "node-a"));
}

/// Trimaran's TargetLoadPacking packs: node-a at 15 % plus the pod's 1-CPU limit reaches
/// the 40 % target; node-b, idle and with fewer requests, would stay at 25 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimaran_tlp_score_under_serve() {
    let (a, b) = ((0.6, 2.0 * GI), (0.0, 2.0 * GI));
    let existing = [("node-a", "500m")];
    let got = with_and_without("TargetLoadPacking", a, b, &existing, Some("1")).await;
    assert_eq!(got, both("node-a", "node-b"));
}

/// Koordinator reads each node's last NodeMetric report, not headroom's live view (issue
/// #74): node-a is busy (3 of 4 cores) when the pod arrives and node-b is full by requests,
/// so the pod waits; node-a then goes idle. Reading the live view
/// (`reportIntervalSeconds: 0`) the pod is placed on node-a within seconds; with the
/// koordlet's report a day apart (each node's report instant drawn from its name: one
/// falls in these seconds with odds of about 1 in 4,000) it is still waiting well after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_reads_each_nodes_last_report_under_serve() {
    async fn run(report_interval_s: u64, wait_s: f64) -> Option<String> {
        let fake = Fake::start().await;
        let ka = FakeKubelet::start("node-a", 3.0, 2.0 * GI).await;
        let kb = FakeKubelet::start("node-b", 0.5, 2.0 * GI).await;
        fake.put("namespaces", namespace("default"));
        fake.put("nodes", node("node-a", "4"));
        fake.put("nodes", node("node-b", "4"));
        fake.put("pods", running("full", "node-b", "3950m"));
        let base = format!(
            "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
            collectors_yaml(&[("node-a", &ka), ("node-b", &kb)])
        );
        let section = profile_with(
            ", LoadAwareScheduling: {enabled: true}",
            &format!("loadAwareScheduling: {{reportIntervalSeconds: {report_interval_s}}}"),
        );
        let s = start(&fake, config(&base, &section), None).await;
        until_measured(&s, &["node-a", "node-b"]).await;
        fake.put(
            "pods",
            json!({"metadata": {"name": "p", "namespace": "default"},
                "spec": {"schedulerName": "headroom", "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]},
                "status": {"phase": "Pending"}}),
        );
        let rejected = within(10.0, || {
            fake.get("pods", "default", "p").unwrap()["status"]["conditions"].is_array()
        })
        .await;
        assert!(rejected, "p was not tried while node-a was busy");
        assert_eq!(fake.node_of("default", "p"), None);
        // node-a goes idle: its 5-minute mean falls under 65 % within seconds.
        ka.set_node(0.0, 2.0 * GI);
        within(wait_s, || fake.node_of("default", "p").is_some()).await;
        let node = fake.node_of("default", "p");
        s.stop().await;
        node
    }
    assert_eq!(run(0, 20.0).await.as_deref(), Some("node-a"));
    assert_eq!(run(86_400, 12.0).await, None);
}
