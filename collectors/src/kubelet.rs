//! Kubelet summary API source: `/stats/summary` of every configured node, through the
//! read-only port or the API server's node proxy.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::{KubeletConfig, NodeTarget, SourceKind};
use crate::error::CollectError;
use crate::http::HttpClient;
use crate::metrics::Metrics;
use crate::samples::{Batch, Coverage, PodSeen, PodView, Sample, Signal, now_ms, sum_opt};
use crate::summary::{ContainerStats, FsStats, Summary, parse_time_ms};
use headroom_scheduler::key::Uid;

/// Polls the kubelets of the configured nodes.
pub(crate) struct KubeletSource {
    config: KubeletConfig,
    http: Arc<HttpClient>,
}

impl KubeletSource {
    pub fn new(config: &KubeletConfig) -> Result<Self, CollectError> {
        Ok(Self {
            http: Arc::new(HttpClient::new(&config.http, &config.schedule)?),
            config: config.clone(),
        })
    }

    /// One cycle: every node, at most `schedule.concurrency` at once.
    pub async fn collect(&self, metrics: &Metrics) -> Batch {
        let semaphore = Arc::new(Semaphore::new(self.config.schedule.concurrency.max(1)));
        let mut tasks = JoinSet::new();
        for target in &self.config.nodes {
            let url = self.config.endpoint.url_for(target);
            let name = target.name().to_owned();
            let http = self.http.clone();
            let semaphore = semaphore.clone();
            let metrics = metrics.clone();
            // Dropping the JoinSet (shutdown) aborts these tasks, cancelling their requests.
            tasks.spawn(async move {
                // The semaphore is never closed, so acquiring cannot fail; if it ever did,
                // going on without a permit is better than losing the node.
                let _permit = semaphore.acquire_owned().await.ok();
                let started = Instant::now();
                let result = fetch_summary(&http, &url).await;
                metrics.observe_duration(SourceKind::Kubelet, started.elapsed());
                (name, url, result)
            });
        }
        let mut batch = Batch::default();
        let mut covered = HashSet::new();
        let mut pods = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            batch.requests += 1;
            let Ok((name, _url, result)) = joined else {
                // A panicking task is a bug, not input; it was already reported by tokio.
                continue;
            };
            match result {
                Ok((summary, fetched_ms)) => {
                    let node = if summary.node.node_name.is_empty() {
                        name.clone()
                    } else {
                        summary.node.node_name.clone()
                    };
                    map_summary(&summary, &node, fetched_ms, &mut batch.samples, &mut pods);
                    covered.insert(node);
                }
                Err(e) => batch.errors.push((name, e)),
            }
        }
        batch.pods = Some(PodView {
            pods,
            coverage: Coverage::Nodes(covered),
        });
        batch
    }
}

async fn fetch_summary(http: &HttpClient, url: &str) -> Result<(Summary, i64), CollectError> {
    let body = http.get_ok(url).await?;
    let fetched_ms = now_ms();
    let summary = parse_summary(&body).map_err(|message| CollectError::Decode {
        url: url.to_owned(),
        message,
    })?;
    Ok((summary, fetched_ms))
}

/// Parses a `/stats/summary` body.
pub fn parse_summary(body: &[u8]) -> Result<Summary, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// Parses a `/stats/summary` body and maps it into samples, as one poll of a node does
/// after the fetch; returns how many samples and pods it yields. The network-free half of
/// a poll, for checking captured bodies (and fuzzing).
pub fn decode_summary(body: &[u8], node: &str, fetched_ms: i64) -> Result<(usize, usize), String> {
    let summary = parse_summary(body)?;
    let mut samples = Vec::new();
    let mut pods = Vec::new();
    map_summary(&summary, node, fetched_ms, &mut samples, &mut pods);
    Ok((samples.len(), pods.len()))
}

/// Bytes and counters are exact in `u64`; converting to the store's `f64` loses precision
/// only past 2^53 (8 PiB), far beyond any value stored here.
fn f(v: u64) -> f64 {
    v as f64
}

fn cpu_cores(c: &ContainerStats) -> Option<f64> {
    c.cpu
        .as_ref()
        .and_then(|cpu| cpu.usage_nano_cores)
        .map(|n| f(n) / 1e9)
}

fn fs_pair(
    fs: Option<&FsStats>,
    available: Signal,
    capacity: Signal,
    node: &str,
    fallback_ms: i64,
    out: &mut Vec<Sample>,
) {
    let Some(fs) = fs else { return };
    let ts = parse_time_ms(fs.time.as_deref()).unwrap_or(fallback_ms);
    if let Some(v) = fs.available_bytes {
        out.push(Sample::node(available, node, ts, f(v)));
    }
    if let Some(v) = fs.capacity_bytes {
        out.push(Sample::node(capacity, node, ts, f(v)));
    }
}

