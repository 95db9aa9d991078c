//! What a recent placement still adds, as `/explain` shows it under `serve` (issue #72):
//! a build placed a moment ago and already measured by its node's kubelet counts only the
//! part of its prediction its pod does not use yet; the pod just placed, not yet in any
//! sample, counts whole; a build that ended counts nothing, and what it used comes off its
//! node's window.

use std::time::Duration;

use serde_json::Value;

use super::engine::get_text;
use super::fake::Fake;
use super::kubelet::{FakeKubelet, PodStats, collectors_yaml};
use super::sections::{SERVE_BASE, config, get_json, start, until_measured};
use super::warm_wait::build;
use super::{namespace, node};

const MI: f64 = (1u64 << 20) as f64;

fn entry<'a>(recent: &'a [Value], pod: &str) -> &'a Value {
    recent
        .iter()
        .find(|r| r["pod"] == pod)
        .unwrap_or_else(|| panic!("{pod} not among {recent:?}"))
}

/// Places build `name` (builder `builder`) and waits for its bind.
async fn place(fake: &Fake, name: &str, builder: &str) {
    fake.put("pods", build(name, builder, "100m", None));
    fake.wait_for(15, "bound", |f| f.node_of("default", name).is_some())
        .await;
}

/// A fake API server with one 4-CPU node, `node-a`, its fake kubelet at 1 GiB, and `serve`
/// with `analytics: {ANALYTICS}` reading it, the node measured.
async fn setup(analytics: &str) -> (Fake, FakeKubelet, super::Running) {
    let fake = Fake::start().await;
    let k = FakeKubelet::start("node-a", 0.5, 1024.0 * MI).await;
    fake.put("nodes", node("node-a", "4"));
    fake.put("namespaces", namespace("default"));
    let base = format!(
        "{SERVE_BASE}analytics: {{{analytics}}}\nusage: {{warmup: 10m}}\n{}",
        collectors_yaml(&[("node-a", &k)])
    );
    let s = start(&fake, config(&base, ""), None).await;
    until_measured(&s, &["node-a"]).await;
    (fake, k, s)
}

/// The chosen node's measured memory in a decision, bytes: what it believed in use less
/// what its recent placements added.
fn measured_memory(explain: &Value) -> f64 {
    let chosen = &explain["inputs"]["chosenNode"];
    let counted: f64 = chosen["recent"]
        .as_array()
        .unwrap_or_else(|| panic!("no recent placements: {explain}"))
        .iter()
        .map(|r| r["countedMemoryBytes"].as_f64().unwrap())
        .sum();
    chosen["headroom"]["memoryUsed"].as_f64().unwrap() - counted
}

/// The kubelet's stats of pod `default/name` (its uid from the API server).
fn stats_of(fake: &Fake, name: &str, memory: f64) -> PodStats {
    let uid = fake.get("pods", "default", name).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    PodStats {
        namespace: "default".into(),
        name: name.into(),
        uid,
        cpu: 0.1,
        memory,
    }
}

