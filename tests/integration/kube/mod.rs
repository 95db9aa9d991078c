//! `headroom serve` end to end against the fake API server (`fake.rs`): real HTTP on
//! loopback, the real watch protocol, the recorded error bodies. Run just these with
//! `cargo test --test integration kube::`.

mod auth;
mod deploy;
mod engine;
mod fake;
mod flood;
mod fragmentation;
mod history_band;
mod keep_whole;
mod kubelet;
mod logs;
mod long_running;
mod peers;
mod plugin;
mod preemption;
mod process_kubelet;
mod real_processes;
mod recent_explain;
mod sections;
mod spreading;
mod ui;
mod volumes;
mod warm_wait;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use fake::Fake;
use headroom::config::Config;
use headroom::kube::serve::{Bound, ServeOptions, ServeReport, run};
use serde_json::{Value, json};
use tokio::sync::oneshot;

fn node(name: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "spec": {},
           "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                      "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}})
}

fn pod(name: &str, scheduler: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "builder"}},
           "spec": {"schedulerName": scheduler, "containers": [
               {"name": "c", "image": "registry.invalid/pause:1",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
           "status": {"phase": "Pending"}})
}

/// `p` as a pod already running on `node`.
fn running_on(mut p: Value, node: &str) -> Value {
    p["spec"]["nodeName"] = json!(node);
    p["status"]["phase"] = json!("Running");
    p
}

fn namespace(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"team": "ci"}}})
}

struct Running {
    bound: Bound,
    stop: oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<headroom::kube::Result<ServeReport>>,
}

impl Running {
    async fn stop(self) -> ServeReport {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("serve stops within 30 s")
            .expect("serve task")
            .expect("serve run")
    }

    fn url(&self, path: &str) -> String {
        // The extender and the inspection API listen apart (the probes on both).
        let addr = if path.starts_with("/extender") {
            self.bound.extender
        } else {
            self.bound.api
        };
        format!("http://{addr}{path}")
    }
}

const BASE: &str = "scheduler: {seed: 1}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {mode: none}\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n  events: {qps: 100, burst: 100}\n";

async fn serve(fake: &Fake, yaml: &str, replica: &str) -> Running {
    let store =
        headroom_storage::Store::open_temporary(headroom_storage::StoreConfig::default()).unwrap();
    serve_with_store(fake, yaml, replica, store).await
}

/// [`serve`] over a store the test prepared (usage samples, runs).
async fn serve_with_store(
    fake: &Fake,
    yaml: &str,
    replica: &str,
    store: headroom_storage::Store,
) -> Running {
    let config = Config::from_yaml(yaml, "test").expect("test config");
    Running::start(fake, config, replica, store).await
}

impl Running {
    /// Runs `serve` as `replica` against the fake API server with `config` and `store`,
    /// once its listeners are bound.
    async fn start(
        fake: &Fake,
        config: Config,
        replica: &str,
        store: headroom_storage::Store,
    ) -> Running {
        let mut opts = ServeOptions::new(config, fake.client(replica));
        opts.store = Some(store);
        Running::start_with(opts).await
    }

