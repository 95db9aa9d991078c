//! RealHeadroom's `keepWhole` under `serve`: while a build that needs most of a node runs,
//! a small build keeps off the nodes with the most free memory, as many as the big builds'
//! arrivals over the small builds' run length need. Usage comes from a fake kubelet per
//! node, the profiles from runs in the store, through the collectors and analytics.

use std::time::{Duration, Instant};

use headroom_storage::{RunRecord, Store, StoreConfig, UsageSummary};

use super::fake::Fake;
use super::kubelet::{FakeKubelet, collectors_yaml};
use super::sections::{SERVE_BASE, config, get_json, start};
use super::warm_wait::build;
use super::{namespace, node};

const GI: f64 = (1u64 << 30) as f64;

/// A store with four runs of `big` (10 GiB, an hour each) and of `small` (0.5 GiB, ten
/// minutes each), all on a node that is gone (no cache anywhere).
fn store_with_profiles() -> Store {
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let now = headroom::kube::now_ms();
    let flat = |v: f64| UsageSummary {
        mean: v,
        p95: v,
        max: v,
    };
    for (builder, memory, len_s) in [("big", 10.0 * GI, 3600), ("small", 0.5 * GI, 600)] {
        for i in 0..4 {
            let start_ms = now - (8 - i) * 3_600_000;
            let run = RunRecord {
                pod_uid: format!("{builder}-{i}"),
                node: "node-z".into(),
                start_ms,
                end_ms: start_ms + len_s * 1000,
                cpu: flat(0.5),
                memory: flat(memory),
            };
            store.put_run(builder, &run).unwrap();
        }
    }
    store.flush().unwrap();
    store
}

/// Five 4-CPU / 16 GiB nodes: `big-1` (1 CPU requested, 10 GiB by its profile) runs on
/// node-big (12 GiB in use) and `small-1` on node-1 (5 GiB); node-2, -3 and -4 have 1,
/// 1.5 and 2 GiB in use. One big build of an hour and small ones of ten minutes: ⌈1/6⌉
/// big build arrives while a node empties, plus two spare, so three nodes are kept whole.
/// Returns where `s` (of builder `small`) was bound under `section`, and its `/explain`.
async fn place_small(section: &str) -> (String, String) {
    let fake = Fake::start().await;
    let used = [
        ("node-big", 12.0),
        ("node-1", 5.0),
        ("node-2", 1.0),
        ("node-3", 1.5),
        ("node-4", 2.0),
    ];
    let mut kubelets = Vec::new();
    for (n, gib) in used {
        kubelets.push((n, FakeKubelet::start(n, 0.5, gib * GI).await));
        fake.put("nodes", node(n, "4"));
    }
    fake.put("namespaces", namespace("default"));
    fake.put("pods", build("big-1", "big", "1", Some(("node-big", 60))));
    fake.put("pods", build("small-1", "small", "1", Some(("node-1", 60))));
    let refs: Vec<(&str, &FakeKubelet)> = kubelets.iter().map(|(n, k)| (*n, k)).collect();
    let base = format!(
        "{SERVE_BASE}  detailedExplanations: true\nanalytics: {{refreshInterval: 1s}}\n{}",
        collectors_yaml(&refs)
    );
    let s = start(&fake, config(&base, section), Some(store_with_profiles())).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    for (n, _) in used {
        while get_json(&s.url(&format!("/nodes/{n}"))).await["headroom"]["basis"] != "measured" {
            assert!(Instant::now() < deadline, "no usage for {n}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for b in ["big", "small"] {
        while !get_json(&s.url(&format!("/builders/{b}"))).await["profile"]["cold_run_s"]
            .is_number()
        {
            assert!(Instant::now() < deadline, "no profile for {b}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // One more refresh: the view the profiles arrived in was derived on the running pods.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    fake.put("pods", build("s", "small", "100m", None));
    fake.wait_for(15, "s bound", |f| f.node_of("default", "s").is_some())
        .await;
    let explain = get_json(&s.url("/explain/default/s")).await.to_string();
    s.stop().await;
    (fake.node_of("default", "s").unwrap(), explain)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_whole_keeps_the_emptiest_nodes_for_big_builds_under_serve() {
    // Kept whole: node-2, -3 and -4; node-1 has more room than node-big.
    let (kept, explain) = place_small("").await;
    assert_eq!(kept, "node-1", "{explain}");
    assert!(
        explain.contains("kept whole: 0, one of the 3 feasible nodes with the most free memory"),
        "{explain}"
    );
    // Off: spread takes the emptiest node.
    let (spread, explain) = place_small(
        "profiles: [{schedulerName: headroom, pluginArgs: {realHeadroom: {keepWhole: false}}}]\n",
    )
    .await;
    assert_eq!(spread, "node-2", "{explain}");
    assert!(!explain.contains("kept whole"), "{explain}");
}
