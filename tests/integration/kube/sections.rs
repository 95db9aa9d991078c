//! Every configuration section takes effect in every mode where it applies (issue "One
//! engine"): a table with one row per section, each setting it to a non-default value and
//! checking the effect against the default — through `serve` (the fake API server, a fake
//! kubelet) and through `simulate` (the in-process simulator on a small contended farm).
//! Where a section cannot apply to a mode, `Config::unused_in` (what `check-config`,
//! `simulate` and `place` print) must say so.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use headroom::config::{Config, Mode};
use headroom::kube::serve::{ServeOptions, run};
use headroom::simulate::{Options, Policy, Scenario};
use headroom_storage::{Labels, Matcher, Store, StoreConfig};
use serde_json::Value;
use tokio::sync::oneshot;

use super::fake::{Fake, merge};
use super::kubelet::{FakeKubelet, collectors_yaml};
use super::{Running, namespace, node, pod};

/// Every serve run here: no leader election, no reservations, loopback, fast events.
pub(super) const SERVE_BASE: &str = "scheduler: {seed: 3}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {mode: none}\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n  events: {qps: 100, burst: 100}\n";

/// `base` with `section` merged over it (both YAML).
pub(super) fn config(base: &str, section: &str) -> Config {
    let mut v: Value = serde_norway::from_str(base).unwrap();
    let s: Value = serde_norway::from_str(section).unwrap();
    if !s.is_null() {
        merge(&mut v, &s);
    }
    Config::from_yaml(&serde_norway::to_string(&v).unwrap(), "test").expect("test config")
}

pub(super) async fn start(fake: &Fake, config: Config, store: Option<Store>) -> Running {
    let store = store.unwrap_or_else(|| Store::open_temporary(StoreConfig::default()).unwrap());
    Running::start(fake, config, "a", store).await
}

/// Polls `f` every 100 ms for at most `secs`; whether it became true.
pub(super) async fn within(secs: f64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits, at most 20 s, until `serve`'s view has measured usage for each of `nodes`.
pub(super) async fn until_measured(s: &Running, nodes: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in nodes {
        while get_json(&s.url(&format!("/nodes/{n}"))).await["headroom"]["basis"] != "measured" {
            assert!(Instant::now() < deadline, "no usage for {n}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

pub(super) async fn get_json(url: &str) -> Value {
    let body = reqwest::get(url).await.unwrap().text().await.unwrap();
    serde_json::from_str(&body).unwrap_or(Value::String(body))
}

type Check = fn(&'static str) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a section does to a simulation: compares the run with it to the run without.
type SimEffect = fn(&SimRun, &SimRun) -> Result<(), String>;

/// One simulation's outcome.
struct SimRun {
    report: Value,
    store: Store,
}

struct Row {
    /// The section (a top-level key).
    section: &'static str,
    /// Its non-default value (YAML merged over the mode's base).
    yaml: &'static str,
    /// Its effect under `serve` (None: covered nowhere else is not allowed — every row
    /// has one, as every section applies to `serve`).
    serve: Check,
    /// Its effect under `simulate`, or None where the section does not apply there (then
    /// `unused_in(Simulate)` must name it).
    simulate: Option<SimEffect>,
    /// The scenario the simulate check runs.
    farm: &'static str,
}

// --- serve checks: each runs serve with and without the section ---------------------

fn profiles_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // MostAllocated packs three 1-CPU pods on one node; the default spreads them.
        let nodes_used = |section: &'static str| async move {
            let fake = Fake::start().await;
            fake.put("namespaces", namespace("default"));
            fake.put("nodes", node("node-a", "4"));
            fake.put("nodes", node("node-b", "4"));
            let s = start(&fake, config(SERVE_BASE, section), None).await;
            let mut used = std::collections::BTreeSet::new();
            for i in 0..3 {
                let name = format!("p{i}");
                fake.put("pods", pod(&name, "headroom", "1"));
                fake.wait_for(15, "bound", |f| f.node_of("default", &name).is_some())
                    .await;
                used.insert(fake.node_of("default", &name).unwrap());
            }
            s.stop().await;
            used.len()
        };
        assert_eq!(nodes_used(yaml).await, 1, "MostAllocated packs");
        assert_eq!(nodes_used("").await, 2, "the default spreads");
    })
}

fn scheduler_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // The first bind fails; the retry waits out the pod's backoff.
        let bound_within_4s = |section: &'static str| async move {
            let fake = Fake::start().await;
            fake.put("namespaces", namespace("default"));
            fake.put("nodes", node("node-a", "4"));
            fake.fail_bindings(1);
            let s = start(&fake, config(SERVE_BASE, section), None).await;
            fake.put("pods", pod("p", "headroom", "1"));
            let bound = within(4.0, || fake.node_of("default", "p").is_some()).await;
            let queue = get_json(&s.url("/queue")).await;
            s.stop().await;
            (bound, queue)
        };
        let (bound, queue) = bound_within_4s(yaml).await;
        assert!(!bound, "a 30 s backoff: not retried within 4 s");
        let p = &queue["pods"][0];
        assert_eq!(p["queue"], "backoff", "{queue}");
        assert!(
            p["backoffRemaining"].as_str().unwrap_or("").contains('s'),
            "{queue}"
        );
        let (bound, _) = bound_within_4s("").await;
        assert!(bound, "the default 1 s backoff retries at once");
    })
}

