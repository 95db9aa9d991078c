//! The replay CI can run (issue #72): `headroom serve` against the fake API server, with
//! each node a [`ProcessKubelet`] that runs the pods as real `headroom-workload` processes
//! in the node's memory cgroup, its memory a hard wall. The kernel judges: a build that
//! outgrows its node is OOM-killed, comes back as `OOMKilled` (exit code 137) and is
//! counted; headroom's collectors read the cgroups through the kubelet's summary, as they
//! read a real kubelet's, and `/explain` shows the measured usage behind a decision.
//!
//! Where the test process may not make memory cgroups (not root, no memory controller) the
//! tests skip, saying why.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use serde_json::{Value, json};

use super::fake::Fake;
use super::namespace;
use super::process_kubelet::{Cgroups, Ended, ProcessKubelet};
use super::sections::{SERVE_BASE, config, get_json, start, until_measured, within};

const MI: u64 = 1 << 20;
/// Each node's wall.
const WALL: u64 = 192 * MI;

/// A build's profile as the driver serves it: memory held (MiB) and run time (s).
#[derive(Clone, Copy)]
struct Profile {
    mib: u64,
    secs: u64,
}

/// The replay driver's profile server: the builds learn their usage here, by name, never
/// from their pod.
async fn driver(profiles: HashMap<String, Profile>) -> SocketAddr {
    let profiles = Arc::new(Mutex::new(profiles));
    async fn profile(
        State(p): State<Arc<Mutex<HashMap<String, Profile>>>>,
        Path((_ns, pod)): Path<(String, String)>,
    ) -> (axum::http::StatusCode, String) {
        match p.lock().unwrap().get(&pod) {
            Some(p) => (
                axum::http::StatusCode::OK,
                format!(
                    "builder {pod}\nmemory_bytes {}\nramp_ms 500\ncpu_cores 0.01\ncold_ms {}\nwarm_ms {}\n",
                    p.mib * MI,
                    p.secs * 1000,
                    p.secs * 1000
                ),
            ),
            None => (axum::http::StatusCode::NOT_FOUND, "no such pod\n".into()),
        }
    }
    let app = Router::new()
        .route("/profile/{ns}/{pod}", get(profile))
        .route("/started/{ns}/{pod}", get(|| async { "ok\n" }))
        .route("/done/{ns}/{pod}", get(|| async { "ok\n" }))
        .with_state(profiles);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn node(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "spec": {},
           "status": {"allocatable": {"cpu": "2", "memory": "192Mi", "pods": "110"},
                      "capacity": {"cpu": "2", "memory": "192Mi", "pods": "110"}}})
}

