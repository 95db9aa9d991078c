//! The engine under `serve`, as users run it: runs collected from kubelet stats under the
//! pod's builder (owner chain), the store flushed and maintained (retention, rollups),
//! the collectors', event writer's and watch counters on `/metrics`, `/explain` from the
//! in-memory log, and the crash-loss window of the real binary under `kill -9`.

use std::io::Write;
use std::time::{Duration, Instant};

use headroom_storage::{Labels, Matcher, Store, StoreConfig};
use serde_json::{Value, json};

use super::fake::Fake;
use super::kubelet::{FakeKubelet, PodStats, collectors_yaml};
use super::sections::{config, start};
use super::{BASE, Running, namespace, node};

/// A pod owned by Job `job` (as the Job controller makes them), on `node` when given.
fn job_pod(name: &str, job: &str, node: Option<&str>, phase: &str) -> Value {
    let mut spec = json!({"schedulerName": "headroom", "containers": [
        {"name": "main", "image": "registry.invalid/build:1",
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({"metadata": {"name": name, "namespace": "default",
              "labels": {"job-name": job},
              "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                   "uid": format!("job-{job}"), "controller": true}]},
           "spec": spec,
           "status": {"phase": phase}})
}

async fn serve_with(fake: &Fake, yaml: &str, store: Store) -> Running {
    super::serve_with_store(fake, yaml, "a", store).await
}

async fn get_json(url: &str) -> (u16, Value) {
    let r = reqwest::get(url).await.expect("GET");
    let status = r.status().as_u16();
    let body = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// The body of a GET, as text.
pub(super) async fn get_text(url: &str) -> String {
    reqwest::get(url)
        .await
        .expect("GET")
        .text()
        .await
        .expect("body")
}

/// Polls `f` every 200 ms until it returns `Some`, for at most `secs`.
async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for pod `default/name` to be bound, then for its decision on `/explain`.
async fn bound_and_explained(fake: &Fake, s: &Running, name: &str) -> Value {
    fake.wait_for(15, &format!("{name} bound"), |f| {
        f.node_of("default", name).is_some()
    })
    .await;
    eventually(10, &format!("{name}'s decision"), || async {
        let (status, e) = get_json(&s.url(&format!("/explain/default/{name}"))).await;
        (status == 200).then_some(e)
    })
    .await
}

fn uid_of(fake: &Fake, name: &str) -> String {
    fake.get("pods", "default", name).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// History's `olderScore` under `serve`: a pod whose bk-ci history annotation lists four
/// nodes, newest first, gets 60/50/40 on the first three and the configured `olderScore`
/// on the fourth, which `/explain` names by its index; with `olderScore` 100 the fourth
/// node wins the placement, while the default (40) leaves it to the newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_scores_older_history_nodes_by_the_configured_older_score() {
    let history_scores = |older: Option<u32>| async move {
        let fake = Fake::start().await;
        fake.put("namespaces", namespace("default"));
        for n in ["n0", "n1", "n2", "n3"] {
            fake.put("nodes", node(n, "4"));
        }
        let args = older.map_or(String::new(), |o| {
            format!("profiles: [{{schedulerName: headroom, pluginArgs: {{history: {{olderScore: {o}}}}}}}]\n")
        });
        // Detailed explanations, so that `/explain` says which history entry scored.
        let section = format!("serve: {{detailedExplanations: true}}\n{args}");
        let s = start(&fake, config(BASE, &section), None).await;
        let mut p = super::pod("build", "headroom", "100m");
        p["metadata"]["annotations"] = json!({
            "bkci.dispatch.kubenetes/builder-history-nodes": r#"["n3", "n2", "n1", "n0"]"#
        });
        fake.put("pods", p);
        let e = bound_and_explained(&fake, &s, "build").await;
        let history = |node: &str| {
            let score = crate::usage::score(&e, node, "History");
            assert!(score.is_object(), "no History score on {node}: {e}");
            (
                score["raw"].as_i64().unwrap(),
                score["detail"].as_str().unwrap_or("").to_string(),
            )
        };
        let scores: Vec<(i64, String)> = ["n3", "n2", "n1", "n0"]
            .iter()
            .map(|n| history(n))
            .collect();
        let bound = fake.node_of("default", "build").unwrap();
        s.stop().await;
        (scores, bound)
    };
    let (scores, bound) = history_scores(Some(100)).await;
    let raw: Vec<i64> = scores.iter().map(|(r, _)| *r).collect();
    assert_eq!(raw, [60, 50, 40, 100], "{scores:?}");
    assert!(scores[3].1.contains("history index 3"), "{scores:?}");
    assert_eq!(
        bound, "n0",
        "olderScore 100 outweighs the newest entry's 60"
    );
    let (scores, bound) = history_scores(None).await;
    let raw: Vec<i64> = scores.iter().map(|(r, _)| *r).collect();
    assert_eq!(raw, [60, 50, 40, 40], "the default olderScore: {scores:?}");
    assert_eq!(bound, "n3");
}

/// `usage.coldStart` under `serve`: a Job seen for the first time is predicted by what the
/// running profiled pods use against their requests — under the default (`calibrated`)
/// all of them, under `image` those that run its container images.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_predicts_a_new_builder_by_the_profiled_pods_of_its_image() {
    let explain_fresh = |cold_start: Option<&'static str>| async move {
        let fake = Fake::start().await;
        fake.put("namespaces", namespace("default"));
        fake.put("nodes", node("node-a", "8"));
        fake.put("nodes", node("node-b", "8"));
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let now = headroom::api::wall_clock_ms();
        let names = ["node-a", "node-b", "unmeasured"].map(String::from);
        for k in 0..5u64 {
            crate::api::write_node_samples(&store, &names, now - 50_000 + k as i64 * 10_000, k);
        }
        // Five Rust builds that use 2.5× their 1Gi, one JVM build that uses a fifth of it.
        let image_pod = |name: &str, job: &str, image: &str, node: Option<&str>, phase: &str| {
            let mut p = job_pod(name, job, node, phase);
            p["spec"]["containers"][0]["image"] = json!(image);
            p
        };
        for (job, gib) in [("heavy", 2.5), ("light", 0.2)] {
            let run = |v: f64| headroom_storage::UsageSummary {
                mean: v,
                p95: v,
                max: v,
            };
            store
                .put_run(
                    &format!("default/Job/{job}"),
                    &headroom_storage::RunRecord {
                        pod_uid: format!("{job}-done"),
                        node: "node-a".into(),
                        start_ms: now - 600_000,
                        end_ms: now - 300_000,
                        cpu: run(0.5),
                        memory: run(gib * (1u64 << 30) as f64),
                    },
                )
                .unwrap();
        }
        for i in 0..5 {
            fake.put(
                "pods",
                image_pod(
                    &format!("rust-{i}"),
                    "heavy",
                    "rust:1",
                    Some("node-a"),
                    "Running",
                ),
            );
        }
        fake.put(
            "pods",
            image_pod("jvm-0", "light", "jvm:1", Some("node-b"), "Running"),
        );
        let usage = cold_start.map_or(String::new(), |c| format!("usage: {{coldStart: {c}}}\n"));
        let yaml = format!(
            "{BASE}  detailedExplanations: true\nanalytics: {{refreshInterval: 1s}}\n{usage}"
        );
        let s = serve_with(&fake, &yaml, store).await;
        // The profiles are in the usage view; one more refresh calibrates over the
        // running pods the informers have listed by then.
        eventually(20, "the JVM Job's profile", || async {
            let (status, b) = get_json(&s.url("/builders/default/Job/light")).await;
            (status == 200 && b["profile"]["runs"] == 1).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        fake.put(
            "pods",
            image_pod("fresh-0", "fresh", "jvm:1", None, "Pending"),
        );
        let e = bound_and_explained(&fake, &s, "fresh-0").await;
        s.stop().await;
        e.to_string()
    };
    let e = explain_fresh(None).await;
    assert!(
        e.contains("no profile yet: requests × 2.50 memory") && !e.contains("with image"),
        "calibrated by every profiled pod: {e}"
    );
    let e = explain_fresh(Some("image")).await;
    assert!(
        e.contains("no profile yet: requests × 0.20 memory, × 1.00 CPU, p90 of 1 profiled pods with image jvm:1"),
        "calibrated by the JVM build: {e}"
    );
}

/// The collectors start with scheduling, once the initial lists are in: while one of the
/// kinds the scheduler waits for cannot be listed (PodDisruptionBudgets refused), no
/// kubelet is polled and no pod is bound; once it can, both begin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_collects_from_the_moment_the_initial_lists_are_in() {
    let fake = Fake::start().await;
    let k = FakeKubelet::start("node-a", 1.0, 4e9).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "8"));
    fake.put("pods", job_pod("build-1", "build", None, "Pending"));
    fake.forbid("poddisruptionbudgets");
    let yaml = format!("{BASE}{}", collectors_yaml(&[("node-a", &k)]));
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let _s = serve_with(&fake, &yaml, store).await;
    fake.wait_for(10, "a refused list of PodDisruptionBudgets", |f| {
        f.calls().iter().any(|c| c.1 == "poddisruptionbudgets")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        k.polls(),
        0,
        "the kubelet was polled before the lists were in"
    );
    assert_eq!(fake.node_of("default", "build-1"), None);
    fake.allow("poddisruptionbudgets");
    eventually(40, "a poll of node-a", || async {
        (k.polls() > 0).then_some(())
    })
    .await;
    fake.wait_for(20, "build-1 bound", |f| {
        f.node_of("default", "build-1").is_some()
    })
    .await;
}

/// Issue "One engine": the pods of a Job, collected from a kubelet summary, form one
/// builder profile under `serve` (the collectors name builders from the engine's cluster
/// state), and History and RealHeadroom decide the Job's next pod on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_learns_a_jobs_profile_from_collected_runs_and_places_by_it() {
    let fake = Fake::start().await;
    let ka = FakeKubelet::start("node-a", 1.0, 4e9).await;
    let kb = FakeKubelet::start("node-b", 1.0, 4e9).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "8"));
    fake.put("nodes", node("node-b", "8"));
    for name in ["build-1", "build-2"] {
        fake.put("pods", job_pod(name, "build", Some("node-a"), "Running"));
    }
    let stats: Vec<PodStats> = ["build-1", "build-2"]
        .iter()
        .map(|n| PodStats {
            namespace: "default".into(),
            name: n.to_string(),
            uid: uid_of(&fake, n),
            cpu: 0.75,
            memory: 3e9,
        })
        .collect();
    ka.set_pods(stats);
    let yaml = format!(
        "{BASE}  builderHistoryAnnotation: true\nanalytics: {{refreshInterval: 1s}}\n{}",
        collectors_yaml(&[("node-a", &ka), ("node-b", &kb)])
    );
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let s = serve_with(&fake, &yaml, store.clone()).await;
    // A few samples of each run, then the Job's pods finish.
    eventually(20, "three polls of node-a", || async {
        (ka.polls() >= 3).then_some(())
    })
    .await;
    ka.set_pods(Vec::new());
    for name in ["build-1", "build-2"] {
        fake.put("pods", job_pod(name, "build", Some("node-a"), "Succeeded"));
    }
    let builder = eventually(30, "the Job's profile from two runs", || async {
        let (status, b) = get_json(&s.url("/builders/default/Job/build")).await;
        (status == 200 && b["profile"]["runs"] == 2).then_some(b)
    })
    .await;
    assert_eq!(builder["runCount"], 2, "{builder}");
    assert_eq!(builder["placementHistory"], json!(["node-a"]), "{builder}");
    // Nothing was stored under a bare pod's identity.
    let (_, all) = get_json(&s.url("/builders")).await;
    assert!(
        !all["builders"].to_string().contains("/Pod/"),
        "runs keyed by pod instead of builder: {all}"
    );

    // The Job's next pod: its profile predicts it, its history warms node-a.
    fake.put("pods", job_pod("build-3", "build", None, "Pending"));
    let e = bound_and_explained(&fake, &s, "build-3").await;
    assert_eq!(e["inputs"]["builder"], "default/Job/build", "{e}");
    assert_eq!(e["inputs"]["profile"]["runs"], 2, "{e}");
    let node_a = e["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-a")
        .unwrap()
        .clone();
    let score = |plugin: &str| {
        node_a["scores"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["plugin"] == plugin)
            .cloned()
            .unwrap_or_else(|| panic!("no {plugin} score on node-a: {node_a}"))
    };
    assert_eq!(score("History")["raw"], 60, "{node_a}");
    assert!(
        score("RealHeadroom")["raw"].as_i64().unwrap() > 0,
        "{node_a}"
    );
    assert_eq!(
        fake.node_of("default", "build-3").as_deref(),
        Some("node-a")
    );
    // The engine's sink recorded the placement in the builder's history once the bind
    // ended, and the reporter wrote bk-ci's annotation from it.
    let annotation = eventually(10, "build-3's bk-ci history annotation", || async {
        fake.get("pods", "default", "build-3")?["metadata"]["annotations"]
            ["bkci.dispatch.kubenetes/builder-history-nodes"]
            .as_str()
            .map(str::to_string)
    })
    .await;
    assert_eq!(annotation, r#"["node-a"]"#);

    // The collectors' counters reach /metrics, with the watch and event counters.
    let metrics = get_text(&s.url("/metrics")).await;
    for needle in [
        "headroom_collector_",
        "headroom_cluster_lists_total{kind=\"Pod\"}",
        "headroom_cluster_watch_errors_total",
        "headroom_events_created_total",
        "headroom_reporter_annotations_total",
        "headroom_scheduler_binds_total{result=\"success\"}",
    ] {
        assert!(
            metrics.contains(needle),
            "no {needle} in /metrics:\n{metrics}"
        );
    }
    let report = s.stop().await;
    assert!(report.sink.decisions >= 1, "{report:?}");
    assert!(
        report.sink.placements >= 1 && report.sink.settled >= 1,
        "{report:?}"
    );
    let m = report.maintenance.expect("maintenance ran");
    assert!(m.final_flush_ok, "{m:?}");
}

/// The store under `serve` is flushed every `storage.flushInterval` and maintained every
/// `storage.maintenanceInterval`: raw samples past `rawRetention` become rollups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_flushes_and_applies_retention_to_its_store() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    let store = Store::open_temporary(StoreConfig {
        raw_retention: Duration::from_secs(3600),
        maintenance_interval: Duration::from_secs(1),
        flush_interval: Duration::from_millis(500),
        ..StoreConfig::default()
    })
    .unwrap();
    // Three hours ago: a node that has since left, sampled every 15 s for an hour.
    let now = headroom_scheduler::clock::wall_ms();
    let labels = Labels::new([("node", "gone")]).unwrap();
    let id = store.series_id("node_cpu_usage_cores", &labels).unwrap();
    for i in 0..240i64 {
        store
            .append_id(id, now - 3 * 3_600_000 + i * 15_000, 1.0 + (i % 4) as f64)
            .unwrap();
    }
    store.checkpoint().unwrap();
    assert!(!store.raw_chunk_sizes(id).unwrap().is_empty());
    let yaml = format!(
        "{BASE}storage: {{rawRetention: 1h, maintenanceInterval: 1s, flushInterval: 500ms}}\n"
    );
    let s = serve_with(&fake, &yaml, store.clone()).await;
    eventually(20, "raw chunks past retention rolled up", || async {
        store.raw_chunk_sizes(id).unwrap().is_empty().then_some(())
    })
    .await;
    let rollups = store.rollups(id, now - 4 * 3_600_000, now).unwrap();
    assert!(!rollups.is_empty(), "the old samples live on as rollups");
    let report = s.stop().await;
    let m = report.maintenance.expect("maintenance ran");
    assert!(m.passes >= 1 && m.final_flush_ok, "{m:?}");
    assert!(
        store
            .select(&[Matcher::metric("node_cpu_usage_cores")])
            .unwrap()
            .len()
            == 1
    );
}