/// A node whose kubelet reports 10 GiB of its 16 GiB in use, and a pod for it, created
/// once the usage view shows the node's usage; the pod's `PodScheduled` condition or node.
async fn memory_pressure(section: &'static str) -> (Option<String>, Option<Value>) {
    let fake = Fake::start().await;
    let k = FakeKubelet::start("node-a", 1.0, 10.0 * (1u64 << 30) as f64).await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    let base = format!(
        "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
        collectors_yaml(&[("node-a", &k)])
    );
    let base: &'static str = Box::leak(base.into_boxed_str());
    let s = start(&fake, config(base, section), None).await;
    until_measured(&s, &["node-a"]).await;
    fake.put("pods", pod("p", "headroom", "100m"));
    let decided = within(10.0, || {
        fake.node_of("default", "p").is_some()
            || fake.get("pods", "default", "p").unwrap()["status"]["conditions"].is_array()
    })
    .await;
    assert!(decided, "no decision for p");
    let node = fake.node_of("default", "p");
    let condition = fake.get("pods", "default", "p").unwrap()["status"]["conditions"][0].clone();
    s.stop().await;
    (node, (!condition.is_null()).then_some(condition))
}

fn usage_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let (node, condition) = memory_pressure(yaml).await;
        assert_eq!(node, None, "a 60 % memory reserve keeps the pod off");
        let message = condition.unwrap()["message"].as_str().unwrap().to_string();
        assert!(message.contains("real free memory"), "{message}");
        let (node, _) = memory_pressure("").await;
        assert_eq!(
            node.as_deref(),
            Some("node-a"),
            "the default 10 % reserve fits"
        );
    })
}

fn advice_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // node-a's kubelet reports 10 of 16 GiB in use (62 %).
        let hot_nodes = |section: &'static str| async move {
            let fake = Fake::start().await;
            let k = FakeKubelet::start("node-a", 1.0, 10.0 * (1u64 << 30) as f64).await;
            fake.put("namespaces", namespace("default"));
            fake.put("nodes", node("node-a", "4"));
            let base = format!(
                "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
                collectors_yaml(&[("node-a", &k)])
            );
            let base: &'static str = Box::leak(base.into_boxed_str());
            let s = start(&fake, config(base, section), None).await;
            until_measured(&s, &["node-a"]).await;
            let advice = get_json(&s.url("/advice")).await;
            s.stop().await;
            advice["hotNodes"].as_array().map_or(usize::MAX, Vec::len)
        };
        assert_eq!(hot_nodes(yaml).await, 1, "62 % is hot above 50 %");
        assert_eq!(hot_nodes("").await, 0, "62 % is not hot by default (90 %)");
    })
}

fn analytics_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // Memory rises from 4 to 8 GB: the windowed quantile is the configured one.
        let windowed = |section: &'static str| async move {
            let fake = Fake::start().await;
            let k = FakeKubelet::start("node-a", 1.0, 4e9).await;
            fake.put("namespaces", namespace("default"));
            fake.put("nodes", node("node-a", "4"));
            let base = format!(
                "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
                collectors_yaml(&[("node-a", &k)])
            );
            let base: &'static str = Box::leak(base.into_boxed_str());
            let s = start(&fake, config(base, section), None).await;
            let deadline = Instant::now() + Duration::from_secs(20);
            while k.polls() < 3 {
                assert!(Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            k.set_node(1.0, 8e9);
            let url = s.url("/nodes/node-a");
            let mut u = Value::Null;
            while Instant::now() < deadline {
                u = get_json(&url).await["usage"]["memory_working_set_bytes"].clone();
                if u["current"] == 8e9 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            s.stop().await;
            assert_eq!(u["current"], 8e9, "{u}");
            u["windowed"].as_f64().unwrap()
        };
        assert_eq!(
            windowed(yaml).await,
            4e9,
            "nodeQuantile 0: the window's minimum"
        );
        let p95 = windowed("").await;
        assert!(p95 > 4e9, "the default p95 sees the rise: {p95}");
    })
}

