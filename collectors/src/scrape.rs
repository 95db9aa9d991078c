//! Text exposition scrape source (`prometheus-parse`): kubelet `/metrics/resource` and
//! node-exporter `/metrics`, for setups without a Prometheus server.
//!
//! CPU is exposed as counters, so usage is the rate between two scrapes of the same target:
//! the first scrape of a target yields no CPU sample.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use prometheus_parse::{Scrape, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::{ScrapeConfig, ScrapeKind, ScrapeTarget, SourceKind};
use crate::error::CollectError;
use crate::http::HttpClient;
use crate::metrics::Metrics;
use crate::samples::{Batch, Coverage, PodSeen, PodView, Sample, Signal, now_ms, sum_opt};
use headroom_scheduler::key::Uid;

/// Parses exposition text. Lines that are not valid samples are skipped (as Prometheus'
/// own parser would reject the whole scrape, being lenient keeps the usable part).
pub fn parse_exposition(text: &str, default_ms: i64) -> Result<Scrape, String> {
    let at = chrono::DateTime::from_timestamp_millis(default_ms).unwrap_or_default();
    Scrape::parse_at(text.lines().map(|l| Ok(l.to_owned())), at).map_err(|e| e.to_string())
}

/// Parses an exposition body (lossy UTF-8, as a scrape reads it) and maps it into samples
/// for a target of `kind` on `node`, as one scrape does after the fetch; returns how many
/// gauge samples and counter points it yields and how many values were not finite. The
/// network-free half of a scrape, for checking captured bodies (and fuzzing).
pub fn decode_exposition(
    body: &[u8],
    kind: ScrapeKind,
    node: &str,
    mountpoint: &str,
    fetched_ms: i64,
) -> Result<(usize, usize), String> {
    let text = String::from_utf8_lossy(body);
    let scrape = parse_exposition(&text, fetched_ms)?;
    let data = map_scrape(&scrape, kind, node, mountpoint);
    Ok((data.gauges.len() + data.counters.len(), data.non_finite))
}

