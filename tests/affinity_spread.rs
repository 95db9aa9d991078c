//! InterPodAffinity and PodTopologySpread against real kube-scheduler v1.36 decisions.
//!
//! Reads the recorded cases (default `/work/shared/kube-scheduler-cases`, or
//! `$HEADROOM_CASES`; the test is a no-op when the directory is absent) and checks, per case
//! and per plugin:
//! - no node kube-scheduler found feasible (scored, or chosen) is rejected by the plugin;
//! - for unplaced pods, the plugin rejects at least as many nodes with each of its reasons as
//!   the FailedScheduling summary counts (other filters run first upstream, so it may reject
//!   more);
//! - over the nodes kube-scheduler scored, the plugin's PreScore skips exactly when the plugin
//!   is absent from `plugin_scores`, and otherwise its normalized score × 2 equals upstream's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use headroom::framework::{CycleState, Registered};
use headroom::plugins::inter_pod_affinity::{self, InterPodAffinity, InterPodAffinityArgs};
use headroom::plugins::pod_topology_spread::{self, PodTopologySpread, PodTopologySpreadArgs};
use headroom::snapshot::{NodeIdx, PodInfo, Snapshot};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

const WEIGHT: i64 = 2;

fn cases_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("HEADROOM_CASES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/shared/kube-scheduler-cases"));
    dir.is_dir().then_some(dir)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn load(dir: &Path) -> (Snapshot, PodInfo, Value) {
    let cluster = read_json(&dir.join("cluster.yaml"));
    let mut nodes: Vec<Node> = Vec::new();
    let mut pods: Vec<Pod> = Vec::new();
    for item in cluster["items"].as_array().unwrap() {
        match item["kind"].as_str() {
            Some("Node") => nodes.push(serde_json::from_value(item.clone()).unwrap()),
            Some("Pod") => pods.push(serde_json::from_value(item.clone()).unwrap()),
            _ => {}
        }
    }
    let pod: Pod = serde_json::from_value(read_json(&dir.join("pod.yaml"))).unwrap();
    (
        Snapshot::build(nodes, pods),
        PodInfo::new(Arc::new(pod)),
        read_json(&dir.join("expect.json")),
    )
}

/// `"0/4 nodes are available: 2 node(s) didn't match ..., 1 ... ."` → reason → count.
fn summary_counts(message: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let Some(rest) = message.split(" nodes are available: ").nth(1) else {
        return out;
    };
    let summary = rest
        .split(" no new claims to deallocate")
        .next()
        .unwrap()
        .split(" preemption:")
        .next()
        .unwrap()
        .trim_end()
        .trim_end_matches('.');
    for part in summary.split(", ") {
        if let Some((n, reason)) = part.split_once(' ')
            && let Ok(n) = n.parse::<usize>()
        {
            out.insert(reason.to_string(), n);
        }
    }
    out
}

struct Outcome {
    rejected: BTreeMap<String, String>,
    scores: Option<BTreeMap<String, i64>>,
}

fn run(r: &Registered, snapshot: &Snapshot, pod: &PodInfo, scored: &[NodeIdx]) -> Outcome {
    let mut state = CycleState::new(false);
    let (s, _) = r
        .pre_filter
        .as_ref()
        .unwrap()
        .pre_filter(&mut state, pod, snapshot);
    assert!(s.is_success() || s.is_skip(), "{s}");
    let mut rejected = BTreeMap::new();
    if s.is_success() {
        let f = r.filter.as_ref().unwrap();
        for n in snapshot.nodes() {
            let st = f.filter(&state, pod, n);
            if !st.is_success() {
                rejected.insert(n.name.to_string(), st.message());
            }
        }
    }
    let mut scores = None;
    if scored.len() > 1 {
        let ps = r
            .pre_score
            .as_ref()
            .unwrap()
            .pre_score(&mut state, pod, snapshot, scored);
        if !ps.is_skip() {
            let sp = r.score.as_ref().unwrap();
            let mut raw: Vec<i64> = scored
                .iter()
                .map(|i| sp.score(&state, pod, snapshot.node(*i)).unwrap())
                .collect();
            assert!(sp.normalize(&state, pod, &mut raw).is_success());
            scores = Some(
                scored
                    .iter()
                    .zip(raw)
                    .map(|(i, s)| (snapshot.node(*i).name.to_string(), s * WEIGHT))
                    .collect(),
            );
        }
    }
    Outcome { rejected, scores }
}