fn storage_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // Raw samples three hours old: rolled up within seconds under a 1 h retention
        // and a 1 s maintenance interval; untouched under the defaults (48 h, 5 min).
        let raw_left = |section: &'static str| async move {
            let fake = Fake::start().await;
            fake.put("namespaces", namespace("default"));
            let c = config(SERVE_BASE, section);
            let store = Store::open_temporary(c.storage.clone()).unwrap();
            let now = headroom_scheduler::clock::wall_ms();
            let id = store
                .series_id(
                    "node_cpu_usage_cores",
                    &Labels::new([("node", "gone")]).unwrap(),
                )
                .unwrap();
            for i in 0..240i64 {
                store
                    .append_id(id, now - 3 * 3_600_000 + i * 15_000, 1.0)
                    .unwrap();
            }
            store.checkpoint().unwrap();
            let s = start(&fake, c, Some(store.clone())).await;
            let gone = within(10.0, || store.raw_chunk_sizes(id).unwrap().is_empty()).await;
            s.stop().await;
            gone
        };
        assert!(raw_left(yaml).await, "retention rolled the old samples up");
        assert!(!raw_left("").await, "the defaults keep 48 h of raw samples");
    })
}

fn collectors_serve(_yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // The row's YAML is a placeholder: the kubelet's address is only known now.
        let series = |with_kubelet: bool| async move {
            let fake = Fake::start().await;
            let k = FakeKubelet::start("node-a", 1.0, 4e9).await;
            fake.put("namespaces", namespace("default"));
            fake.put("nodes", node("node-a", "4"));
            let section = if with_kubelet {
                collectors_yaml(&[("node-a", &k)])
            } else {
                String::new()
            };
            let section: &'static str = Box::leak(section.into_boxed_str());
            let store = Store::open_temporary(StoreConfig::default()).unwrap();
            let s = start(&fake, config(SERVE_BASE, section), Some(store.clone())).await;
            let found = within(6.0, || {
                !store
                    .select(&[Matcher::metric("node_memory_working_set_bytes")])
                    .unwrap()
                    .is_empty()
            })
            .await;
            s.stop().await;
            found
        };
        assert!(series(true).await, "the kubelet source stored node series");
        assert!(!series(false).await, "no source, no samples");
    })
}

fn data_dir_serve(_yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // `dataDir` is where serve keeps its store when --data-dir is not given.
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("store");
        let fake = Fake::start().await;
        fake.put("namespaces", namespace("default"));
        let yaml = format!("dataDir: {}\n", data.display());
        let yaml: &'static str = Box::leak(yaml.into_boxed_str());
        let mut opts = ServeOptions::new(config(SERVE_BASE, yaml), fake.client("a"));
        let (bound_tx, bound_rx) = oneshot::channel();
        opts.bound = Some(bound_tx);
        let (stop, stop_rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(run(opts, async {
            let _ = stop_rx.await;
        }));
        let bound = bound_rx.await.unwrap();
        Running {
            bound,
            stop,
            handle,
        }
        .stop()
        .await;
        assert!(
            std::fs::read_dir(&data).unwrap().next().is_some(),
            "the store was created in dataDir"
        );
    })
}

fn serve_serve(yaml: &'static str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let annotated = |section: &'static str| async move {
            let fake = Fake::start().await;
            fake.put("namespaces", namespace("default"));
            fake.put("nodes", node("node-a", "4"));
            let s = start(&fake, config(SERVE_BASE, section), None).await;
            fake.put("pods", pod("p", "headroom", "1"));
            fake.wait_for(15, "bound", |f| f.node_of("default", "p").is_some())
                .await;
            // The annotation follows the bind; give it the same time either way.
            let has = within(3.0, || {
                fake.get("pods", "default", "p").unwrap()["metadata"]["annotations"]
                    ["headroom.io/decision"]
                    .is_string()
            })
            .await;
            s.stop().await;
            has
        };
        assert!(!annotated(yaml).await, "decisionAnnotation: false");
        assert!(annotated("").await, "annotated by default");
    })
}

