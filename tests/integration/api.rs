//! The inspection API over real HTTP on loopback, served by [`spawn_demo_server`]: the
//! engine (the one `serve` runs) over a small synthetic cluster fed through its cluster
//! state, a real store on disk, the analytics refresh, the decision sink and the router.
//! Also `headroom explain` against it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use headroom::api::ApiState;
use headroom::config::Config;
use headroom::decisions::{DecisionLog, LogLimits};
use headroom::engine::{Drive, Engine, Parts, Phase, Running};
use headroom::metrics::Metrics;
use headroom::scheduling_loop::InstantBinder;
use headroom_scheduler::clock::Clock;
use headroom_scheduler::framework::{BindOutcome, BindPlugin, BoxFuture, Plugin};
use headroom_scheduler::key::PodKey;
use headroom_scheduler::scheduler::Scheduler;
use headroom_scheduler::snapshot::{PodInfo, Snapshot};
use headroom_storage::{Labels, RunRecord, Store, StoreConfig, UsageSummary};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};

use super::{run, run_ok};

/// Nodes in the demo cluster; the last one never reports usage (a stale node).
pub const DEMO_NODES: usize = 6;
/// Builders whose pods the demo keeps submitting.
pub const DEMO_BUILDERS: [&str; 2] = ["ci/Job/build-a", "ci/Job/build-b"];

/// A running demo: the API on `addr` over a live scheduling loop. Dropping it stops
/// everything.
pub struct DemoServer {
    /// Where the API listens.
    pub addr: SocketAddr,
    /// The API state (to flip readiness in tests).
    pub state: ApiState,
    runtime: Option<tokio::runtime::Runtime>,
    running: Option<Running>,
    _gate: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl DemoServer {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs a future on the demo's runtime (for HTTP clients in tests).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.as_ref().expect("runtime").block_on(f)
    }

    /// GET `path`; (status, content type, body).
    pub fn get(&self, path: &str) -> (u16, String, String) {
        let url = format!("{}{path}", self.url());
        self.block_on(async move {
            let r = reqwest::get(&url).await.expect("GET");
            let status = r.status().as_u16();
            let ct = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            (status, ct, r.text().await.expect("body"))
        })
    }
}

impl Drop for DemoServer {
    fn drop(&mut self) {
        if let (Some(rt), Some(running)) = (&self.runtime, self.running.take()) {
            rt.block_on(running.stop());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

fn now_ms() -> i64 {
    headroom::api::wall_clock_ms()
}

/// A pod of `builder` (annotation `headroom.io/builder`) requesting `cpu`, or with a
/// scheduling gate.
fn demo_pod(name: &str, builder: &str, cpu: &str, gated: bool) -> Pod {
    let mut spec = json!({"schedulerName": "headroom", "containers": [{"name": "main", "image": "registry.example/img-3:v1",
        "resources": {"requests": {"cpu": cpu, "memory": "256Mi", "ephemeral-storage": "1Gi"}}}]});
    if gated {
        spec["schedulingGates"] = json!([{"name": "example.com/wait"}]);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ci", "uid": format!("uid-{name}"),
            "annotations": {"headroom.io/builder": builder}},
        "spec": spec,
    }))
    .expect("demo pod")
}

/// Fails every `every`-th bind, so bind errors exist.
struct FlakyBinder {
    every: u64,
    calls: AtomicU64,
    inner: InstantBinder,
}

impl Plugin for FlakyBinder {
    fn name(&self) -> &'static str {
        "DemoBinder"
    }
}

impl BindPlugin for FlakyBinder {
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        annotations: &'a headroom_scheduler::framework::BindAnnotations,
    ) -> BoxFuture<'a, BindOutcome> {
        Box::pin(async move {
            if self.calls.fetch_add(1, Ordering::SeqCst) % self.every == self.every - 1 {
                BindOutcome::Retry("Operation cannot be fulfilled on pods/binding: conflict".into())
            } else {
                self.inner.bind(pod, node, annotations).await
            }
        })
    }
}