/// A build requesting `request` of memory; bound to `node` already when given.
fn build(name: &str, request: &str, node: Option<&str>) -> Value {
    let mut p = json!({"metadata": {"name": name, "namespace": "ci",
            "labels": {"bkci.dispatch.kubenetes/core": name}},
        "spec": {"schedulerName": "headroom", "restartPolicy": "Never",
            "containers": [{"name": "build", "image": "localhost/headroom-workload:1",
                "resources": {"requests": {"cpu": "100m", "memory": request}}}]},
        "status": {"phase": "Pending"}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

/// Waits until `f` gives something, at most `secs` (`within`, keeping what it gave).
async fn until<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let mut got = None;
    let done = within(secs as f64, || {
        got = f();
        got.is_some()
    })
    .await;
    assert!(done, "timed out waiting for {what}");
    got.unwrap()
}

fn cgroups(tag: &str) -> Option<Cgroups> {
    match Cgroups::open(tag) {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("skipping: real processes need a memory cgroup of their own: {why}");
            None
        }
    }
}

/// What one replay of the hot-node case ended with: where the new build went, the OOM
/// kills on each node, and `/explain` of its decision.
struct Outcome {
    node: String,
    oom_kills: HashMap<String, u64>,
    explain: Value,
}

/// node-a runs a build that requests little and holds 112 MiB; node-b one that requests
/// 128 Mi and holds 8. A new build (16 Mi requested, 112 MiB held) arrives once both are
/// measured: by requests node-a looks emptier, by real memory it has 80 MiB left of its
/// 192 MiB wall.
async fn hot_node_case(tag: &str, requests_only: bool) -> Option<Outcome> {
    let cg = cgroups(tag)?;
    let fake = Fake::start().await;
    let profiles = HashMap::from([
        (
            "hog".to_string(),
            Profile {
                mib: 112,
                secs: 120,
            },
        ),
        ("idle".to_string(), Profile { mib: 8, secs: 120 }),
        ("new".to_string(), Profile { mib: 112, secs: 8 }),
    ]);
    let drv = driver(profiles).await;
    let ka = ProcessKubelet::start(&fake, &cg, "node-a", WALL, drv).await;
    let kb = ProcessKubelet::start(&fake, &cg, "node-b", WALL, drv).await;
    fake.put("namespaces", namespace("ci"));
    fake.put("nodes", node("node-a"));
    fake.put("nodes", node("node-b"));
    fake.put("pods", build("hog", "16Mi", Some("node-a")));
    fake.put("pods", build("idle", "128Mi", Some("node-b")));
    let base = format!(
        "{SERVE_BASE}analytics: {{refreshInterval: 1s}}\n{}",
        super::kubelet::collectors_yaml_at(&[("node-a", ka.addr), ("node-b", kb.addr)])
    );
    let mut c = config(&base, "");
    if requests_only {
        c = headroom::simulate::Policy::Requests.config(&c);
    }
    let s = start(&fake, c, None).await;
    // Both nodes measured, node-a with the hog's memory in it.
    until(30, "the hog's memory", || {
        (ka.working_set() > 100 * MI).then_some(())
    })
    .await;
    until_measured(&s, &["node-a", "node-b"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fake.put("pods", build("new", "16Mi", None));
    let node = until(20, "new bound", || fake.node_of("ci", "new")).await;
    let on = if node == "node-a" { &ka } else { &kb };
    let ended = until(60, "new ended", || on.ended("new")).await;
    // The hog may be the one the kernel chose; give its kubelet a moment to reap it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let explain = get_json(&s.url("/explain/ci/new")).await;
    let kills = |k: &ProcessKubelet| {
        ["hog", "idle", "new"]
            .iter()
            .filter_map(|p| k.ended(p))
            .map(|e| e.kernel_oom_kills)
            .sum::<u64>()
    };
    let oom_kills = HashMap::from([
        ("node-a".to_string(), kills(&ka)),
        ("node-b".to_string(), kills(&kb)),
    ]);
    eprintln!("{tag}: new on {node}, ended {ended:?}, kills {oom_kills:?}");
    s.stop().await;
    Some(Outcome {
        node,
        oom_kills,
        explain,
    })
}

/// A build that outgrows any node is killed by the kernel inside its node's cgroup and
/// reported as a kubelet reports it: `Failed`, exit code 137, `OOMKilled`, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_oom_kill_comes_back_as_oom_killed_and_is_counted() {
    let Some(cg) = cgroups("oom") else { return };
    let fake = Fake::start().await;
    let drv = driver(HashMap::from([(
        "over".to_string(),
        Profile { mib: 400, secs: 30 },
    )]))
    .await;
    let k = ProcessKubelet::start(&fake, &cg, "node-a", WALL, drv).await;
    fake.put("namespaces", namespace("ci"));
    fake.put("pods", build("over", "16Mi", Some(k.node())));
    let e = until(30, "over ended", || k.ended("over")).await;
    assert_eq!(
        e,
        Ended {
            phase: "Failed",
            exit_code: 137,
            reason: "OOMKilled",
            kernel_oom_kills: 1
        }
    );
    let pod = fake.get("pods", "ci", "over").unwrap();
    assert_eq!(pod["status"]["phase"], "Failed");
    let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(137), Some("OOMKilled"))
    );
}

/// The hot-node case on real processes: kube-scheduler's request-based scoring (`requests`)
/// sends the new build to node-a, where the kernel kills a build; headroom reads the
/// cgroups' real usage through the kubelet's summary, sends it to node-b, and nothing is
/// killed. `/explain` shows the measured memory behind headroom's choice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headroom_keeps_a_build_off_the_node_real_memory_fills_on_real_processes() {
    let Some(requests) = hot_node_case("requests", true).await else {
        return;
    };
    assert_eq!(requests.node, "node-a");
    assert!(
        requests.oom_kills["node-a"] >= 1,
        "{:?}",
        requests.oom_kills
    );

    let hr = hot_node_case("headroom", false).await.unwrap();
    assert_eq!(hr.node, "node-b", "{}", hr.explain);
    assert_eq!(hr.oom_kills.values().sum::<u64>(), 0, "{:?}", hr.oom_kills);
    // The decision's record carries what the collectors measured in node-b's cgroup: the
    // idle build's few MiB, not its 128 Mi request.
    let chosen = &hr.explain["inputs"]["chosenNode"];
    assert_eq!(chosen["headroom"]["basis"], "measured", "{}", hr.explain);
    let ws = chosen["usage"]["memory_working_set_bytes"]["current"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(ws > 1.0e6 && ws < 64.0 * MI as f64, "{ws}: {}", hr.explain);
}