// --- simulate effects ---------------------------------------------------------------

fn num(r: &SimRun, key: &str) -> f64 {
    r.report["policies"][0][key]
        .as_f64()
        .unwrap_or_else(|| panic!("no {key} in {}", r.report))
}

fn profiles_sim(with: &SimRun, without: &SimRun) -> Result<(), String> {
    let (a, b) = (num(with, "nodeHoursBusy"), num(without, "nodeHoursBusy"));
    (a < b)
        .then_some(())
        .ok_or(format!("MostAllocated busy node-hours {a} not below {b}"))
}

fn scheduler_sim(with: &SimRun, without: &SimRun) -> Result<(), String> {
    // CORDONED: the pods fail once at 1m, the node is uncordoned at 1m15s; a 1 s backoff
    // has expired by then (placed at 1m15s), a 30 s one holds them until 1m30s.
    let (a, b) = (
        num(with, "timeToScheduleP99S"),
        num(without, "timeToScheduleP99S"),
    );
    (a == 30.0 && b == 15.0).then_some(()).ok_or(format!(
        "time to schedule p99: {a} s with a 30 s backoff, {b} s without"
    ))
}

fn usage_sim(with: &SimRun, without: &SimRun) -> Result<(), String> {
    let (a, b) = (
        num(with, "unschedulableAttempts"),
        num(without, "unschedulableAttempts"),
    );
    (a > b).then_some(()).ok_or(format!(
        "60 % reserve: {a} unschedulable attempts, default {b}"
    ))
}

fn advice_sim(with: &SimRun, without: &SimRun) -> Result<(), String> {
    let (a, b) = (
        num(with, "adviceHotNodeHours"),
        num(without, "adviceHotNodeHours"),
    );
    (a > b).then_some(()).ok_or(format!(
        "hot above 50 %: {a} hot node-hours, above the default 90 %: {b}"
    ))
}

fn analytics_sim(with: &SimRun, without: &SimRun) -> Result<(), String> {
    (with.report["policies"][0] != without.report["policies"][0])
        .then_some(())
        .ok_or("nodeQuantile 0 changed nothing".to_string())
}

fn storage_sim(with: &SimRun, without: &SimRun) -> Result<(), String> {
    let raw = |r: &SimRun| -> usize {
        r.store
            .select(&[Matcher::metric("node_memory_working_set_bytes")])
            .unwrap()
            .iter()
            .map(|s| r.store.raw_chunk_sizes(s.id).unwrap().len())
            .sum()
    };
    let (a, b) = (raw(with), raw(without));
    (a < b).then_some(()).ok_or(format!(
        "20 min retention kept {a} raw chunks, the default {b}"
    ))
}

/// A small farm under memory pressure: 3 nodes, C++-like builds using 1.5–3× their
/// memory request, arriving faster than the nodes clear them at the start.
const FARM: &str = "duration: 90m\nstep: 15s\nseed: 5\nnodes:\n  - {count: 3, namePrefix: n-, cpu: \"8\", memory: 16Gi, disk: 200Gi, systemCpu: 500m, systemMemory: 1Gi}\nworkloads:\n  - {name: cpp, kind: builder, namespace: ci, builders: 4, arrivalsPerHour: 40, duration: 20m, warmSpeedup: 0.3, requests: {cpu: \"2\", memory: 2Gi}, usage: {cpu: [0.5, 1.0], memory: [1.5, 3.0]}, noise: 0.1}\nevents:\n  - {at: 10m, burst: {workload: cpp, count: 12}}\n";

/// One node, cordoned until 1m15s; two builds arrive at 1m.
const CORDONED: &str = "duration: 5m\nstep: 15s\nseed: 5\nnodes:\n  - {count: 1, namePrefix: n-, cpu: \"8\", memory: 16Gi, disk: 200Gi}\nworkloads:\n  - {name: b, kind: builder, namespace: ci, builders: 1, arrivalsPerHour: 0, duration: 20m, requests: {cpu: \"1\", memory: 1Gi}, usage: {cpu: [0.5, 0.5], memory: [0.5, 0.5]}}\nevents:\n  - {at: 0s, cordon: n-1}\n  - {at: 1m, burst: {workload: b, count: 2}}\n  - {at: 75s, uncordon: n-1}\n";