/// A kubeconfig for the fake API server at `server` (no credentials).
pub(super) fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let mut f = std::fs::File::create(&path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: \"{server}\"}}}}]\n\
         users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: fake, user: u}}}}]\n\
         current-context: c\n"
    )
    .unwrap();
    path
}

/// Crash safety (docs/configuration.md: a crash loses at most `storage.flushInterval` of samples): the
/// real `headroom serve` collects from a kubelet every second with a 2 s flush interval;
/// `kill -9` mid-collection; the reopened store has the node's series with samples up to
/// within the flush interval (plus one collection interval and scheduling slack) of the
/// kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_kill_9_loses_at_most_the_flush_interval() {
    let fake = Fake::start().await;
    let ka = FakeKubelet::start("node-a", 1.5, 6e9).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "storage: {{flushInterval: 2s}}\nserve: {{leaderElection: {{enabled: false}}, reservations: {{enabled: false}}}}\n{}",
            collectors_yaml(&[("node-a", &ka)])
        ),
    )
    .unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let mut child = crate::headroom()
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--api-listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start headroom serve");
    // Let it collect for a while: well past several flushes.
    eventually(30, "eight kubelet polls", || async {
        (ka.polls() >= 8).then_some(())
    })
    .await;
    let killed_at = headroom_scheduler::clock::wall_ms();
    child.kill().expect("kill -9");
    let _ = child.wait();
    let store = Store::open(&data, StoreConfig::default()).expect("the store reopens");
    let series = store
        .select(&[Matcher::metric("node_memory_working_set_bytes")])
        .unwrap();
    assert_eq!(series.len(), 1, "{series:?}");
    let newest = store
        .latest(series[0].id)
        .unwrap()
        .expect("samples survived")
        .ts_ms;
    // Samples are stamped with the kubelet's second-resolution time; a poll every second;
    // at most one flush interval (2 s) unflushed; 2 s of slack for a loaded machine.
    let lost_ms = killed_at - newest;
    assert!(
        lost_ms <= 2_000 + 1_000 + 1_000 + 2_000,
        "newest surviving sample is {lost_ms} ms older than the kill"
    );
    let samples = store.query_range(series[0].id, 0, i64::MAX).unwrap();
    assert!(samples.len() >= 4, "{} samples survived", samples.len());
}