/// Writes one round of node usage samples at `ts` (all nodes but the last).
pub(crate) fn write_node_samples(store: &Store, names: &[String], ts: i64, tick: u64) {
    for (i, name) in names.iter().enumerate().take(names.len() - 1) {
        let labels = Labels::new([("node", name.as_str())]).unwrap();
        // Usage that moves a little with time, different per node.
        let wobble = ((tick + i as u64) % 5) as f64 * 0.1;
        let cores = 1.0 + i as f64 * 0.5 + wobble;
        let memory = (2.0 + i as f64) * 1e9 + wobble * 1e8;
        for (metric, v) in [
            ("node_cpu_usage_cores", cores),
            ("node_memory_working_set_bytes", memory),
            (
                "node_fs_available_bytes",
                120e9 - i as f64 * 10e9 - wobble * 1e9,
            ),
            ("node_fs_capacity_bytes", 200e9),
        ] {
            store.append(metric, &labels, ts, v).unwrap();
        }
    }
}

/// Starts the demo: a 6-node synthetic cluster with running pods, node usage and builder
/// runs in a real store, the analytics refresh, the scheduling loop (explaining every
/// decision, one bind in ten failing), a feeder that submits builder pods every 200 ms and
/// deletes old ones, a gated and an unschedulable pod, the decision sink, and the API on
/// 127.0.0.1 (ephemeral port). Ready when it returns: decisions exist.
///
/// `headroom simulate --serve` replaces this once it exists.
pub fn spawn_demo_server() -> DemoServer {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Store::open(dir.path().join("data"), StoreConfig::default()).unwrap();

    let (nodes, pods) = headroom_scheduler::synthetic::cluster(DEMO_NODES, 3, 11);
    let names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    let t0 = now_ms();
    for k in 0..5u64 {
        write_node_samples(&store, &names, t0 - 60_000 + k as i64 * 10_000, k);
    }
    write_demo_runs(&store, &names, t0);

    let mut config = Config::default();
    config.scheduler.seed = Some(5);
    config.analytics.refresh_interval = Duration::from_secs(1);
    let _guard = runtime.enter();
    let mut parts = Parts::new(Clock::wall(), store.clone());
    parts.explain = true;
    let engine = Engine::new(config, parts).unwrap();
    engine.cluster().replace_nodes(nodes);
    engine.cluster().replace_pods(pods);
    engine.housekeeping();
    // The first view before the first cycle, as a scheduler would wait for it.
    engine.publish_view(Arc::new(engine.compute_view().unwrap()));
    let mut running = engine.start(Drive::Timers, None).unwrap();
    let binder = Arc::new(FlakyBinder {
        every: 10,
        calls: AtomicU64::new(0),
        inner: InstantBinder::new(),
    });
    let (gate_tx, gate_rx) = watch::channel(true);
    {
        let engine = engine.clone();
        running.spawn_scheduling(
            move || engine.scheduling_loop(binder.clone(), true, None),
            gate_rx,
        );
    }
    let state = engine.api_state();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    // Pods that stay pending: one gated, one too big for any node.
    for (name, cpu, gated) in [("gated-0", "100m", true), ("huge-0", "1000", false)] {
        engine
            .cluster()
            .apply_pod(demo_pod(name, DEMO_BUILDERS[0], cpu, gated));
    }
    // The feeder: a builder pod every 200 ms; pods older than 40 ticks are deleted (the
    // cluster churns instead of filling up); fresh node samples every 5 ticks.
    {
        let (engine, store, names) = (engine.clone(), store.clone(), names.clone());
        let stop = running.phases.stopped(Phase::Intake);
        running.phases.spawn(Phase::Intake, async move {
            tokio::pin!(stop);
            let mut tick = 0u64;
            let mut every = tokio::time::interval(Duration::from_millis(200));
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    _ = every.tick() => {}
                }
                let now = now_ms();
                if tick.is_multiple_of(5) {
                    let (store, names) = (store.clone(), names.clone());
                    let _ = tokio::task::spawn_blocking(move || {
                        write_node_samples(&store, &names, now, tick)
                    })
                    .await;
                }
                let builder = DEMO_BUILDERS[(tick % 2) as usize];
                let name = format!("{}-{tick}", &builder[7..]);
                engine
                    .cluster()
                    .apply_pod(demo_pod(&name, builder, "200m", false));
                if tick >= 40 {
                    let old = tick - 40;
                    let old_name = format!("{}-{old}", &DEMO_BUILDERS[(old % 2) as usize][7..]);
                    engine
                        .cluster()
                        .delete_pod(&demo_pod(&old_name, builder, "200m", false));
                }
                tick += 1;
            }
        });
    }
    {
        let stop = running.phases.stopped(Phase::Intake);
        let state = state.clone();
        running.phases.spawn(Phase::Intake, async move {
            let _ = headroom::api::serve(listener, state, stop).await;
        });
    }
    drop(_guard);
    state.set_ready(true);

    let demo = DemoServer {
        addr,
        state,
        runtime: Some(runtime),
        running: Some(running),
        _gate: gate_tx,
        _dir: dir,
    };
    // Ready: the first builder pod was decided and a usage view published.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, _, _) = demo.get("/explain/ci/build-a-0");
        let view_ready = demo.state.usage_view().generated_ms > 0;
        if s == 200 && view_ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the demo server made no decision in 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    demo
}