/// Value of a counter, gauge or untyped sample.
pub fn scalar(value: &Value) -> Option<f64> {
    match value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

/// Key of a counter whose rate is computed between scrapes.
type CounterKey = (String, Vec<(String, String)>);

/// The scrape source, with the previous counter values of every target.
pub(crate) struct ScrapeSource {
    config: ScrapeConfig,
    http: Arc<HttpClient>,
    /// counter → (ms, value) at the previous scrape.
    previous: HashMap<CounterKey, (i64, f64)>,
}

/// A counter read from a target: output signal, output labels, ms, counter value.
type CounterPoint = (Signal, Vec<(String, String)>, i64, f64);

/// What one target yielded, before rates.
struct TargetData {
    node: String,
    kind: ScrapeKind,
    gauges: Vec<Sample>,
    /// (signal, labels of the output sample, ms, counter value)
    counters: Vec<CounterPoint>,
    non_finite: usize,
}

fn target_node(t: &ScrapeTarget) -> String {
    if let Some(n) = &t.node {
        return n.clone();
    }
    reqwest::Url::parse(&t.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| t.url.clone())
}

impl ScrapeSource {
    pub fn new(config: &ScrapeConfig) -> Result<Self, CollectError> {
        Ok(Self {
            http: Arc::new(HttpClient::new(&config.http, &config.schedule)?),
            config: config.clone(),
            previous: HashMap::new(),
        })
    }

    pub async fn collect(&mut self, metrics: &Metrics) -> Batch {
        let semaphore = Arc::new(Semaphore::new(self.config.schedule.concurrency.max(1)));
        let mut tasks = JoinSet::new();
        for target in &self.config.targets {
            let http = self.http.clone();
            let semaphore = semaphore.clone();
            let metrics = metrics.clone();
            let target = target.clone();
            let mountpoint = self.config.mountpoint.clone();
            tasks.spawn(async move {
                let _permit = semaphore.acquire_owned().await.ok();
                let started = Instant::now();
                let result = http.get_ok(&target.url).await;
                metrics.observe_duration(SourceKind::Scrape, started.elapsed());
                let fetched_ms = now_ms();
                let node = target_node(&target);
                let result = result.and_then(|body| {
                    let text = String::from_utf8_lossy(&body);
                    let scrape = parse_exposition(&text, fetched_ms).map_err(|message| {
                        CollectError::Decode {
                            url: target.url.clone(),
                            message,
                        }
                    })?;
                    Ok(map_scrape(&scrape, target.kind, &node, &mountpoint))
                });
                (target.url, result)
            });
        }
        let mut batch = Batch::default();
        let mut covered = HashSet::new();
        let mut pod_targets = false;
        let mut pods: BTreeMap<(String, String), PodSeen> = BTreeMap::new();
        let mut seen_counters = HashSet::new();
        while let Some(joined) = tasks.join_next().await {
            batch.requests += 1;
            let Ok((url, result)) = joined else { continue };
            let data = match result {
                Ok(d) => d,
                Err(e) => {
                    batch.errors.push((url, e));
                    continue;
                }
            };
            if data.non_finite > 0 {
                batch.errors.push((
                    url.clone(),
                    CollectError::NonFinite {
                        signal: url.clone(),
                        count: data.non_finite,
                    },
                ));
            }
            if data.kind == ScrapeKind::KubeletResource {
                pod_targets = true;
                covered.insert(data.node.clone());
            }
            let mut samples = data.gauges;
            for (signal, labels, ts, value) in data.counters {
                let key = (signal.metric().to_owned(), labels.clone());
                seen_counters.insert(key.clone());
                if let Some(&(prev_ts, prev_v)) = self.previous.get(&key) {
                    // Same timestamp: the target has not refreshed the counter yet; keep the
                    // older point so the next rate spans real time. A decrease is a reset.
                    if ts <= prev_ts {
                        continue;
                    }
                    if value >= prev_v {
                        let rate = (value - prev_v) / ((ts - prev_ts) as f64 / 1000.0);
                        samples.push(Sample {
                            signal,
                            labels,
                            ts_ms: ts,
                            value: rate,
                        });
                    }
                }
                self.previous.insert(key, (ts, value));
            }
            for s in &samples {
                if data.kind != ScrapeKind::KubeletResource {
                    continue;
                }
                let get = |k: &str| {
                    s.labels
                        .iter()
                        .find(|(lk, _)| lk == k)
                        .map(|(_, v)| v.clone())
                };
                let (Some(ns), Some(pod)) = (get("namespace"), get("pod")) else {
                    continue;
                };
                let seen = pods
                    .entry((ns.clone(), pod.clone()))
                    .or_insert_with(|| PodSeen {
                        uid: Uid::from(format!("{ns}/{pod}")),
                        namespace: ns,
                        name: pod,
                        node: data.node.clone(),
                        ts_ms: s.ts_ms,
                        cpu_cores: None,
                        memory_bytes: None,
                    });
                match s.signal {
                    Signal::ContainerCpuUsageCores => {
                        seen.cpu_cores = sum_opt(seen.cpu_cores, Some(s.value))
                    }
                    Signal::ContainerMemoryWorkingSetBytes => {
                        seen.memory_bytes = sum_opt(seen.memory_bytes, Some(s.value))
                    }
                    _ => {}
                }
            }
            batch.samples.extend(samples);
        }
        // Forget counters of containers that are gone, so the map does not grow forever;
        // counters of failed targets are kept for the next successful scrape.
        let failed: HashSet<&String> = batch.errors.iter().map(|(u, _)| u).collect();
        if failed.is_empty() {
            self.previous.retain(|k, _| seen_counters.contains(k));
        }
        if pod_targets {
            batch.pods = Some(PodView {
                pods: pods.into_values().collect(),
                coverage: Coverage::Nodes(covered),
            });
        }
        batch
    }
}

fn label<'a>(s: &'a prometheus_parse::Sample, k: &str) -> Option<&'a str> {
    s.labels.get(k).filter(|v| !v.is_empty())
}

