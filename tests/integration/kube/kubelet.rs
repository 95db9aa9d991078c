//! A kubelet stand-in on 127.0.0.1:0 whose `/stats/summary` reports what the test says,
//! stamped with the current time (so every poll is a new sample): one node's CPU and
//! memory and the pods running there, in the real summary's JSON shape.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

/// A pod the kubelet reports.
#[derive(Debug, Clone)]
pub struct PodStats {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid (the collectors match pods by it).
    pub uid: String,
    /// CPU in use, cores.
    pub cpu: f64,
    /// Memory working set, bytes.
    pub memory: f64,
}

#[derive(Debug, Default)]
struct Inner {
    node: String,
    cpu: f64,
    memory: f64,
    pods: Vec<PodStats>,
    polls: u64,
    /// How long before its pods the node's own usage is stamped, ms (0: the same second).
    node_lag_ms: i64,
}

/// The fake kubelet of one node.
#[derive(Clone)]
pub struct FakeKubelet {
    inner: Arc<Mutex<Inner>>,
    /// Where it listens.
    pub addr: SocketAddr,
}

fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn summary(State(k): State<Arc<Mutex<Inner>>>) -> axum::Json<Value> {
    let mut i = k.lock().unwrap();
    i.polls += 1;
    if i.node_lag_ms > 0 {
        // A real kubelet reads its node's root cgroup on its housekeeping and its
        // containers when asked: the node's figures are older than its pods'.
        let now = chrono::Utc::now();
        let stamp = |t: chrono::DateTime<chrono::Utc>| {
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let node_t = stamp(now - chrono::Duration::milliseconds(i.node_lag_ms));
        let pod_t = stamp(now);
        return axum::Json(summary_json_at(
            &i.node, i.cpu, i.memory, &i.pods, "main", &node_t, &pod_t,
        ));
    }
    axum::Json(summary_json(&i.node, i.cpu, i.memory, &i.pods, "main"))
}

/// A `/stats/summary` body in the real summary's JSON shape, stamped now: the node's CPU
/// (cores) and memory working set (bytes), and each pod with one container named
/// `container`.
pub fn summary_json(
    node: &str,
    cpu: f64,
    memory: f64,
    pods: &[PodStats],
    container: &str,
) -> Value {
    let t = now_rfc3339();
    summary_json_at(node, cpu, memory, pods, container, &t, &t)
}

/// [`summary_json`] with the node's figures stamped `node_t` and its pods' `pod_t`.
fn summary_json_at(
    node: &str,
    cpu: f64,
    memory: f64,
    pods: &[PodStats],
    container: &str,
    node_t: &str,
    pod_t: &str,
) -> Value {
    let t = pod_t;
    let pods: Vec<Value> = pods
        .iter()
        .map(|p| {
            json!({
                "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
                "startTime": t,
                "containers": [{"name": container, "startTime": t,
                    "cpu": {"time": t, "usageNanoCores": (p.cpu * 1e9) as u64},
                    "memory": {"time": t, "workingSetBytes": p.memory as u64}}],
                "cpu": {"time": t, "usageNanoCores": (p.cpu * 1e9) as u64},
                "memory": {"time": t, "workingSetBytes": p.memory as u64},
            })
        })
        .collect();
    let t = node_t;
    json!({
        "node": {
            "nodeName": node,
            "startTime": t,
            "cpu": {"time": t, "usageNanoCores": (cpu * 1e9) as u64},
            "memory": {"time": t, "workingSetBytes": memory as u64},
            "fs": {"time": t, "availableBytes": 80_000_000_000u64, "capacityBytes": 100_000_000_000u64},
        },
        "pods": pods,
    })
}

impl FakeKubelet {
    /// Starts one for `node`, reporting `cpu` cores and `memory` bytes in use.
    pub async fn start(node: &str, cpu: f64, memory: f64) -> FakeKubelet {
        let inner = Arc::new(Mutex::new(Inner {
            node: node.to_string(),
            cpu,
            memory,
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/stats/summary", get(summary))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeKubelet { inner, addr }
    }

    /// Sets the node's usage.
    #[allow(dead_code)] // used by some tests only
    pub fn set_node(&self, cpu: f64, memory: f64) {
        let mut i = self.inner.lock().unwrap();
        i.cpu = cpu;
        i.memory = memory;
    }

    /// Stamps the node's own usage `ms` before its pods' (0: the same instant).
    #[allow(dead_code)] // used by some tests only
    pub fn set_node_lag_ms(&self, ms: i64) {
        self.inner.lock().unwrap().node_lag_ms = ms;
    }

    /// Sets the pods it reports.
    pub fn set_pods(&self, pods: Vec<PodStats>) {
        self.inner.lock().unwrap().pods = pods;
    }

    /// Summaries served so far.
    pub fn polls(&self) -> u64 {
        self.inner.lock().unwrap().polls
    }
}

/// A `collectors.kubelet` section polling these kubelets every second.
pub fn collectors_yaml(kubelets: &[(&str, &FakeKubelet)]) -> String {
    let at: Vec<(&str, SocketAddr)> = kubelets.iter().map(|(n, k)| (*n, k.addr)).collect();
    collectors_yaml_at(&at)
}

/// [`collectors_yaml`] for kubelets at these addresses.
pub fn collectors_yaml_at(kubelets: &[(&str, SocketAddr)]) -> String {
    let nodes: Vec<String> = kubelets
        .iter()
        .map(|(name, addr)| format!("{{name: {name}, address: \"{addr}\"}}"))
        .collect();
    format!(
        "collectors:\n  kubelet:\n    nodes: [{}]\n    endpoint: {{kind: template, url: \"http://{{address}}/stats/summary\"}}\n    schedule: {{interval: 1s, jitter: 0s, retries: 0, timeout: 2s}}\n  runs: {{missingCycles: 1}}\n",
        nodes.join(", ")
    )
}