    /// Runs `serve` with `opts` (a store among them) once its listeners are bound.
    async fn start_with(mut opts: ServeOptions) -> Running {
        let (bound_tx, bound_rx) = oneshot::channel();
        opts.bound = Some(bound_tx);
        let (stop, stop_rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(run(opts, async {
            let _ = stop_rx.await;
        }));
        let bound = tokio::time::timeout(Duration::from_secs(10), bound_rx)
            .await
            .expect("listener within 10 s")
            .expect("listener address");
        Running {
            bound,
            stop,
            handle,
        }
    }
}

fn events_for(fake: &Fake, pod: &str, reason: &str) -> Vec<Value> {
    fake.list("events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod && e["reason"] == reason)
        .collect()
}

fn condition(fake: &Fake, pod: &str) -> Option<Value> {
    fake.get("pods", "default", pod)?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
}

/// Every call the fake saw is one `deploy/rbac.yaml` grants (via `API_CALLS`).
fn assert_calls_allowed(fake: &Fake) {
    let allowed: HashSet<(String, String, String)> = headroom::kube::API_CALLS
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    for c in fake.calls() {
        assert!(
            allowed.contains(&c),
            "API call not in API_CALLS (and RBAC): {c:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_serve_binds_ours_ignores_others_writes_events_and_unblocks_on_node_added() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    fake.put("pods", pod("p1", "headroom", "1"));
    fake.put("pods", pod("other", "default-scheduler", "1"));
    fake.put("pods", pod("huge", "headroom", "64"));
    let s = serve(&fake, BASE, "a").await;

    fake.wait_for(15, "p1 bound", |f| f.node_of("default", "p1").is_some())
        .await;
    let p1_node = fake.node_of("default", "p1").unwrap();
    assert!(p1_node == "node-a" || p1_node == "node-b");
    // 64 CPUs exceed both nodes' allocatable: preemption cannot help (upstream's tail).
    let msg = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.";
    fake.wait_for(15, "huge's PodScheduled=False", |f| {
        condition(f, "huge").is_some()
    })
    .await;
    let c = condition(&fake, "huge").unwrap();
    assert_eq!(
        (
            c["status"].as_str(),
            c["reason"].as_str(),
            c["message"].as_str()
        ),
        (Some("False"), Some("Unschedulable"), Some(msg))
    );
    fake.wait_for(10, "events", |f| {
        !events_for(f, "huge", "FailedScheduling").is_empty()
            && !events_for(f, "p1", "Scheduled").is_empty()
    })
    .await;
    let failed = &events_for(&fake, "huge", "FailedScheduling")[0];
    assert_eq!(failed["note"], msg);
    assert_eq!(
        (failed["type"].as_str(), failed["action"].as_str()),
        (Some("Warning"), Some("Scheduling"))
    );
    assert_eq!(failed["reportingController"], "headroom");
    let scheduled = &events_for(&fake, "p1", "Scheduled")[0];
    assert_eq!(
        scheduled["note"],
        format!("Successfully assigned default/p1 to {p1_node}")
    );
    assert_eq!(
        (scheduled["type"].as_str(), scheduled["action"].as_str()),
        (Some("Normal"), Some("Binding"))
    );
    assert_eq!(scheduled["regarding"]["kind"], "Pod");
    assert_eq!(
        scheduled["regarding"]["uid"],
        fake.get("pods", "default", "p1").unwrap()["metadata"]["uid"]
    );

    // The decision summary annotation.
    fake.wait_for(10, "decision annotation", |f| {
        f.get("pods", "default", "p1").unwrap()["metadata"]["annotations"]["headroom.io/decision"]
            .is_string()
    })
    .await;
    let ann = fake.get("pods", "default", "p1").unwrap()["metadata"]["annotations"]["headroom.io/decision"]
        .as_str()
        .unwrap()
        .to_string();
    let ann: Value = serde_json::from_str(&ann).unwrap();
    assert_eq!(ann["node"], p1_node);
    assert_eq!(ann["nodes"], 2);
    // Ties are broken at random, so the chosen node has the best score, not necessarily
    // the first entry.
    let best = ann["top"][0]["score"].as_i64().unwrap();
    let chosen = ann["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["node"] == p1_node)
        .unwrap();
    assert_eq!(chosen["score"].as_i64(), Some(best), "{ann}");
    // It came with the binding: no pod patch of its own (kube-scheduler's writes per pod,
    // a binding and an event, are all headroom makes).
    assert!(
        !fake
            .calls()
            .iter()
            .any(|(g, r, v)| g.is_empty() && r == "pods" && v == "patch"),
        "{:?}",
        fake.calls()
    );
    assert_eq!(ann["feasibleNodes"], 2);

    // Not ours: never bound, never attempted.
    assert!(fake.node_of("default", "other").is_none());
    assert!(fake.bindings().iter().all(|b| b.pod != "default/other"));

    // Probes.
    let http = reqwest::Client::new();
    let r = http.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ok (leader)\n");
    assert_eq!(
        http.get(s.url("/healthz")).send().await.unwrap().status(),
        200
    );
    // The inspection API answers for the bound pod from the decision log in the store.
    let r = http.get(s.url("/explain/default/p1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["placed"], true, "{v}");
    assert!(v["node"].is_string(), "{v}");
    assert_eq!(
        http.get(s.url("/explain/default/none"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        http.get(s.url("/queue")).send().await.unwrap().status(),
        200
    );

    // A node added later unblocks the unschedulable pod.
    fake.put("nodes", node("node-c", "128"));
    fake.wait_for(20, "huge bound after node-c joined", |f| {
        f.node_of("default", "huge").is_some()
    })
    .await;
    assert_eq!(fake.node_of("default", "huge").as_deref(), Some("node-c"));

    // A stuck pod does not flood: repeated identical failures fold into one event series.
    let report = s.stop().await;
    assert_eq!(report.scheduling.bound, 2, "{report:?}");
    assert_eq!(events_for(&fake, "huge", "FailedScheduling").len(), 1);
    assert!(report.sink.stored >= 3, "{report:?}");
    assert_calls_allowed(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_survives_watch_expiry_api_errors_and_requeues_failed_binds() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "2"));
    fake.put("pods", pod("a", "headroom", "1"));
    let s = serve(&fake, BASE, "a").await;
    fake.wait_for(15, "a bound", |f| f.node_of("default", "a").is_some())
        .await;
    fake.put("pods", pod("big", "headroom", "3"));
    fake.wait_for(15, "big unschedulable", |f| condition(f, "big").is_some())
        .await;
    let lists_before = fake
        .calls()
        .iter()
        .filter(|c| c.1 == "nodes" && c.2 == "list")
        .count();

    // Every watch's resourceVersion becomes too old (410 Gone), and the next watch
    // requests fail outright; then a bind fails once with a 500.
    fake.expire_watches();
    fake.fail_watches(3);
    fake.fail_bindings(1);
    fake.put("pods", pod("b", "headroom", "1"));
    fake.wait_for(30, "b bound after the re-list and a failed bind", |f| {
        f.node_of("default", "b").is_some()
    })
    .await;
    let b_binds: Vec<u16> = fake
        .bindings()
        .iter()
        .filter(|x| x.pod == "default/b")
        .map(|x| x.status)
        .collect();
    assert_eq!(
        b_binds,
        vec![500, 201],
        "one failed bind, then one retry after backoff"
    );
    fake.wait_for(30, "410 making the node watch re-list", |f| {
        f.calls()
            .iter()
            .filter(|c| c.1 == "nodes" && c.2 == "list")
            .count()
            > lists_before
    })
    .await;

    // The unschedulable pod survived the re-list in the queue: a new node unblocks it.
    fake.put("nodes", node("node-b", "4"));
    fake.wait_for(20, "big bound on node-b", |f| {
        f.node_of("default", "big").is_some()
    })
    .await;
    assert_eq!(fake.node_of("default", "big").as_deref(), Some("node-b"));
    let report = s.stop().await;
    assert_eq!(report.scheduling.bind_errors, 1, "{report:?}");
    assert_eq!(report.scheduling.bound, 3, "{report:?}");
    assert_calls_allowed(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_bind_conflict_is_not_retried_blindly() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    // Another scheduler binds the pod to node-b just before our binding arrives: 409.
    fake.steal_next_binding("node-b");
    fake.put("pods", pod("c", "headroom", "1"));
    let s = serve(&fake, BASE, "a").await;
    fake.wait_for(15, "our binding attempt", |f| {
        f.bindings().iter().any(|b| b.pod == "default/c")
    })
    .await;
    // Backoff would retry within 1-2 s if the pod were requeued blindly.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c: Vec<(u16, String)> = fake
        .bindings()
        .iter()
        .filter(|b| b.pod == "default/c")
        .map(|b| (b.status, b.node.clone()))
        .collect();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].0, 409);
    assert_eq!(fake.node_of("default", "c").as_deref(), Some("node-b"));
    // The Binding-rejected event is written, as kube-scheduler does.
    fake.wait_for(10, "FailedScheduling for c", |f| {
        !events_for(f, "c", "FailedScheduling").is_empty()
    })
    .await;
    let note = events_for(&fake, "c", "FailedScheduling")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        note.starts_with("Binding rejected: ")
            && note.contains("already assigned to node \"node-b\""),
        "{note}"
    );
    // Scheduling goes on.
    fake.put("pods", pod("d", "headroom", "1"));
    fake.wait_for(15, "d bound", |f| f.node_of("default", "d").is_some())
        .await;
    let report = s.stop().await;
    assert_eq!(
        (report.scheduling.bind_errors, report.scheduling.bound),
        (1, 1),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_two_replicas_with_one_lease_never_both_bind() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "64"));
    fake.put("nodes", node("node-b", "64"));
    // kube-scheduler's lease timings (15 s / 10 s): a leader starved of CPU for two seconds
    // on a loaded machine would otherwise lose the lease mid-test and leave b binding some
    // of the first ten. The hand-over below does not wait for expiry: a releases the lease.
    let yaml = |id: &str| {
        format!(
            "scheduler: {{seed: 1}}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {{mode: none}}\n  reservations: {{enabled: false}}\n  leaderElection: {{identity: {id}, leaseNamespace: kube-system, leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 250ms}}\n"
        )
    };
    let a = serve(&fake, &yaml("replica-a"), "replica-a").await;
    fake.wait_for(10, "a holds the lease", |f| {
        f.get("leases", "kube-system", "headroom")
            .is_some_and(|l| l["spec"]["holderIdentity"] == "replica-a")
    })
    .await;
    let b = serve(&fake, &yaml("replica-b"), "replica-b").await;
    let http = reqwest::Client::new();
    fake.wait_for(10, "b ready", |_| true).await;
    for i in 0..10 {
        fake.put("pods", pod(&format!("p{i}"), "headroom", "1"));
    }
    fake.wait_for(20, "10 pods bound", |f| {
        (0..10).all(|i| f.node_of("default", &format!("p{i}")).is_some())
    })
    .await;
    let r = http.get(b.url("/readyz")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "ok (follower)\n");

    // The leader leaves (SIGTERM): it releases the lease; b takes over and binds.
    let ra = a.stop().await;
    assert_eq!(ra.scheduling.bound, 10, "{ra:?}");
    fake.wait_for(10, "b holds the lease", |f| {
        f.get("leases", "kube-system", "headroom")
            .is_some_and(|l| l["spec"]["holderIdentity"] == "replica-b")
    })
    .await;
    for i in 10..15 {
        fake.put("pods", pod(&format!("p{i}"), "headroom", "1"));
    }
    fake.wait_for(20, "5 more pods bound", |f| {
        (10..15).all(|i| f.node_of("default", &format!("p{i}")).is_some())
    })
    .await;
    let rb = b.stop().await;
    assert_eq!(rb.scheduling.bound, 5, "{rb:?}");

    let bindings = fake.bindings();
    assert_eq!(
        bindings.len(),
        15,
        "each pod bound exactly once: {bindings:?}"
    );
    for bnd in &bindings {
        assert_eq!(bnd.status, 201, "{bnd:?}");
        assert_eq!(
            bnd.holder.as_deref(),
            Some(bnd.replica.as_str()),
            "only the lease holder binds: {bnd:?}"
        );
    }
    assert_eq!(
        bindings.iter().filter(|x| x.replica == "replica-a").count(),
        10
    );
    assert_calls_allowed(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_reservation_lifecycle() {
    use headroom_scheduler::reservation::ReservationSource;
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("ci"));
    fake.put("nodes", node("node-a", "4"));
    let res = |name: &str, node: &str, ttl: Option<&str>| {
        let mut v = json!({"metadata": {"name": name, "namespace": "ci"},
            "spec": {"pod": {"name": format!("builder-{name}")}, "nodeName": node,
                     "resources": {"cpu": "2", "memory": "1Gi"}}});
        if let Some(t) = ttl {
            v["spec"]["ttl"] = json!(t);
        }
        v
    };
    fake.put("reservations", res("active", "node-a", Some("2s")));
    fake.put("reservations", res("missing", "node-x", None));
    let yaml = "serve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {mode: none}\n  leaderElection: {enabled: false}\n  reservations: {gcInterval: 200ms, keepFinished: 1s}\n";
    let s = serve(&fake, yaml, "a").await;
    let phase = |f: &Fake, n: &str| {
        f.get("reservations", "ci", n)
            .and_then(|r| r["status"]["phase"].as_str().map(str::to_string))
    };
    fake.wait_for(10, "statuses", |f| {
        phase(f, "active").as_deref() == Some("Active")
            && phase(f, "missing").as_deref() == Some("Pending")
    })
    .await;
    let missing = fake.get("reservations", "ci", "missing").unwrap();
    assert_eq!(
        missing["status"]["message"],
        "node \"node-x\" does not exist"
    );
    assert!(fake.get("reservations", "ci", "active").unwrap()["status"]["expireAt"].is_string());
    // The node appears: the reservation becomes Active.
    fake.put("nodes", node("node-x", "4"));
    fake.wait_for(10, "missing → Active", |f| {
        phase(f, "missing").as_deref() == Some("Active")
    })
    .await;
    // ttl 2s: Expired, then deleted keepFinished (1s) later.
    fake.wait_for(10, "active → Expired", |f| {
        phase(f, "active").as_deref() == Some("Expired")
    })
    .await;
    fake.wait_for(10, "expired one deleted", |f| {
        f.get("reservations", "ci", "active").is_none()
    })
    .await;
    let report = s.stop().await;
    // The engine's housekeeping marks expiries as they happen (the GC loop finds
    // nothing left to mark); the GC deletes what is finished.
    assert!(report.reservation_gc.1 >= 1, "{report:?}");

    // Consumption: what the Reservation plugin calls in Reserve, written back as status.
    let client = fake.client("a");
    let (cache, rx) = headroom::kube::crd::KubeReservations::new(Arc::new(headroom::kube::now_ms));
    let obj: headroom::kube::crd::ReservationResource =
        serde_json::from_value(fake.get("reservations", "ci", "missing").unwrap()).unwrap();
    cache.set_nodes(["node-a".to_string(), "node-x".to_string()], true);
    cache.apply(Arc::new(obj));
    cache.consume(
        "ci/missing",
        &headroom_scheduler::key::PodKey::new("ci", "builder-missing"),
        "node-x",
    );
    assert!(
        cache
            .current()
            .iter()
            .all(|h| h.phase == headroom_scheduler::reservation::Phase::Consumed)
    );
    let (leader_tx, leader_rx) = tokio::sync::watch::channel(true);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let writer = tokio::spawn(headroom::kube::crd::run_status_writer(
        move |ns: &str| kube::Api::namespaced(client.clone(), ns),
        rx,
        leader_rx,
        async {
            let _ = stop_rx.await;
        },
    ));
    fake.wait_for(10, "Consumed status", |f| {
        phase(f, "missing").as_deref() == Some("Consumed")
    })
    .await;
    let consumed = fake.get("reservations", "ci", "missing").unwrap();
    assert_eq!(
        consumed["status"]["consumedBy"],
        "ci/builder-missing on node-x"
    );
    let _ = stop_tx.send(());
    drop(leader_tx);
    drop(cache);
    let (written, failed) = writer.await.unwrap();
    assert!(written >= 1 && failed == 0);
    assert_calls_allowed(&fake);
}

fn capture(name: &str) -> Value {
    let p = crate::repo("tests/fixtures/kube-captures").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_extender_answers_recorded_kube_scheduler_requests() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    // The cluster of the recording: node objects and pods exactly as kube-scheduler sent them.
    let full = capture("kube-scheduler-extender/02-full-nodes-filter-plain-1.json");
    for n in full["request"]["Nodes"]["items"].as_array().unwrap() {
        fake.put("nodes", n.clone());
    }
    for f in [
        "01-cache-capable-filter-plain-1.json",
        "06-cache-capable-filter-avoid-1.json",
    ] {
        let mut p = capture(&format!("kube-scheduler-extender/{f}"))["request"]["Pod"].clone();
        let meta = p["metadata"].as_object_mut().unwrap();
        meta.remove("resourceVersion");
        // plain-1 names its builder (avoid-1 is a bare pod, its own builder).
        if meta["name"] == "plain-1" {
            meta.insert(
                "annotations".into(),
                serde_json::json!({"headroom.io/builder": "ci/build-plain"}),
            );
        }
        fake.put("pods", p);
    }
    let yaml = "serve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  security: {mode: none}\n  schedule: false\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n  extender:\n    plugins: {TaintToleration: {enabled: true}, NodeResourcesFit: {enabled: true}}\n";
    let store =
        headroom_storage::Store::open_temporary(headroom_storage::StoreConfig::default()).unwrap();
    let s = serve_with_store(&fake, yaml, "a", store.clone()).await;
    let ext = Extender {
        http: reqwest::Client::new(),
        s: &s,
    };
    let ready = || async {
        ext.http
            .get(s.url("/readyz"))
            .send()
            .await
            .map(|r| r.status() == 200)
            .unwrap_or(false)
    };
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while !ready().await {
        assert!(tokio::time::Instant::now() < end, "extender ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    extender_answers_as_recorded(&ext, &full).await;
    extender_judges_known_nodes_by_its_cache(&ext, &fake).await;
    extender_binds_as_recorded(&ext, &fake).await;
    // The bind settled through the engine's sink, as serve's own binds do: plain-1's node
    // is in its builder's placement history (History scores warm caches from it); the bare
    // pod has none. The sink writes behind the answer.
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while store
        .placement_history("ci/build-plain")
        .unwrap()
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < end,
            "the extender's bind settles"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        store.placement_history("ci/build-plain").unwrap(),
        ["node-c"]
    );
    assert_eq!(store.placement_histories().unwrap().len(), 1);
    // kube-scheduler writes the events of the pods it binds through the extender: headroom's
    // reporter, told the bind came from the extender, writes none.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        events_for(&fake, "plain-1", "Scheduled").is_empty(),
        "{:?}",
        fake.list("events")
    );
    extender_bind_refuses_what_it_must(&ext, &fake).await;
    extender_rejects_bad_input(&ext).await;
    // Every request answered above, good or bad, is timed by verb on /metrics.
    let metrics = engine::get_text(&s.url("/metrics")).await;
    let count = |verb: &str| {
        let key = format!("headroom_extender_request_duration_seconds_count{{verb=\"{verb}\"}} ");
        let line = metrics.lines().find_map(|l| l.strip_prefix(&key));
        line.and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{key} in {metrics}"))
    };
    assert!(count("filter") >= 4, "{metrics}");
    assert!(count("prioritize") >= 4, "{metrics}");
    assert!(count("bind") >= 4, "{metrics}");
    let report = s.stop().await;
    assert_eq!(report.terms, 0, "extender-only mode never schedules");
    assert_calls_allowed(&fake);
}

/// A client of the extender under test.
struct Extender<'a> {
    http: reqwest::Client,
    s: &'a Running,
}

impl Extender<'_> {
    /// POSTs `body` to `path`: the status and the JSON answer.
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.s.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        (code, r.json::<Value>().await.unwrap())
    }

    /// Replays a recorded request to the verb it was recorded on.
    async fn recorded(&self, c: &Value) -> (u16, Value) {
        let verb = c["path"].as_str().unwrap().rsplit('/').next().unwrap();
        self.post(&format!("/extender/{verb}"), c["request"].clone())
            .await
    }
}

/// Filter and prioritize answer the recorded requests as kube-scheduler saw them answered.
async fn extender_answers_as_recorded(ext: &Extender<'_>, full: &Value) {
    // plain-1, cache-capable: every node passes, exactly as recorded.
    let c = capture("kube-scheduler-extender/01-cache-capable-filter-plain-1.json");
    let (code, r) = ext.recorded(&c).await;
    assert_eq!(code, 200);
    assert_eq!(r, c["response"]);
    // Full-node form: the node objects come back unchanged, no NodeNames.
    let (code, r) = ext.recorded(full).await;
    assert_eq!(code, 200);
    assert_eq!(r["Nodes"]["items"], full["request"]["Nodes"]["items"]);
    assert!(r.get("NodeNames").is_none());
    assert_eq!(
        (r["FailedNodes"].clone(), r["Error"].clone()),
        (json!({}), json!(""))
    );
    // Prioritize: one entry per node in request order, 0..=10; an empty cluster scores evenly.
    for f in [
        "03-full-nodes-prioritize-plain-1.json",
        "04-cache-capable-prioritize-plain-1.json",
        "09-cache-capable-prioritize-avoid-1.json",
    ] {
        let c = capture(&format!("kube-scheduler-extender/{f}"));
        let (code, r) = ext.recorded(&c).await;
        assert_eq!(code, 200, "{f}");
        let hosts: Vec<&Value> = r.as_array().unwrap().iter().map(|h| &h["Host"]).collect();
        let want: Vec<&Value> = c["response"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| &h["Host"])
            .collect();
        assert_eq!(hosts, want, "{f}");
        let scores: HashSet<i64> = r
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["Score"].as_i64().unwrap())
            .collect();
        assert_eq!(scores.len(), 1, "{f}: {r}");
        assert!(scores.iter().all(|s| (0..=10).contains(s)));
    }
}

/// Changes in the cluster reach the extender's judgments through its cache.
async fn extender_judges_known_nodes_by_its_cache(ext: &Extender<'_>, fake: &Fake) {
    // Taint node-b in the cluster: both forms reject it with the upstream reason (the
    // full-node request still carries the old object; headroom judges known nodes by its
    // cache).
    let mut b = fake.get("nodes", "", "node-b").unwrap();
    b["spec"]["taints"] = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
    fake.put("nodes", b);
    let c = capture("kube-scheduler-extender/06-cache-capable-filter-avoid-1.json");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        let (_, r) = ext.recorded(&c).await;
        if r["FailedAndUnresolvableNodes"].get("node-b").is_some()
            || tokio::time::Instant::now() > deadline
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(r["NodeNames"], json!(["node-a", "node-c"]));
    assert_eq!(
        r["FailedAndUnresolvableNodes"],
        json!({"node-b": "node(s) had untolerated taint(s)"})
    );
    let c7 = capture("kube-scheduler-extender/07-full-nodes-filter-avoid-1.json");
    let (_, r) = ext.recorded(&c7).await;
    let names: Vec<&Value> = r["Nodes"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["metadata"]["name"])
        .collect();
    assert_eq!(names, vec!["node-a", "node-c"]);

    // A 3-CPU pod on node-a: NodeResourcesFit (LeastAllocated) now prefers node-c.
    let mut busy = pod("busy", "default-scheduler", "3");
    busy["spec"]["nodeName"] = json!("node-a");
    fake.put("pods", busy);
    let c = capture("kube-scheduler-extender/09-cache-capable-prioritize-avoid-1.json");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        let (_, r) = ext.recorded(&c).await;
        if r[0]["Score"] != r[1]["Score"] || tokio::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (a, cc) = (
        r[0]["Score"].as_i64().unwrap(),
        r[1]["Score"].as_i64().unwrap(),
    );
    assert!(a < cc && cc <= 10, "{r}");
}

/// Bind, as recorded, and a second bind of the same pod refused.
async fn extender_binds_as_recorded(ext: &Extender<'_>, fake: &Fake) {
    // Bind, as recorded: through pods/binding.
    for f in [
        "05-cache-capable-bind-plain-1.json",
        "10-cache-capable-bind-avoid-1.json",
    ] {
        let c = capture(&format!("kube-scheduler-extender/{f}"));
        let (code, r) = ext.recorded(&c).await;
        assert_eq!((code, &r), (200, &c["response"]), "{f}");
    }
    assert_eq!(
        fake.node_of("default", "plain-1").as_deref(),
        Some("node-c")
    );
    assert_eq!(
        fake.node_of("default", "avoid-1").as_deref(),
        Some("node-c")
    );
    // Binding it again: refused, the pod is no longer pending.
    let c = capture("kube-scheduler-extender/05-cache-capable-bind-plain-1.json");
    let (_, r) = ext.post("/extender/bind", c["request"].clone()).await;
    assert!(
        r["Error"]
            .as_str()
            .unwrap()
            .contains("already bound to node-c"),
        "{r}"
    );
}

/// A bind names a pending pod by uid and a node headroom knows, or nothing is bound.
async fn extender_bind_refuses_what_it_must(ext: &Extender<'_>, fake: &Fake) {
    let bindings_before = fake.bindings().len();
    // Issue "Hardening", defect 1: a bind of any pod to any node. No uid: 400. An unknown
    // node, a wrong uid, a pod that does not exist: an Error, and no binding is posted.
    fake.put("pods", pod("victim", "default-scheduler", "1"));
    let r = ext.http
        .post(ext.s.url("/extender/bind"))
        .json(&json!({"PodName": "victim", "PodNamespace": "default", "PodUID": "", "Node": "node-c"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("PodUID: missing"));
    for (body, want) in [
        (
            json!({"PodName": "victim", "PodNamespace": "default", "PodUID": "u", "Node": "control-plane-1"}),
            "node \"control-plane-1\" is not known to headroom",
        ),
        (
            json!({"PodName": "victim", "PodNamespace": "default", "PodUID": "not-its-uid", "Node": "node-c"}),
            "has uid",
        ),
        (
            json!({"PodName": "ghost", "PodNamespace": "default", "PodUID": "u", "Node": "node-c"}),
            "does not exist",
        ),
    ] {
        let (code, r) = ext.post("/extender/bind", body.clone()).await;
        assert_eq!(code, 200, "{body}");
        assert!(r["Error"].as_str().unwrap().contains(want), "{body}: {r}");
    }
    assert_eq!(fake.bindings().len(), bindings_before, "nothing was bound");
}

/// Malformed requests: 400 naming the problem.
async fn extender_rejects_bad_input(ext: &Extender<'_>) {
    // Bad input: 400 naming the problem, never a panic.
    for (path, body, want) in [
        ("/extender/filter", "{", "invalid ExtenderArgs"),
        ("/extender/filter", "{\"NodeNames\": []}", "Pod: missing"),
        (
            "/extender/prioritize",
            "{\"Pod\": {\"spec\": {\"containers\": 3}}, \"NodeNames\": []}",
            "Pod.spec.containers",
        ),
        (
            "/extender/bind",
            "{\"PodName\": \"x\"}",
            "PodNamespace: missing",
        ),
    ] {
        let r = ext
            .http
            .post(ext.s.url(path))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path} {body}");
        let text = r.text().await.unwrap();
        assert!(text.contains(want), "{path} {body}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_fake_answers_like_the_recorded_api_server() {
    let fake = Fake::start().await;
    let http = reqwest::Client::new();
    let already = capture("kube-apiserver/binding-already-bound-409.json");
    let mismatch = capture("kube-apiserver/binding-uid-mismatch.json");
    let mut plain = pod("plain-1", "default-scheduler", "500m");
    plain["metadata"]["uid"] = json!("db9e6ddb-f83e-4861-b336-8e9aca6f5164");
    plain["spec"]["nodeName"] = json!("node-c");
    fake.put("pods", plain);
    let mut huge = pod("huge-1", "default-scheduler", "64");
    huge["metadata"]["uid"] = json!("b73aecef-9715-46e2-9e75-23d6302f6742");
    fake.put("pods", huge);
    for name in [
        "binding-already-bound-409.json",
        "binding-missing-pod-404.json",
        "binding-uid-mismatch.json",
        "list-bad-continue-token.json",
    ] {
        let c = capture(&format!("kube-apiserver/{name}"));
        let url = format!("{}{}", fake.url(), c["request"]["path"].as_str().unwrap());
        let req = match c["request"]["method"].as_str().unwrap() {
            "POST" => http.post(url).json(&c["request"]["body"]),
            _ => http.get(url),
        };
        let r = req.send().await.unwrap();
        assert_eq!(
            r.status().as_u16() as u64,
            c["status"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r.json::<Value>().await.unwrap(), c["response"], "{name}");
    }
    // And headroom reads them as upstream does: a conflict is final, nothing else is.
    let client = fake.client("t");
    let e = headroom::kube::bind::bind_pod(
        &client,
        "default",
        "plain-1",
        "db9e6ddb-f83e-4861-b336-8e9aca6f5164",
        "node-a",
        &Default::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(e.is_final(), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "binding rejected: {}",
            already["response"]["message"].as_str().unwrap()
        )
    );
    let e = headroom::kube::bind::bind_pod(
        &client,
        "default",
        "huge-1",
        "00000000-0000-0000-0000-000000000000",
        "node-a",
        &Default::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "binding rejected: {}",
            mismatch["response"]["message"].as_str().unwrap()
        )
    );
    let e = headroom::kube::bind::bind_pod(
        &client,
        "default",
        "missing-pod",
        "",
        "node-a",
        &Default::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, headroom::kube::bind::BindError::NotFound(_)),
        "{e}"
    );
    // The condition kube-scheduler writes has the shape headroom writes.
    let cond = capture("kube-apiserver/pod-unschedulable-condition.json");
    let recorded = &cond["response"]["status"]["conditions"][0];
    let ours = headroom::kube::recorder::unschedulable_condition(
        "Unschedulable",
        recorded["message"].as_str().unwrap(),
        0,
    );
    let ours = &ours["status"]["conditions"][0];
    for k in ["type", "status", "reason", "message", "lastProbeTime"] {
        assert_eq!(ours[k], recorded[k], "{k}");
    }
}