fn map_scrape(scrape: &Scrape, kind: ScrapeKind, node: &str, mountpoint: &str) -> TargetData {
    let mut data = TargetData {
        node: node.to_owned(),
        kind,
        gauges: Vec::new(),
        counters: Vec::new(),
        non_finite: 0,
    };
    let node_labels = vec![("node".to_owned(), node.to_owned())];
    let push = |data: &mut TargetData, sample: Sample| {
        if sample.value.is_finite() {
            data.gauges.push(sample);
        } else {
            data.non_finite += 1;
        }
    };
    match kind {
        ScrapeKind::KubeletResource => {
            for s in &scrape.samples {
                let Some(v) = scalar(&s.value) else { continue };
                let ts = s.timestamp.timestamp_millis();
                let container = || {
                    Some((
                        label(s, "namespace")?,
                        label(s, "pod")?,
                        label(s, "container")?,
                    ))
                };
                match s.metric.as_str() {
                    "node_cpu_usage_seconds_total" if v.is_finite() => {
                        data.counters
                            .push((Signal::NodeCpuUsageCores, node_labels.clone(), ts, v))
                    }
                    "node_memory_working_set_bytes" => push(
                        &mut data,
                        Sample::node(Signal::NodeMemoryWorkingSetBytes, node, ts, v),
                    ),
                    "container_cpu_usage_seconds_total" if v.is_finite() => {
                        if let Some((ns, pod, c)) = container() {
                            let labels = Sample::container(
                                Signal::ContainerCpuUsageCores,
                                ns,
                                pod,
                                c,
                                node,
                                ts,
                                v,
                            )
                            .labels;
                            data.counters
                                .push((Signal::ContainerCpuUsageCores, labels, ts, v));
                        }
                    }
                    "container_memory_working_set_bytes" => {
                        if let Some((ns, pod, c)) = container() {
                            push(
                                &mut data,
                                Sample::container(
                                    Signal::ContainerMemoryWorkingSetBytes,
                                    ns,
                                    pod,
                                    c,
                                    node,
                                    ts,
                                    v,
                                ),
                            );
                        }
                    }
                    "node_cpu_usage_seconds_total" | "container_cpu_usage_seconds_total" => {
                        data.non_finite += 1
                    }
                    _ => {}
                }
            }
        }
        ScrapeKind::NodeExporter => {
            let mut busy_cpu: Option<(i64, f64)> = None;
            let mut mem_total = None;
            let mut mem_avail = None;
            let mut fs_avail: Option<(i64, f64)> = None;
            let mut fs_size: Option<(i64, f64)> = None;
            for s in &scrape.samples {
                let Some(v) = scalar(&s.value) else { continue };
                let ts = s.timestamp.timestamp_millis();
                match s.metric.as_str() {
                    "node_cpu_seconds_total" => {
                        let idle = matches!(label(s, "mode"), Some("idle" | "iowait" | "steal"));
                        if !idle {
                            let (t, acc) = busy_cpu.unwrap_or((ts, 0.0));
                            busy_cpu = Some((t.max(ts), acc + v));
                        }
                    }
                    "node_memory_MemTotal_bytes" => mem_total = Some((ts, v)),
                    "node_memory_MemAvailable_bytes" => mem_avail = Some((ts, v)),
                    "node_filesystem_avail_bytes" if label(s, "mountpoint") == Some(mountpoint) => {
                        fs_avail = Some(fs_avail.map_or((ts, v), |(t, a)| (t, a.max(v))))
                    }
                    "node_filesystem_size_bytes" if label(s, "mountpoint") == Some(mountpoint) => {
                        fs_size = Some(fs_size.map_or((ts, v), |(t, a)| (t, a.max(v))))
                    }
                    _ => {}
                }
            }
            if let Some((ts, v)) = busy_cpu {
                if v.is_finite() {
                    data.counters
                        .push((Signal::NodeCpuUsageCores, node_labels.clone(), ts, v));
                } else {
                    data.non_finite += 1;
                }
            }
            if let Some((ts, avail)) = mem_avail {
                push(
                    &mut data,
                    Sample::node(Signal::NodeMemoryAvailableBytes, node, ts, avail),
                );
                if let Some((_, total)) = mem_total {
                    push(
                        &mut data,
                        Sample::node(Signal::NodeMemoryWorkingSetBytes, node, ts, total - avail),
                    );
                }
            }
            if let Some((ts, v)) = fs_avail {
                push(
                    &mut data,
                    Sample::node(Signal::NodeFsAvailableBytes, node, ts, v),
                );
            }
            if let Some((ts, v)) = fs_size {
                push(
                    &mut data,
                    Sample::node(Signal::NodeFsCapacityBytes, node, ts, v),
                );
            }
        }
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESOURCE: &str = "\
# HELP container_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"app\",namespace=\"ci\",pod=\"b-1\"} 10 1633512130000
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"app\",namespace=\"ci\",pod=\"b-1\"} 1.048576e+06 1633512130000
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35491 1633512130914
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.6046084096e+10 1633512130914
# TYPE scrape_error gauge
scrape_error 0
";

    #[test]
    fn kubelet_resource_maps_gauges_and_counters() {
        let scrape = parse_exposition(RESOURCE, 0).unwrap();
        let d = map_scrape(&scrape, ScrapeKind::KubeletResource, "n1", "/");
        assert_eq!(d.counters.len(), 2);
        assert_eq!(d.gauges.len(), 2);
        let mem = d
            .gauges
            .iter()
            .find(|s| s.signal == Signal::ContainerMemoryWorkingSetBytes)
            .unwrap();
        assert_eq!(mem.value, 1_048_576.0);
        assert_eq!(mem.ts_ms, 1_633_512_130_000);
        let node = d
            .gauges
            .iter()
            .find(|s| s.signal == Signal::NodeMemoryWorkingSetBytes)
            .unwrap();
        assert_eq!(node.value, 16_046_084_096.0);
    }

    #[test]
    fn non_finite_values_are_counted_not_stored() {
        let text = "node_memory_working_set_bytes NaN\nnode_cpu_usage_seconds_total +Inf\n";
        let scrape = parse_exposition(text, 5).unwrap();
        let d = map_scrape(&scrape, ScrapeKind::KubeletResource, "n1", "/");
        assert!(d.gauges.is_empty() && d.counters.is_empty());
        assert_eq!(d.non_finite, 2);
    }
}