/// Issue #17's waiting policy under `serve`: a pod that real memory keeps off every node
/// waits, and its FailedScheduling event says for how long at most; after `usage.maxWait`
/// the fallback places it on the least-hot node that fits by requests, and the Scheduled
/// event, the decision annotation, `/explain` and `/metrics` say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_places_a_waiting_pod_by_the_usage_fallback_after_max_wait() {
    let fake = Fake::start().await;
    // 15 of 16 GiB really in use: a 256 MiB pod would leave less than the 10 % reserve.
    let k = FakeKubelet::start("node-a", 1.0, 15.0 * (1u64 << 30) as f64).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    let yaml = format!(
        "{BASE}analytics: {{refreshInterval: 1s}}\nusage: {{maxWait: 4s}}\n{}",
        collectors_yaml(&[("node-a", &k)])
    );
    let s = serve_with(
        &fake,
        &yaml,
        Store::open_temporary(StoreConfig::default()).unwrap(),
    )
    .await;
    eventually(20, "node-a's measured usage", || async {
        let (_, n) = get_json(&s.url("/nodes/node-a")).await;
        (n["headroom"]["basis"] == "measured").then_some(())
    })
    .await;
    let created = Instant::now();
    fake.put("pods", super::pod("p", "headroom", "100m"));
    fake.wait_for(10, "a FailedScheduling event for p", |f| {
        !super::events_for(f, "p", "FailedScheduling").is_empty()
    })
    .await;
    let failed = super::events_for(&fake, "p", "FailedScheduling")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        failed.contains("didn't have enough real free memory")
            && failed.contains("after usage.maxWait (4s)"),
        "{failed}"
    );
    fake.wait_for(30, "p bound by the fallback", |f| {
        f.node_of("default", "p").is_some()
    })
    .await;
    assert!(
        created.elapsed() >= Duration::from_secs(4),
        "bound before maxWait"
    );
    assert_eq!(fake.node_of("default", "p").as_deref(), Some("node-a"));
    fake.wait_for(10, "the Scheduled event", |f| {
        !super::events_for(f, "p", "Scheduled").is_empty()
    })
    .await;
    let scheduled = super::events_for(&fake, "p", "Scheduled")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        scheduled.starts_with("Successfully assigned default/p to node-a (usage fallback: waited")
            && scheduled.contains("≥ usage.maxWait 4s: RealMemoryFit let it through"),
        "{scheduled}"
    );
    let e = eventually(10, "p's decision", || async {
        let (status, e) = get_json(&s.url("/explain/default/p")).await;
        (status == 200 && e["placed"] == true).then_some(e)
    })
    .await;
    assert_eq!(e["fallback"]["relaxed"], json!(["RealMemoryFit"]), "{e}");
    assert!(
        e["fallback"]["waitedSeconds"].as_f64().unwrap() >= 4.0,
        "{e}"
    );
    let annotation = eventually(10, "the decision annotation", || async {
        fake.get("pods", "default", "p").unwrap()["metadata"]["annotations"]["headroom.io/decision"]
            .as_str()
            .map(str::to_string)
    })
    .await;
    let summary: Value = serde_json::from_str(&annotation).unwrap();
    assert_eq!(summary["fallback"]["maxWaitSeconds"], 4.0, "{summary}");
    let metrics = get_text(&s.url("/metrics")).await;
    assert!(
        metrics.contains("headroom_scheduler_fallback_placements_total 1"),
        "{metrics}"
    );
    s.stop().await;
}