/// Three polls of the kubelet after a change, then two refreshes of the usage view.
async fn sampled(fake: &Fake, k: &FakeKubelet) {
    let polled = k.polls();
    fake.wait_for(15, "three polls", |_| k.polls() >= polled + 3)
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_what_each_recent_placement_still_adds_under_serve() {
    let (fake, k, s) = setup("refreshInterval: 1s").await;
    place(&fake, "first", "b1").await;
    // The kubelet now reports the first build using 64 MiB (of its 256Mi request).
    k.set_node(0.6, 1088.0 * MI);
    k.set_pods(vec![stats_of(&fake, "first", 64.0 * MI)]);
    sampled(&fake, &k).await;

    place(&fake, "second", "b2").await;
    let explain = get_json(&s.url("/explain/default/second")).await;
    let text = get_text(&s.url("/explain/default/second?format=text")).await;
    // The first build ends: the kubelet no longer reports it, the node is back at 1 GiB,
    // and the node's window still holds the 1088 MiB it showed with the build.
    k.set_node(0.5, 1024.0 * MI);
    k.set_pods(Vec::new());
    sampled(&fake, &k).await;
    // Its pod ends: its placement stops counting at once, and its last sample comes off
    // the node's window.
    let mut done = fake.get("pods", "default", "first").unwrap();
    done["status"]["phase"] = "Succeeded".into();
    fake.put("pods", done);
    let gone = fake.get("pods", "default", "first").unwrap();
    assert_eq!(gone["status"]["phase"], "Succeeded");
    tokio::time::sleep(Duration::from_millis(300)).await;
    place(&fake, "third", "b3").await;
    let third = get_json(&s.url("/explain/default/third")).await;
    s.stop().await;
    let after: Vec<&Value> = third["inputs"]["chosenNode"]["recent"]
        .as_array()
        .unwrap_or_else(|| panic!("no recent placements: {third}"))
        .iter()
        .map(|r| &r["pod"])
        .collect();
    assert_eq!(after, ["default/third", "default/second"], "{third}");
    // Measured: the node's 1 GiB now, not the window's 1088 MiB with the ended build.
    let chosen = &third["inputs"]["chosenNode"];
    let measured = measured_memory(&third);
    assert!(
        (measured - 1024.0 * MI).abs() < 1.0,
        "measured {} MiB: {third}",
        measured / MI
    );
    assert_eq!(
        chosen["usage"]["memory_working_set_bytes"]["windowed"].as_f64(),
        Some(1088.0 * MI),
        "{third}"
    );

    let recent = explain["inputs"]["chosenNode"]["recent"]
        .as_array()
        .unwrap_or_else(|| panic!("no recent placements: {explain}"));
    assert_eq!(recent.len(), 2, "{explain}");
    // Newest first: the decided pod itself, after every sample, counted whole.
    assert_eq!(recent[0]["pod"], "default/second", "{explain}");
    let second = entry(recent, "default/second");
    assert!(second["measuredMemoryBytes"].is_null(), "{explain}");
    assert_eq!(
        second["countedMemoryBytes"], second["predictedMemoryBytes"],
        "{explain}"
    );
    // The first build: measured, so it adds its prediction less what it uses, in the share
    // of the ten-minute warm-up still left (a few seconds gone).
    let first = entry(recent, "default/first");
    let f = |k: &str| first[k].as_f64().unwrap_or(f64::NAN);
    assert_eq!(f("measuredMemoryBytes"), 64.0 * MI, "{explain}");
    assert!(f("predictedMemoryBytes") >= 128.0 * MI, "{explain}");
    let left = f("predictedMemoryBytes") - f("measuredMemoryBytes");
    let counted = f("countedMemoryBytes");
    assert!(
        counted <= left + 1.0 && counted >= 0.9 * left,
        "counted {counted}, left {left}: {explain}"
    );
    assert!(f("placedSecondsAgo") > 1.0 && f("placedSecondsAgo") < 60.0);
    assert!(
        text.contains("default/first, memory predicted")
            && text.contains("measured 67108864")
            && text.contains("default/second")
            && text.contains("not measured yet"),
        "{text}"
    );
}

/// The age of `serve`'s usage view, from `/metrics`.
async fn view_age(s: &super::Running) -> f64 {
    let metrics = get_text(&s.url("/metrics")).await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("headroom_usage_view_age_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::INFINITY)
}

/// A build that ends between two usage views (its last samples polled after the view the
/// scheduler holds, as on the kit, where views come every 15 s and a pod's end within a
/// second) comes off its node's window once the next view has those samples: a departure
/// is judged by when the pod left, not by the newest sample of the view it left in (which
/// dropped it at the next view).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_ending_between_views_comes_off_its_nodes_window_under_serve() {
    let (fake, k, s) = setup("refreshInterval: 4s").await;
    place(&fake, "first", "b1").await;
    // The build holds 512 MiB (the pod first, so no poll sees the node without it).
    k.set_pods(vec![stats_of(&fake, "first", 512.0 * MI)]);
    k.set_node(0.6, 1536.0 * MI);
    tokio::time::sleep(Duration::from_secs(9)).await;
    // Just after a view, two more polls: the view the scheduler holds lacks them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while view_age(&s).await > 0.5 {
        assert!(tokio::time::Instant::now() < deadline, "no fresh view");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let polled = k.polls();
    fake.wait_for(5, "two polls", |_| k.polls() >= polled + 2)
        .await;
    // The build ends: its node drops back, the kubelet stops reporting it, and its phase
    // reaches the scheduler at once, before the next view.
    k.set_node(0.5, 1024.0 * MI);
    k.set_pods(Vec::new());
    let mut done = fake.get("pods", "default", "first").unwrap();
    done["status"]["phase"] = "Succeeded".into();
    fake.put("pods", done);
    assert!(
        view_age(&s).await < 3.5,
        "the next view came before the end"
    );
    // Two views later the build comes off the window they still hold it in.
    tokio::time::sleep(Duration::from_secs(9)).await;
    place(&fake, "second", "b2").await;
    let explain = get_json(&s.url("/explain/default/second")).await;
    let text = get_text(&s.url("/explain/default/second?format=text")).await;
    s.stop().await;
    let chosen = &explain["inputs"]["chosenNode"];
    // /explain names the build that came off, and the node's memory without it.
    assert_eq!(chosen["departed"][0]["pod"], "default/first", "{explain}");
    assert!(
        (chosen["withoutDeparted"][1].as_f64().unwrap_or(f64::NAN) - 1024.0 * MI).abs() < 1.0,
        "{explain}"
    );
    assert!(
        text.contains("without the pods that left it: memory 1073741824 bytes")
            && text.contains(" s ago: default/first"),
        "{text}"
    );
    let measured = measured_memory(&explain);
    assert_eq!(
        chosen["usage"]["memory_working_set_bytes"]["windowed"].as_f64(),
        Some(1536.0 * MI),
        "the window still holds the build: {explain}"
    );
    assert!(
        (measured - 1024.0 * MI).abs() < 1.0,
        "measured {} MiB, the node without the build 1024: {explain}",
        measured / MI
    );
}

/// A kubelet stamps its node's root cgroup before the containers of the same summary, so
/// the node's first sample in the window precedes its pods' first ones there: a build that
/// left must still come off that sample (by its sample before the window), or the window's
/// p95 keeps it whole. Three decisions after the build ended, each on a view of its own,
/// all see the node without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_left_comes_off_the_windows_first_sample_under_serve() {
    let (fake, k, s) = setup("refreshInterval: 1s, nodeWindow: 6s").await;
    k.set_node_lag_ms(100);
    place(&fake, "build", "b1").await;
    k.set_pods(vec![stats_of(&fake, "build", 512.0 * MI)]);
    k.set_node(0.6, 1536.0 * MI);
    tokio::time::sleep(Duration::from_secs(9)).await;
    // It ends.
    k.set_node(0.5, 1024.0 * MI);
    k.set_pods(Vec::new());
    let mut done = fake.get("pods", "default", "build").unwrap();
    done["status"]["phase"] = "Succeeded".into();
    fake.put("pods", done);
    let mut seen = Vec::new();
    for i in 0..3 {
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let name = format!("next-{i}");
        place(&fake, &name, "b2").await;
        let explain = get_json(&s.url(&format!("/explain/default/{name}"))).await;
        let windowed =
            explain["inputs"]["chosenNode"]["usage"]["memory_working_set_bytes"]["windowed"]
                .as_f64()
                .unwrap();
        seen.push((measured_memory(&explain) / MI, windowed / MI));
    }
    s.stop().await;
    // The raw window still held the build in at least one of them, and every decision
    // saw the node at its 1 GiB.
    assert!(seen.iter().any(|(_, w)| *w > 1100.0), "{seen:?}");
    assert!(
        seen.iter().all(|(m, _)| (m - 1024.0).abs() < 1.0),
        "measured, windowed (MiB): {seen:?}"
    );
}
