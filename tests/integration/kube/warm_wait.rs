//! The warm wait (`usage.warmWait`) under `serve`: a returning builder whose warm node is
//! busy waits for it, within the queue's own tail, when its runs say a warm cache saves
//! more than the wait; with the warm wait off it goes cold at once.

use std::time::{Duration, Instant};

use headroom_storage::{RunRecord, Store, StoreConfig, UsageSummary};
use serde_json::{Value, json};

use super::fake::Fake;
use super::kubelet::{FakeKubelet, collectors_yaml};
use super::sections::{SERVE_BASE, config, get_json, start, within};
use super::{events_for, namespace, node};

const GI: f64 = (1u64 << 30) as f64;

/// A pod `name` of `builder` (the `headroom.io/builder` annotation) requesting `cpu`;
/// bound to `node` and started `started_s_ago` when given, else pending for headroom.
pub(super) fn build(name: &str, builder: &str, cpu: &str, on: Option<(&str, i64)>) -> Value {
    let mut p = json!({"metadata": {"name": name, "namespace": "default",
            "annotations": {"headroom.io/builder": builder}},
        "spec": {"schedulerName": "headroom", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
        "status": {"phase": "Pending"}});
    if let Some((node, ago)) = on {
        p["spec"]["nodeName"] = json!(node);
        p["status"] = json!({"phase": "Running",
            "startTime": headroom::kube::rfc3339(headroom::kube::now_ms() - ago * 1000)});
    }
    p
}

/// A store holding runs of builder `b` (cold runs of 600 s and, with `b_warm`, warm ones of
/// 300 s: a warm cache saves 300 s) and of builder `c` (a cold run of 600 s, a warm one of
/// 300 s), and `b`'s placement history: `history`, most recent first.
fn store_with_runs(history: &[&str], b_warm: bool) -> Store {
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let now = headroom::kube::now_ms();
    let s = UsageSummary {
        mean: 0.2,
        p95: 0.3,
        max: 0.4,
    };
    let m = UsageSummary {
        mean: 0.2 * GI,
        p95: 0.25 * GI,
        max: 0.3 * GI,
    };
    let put = |builder: &str, uid: &str, node: &str, start_h: i64, len_s: i64| {
        let start_ms = now - start_h * 3_600_000;
        let run = RunRecord {
            pod_uid: uid.into(),
            node: node.into(),
            start_ms,
            end_ms: start_ms + len_s * 1000,
            cpu: s,
            memory: m,
        };
        store.put_run(builder, &run).unwrap();
    };
    // b: cold on node-z, cold on node-a, then (b_warm) warm on node-a twice.
    put("b", "b1", "node-z", 8, 600);
    put("b", "b2", "node-a", 6, 600);
    if b_warm {
        put("b", "b3", "node-a", 4, 300);
        put("b", "b4", "node-a", 2, 300);
    }
    put("c", "c1", "node-a", 5, 600);
    put("c", "c2", "node-a", 3, 300);
    for node in history.iter().rev() {
        store
            .record_placement("b", node, headroom_scheduler::clock::Clock::wall().now_ms())
            .unwrap();
    }
    store.flush().unwrap();
    store
}

/// Two 4-CPU nodes. node-a runs `r` of builder `c` (3.5 CPU), started 295 s ago: its
/// warm runs take 300 s, so it is expected to end any moment. The queue first gets a tail:
/// `w1`–`w4` (10m each) placed at once, `slow1`–`slow3` (900m each) only after `k` (3.5
/// CPU on node-b) is deleted 8 s later: p99 − p50 of the waits is 8 s, and three pods of
/// seven waited, room above the p99 for two held ones. Then `p` of builder `b` (1 CPU,
/// history node-a) arrives: only node-b fits. Returns the fake, the running serve, and
/// where `p` was bound at once, if it was. `b`'s history is `history` (most recent first).
async fn scene(
    section: &str,
    history: &[&str],
) -> (Fake, super::Running, Option<String>, Vec<FakeKubelet>) {
    scene_with(section, history, true, 3).await
}

/// [`scene`], where `b` has warm runs only when `b_warm`, and `slow` pods wait the 8 s
/// (room above the p99 for `slow − 1` held ones).
async fn scene_with(
    section: &str,
    history: &[&str],
    b_warm: bool,
    slow: usize,
) -> (Fake, super::Running, Option<String>, Vec<FakeKubelet>) {
    let fake = Fake::start().await;
    let ka = FakeKubelet::start("node-a", 0.5, GI).await;
    let kb = FakeKubelet::start("node-b", 0.5, GI).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    fake.put("pods", build("r", "c", "3500m", Some(("node-a", 295))));
    fake.put("pods", build("k", "k", "3500m", Some(("node-b", 10))));
    let base = format!(
        "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
        collectors_yaml(&[("node-a", &ka), ("node-b", &kb)])
    );
    let s = start(
        &fake,
        config(&base, section),
        Some(store_with_runs(history, b_warm)),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    // The builders' profiles, with their run lengths, reach the view and /builders.
    loop {
        let b = get_json(&s.url("/builders/b")).await;
        let c = get_json(&s.url("/builders/c")).await;
        if b["profile"]["cold_run_s"].is_number() && c["profile"]["warm_run_s"].is_number() {
            assert_eq!(b["profile"]["cold_run_s"], json!(600.0), "{b}");
            let warm = if b_warm { json!(300.0) } else { Value::Null };
            assert_eq!(b["profile"]["warm_run_s"], warm, "{b}");
            break;
        }
        assert!(Instant::now() < deadline, "no profile for b: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The queue's tail: four pods at once, `slow` after 8 s.
    const AT_ONCE: [&str; 4] = ["w1", "w2", "w3", "w4"];
    let slow: Vec<String> = (1..=slow).map(|i| format!("slow{i}")).collect();
    let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
    for w in AT_ONCE {
        fake.put("pods", build(w, w, "10m", None));
    }
    for &w in &slow {
        fake.put("pods", build(w, w, "900m", None));
    }
    let bound = |f: &Fake, p: &str| f.node_of("default", p).is_some();
    assert!(
        within(10.0, || AT_ONCE.iter().all(|w| bound(&fake, w))).await,
        "w1–w4 not bound"
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!bound(&fake, "slow1"), "slow1 bound with no room");
    fake.delete("pods", "default", "k");
    assert!(
        within(10.0, || slow.iter().all(|w| bound(&fake, w))).await,
        "the slow pods not bound"
    );
    fake.put("pods", build("p", "b", "1", None));
    let decided = within(10.0, || {
        bound(&fake, "p") || !events_for(&fake, "p", "FailedScheduling").is_empty()
    })
    .await;
    assert!(decided, "no decision for p");
    let at_once = fake.node_of("default", "p");
    (fake, s, at_once, vec![ka, kb])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_builder_waits_for_its_warm_node_under_serve() {
    let (fake, s, at_once, _kubelets) = scene("", &["node-a"]).await;
    assert_eq!(at_once, None, "p was placed cold");
    let failed = events_for(&fake, "p", "FailedScheduling")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(failed.contains("usage.warmWait"), "{failed}");
    let e = get_json(&s.url("/explain/default/p")).await;
    let notes = e["notes"].to_string();
    assert!(
        notes.contains("held for its build cache: node node-a expected to free in")
            && notes.contains("a warm cache saves 5m")
            && notes.contains("of the queue's tail 8s"),
        "{e}"
    );
    let metrics = get_json(&s.url("/metrics")).await;
    assert!(
        metrics
            .as_str()
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("headroom_scheduler_warm_holds_total ") && !l.ends_with(" 0")),
        "no warm hold counted"
    );
    r_ends_and_p_goes_warm(&fake).await;
    s.stop().await;
}

/// `r` ends: the held `p` goes to its warm node, node-a.
async fn r_ends_and_p_goes_warm(fake: &Fake) {
    fake.delete("pods", "default", "r");
    assert!(
        within(10.0, || fake.node_of("default", "p").is_some()).await,
        "p not bound after r ended"
    );
    assert_eq!(fake.node_of("default", "p").as_deref(), Some("node-a"));
}

/// The build expected to end on node-a frees room for one build: while `p` waits for it,
/// `p2` of the same builder (600m: node-a's 0.5 CPU cannot take it, node-b's can) is not
/// held for node-a too (the tail has room for a second hold) but placed cold at once;
/// when `r` ends, `p` gets node-a.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_build_is_not_held_for_a_node_another_already_awaits_under_serve() {
    let (fake, s, at_once, _kubelets) = scene("", &["node-a"]).await;
    assert_eq!(at_once, None, "p was placed cold");
    fake.put("pods", build("p2", "b", "600m", None));
    assert!(
        within(10.0, || fake.node_of("default", "p2").is_some()).await,
        "p2 not bound: held for node-a, which p already awaits? {}",
        get_json(&s.url("/explain/default/p2")).await
    );
    assert_eq!(fake.node_of("default", "p2").as_deref(), Some("node-b"));
    // At once: a hold, even one released at the tail, leaves a FailedScheduling event.
    assert!(
        events_for(&fake, "p2", "FailedScheduling").is_empty(),
        "p2 was held"
    );
    assert_eq!(fake.node_of("default", "p"), None, "p no longer waits");
    r_ends_and_p_goes_warm(&fake).await;
    s.stop().await;
}

/// `b` has run only on nodes new to it: no warm run length of its own. The cluster's
/// other builder with both (`c`: 600 s cold, 300 s warm) says a warm cache leaves half a
/// run, so `b`'s is expected to save 300 s of its 600 s, and `p` waits for node-a as in
/// [`a_returning_builder_waits_for_its_warm_node_under_serve`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builder_with_no_warm_run_yet_waits_by_the_clusters_warm_ratio_under_serve() {
    let (_fake, s, at_once, _kubelets) = scene_with("", &["node-a"], false, 3).await;
    assert_eq!(at_once, None, "p was placed cold");
    let e = get_json(&s.url("/explain/default/p")).await;
    assert!(
        e["notes"].to_string().contains("a warm cache saves 5m"),
        "{e}"
    );
    s.stop().await;
}

/// A held build placed within the window's p99 gives its room back: its wait cannot raise
/// the p99. With two pods of six waiting 8 s, the tail has room above the p99 for one
/// held pod; `p` takes it, and is placed on node-a a second or two later, when `r` ends.
/// Then `r2` of `c` (2.5 CPU, also expected to end any moment) runs on node-a beside `p`,
/// and `p2` of `b` (1 CPU) arrives: only node-b fits, and `p2` is held for node-a too,
/// on the room `p` gave back (were `p` still counted, `p2` would go cold to node-b at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_placed_within_the_p99_gives_its_room_back_under_serve() {
    let (fake, s, at_once, _kubelets) = scene_with("", &["node-a"], true, 2).await;
    assert_eq!(at_once, None, "p was placed cold");
    r_ends_and_p_goes_warm(&fake).await;
    fake.put("pods", build("r2", "c", "2500m", Some(("node-a", 295))));
    // r2 reaches the scheduler's cache before p2 arrives (else p2 would fit node-a).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = get_json(&s.url("/nodes/node-a")).await;
        if n["requested"]["cpuCores"]
            .as_f64()
            .is_some_and(|c| c >= 3.5)
        {
            break;
        }
        assert!(Instant::now() < deadline, "r2 not on node-a: {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fake.put("pods", build("p2", "b", "1", None));
    let held = within(10.0, || {
        !events_for(&fake, "p2", "FailedScheduling").is_empty()
            || fake.node_of("default", "p2").is_some()
    })
    .await;
    assert!(held, "no decision for p2");
    assert_eq!(
        fake.node_of("default", "p2"),
        None,
        "p2 placed cold at once: p's room was not given back; {}",
        get_json(&s.url("/explain/default/p2")).await
    );
    let failed = events_for(&fake, "p2", "FailedScheduling")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(failed.contains("usage.warmWait"), "{failed}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_warm_wait_the_builder_goes_cold_at_once_under_serve() {
    let (_fake, s, at_once, _kubelets) =
        scene("usage: {warmWait: {enabled: false}}\n", &["node-a"]).await;
    assert_eq!(at_once.as_deref(), Some("node-b"));
    s.stop().await;
}

/// The warm wait waits only for the warm nodes History scores. node-a is second in `b`'s
/// history (node-z, gone, is first): with `olderScore` at its default every history node
/// scores and `p` is held for node-a; with `scores: [60], olderScore: 0` only the first
/// entry scores, so placing `p` on node-a after a wait would not be History's choice
/// either, and `p` goes cold to node-b at once. node-b is `p`'s only feasible node, so
/// the cycle skips scoring and the scheduler runs History's PreScore for the warm nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_wait_holds_only_for_warm_nodes_history_scores_under_serve() {
    let history = ["node-z", "node-a"];
    let (_fake, s, at_once, _kubelets) = scene("", &history).await;
    assert_eq!(at_once, None, "p was placed cold with node-a scored");
    s.stop().await;
    let section = "profiles: [{schedulerName: headroom, pluginArgs: {history: {scores: [60], olderScore: 0}}}]\n";
    let (_fake, s, at_once, _kubelets) = scene(section, &history).await;
    assert_eq!(at_once.as_deref(), Some("node-b"));
    s.stop().await;
}