/// Issue #21's memory fit built on risk, under `serve` from its config: with
/// `usage.memoryRiskPercent` a node whose real memory would likely pass what it can give is
/// rejected by RealMemoryFit, and the pod goes to one with room; with
/// `serve.detailedExplanations` `/explain` shows each node's risk, as `place` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_rejects_by_memory_risk() {
    let fake = Fake::start().await;
    let gi = (1u64 << 30) as f64;
    let a = FakeKubelet::start("node-a", 1.0, 15.0 * gi).await;
    let b = FakeKubelet::start("node-b", 1.0, 2.0 * gi).await;
    let c = FakeKubelet::start("node-c", 1.0, 2.0 * gi).await;
    fake.put("namespaces", namespace("default"));
    for n in ["node-a", "node-b", "node-c"] {
        fake.put("nodes", node(n, "4"));
    }
    let yaml = format!(
        "{BASE}  detailedExplanations: true\nanalytics: {{refreshInterval: 1s}}\nusage: {{memoryRiskPercent: 5}}\n{}",
        collectors_yaml(&[("node-a", &a), ("node-b", &b), ("node-c", &c)])
    );
    let s = serve_with(
        &fake,
        &yaml,
        Store::open_temporary(StoreConfig::default()).unwrap(),
    )
    .await;
    for n in ["node-a", "node-b", "node-c"] {
        eventually(20, "measured usage", || async {
            let (_, v) = get_json(&s.url(&format!("/nodes/{n}"))).await;
            (v["headroom"]["basis"] == "measured").then_some(())
        })
        .await;
    }
    fake.put("pods", super::pod("p", "headroom", "100m"));
    fake.wait_for(20, "p bound", |f| f.node_of("default", "p").is_some())
        .await;
    assert_ne!(fake.node_of("default", "p").as_deref(), Some("node-a"));
    let e = eventually(10, "p's decision", || async {
        let (status, e) = get_json(&s.url("/explain/default/p")).await;
        (status == 200 && e["placed"] == true).then_some(e)
    })
    .await;
    let a = e["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-a")
        .unwrap();
    assert_eq!(a["plugin"], "RealMemoryFit", "{e}");
    // serve.detailedExplanations: each node's risk, as `place` shows it.
    let detail = a["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("memory risk ") && detail.contains("> target 5 %"),
        "{e}"
    );
    let b = e["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-b")
        .unwrap();
    let headroom = b["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["plugin"] == "RealHeadroom")
        .unwrap_or_else(|| panic!("no RealHeadroom score on node-b: {b}"));
    assert!(
        headroom["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("; memory risk "),
        "{headroom}"
    );
    s.stop().await;
}

/// Issue "Throughput": binds go through a congestion window. Against a slow server that
/// also answers 429 with Retry-After and sometimes binds but answers too late, the window
/// shrinks, at most the window's worth of binds are ever in flight, every pod is bound
/// exactly once, and a timed-out bind that went through is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_bind_flow_control_shrinks_under_429_and_latency_and_binds_each_pod_once() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "64"));
    fake.put("nodes", node("node-b", "64"));
    fake.binding_latency(Duration::from_millis(150));
    fake.throttle_bindings(6, 1);
    fake.answer_late(2, Duration::from_millis(1500));
    let yaml = "scheduler: {seed: 1}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {mode: none}\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n  events: {qps: 100, burst: 100}\n  requestTimeout: 1s\n  binding: {initialWindow: 8, minWindow: 1, latencyTarget: 100ms}\n";
    let s = serve_with(
        &fake,
        yaml,
        Store::open_temporary(StoreConfig::default()).unwrap(),
    )
    .await;
    let pods = 40;
    for i in 0..pods {
        fake.put("pods", super::pod(&format!("p{i}"), "headroom", "100m"));
    }
    // Watch the window while the pods bind.
    let mut min_window = f64::MAX;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = get_text(&s.url("/metrics")).await;
        if let Some(w) = metrics
            .lines()
            .find(|l| l.starts_with("headroom_bind_window "))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
        {
            min_window = min_window.min(w);
        }
        let bound = (0..pods)
            .filter(|i| fake.node_of("default", &format!("p{i}")).is_some())
            .count();
        if bound == pods {
            break;
        }
        assert!(Instant::now() < deadline, "only {bound}/{pods} bound");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = get_text(&s.url("/metrics")).await;
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in /metrics:\n{metrics}"))
    };
    s.stop().await;
    assert!(
        min_window < 8.0,
        "the window never shrank (min {min_window})"
    );
    assert!(
        fake.max_bindings_in_flight() <= 8,
        "{} binds in flight at once, window 8",
        fake.max_bindings_in_flight()
    );
    assert_eq!(value("headroom_bind_throttled_total"), 6.0);
    assert!(value("headroom_bind_timeouts_total") >= 2.0);
    assert!(value("headroom_bind_timeouts_bound_total") >= 2.0);
    // Exactly one successful binding per pod, and no request after it.
    let seen = fake.bindings();
    for i in 0..pods {
        let pod = format!("default/p{i}");
        let mine: Vec<u16> = seen
            .iter()
            .filter(|b| b.pod == pod)
            .map(|b| b.status)
            .collect();
        assert_eq!(
            mine.iter().filter(|s| **s == 201).count(),
            1,
            "{pod}: {mine:?}"
        );
        assert_eq!(
            mine.last(),
            Some(&201),
            "{pod} was bound again after success: {mine:?}"
        );
    }
}