/// Builder runs: build-a ran on the first two nodes (its placement history), build-b on the
/// third; six runs each, the last an hour before `t0`.
fn write_demo_runs(store: &Store, names: &[String], t0: i64) {
    for (b, builder) in DEMO_BUILDERS.iter().enumerate() {
        for r in 0..6usize {
            let node = &names[if b == 0 { r % 2 } else { 2 }];
            let v = 0.5 + b as f64 + r as f64 * 0.1;
            let s = UsageSummary {
                mean: v,
                p95: v * 1.2,
                max: v * 1.5,
            };
            let m = UsageSummary {
                mean: v * 1e9,
                p95: v * 1.2e9,
                max: v * 1.5e9,
            };
            let start = t0 - 3_600_000 + r as i64 * 60_000;
            store
                .put_run(
                    builder,
                    &RunRecord {
                        pod_uid: format!("run-{b}-{r}"),
                        node: node.clone(),
                        start_ms: start,
                        end_ms: start + 30_000,
                        cpu: s,
                        memory: m,
                    },
                )
                .unwrap();
            store.record_placement(builder, node, now_ms()).unwrap();
        }
    }
}

fn json_body(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn api_routes_over_http() {
    let demo = spawn_demo_server();
    routes_explain_by_pod(&demo);
    routes_explain_bad_input(&demo);
    routes_nodes(&demo);
    routes_builders(&demo);
    routes_queue(&demo);
    routes_metrics_health_and_404(&demo);
}

/// /explain by pod or uid, as JSON, text and the pod's page; an unschedulable pod.
fn routes_explain_by_pod(demo: &DemoServer) {
    // /explain by pod: every node's verdict, one chosen, scores on feasible nodes.
    let (s, ct, body) = demo.get("/explain/ci/build-a-0");
    assert_eq!(s, 200, "{body}");
    assert!(ct.starts_with("application/json"), "{ct}");
    let e = json_body(&body);
    assert_eq!(e["pod"], "ci/build-a-0");
    assert_eq!(e["uid"], "uid-build-a-0");
    let nodes = e["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), DEMO_NODES);
    let chosen: Vec<&Value> = nodes.iter().filter(|n| n["chosen"] == true).collect();
    assert_eq!(chosen.len(), 1, "{body}");
    assert_eq!(e["node"], chosen[0]["name"]);
    for n in nodes {
        if n["feasible"] == true {
            let scores = n["scores"].as_array().unwrap();
            assert!(!scores.is_empty(), "{n}");
            for sc in scores {
                assert_eq!(
                    sc["weighted"].as_i64().unwrap(),
                    sc["normalized"].as_i64().unwrap() * sc["weight"].as_i64().unwrap()
                );
            }
        } else {
            assert!(n["plugin"].is_string(), "{n}");
            assert!(!n["reasons"].as_array().unwrap().is_empty(), "{n}");
        }
    }
    // The synthetic node-00003 is tainted dedicated=db:NoSchedule.
    let tainted = nodes.iter().find(|n| n["name"] == "node-00003").unwrap();
    assert_eq!(tainted["plugin"], "TaintToleration", "{tainted}");
    // Inputs: the builder, its profile from the stored runs, the chosen node's usage.
    assert_eq!(e["inputs"]["builder"], DEMO_BUILDERS[0]);
    assert_eq!(e["inputs"]["profile"]["runs"], 6);
    assert!(e["inputs"]["warmCache"].is_boolean(), "{}", e["inputs"]);
    assert!(e["decidedAtMs"].as_i64().unwrap() > 0);
    assert!(e["cycleSeconds"].as_f64().unwrap() > 0.0);
    // The pod's page, as a path on the API, and that page shows the same verdicts.
    assert_eq!(e["ui"], "/ui/pods/ci/build-a-0");
    let (s, ct, page) = demo.get("/ui/pods/ci/build-a-0");
    assert_eq!(
        (s, ct.as_str()),
        (200, "text/html; charset=utf-8"),
        "{page}"
    );
    assert!(
        page.contains("<td class=\"nw\">node-00003</td><td>rejected</td>")
            && page.contains("<b>TaintToleration</b>"),
        "{page}"
    );

    let (s, ct, text) = demo.get("/explain/ci/build-a-0?format=text");
    assert_eq!(s, 200);
    assert!(ct.starts_with("text/plain"), "{ct}");
    assert!(
        text.contains("pod ci/build-a-0 (profile headroom)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("placed on {}", e["node"].as_str().unwrap())),
        "{text}"
    );
    assert!(
        text.contains("node-00003  rejected  TaintToleration"),
        "{text}"
    );
    assert!(
        text.contains("builder ci/Job/build-a: profile of 6 run(s)"),
        "{text}"
    );
    assert!(text.ends_with("page: /ui/pods/ci/build-a-0\n"), "{text}");

    // By uid, and by ?pod=.
    let (s, _, body) = demo.get("/explain?uid=uid-build-a-0");
    assert_eq!(s, 200, "{body}");
    assert_eq!(json_body(&body)["pod"], "ci/build-a-0");
    let (s, _, body) = demo.get("/explain?pod=ci/build-a-0&format=json");
    assert_eq!(s, 200, "{body}");
    assert_eq!(json_body(&body)["uid"], "uid-build-a-0");

    // The unschedulable pod: not placed, with upstream's message.
    let (s, _, body) = demo.get("/explain/ci/huge-0");
    assert_eq!(s, 200, "{body}");
    let huge = json_body(&body);
    assert_eq!(huge["placed"], false);
    assert!(
        huge["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("0/{DEMO_NODES} nodes are available:")),
        "{body}"
    );
}

/// /explain's answers to unknown pods and bad input.
fn routes_explain_bad_input(demo: &DemoServer) {
    // Unknown pod and uid: 404 with the message; bad input: 400; all JSON.
    let (s, ct, body) = demo.get("/explain/ci/nope");
    assert_eq!(s, 404);
    assert!(ct.starts_with("application/json"), "{ct}");
    assert_eq!(
        json_body(&body),
        json!({"error": "no decision recorded for pod ci/nope"})
    );
    let (s, _, body) = demo.get("/explain?uid=no-such-uid");
    assert_eq!(
        (s, json_body(&body)),
        (
            404,
            json!({"error": "no decision recorded for uid no-such-uid"})
        )
    );
    let (s, _, body) = demo.get("/explain/ci/build-a-0?format=yaml");
    assert_eq!(s, 400);
    assert_eq!(
        json_body(&body)["error"],
        "unknown format \"yaml\": use json or text"
    );
    let (s, _, body) = demo.get("/explain?pod=no-slash");
    assert_eq!(s, 400);
    assert!(
        json_body(&body)["error"]
            .as_str()
            .unwrap()
            .contains("NAMESPACE/NAME")
    );
    let (s, _, body) = demo.get("/explain");
    assert_eq!(s, 400, "{body}");
    let (s, _, body) = demo.get("/explain/ci/x%FF");
    assert_eq!(s, 400, "invalid UTF-8 in the path is a bad request: {body}");
    assert!(json_body(&body)["error"].is_string());
}

/// /nodes and /nodes/{name}.
fn routes_nodes(demo: &DemoServer) {
    // /nodes: requested vs measured, headroom, freshness; the last node has no usage.
    let (s, _, body) = demo.get("/nodes");
    assert_eq!(s, 200, "{body}");
    let list = json_body(&body);
    let nodes = list["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), DEMO_NODES);
    assert_eq!(list["staleNodes"], 1, "{body}");
    let first = &nodes[0];
    assert_eq!(first["name"], "node-00000");
    assert_eq!(first["allocatable"]["cpuCores"], 4.0);
    assert!(first["requested"]["cpuCores"].as_f64().unwrap() > 0.0);
    assert!(
        first["usage"]["cpu_cores"]["current"].as_f64().unwrap() >= 1.0,
        "{first}"
    );
    // The headroom is the scheduler's own: capacity minus the larger of current and
    // windowed usage, plus what it placed there since the newest sample.
    let h = &first["headroom"];
    assert_eq!(h["basis"], "measured", "{first}");
    assert_eq!(h["cpuTotal"], 4.0, "{first}");
    let current = first["usage"]["cpu_cores"]["current"].as_f64().unwrap();
    let windowed = first["usage"]["cpu_cores"]["windowed"].as_f64().unwrap();
    assert!(
        h["cpuUsed"].as_f64().unwrap() >= current.max(windowed) - 1e-9,
        "{first}"
    );
    assert_eq!(first["stale"], false);
    assert!(first["ageSeconds"].as_f64().unwrap() < 60.0);
    let last = &nodes[DEMO_NODES - 1];
    assert_eq!(
        (last["stale"].clone(), last["usage"].clone()),
        (json!(true), Value::Null)
    );
    // Without usage, requests stand in, as they do in the scheduler's decisions.
    assert_eq!(last["headroom"]["basis"], "requests", "{last}");
    assert_eq!(
        last["headroom"]["cpuUsed"], last["requested"]["cpuCores"],
        "{last}"
    );

    let (s, _, body) = demo.get("/nodes/node-00001");
    assert_eq!(s, 200);
    assert_eq!(json_body(&body)["name"], "node-00001");
    let (s, _, body) = demo.get("/nodes/nope");
    assert_eq!(
        (s, json_body(&body)),
        (404, json!({"error": "no node named nope"}))
    );
}

/// /builders and /builders/{id}.
fn routes_builders(demo: &DemoServer) {
    // /builders: ids with slashes, profile from the view, runs and history from the store.
    let (s, _, body) = demo.get("/builders/ci/Job/build-a");
    assert_eq!(s, 200, "{body}");
    let b = json_body(&body);
    assert_eq!(b["builder"], "ci/Job/build-a");
    assert_eq!(b["runCount"], 6);
    assert_eq!(b["profile"]["runs"], 6);
    // p95 per run is 1.2 × (0.5 + 0.1 r) for r in 0..6: the max over runs is 1.2 × 1.0.
    assert!(
        (b["profile"]["cpu"]["max"].as_f64().unwrap() - 1.2).abs() < 1e-9,
        "{b}"
    );
    assert_eq!(b["placementHistory"], json!(["node-00001", "node-00000"]));
    let (s, _, body) = demo.get("/builders");
    assert_eq!(s, 200);
    assert_eq!(json_body(&body)["builders"], json!(DEMO_BUILDERS));
    let (s, _, body) = demo.get("/builders/ci/Job/nope");
    assert_eq!(s, 404);
    assert_eq!(
        json_body(&body)["error"],
        "no builder ci/Job/nope: no profile, runs or placement history"
    );
}

/// /queue: why each waiting pod waits.
fn routes_queue(demo: &DemoServer) {
    // /queue: the gated pod waits for its gate, the huge one for resources.
    // The huge pod is retried on every pod deletion; while in flight it has no failure
    // to show, so look until it is back in a queue.
    let mut q = Value::Null;
    for _ in 0..50 {
        let (s, _, body) = demo.get("/queue");
        assert_eq!(s, 200, "{body}");
        q = json_body(&body);
        let waiting = q["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "huge-0" && p["queue"] != "inFlight");
        if waiting {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pods = q["pods"].as_array().unwrap();
    let gated = pods
        .iter()
        .find(|p| p["name"] == "gated-0")
        .expect("gated pod listed");
    assert_eq!(gated["queue"], "gated");
    assert!(
        gated["lastFailure"]
            .as_str()
            .unwrap()
            .contains("waiting for scheduling gates")
    );
    assert_eq!(q["lengths"]["gated"], 1);
    let huge = pods
        .iter()
        .find(|p| p["name"] == "huge-0")
        .expect("huge pod listed");
    assert!(
        huge["lastFailure"]
            .as_str()
            .unwrap()
            .contains("Insufficient cpu"),
        "{huge}"
    );
    assert!(
        huge["rejectedBy"]
            .as_array()
            .unwrap()
            .contains(&json!("NodeResourcesFit"))
    );
}

/// /metrics, the probes, unknown routes.
fn routes_metrics_health_and_404(demo: &DemoServer) {
    // /metrics: OpenMetrics with live numbers.
    let (s, ct, text) = demo.get("/metrics");
    assert_eq!(s, 200);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(text.ends_with("# EOF\n"));
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert!(value("headroom_scheduler_schedule_attempts_total{result=\"scheduled\"}") >= 1.0);
    assert!(value("headroom_scheduler_schedule_attempts_total{result=\"unschedulable\"}") >= 1.0);
    assert_eq!(value("headroom_queue_pending_pods{queue=\"gated\"}"), 1.0);
    assert_eq!(value("headroom_usage_stale_nodes"), 1.0);
    assert_eq!(
        value("headroom_node_cpu_cores{node=\"node-00000\",kind=\"allocatable\"}"),
        4.0
    );
    assert_eq!(
        value("headroom_builder_profile_runs{builder=\"ci/Job/build-a\"}"),
        6.0
    );
    assert_eq!(
        value("headroom_builder_runs_per_node{node=\"node-00002\"}"),
        6.0
    );
    assert!(value("headroom_store_size_bytes{part=\"disk\"}") > 0.0);
    assert!(value("headroom_api_decision_log_entries") >= 2.0);
    assert!(text.contains("headroom_collector_runs_total"));

    // Health and readiness.
    assert_eq!(demo.get("/healthz").0, 200);
    assert_eq!(demo.get("/readyz").0, 200);
    demo.state.set_ready(false);
    let (s, _, body) = demo.get("/readyz");
    assert_eq!((s, json_body(&body)), (503, json!({"error": "not ready"})));
    demo.state.set_ready(true);

    // Unknown routes are JSON 404s too.
    let (s, _, body) = demo.get("/nope");
    assert_eq!(s, 404);
    assert!(
        json_body(&body)["error"]
            .as_str()
            .unwrap()
            .starts_with("no route GET /nope")
    );
}

#[test]
fn api_serves_decisions_evicted_from_memory_from_the_store() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let scheduler = Scheduler::new(&Config::default().core()).unwrap();
    let (nodes, _) = headroom_scheduler::synthetic::cluster(3, 0, 1);
    scheduler
        .cache()
        .update(|c| c.replace(Snapshot::build(nodes, [])));
    let state = ApiState::new(scheduler.cache().clone(), Arc::new(Metrics::default()))
        .with_store(store.clone())
        .with_decision_log(Arc::new(DecisionLog::new(LogLimits {
            max_entries: 1,
            max_bytes: usize::MAX,
        })));
    let (tx, rx) = headroom::decisions::decision_channel(8, usize::MAX);
    let sink = headroom::decisions::Sink {
        metrics: state.metrics().clone(),
        log: state.decisions().clone(),
        store: Some(store.clone()),
        trouble: std::sync::Arc::new(headroom::logging::Trouble::new(
            "the store",
            "writing again",
        )),
        clock: headroom_scheduler::clock::Clock::from_fn(|| 0),
        handler: None,
    };
    let sink = runtime.spawn(headroom::decisions::run_decision_sink(
        rx,
        sink,
        std::future::pending(),
    ));
    for (i, name) in ["first", "second"].iter().enumerate() {
        let p = PodInfo::new(Arc::new(headroom_scheduler::synthetic::plain_pod(name)));
        let mut a = scheduler.schedule_one(&p, None, true);
        a.decision.decided_at_ms = 1_000 + i as i64;
        runtime
            .block_on(tx.send(a.decision, Default::default()))
            .unwrap();
    }
    drop(tx);
    let report = runtime.block_on(sink).unwrap();
    assert_eq!(
        (report.decisions, report.stored, report.store_errors),
        (2, 2, 0)
    );
    assert!(
        state
            .decisions()
            .by_pod(&PodKey::new("default", "first"))
            .is_none(),
        "evicted"
    );

    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    runtime.spawn(headroom::api::serve(listener, state, async {
        let _ = stop_rx.await;
    }));
    let get = |path: &str| {
        let url = format!("http://{addr}{path}");
        runtime.block_on(async move {
            let r = reqwest::get(&url).await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    for path in ["/explain/default/first", "/explain?uid=uid-first"] {
        let (s, body) = get(path);
        assert_eq!(s, 200, "{path}: {body}");
        let e = json_body(&body);
        assert_eq!(e["pod"], "default/first");
        assert_eq!(e["decidedAtMs"], 1_000);
        assert_eq!(e["nodes"].as_array().unwrap().len(), 3);
    }
    let (s, text) = get("/explain/default/first?format=text");
    assert_eq!(s, 200);
    assert!(text.contains("pod default/first"), "{text}");
    // The page reads the same lookup: memory, then the store.
    let (s, page) = get("/ui/pods/default/first");
    assert_eq!(s, 200, "{page}");
    assert!(
        page.contains("<title>default/first · headroom</title>"),
        "{page}"
    );
    let (s, body) = get("/explain/default/second");
    assert_eq!(
        (s, json_body(&body)["decidedAtMs"].clone()),
        (200, json!(1_001))
    );
    // No queue attached: /queue says so.
    let (s, body) = get("/queue");
    assert_eq!(
        (s, json_body(&body)),
        (
            503,
            json!({"error": "this server was started without a scheduling queue"})
        )
    );
    let _ = stop_tx.send(());
}

#[test]
fn api_explain_cli_prints_text_and_json_with_exit_codes() {
    let demo = spawn_demo_server();
    let url = demo.url();

    let o = run_ok(&["explain", "ci/build-a-0", "--server", &url]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("pod ci/build-a-0 (profile headroom)"),
        "{stdout}"
    );
    assert!(stdout.contains("TaintToleration"), "{stdout}");

    let o = run(&[
        "explain",
        "ci/build-a-0",
        "--server",
        &url,
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let e: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["pod"], "ci/build-a-0");

    // Not found: exit 3 with the server's message.
    let o = run(&["explain", "ci/missing", "--server", &url]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "error: no decision recorded for pod ci/missing"
    );

    // Bad input: exit 2, nothing asked.
    for bad in ["no-slash", "ci/Upper", "/x", "ci/"] {
        let o = run(&["explain", bad, "--server", &url]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&o.stderr).starts_with("error: "),
            "{bad}"
        );
    }
    let o = run(&["explain", "ci/x", "--server", "not a url"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid --server"));

    // Unreachable: exit 2, saying where it tried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let o = run(&[
        "explain",
        "ci/x",
        "--server",
        &format!("http://127.0.0.1:{port}"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "cannot reach headroom at http://127.0.0.1:{port}/explain/ci/x?format=text: the connection was refused - \
             is `headroom serve` (or `headroom simulate --serve`) listening there?"
        )),
        "{err}"
    );
}