#[test]
fn agrees_with_recorded_kube_scheduler_decisions() {
    let Some(dir) = cases_dir() else {
        eprintln!("no recorded cases found; skipping");
        return;
    };
    let plugins = [
        (
            inter_pod_affinity::NAME,
            InterPodAffinity::new(InterPodAffinityArgs::default()).register(),
            [
                inter_pod_affinity::ERR_REASON_AFFINITY_RULES_NOT_MATCH,
                inter_pod_affinity::ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
                inter_pod_affinity::ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
            ]
            .as_slice(),
        ),
        (
            pod_topology_spread::NAME,
            PodTopologySpread::new(PodTopologySpreadArgs::default()).register(),
            [
                pod_topology_spread::ERR_REASON_CONSTRAINTS_NOT_MATCH,
                pod_topology_spread::ERR_REASON_NODE_LABEL_NOT_MATCH,
            ]
            .as_slice(),
        ),
    ];
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expect.json").is_file())
        .collect();
    entries.sort();
    let mut failures = Vec::new();
    let mut checked_scores = 0;
    for case in &entries {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let (snapshot, pod, expect) = load(case);
        let plugin_scores = expect["plugin_scores"].as_object();
        let mut scored: Vec<NodeIdx> = plugin_scores
            .map(|m| m.keys().filter_map(|n| snapshot.index_of(n)).collect())
            .unwrap_or_default();
        scored.sort_unstable();
        let summary = summary_counts(expect["message"].as_str().unwrap_or(""));
        for (pname, reg, reasons) in &plugins {
            let out = run(reg, &snapshot, &pod, &scored);
            // Feasible upstream ⇒ feasible here.
            let names = snapshot.names();
            let mut feasible: Vec<&str> = scored.iter().map(|i| &*names[*i as usize]).collect();
            if let Some(node) = expect["node"].as_str() {
                feasible.push(node);
            }
            for n in &feasible {
                if let Some(reason) = out.rejected.get(*n) {
                    failures.push(format!("{name} {pname}: rejects feasible {n}: {reason}"));
                }
            }
            // Unplaced: at least as many rejections per reason as the summary counts.
            for reason in reasons.iter() {
                let want = summary.get(*reason).copied().unwrap_or(0);
                let got = out.rejected.values().filter(|r| r == reason).count();
                if got < want {
                    failures.push(format!(
                        "{name} {pname}: {got} node(s) rejected with {reason:?}, summary says {want}"
                    ));
                }
            }
            // Scores over upstream's scored nodes.
            if let Some(ps) = plugin_scores {
                let upstream: Option<BTreeMap<String, i64>> = ps
                    .iter()
                    .map(|(n, m)| {
                        m.get(*pname)
                            .and_then(Value::as_i64)
                            .map(|s| (n.clone(), s))
                    })
                    .collect();
                let any = ps.values().any(|m| m.get(*pname).is_some());
                let upstream = if any { upstream } else { None };
                if out.scores != upstream {
                    failures.push(format!(
                        "{name} {pname}: scores {:?}, upstream {:?}",
                        out.scores, upstream
                    ));
                } else if upstream.is_some() {
                    checked_scores += 1;
                }
            }
        }
    }
    eprintln!(
        "{} cases, {checked_scores} plugin score columns compared",
        entries.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn summary_parsing() {
    let m = summary_counts(
        "0/4 nodes are available: 2 node(s) didn't match pod affinity rules, 2 node(s) had untolerated taint(s). no new claims to deallocate, preemption: x",
    );
    assert_eq!(m.get("node(s) didn't match pod affinity rules"), Some(&2));
    assert_eq!(m.get("node(s) had untolerated taint(s)"), Some(&2));
}

/// Timing probe for the 5,000 nodes × 30 pods target (run with `--release --ignored`): a pod
/// with one required anti-affinity term through both plugins' PreFilter, Filter (every node),
/// PreScore and Score.
#[test]
#[ignore]
fn timing_anti_affinity_5000_nodes_30_pods() {
    use serde_json::json;
    let nodes: Vec<Node> = (0..5000)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("n{i}"), "labels": {
                    "kubernetes.io/hostname": format!("n{i}"),
                    "topology.kubernetes.io/zone": format!("z{}", i % 3)}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}
            }))
            .unwrap()
        })
        .collect();
    let pods: Vec<Pod> = (0..150_000)
        .map(|i| {
            let mut spec = json!({"nodeName": format!("n{}", i % 5000), "containers": [{"name": "c"}]});
            if i % 100 == 0 {
                spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": format!("a{}", i % 500)}},
                     "topologyKey": "kubernetes.io/hostname"}]}});
            }
            serde_json::from_value(json!({
                "metadata": {"name": format!("p{i}"), "namespace": "default", "uid": format!("u{i}"),
                             "labels": {"app": format!("a{}", i % 500), "team": format!("t{}", i % 20)}},
                "spec": spec
            }))
            .unwrap()
        })
        .collect();
    let snapshot = Snapshot::build(nodes, pods);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "new", "namespace": "default", "labels": {"app": "a7"}},
        "spec": {"containers": [{"name": "c"}], "affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a7"}}, "topologyKey": "kubernetes.io/hostname"}]}}}
    }))
    .unwrap();
    let pod = PodInfo::new(Arc::new(pod));
    let plugins = [
        InterPodAffinity::new(InterPodAffinityArgs::default()).register(),
        PodTopologySpread::new(PodTopologySpreadArgs::default()).register(),
    ];
    let all: Vec<NodeIdx> = (0..snapshot.len() as NodeIdx).collect();
    let rounds = 50u32;
    let mut phases = [std::time::Duration::ZERO; 3];
    let mut rejected = 0;
    for _ in 0..rounds {
        for r in &plugins {
            let t0 = std::time::Instant::now();
            let mut state = CycleState::new(false);
            let (s, _) = r
                .pre_filter
                .as_ref()
                .unwrap()
                .pre_filter(&mut state, &pod, &snapshot);
            let t1 = std::time::Instant::now();
            if s.is_success() {
                let f = r.filter.as_ref().unwrap();
                for n in snapshot.nodes() {
                    rejected += usize::from(!f.filter(&state, &pod, n).is_success());
                }
            }
            let t2 = std::time::Instant::now();
            if !r
                .pre_score
                .as_ref()
                .unwrap()
                .pre_score(&mut state, &pod, &snapshot, &all)
                .is_skip()
            {
                let sp = r.score.as_ref().unwrap();
                let mut raw: Vec<i64> = all
                    .iter()
                    .map(|i| sp.score(&state, &pod, snapshot.node(*i)).unwrap())
                    .collect();
                assert!(sp.normalize(&state, &pod, &mut raw).is_success());
            }
            let t3 = std::time::Instant::now();
            phases[0] += t1 - t0;
            phases[1] += t2 - t1;
            phases[2] += t3 - t2;
        }
    }
    let [pf, f, sc] = phases.map(|d| d / rounds);
    eprintln!(
        "per pod: prefilter {pf:?}, filter (5000 nodes) {f:?}, prescore+score {sc:?}, total {:?}; {} rejections per round",
        pf + f + sc,
        rejected / rounds as usize
    );
}