/// SIGTERM with the API server gone (issue "Hardening", defect 12): `serve` stops within
/// `serve.shutdownGracePeriod` — a bind in flight and the writes queued behind it are
/// abandoned — and still flushes its store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_stops_within_the_grace_period_when_the_api_server_is_gone() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    let yaml = "scheduler: {seed: 1}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {mode: none}\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n  shutdownGracePeriod: 3s\n  requestTimeout: 30s\n";
    let s = serve_with(
        &fake,
        yaml,
        Store::open_temporary(StoreConfig::default()).unwrap(),
    )
    .await;
    fake.wait_for(10, "synced", |f| {
        f.calls().iter().any(|c| c.1 == "pods" && c.2 == "watch")
    })
    .await;
    // The server dies with a bind in flight.
    fake.binding_latency(Duration::from_secs(600));
    fake.put("pods", super::pod("p", "headroom", "1"));
    fake.wait_for(10, "a bind in flight", |f| f.max_bindings_in_flight() >= 1)
        .await;
    fake.black_hole();
    let t0 = Instant::now();
    let report = s.stop().await;
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "stopped after {took:?} with a 3 s grace period"
    );
    let m = report.maintenance.expect("maintenance ran");
    assert!(m.final_flush_ok, "{m:?}");
}

/// Issue "Hardening": 1,000 pods created at once on 20 nodes that fit 800 of them. No node
/// is overcommitted by requests, no pod is bound twice, and the 200 that fit nowhere stay
/// pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_a_thousand_pods_at_once_overcommit_nothing_and_bind_once() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    for i in 0..20 {
        fake.put("nodes", node(&format!("node-{i:02}"), "4"));
    }
    let s = serve_with(
        &fake,
        super::BASE,
        Store::open_temporary(StoreConfig::default()).unwrap(),
    )
    .await;
    for i in 0..1000 {
        fake.put("pods", super::pod(&format!("p{i:04}"), "headroom", "100m"));
    }
    fake.wait_for(120, "800 bound", |f| {
        (0..1000)
            .filter(|i| f.node_of("default", &format!("p{i:04}")).is_some())
            .count()
            == 800
    })
    .await;
    // Give any late, wrong bind the chance to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut per_node: std::collections::BTreeMap<String, usize> = Default::default();
    for i in 0..1000 {
        if let Some(n) = fake.node_of("default", &format!("p{i:04}")) {
            *per_node.entry(n).or_default() += 1;
        }
    }
    assert_eq!(per_node.len(), 20);
    for (node, pods) in &per_node {
        assert!(*pods <= 40, "{node} holds {pods} pods of 100m on 4 CPUs");
    }
    let seen = fake.bindings();
    let mut ok: std::collections::BTreeMap<String, usize> = Default::default();
    for b in seen.iter().filter(|b| b.status == 201) {
        *ok.entry(b.pod.clone()).or_default() += 1;
    }
    assert_eq!(ok.len(), 800);
    assert!(ok.values().all(|n| *n == 1), "a pod bound twice");
    let report = s.stop().await;
    assert_eq!(report.scheduling.bound, 800, "{report:?}");
}