fn simulate(config: Config, policy: Policy, farm: &str) -> SimRun {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let scenario = Scenario::parse(farm, "farm").unwrap();
    let options = Options {
        seed: None,
        policies: vec![policy],
        data_dir: Some(data.clone()),
        progress: false,
        act_on_advice: false,
        tuned: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let report = rt
        .block_on(headroom::simulate::run(&scenario, &config, &options))
        .unwrap();
    let store = Store::open(&data, config.storage.clone()).unwrap();
    // The directory must outlive the store handle.
    std::mem::forget(dir);
    SimRun {
        report: serde_json::to_value(&report).unwrap(),
        store,
    }
}

const SIM_BASE: &str = "analytics: {refreshInterval: 1m}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_every_config_section_takes_effect_in_every_mode_it_applies_to() {
    let rows = [
        Row {
            section: "profiles",
            yaml: "profiles: [{schedulerName: headroom, pluginArgs: {nodeResourcesFit: {scoringStrategy: {type: MostAllocated}}}}]",
            serve: profiles_serve,
            simulate: Some(profiles_sim),
            farm: FARM,
        },
        Row {
            section: "scheduler",
            yaml: "scheduler: {podInitialBackoffSeconds: 30, podMaxBackoffSeconds: 60}",
            serve: scheduler_serve,
            simulate: Some(scheduler_sim),
            farm: CORDONED,
        },
        Row {
            section: "usage",
            yaml: "usage: {defaults: {memoryReservePercent: 60}, maxWait: 1h}",
            serve: usage_serve,
            simulate: Some(usage_sim),
            farm: FARM,
        },
        Row {
            section: "advice",
            yaml: "advice: {hotMemoryPercent: 50, targetMemoryPercent: 40}",
            serve: advice_serve,
            simulate: Some(advice_sim),
            farm: FARM,
        },
        Row {
            section: "analytics",
            yaml: "analytics: {nodeQuantile: 0.0}",
            serve: analytics_serve,
            simulate: Some(analytics_sim),
            farm: FARM,
        },
        Row {
            section: "storage",
            yaml: "storage: {rawRetention: 20m, maintenanceInterval: 1s}",
            serve: storage_serve,
            simulate: Some(storage_sim),
            farm: FARM,
        },
        Row {
            section: "collectors",
            yaml: "collectors: {kubelet: {nodes: [node-a]}}",
            serve: collectors_serve,
            simulate: None,
            farm: FARM,
        },
        Row {
            section: "dataDir",
            yaml: "dataDir: /var/lib/headroom",
            serve: data_dir_serve,
            simulate: None,
            farm: FARM,
        },
        Row {
            section: "serve",
            yaml: "serve: {decisionAnnotation: false}",
            serve: serve_serve,
            simulate: None,
            farm: FARM,
        },
    ];
    // Every top-level section has a row.
    let all: Value = serde_json::to_value(Config::default()).unwrap();
    let mut sections: Vec<&str> = all
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    sections.push("dataDir");
    for s in sections {
        assert!(
            rows.iter().any(|r| r.section == s),
            "no row for section {s}"
        );
    }
    for row in &rows {
        // serve: always applies.
        (row.serve)(row.yaml).await;
        let cfg = config(SIM_BASE, row.yaml);
        let unused: Vec<String> = cfg
            .unused_in(Mode::Simulate)
            .iter()
            .map(ToString::to_string)
            .collect();
        match row.simulate {
            Some(effect) => {
                assert!(
                    unused.iter().all(|u| !u.starts_with(row.section)),
                    "{}: applies to simulate but is reported unused: {unused:?}",
                    row.section
                );
                let policy = if row.section == "profiles" {
                    // Request-based scoring only, so the strategy alone decides.
                    Policy::Requests
                } else {
                    Policy::Headroom
                };
                let farm = row.farm;
                let (with, without) = tokio::task::spawn_blocking(move || {
                    (
                        simulate(cfg, policy, farm),
                        simulate(config(SIM_BASE, ""), policy, farm),
                    )
                })
                .await
                .unwrap();
                if let Err(e) = effect(&with, &without) {
                    panic!("{}: no effect under simulate: {e}", row.section);
                }
            }
            None => assert!(
                unused.iter().any(|u| u.starts_with(row.section)),
                "{}: does not apply to simulate, but unused_in does not say so: {unused:?}",
                row.section
            ),
        }
        eprintln!("section {}: ok", row.section);
    }
}