/// Maps a summary into stored samples and the pods seen. Each sample carries the kubelet's
/// own observation time when it reports one, else the time the summary was fetched.
fn map_summary(
    summary: &Summary,
    node: &str,
    fetched_ms: i64,
    out: &mut Vec<Sample>,
    pods: &mut Vec<PodSeen>,
) {
    let n = &summary.node;
    if let Some(cpu) = &n.cpu
        && let Some(nano) = cpu.usage_nano_cores
    {
        let ts = parse_time_ms(cpu.time.as_deref()).unwrap_or(fetched_ms);
        out.push(Sample::node(
            Signal::NodeCpuUsageCores,
            node,
            ts,
            f(nano) / 1e9,
        ));
    }
    if let Some(mem) = &n.memory {
        let ts = parse_time_ms(mem.time.as_deref()).unwrap_or(fetched_ms);
        if let Some(v) = mem.working_set_bytes {
            out.push(Sample::node(
                Signal::NodeMemoryWorkingSetBytes,
                node,
                ts,
                f(v),
            ));
        }
        if let Some(v) = mem.available_bytes {
            out.push(Sample::node(
                Signal::NodeMemoryAvailableBytes,
                node,
                ts,
                f(v),
            ));
        }
    }
    fs_pair(
        n.fs.as_ref(),
        Signal::NodeFsAvailableBytes,
        Signal::NodeFsCapacityBytes,
        node,
        fetched_ms,
        out,
    );
    fs_pair(
        n.runtime.as_ref().and_then(|r| r.image_fs.as_ref()),
        Signal::NodeImagefsAvailableBytes,
        Signal::NodeImagefsCapacityBytes,
        node,
        fetched_ms,
        out,
    );

    for pod in &summary.pods {
        let r = &pod.pod_ref;
        if r.name.is_empty() || r.namespace.is_empty() {
            // Without a name the series cannot be labelled; skip rather than invent one.
            continue;
        }
        let mut pod_ts = fetched_ms;
        let mut cpu_sum = None;
        let mut mem_sum = None;
        for c in &pod.containers {
            if c.name.is_empty() {
                continue;
            }
            if let Some(cores) = cpu_cores(c) {
                let ts = parse_time_ms(c.cpu.as_ref().and_then(|x| x.time.as_deref()))
                    .unwrap_or(fetched_ms);
                out.push(Sample::container(
                    Signal::ContainerCpuUsageCores,
                    &r.namespace,
                    &r.name,
                    &c.name,
                    node,
                    ts,
                    cores,
                ));
                cpu_sum = sum_opt(cpu_sum, Some(cores));
                pod_ts = ts;
            }
            if let Some(mem) = &c.memory
                && let Some(ws) = mem.working_set_bytes
            {
                let ts = parse_time_ms(mem.time.as_deref()).unwrap_or(fetched_ms);
                out.push(Sample::container(
                    Signal::ContainerMemoryWorkingSetBytes,
                    &r.namespace,
                    &r.name,
                    &c.name,
                    node,
                    ts,
                    f(ws),
                ));
                mem_sum = sum_opt(mem_sum, Some(f(ws)));
            }
        }
        // The pod-level block also counts the pod's own cgroup overhead; prefer it for the
        // run's usage when the kubelet reports it.
        let pod_cpu = pod
            .cpu
            .as_ref()
            .and_then(|c| c.usage_nano_cores)
            .map(|n| f(n) / 1e9)
            .or(cpu_sum);
        let pod_mem = pod
            .memory
            .as_ref()
            .and_then(|m| m.working_set_bytes)
            .map(f)
            .or(mem_sum);
        if let Some(cpu) = &pod.cpu
            && let Some(ts) = parse_time_ms(cpu.time.as_deref())
        {
            pod_ts = ts;
        }
        if let Some(es) = &pod.ephemeral_storage
            && let Some(used) = es.used_bytes
        {
            let ts = parse_time_ms(es.time.as_deref()).unwrap_or(fetched_ms);
            out.push(Sample::pod(
                Signal::PodEphemeralStorageUsedBytes,
                &r.namespace,
                &r.name,
                node,
                ts,
                f(used),
            ));
        }
        pods.push(PodSeen {
            uid: if r.uid.is_empty() {
                Uid::from(format!("{}/{}", r.namespace, r.name))
            } else {
                Uid::from(r.uid.as_str())
            },
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            node: node.to_owned(),
            ts_ms: pod_ts,
            cpu_cores: pod_cpu,
            memory_bytes: pod_mem,
        });
    }
}

/// The URL polled for `node` (exposed for diagnostics and the CLI).
pub fn summary_url(config: &KubeletConfig, node: &NodeTarget) -> String {
    config.endpoint.url_for(node)
}
