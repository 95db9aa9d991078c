//! Prometheus HTTP API source: one PromQL query per stored signal, evaluated with
//! `/api/v1/query` each cycle (and `/api/v1/query_range` for backfill).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::{InstanceMapConfig, LabelMapping, PrometheusConfig, QueriesConfig, SourceKind};
use crate::error::CollectError;
use crate::http::{HttpClient, snippet};
use crate::metrics::Metrics;
use crate::samples::{Batch, Coverage, PodSeen, PodView, Sample, Scope, Signal, now_ms, sum_opt};
use headroom_scheduler::key::Uid;

/// One series of a query result: its labels and its `(ms, value)` points.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSeries {
    /// Labels of the series.
    pub labels: BTreeMap<String, String>,
    /// Points, oldest first (one for an instant query).
    pub points: Vec<(i64, f64)>,
}

/// A successful query: its series and any `warnings` (partial answers).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryResult {
    /// Series returned.
    pub series: Vec<PromSeries>,
    /// Prometheus warnings, e.g. partial results from a federated/remote-read source.
    pub warnings: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum ApiData {
    Vector(Vec<ApiVectorSample>),
    Matrix(Vec<ApiMatrixSeries>),
    Scalar(ApiPoint),
    String(ApiPoint),
}

#[derive(Deserialize)]
struct ApiVectorSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    // Absent for native histograms (`histogram` instead), which no signal uses.
    #[serde(default)]
    value: Option<ApiPoint>,
}

#[derive(Deserialize)]
struct ApiMatrixSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<ApiPoint>,
}

/// `[<unix seconds float>, "<value>"]`; values are strings so that NaN and ±Inf survive JSON.
#[derive(Deserialize)]
struct ApiPoint(f64, String);

impl ApiPoint {
    fn to_point(&self) -> (i64, f64) {
        // Go's formatting of NaN/±Inf ("NaN", "+Inf", "-Inf") parses with Rust's f64 parser;
        // anything unparsable becomes NaN and is then skipped as non-finite.
        let v = self.1.parse::<f64>().unwrap_or(f64::NAN);
        ((self.0 * 1000.0).round() as i64, v)
    }
}

/// A client of the Prometheus HTTP API.
pub struct PrometheusClient {
    base: String,
    http: HttpClient,
}

impl PrometheusClient {
    /// A client of the Prometheus at `config.url` with `config`'s auth, TLS and timeouts.
    pub fn new(config: &PrometheusConfig) -> Result<Self, CollectError> {
        Ok(Self {
            base: config.url.trim_end_matches('/').to_owned(),
            http: HttpClient::new(&config.http, &config.schedule)?,
        })
    }

    /// Evaluates `query` at `time_ms` (server time if `None`). `signal` names the query in errors.
    pub async fn query(
        &self,
        signal: &str,
        query: &str,
        time_ms: Option<i64>,
    ) -> Result<QueryResult, CollectError> {
        let mut params = vec![("query", query.to_owned())];
        if let Some(t) = time_ms {
            params.push(("time", format_secs(t)));
        }
        self.call("/api/v1/query", signal, query, &params).await
    }

    /// Evaluates `query` over `[start_ms, end_ms]` every `step`.
    pub async fn query_range(
        &self,
        signal: &str,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step: Duration,
    ) -> Result<QueryResult, CollectError> {
        let params = vec![
            ("query", query.to_owned()),
            ("start", format_secs(start_ms)),
            ("end", format_secs(end_ms)),
            ("step", format!("{:.3}", step.as_secs_f64().max(0.001))),
        ];
        self.call("/api/v1/query_range", signal, query, &params)
            .await
    }

    async fn call(
        &self,
        path: &str,
        signal: &str,
        query: &str,
        params: &[(&str, String)],
    ) -> Result<QueryResult, CollectError> {
        let url = format!("{}{path}", self.base);
        let (status, body) = self.http.get(&url, params).await?;
        decode_response(&url, status, signal, query, &body)
    }
}

/// Decodes a Prometheus HTTP API answer (`/api/v1/query`, `/api/v1/query_range`) with its
/// HTTP status: the series, or the error Prometheus (or the body) gives, naming `url`,
/// `signal` and `query`.
pub fn decode_response(
    url: &str,
    status: u16,
    signal: &str,
    query: &str,
    body: &[u8],
) -> Result<QueryResult, CollectError> {
    let url = url.to_owned();
    // Prometheus answers 400/422 with a JSON error naming the problem: prefer it.
    let response: ApiResponse = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) if (200..300).contains(&status) => {
            return Err(CollectError::Decode {
                url,
                message: format!("{e}; body starts: {}", snippet(body)),
            });
        }
        Err(_) => {
            return Err(CollectError::Status {
                url,
                status,
                body: snippet(body),
            });
        }
    };
    if response.status != "success" {
        return Err(CollectError::Query {
            signal: signal.to_owned(),
            query: query.to_owned(),
            error_type: response
                .error_type
                .unwrap_or_else(|| format!("HTTP {status}")),
            message: response.error.unwrap_or_default(),
        });
    }
    let series = match response.data {
        Some(ApiData::Vector(v)) => v
            .into_iter()
            .filter_map(|s| {
                s.value.map(|p| PromSeries {
                    labels: s.metric,
                    points: vec![p.to_point()],
                })
            })
            .collect(),
        Some(ApiData::Matrix(m)) => m
            .into_iter()
            .map(|s| PromSeries {
                labels: s.metric,
                points: s.values.iter().map(ApiPoint::to_point).collect(),
            })
            .collect(),
        Some(ApiData::Scalar(p)) | Some(ApiData::String(p)) => vec![PromSeries {
            labels: BTreeMap::new(),
            points: vec![p.to_point()],
        }],
        None => {
            return Err(CollectError::Decode {
                url,
                message: "success without data".into(),
            });
        }
    };
    Ok(QueryResult {
        series,
        warnings: response.warnings.unwrap_or_default(),
    })
}

fn format_secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// Default PromQL of `signal`, for a stock kube-prometheus stack (`None`: no default).
pub fn default_query(signal: Signal) -> Option<&'static str> {
    Some(match signal {
        Signal::NodeCpuUsageCores => {
            r#"sum by (instance, node) (rate(node_cpu_seconds_total{mode!~"idle|iowait|steal"}[{window}]))"#
        }
        Signal::NodeMemoryWorkingSetBytes => {
            "node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes"
        }
        Signal::NodeMemoryAvailableBytes => "node_memory_MemAvailable_bytes",
        Signal::NodeFsAvailableBytes => {
            r#"max by (instance, node) (node_filesystem_avail_bytes{mountpoint="{mountpoint}"})"#
        }
        Signal::NodeFsCapacityBytes => {
            r#"max by (instance, node) (node_filesystem_size_bytes{mountpoint="{mountpoint}"})"#
        }
        Signal::ContainerCpuUsageCores => {
            r#"sum by (namespace, pod, container, node, instance) (rate(container_cpu_usage_seconds_total{container!="", container!="POD", image!=""}[{window}]))"#
        }
        Signal::ContainerMemoryWorkingSetBytes => {
            r#"sum by (namespace, pod, container, node, instance) (container_memory_working_set_bytes{container!="", container!="POD", image!=""})"#
        }
        Signal::NodeImagefsAvailableBytes
        | Signal::NodeImagefsCapacityBytes
        | Signal::PodEphemeralStorageUsedBytes => return None,
    })
}

fn configured(q: &QueriesConfig, signal: Signal) -> Option<&String> {
    match signal {
        Signal::NodeCpuUsageCores => q.node_cpu_usage_cores.as_ref(),
        Signal::NodeMemoryWorkingSetBytes => q.node_memory_working_set_bytes.as_ref(),
        Signal::NodeMemoryAvailableBytes => q.node_memory_available_bytes.as_ref(),
        Signal::NodeFsAvailableBytes => q.node_fs_available_bytes.as_ref(),
        Signal::NodeFsCapacityBytes => q.node_fs_capacity_bytes.as_ref(),
        Signal::NodeImagefsAvailableBytes => q.node_imagefs_available_bytes.as_ref(),
        Signal::NodeImagefsCapacityBytes => q.node_imagefs_capacity_bytes.as_ref(),
        Signal::ContainerCpuUsageCores => q.container_cpu_usage_cores.as_ref(),
        Signal::ContainerMemoryWorkingSetBytes => q.container_memory_working_set_bytes.as_ref(),
        Signal::PodEphemeralStorageUsedBytes => q.pod_ephemeral_storage_used_bytes.as_ref(),
    }
}

/// The queries run each cycle: `(signal, PromQL, is_default)`, placeholders substituted.
pub fn resolve_queries(config: &PrometheusConfig) -> Vec<(Signal, String, bool)> {
    Signal::ALL
        .iter()
        .filter_map(|&s| {
            let (text, is_default) = match configured(&config.queries, s) {
                Some(q) if q.trim().is_empty() => return None,
                Some(q) => (q.as_str(), false),
                None => (default_query(s)?, true),
            };
            let q = text
                .replace("{window}", &config.rate_window)
                .replace("{mountpoint}", &config.mountpoint);
            Some((s, q, is_default))
        })
        .collect()
}

fn hint(signal: Signal, is_default: bool, mountpoint: &str) -> String {
    if !is_default {
        return "Check that the metric or recording rule it uses exists in this Prometheus.".into();
    }
    match signal {
        Signal::NodeCpuUsageCores => "node_cpu_seconds_total comes from node-exporter: check that this Prometheus scrapes it, and that rate_window spans at least two scrapes.".into(),
        Signal::NodeMemoryWorkingSetBytes | Signal::NodeMemoryAvailableBytes => {
            "node_memory_MemAvailable_bytes and node_memory_MemTotal_bytes come from node-exporter: check that this Prometheus scrapes it.".into()
        }
        Signal::NodeFsAvailableBytes | Signal::NodeFsCapacityBytes => format!(
            "node_filesystem_* come from node-exporter: check that it is scraped and reports mountpoint {mountpoint:?} (set prometheus.mountpoint to one it reports)."
        ),
        Signal::ContainerCpuUsageCores | Signal::ContainerMemoryWorkingSetBytes => {
            "container_* come from the kubelet's cAdvisor endpoint (/metrics/cadvisor): check that this Prometheus scrapes it (kube-prometheus job \"kubelet\") and keeps the namespace/pod/container labels.".into()
        }
        _ => "Check that the metric it uses exists in this Prometheus.".into(),
    }
}

/// Turns Prometheus labels into a node name.
struct NodeResolver<'a> {
    labels: &'a LabelMapping,
    config: &'a InstanceMapConfig,
    /// From `instance_map.query`: instance (and host without port) → node.
    dynamic: HashMap<String, String>,
}

/// `10.0.0.1:9100` → `10.0.0.1`, `[fd00::1]:9100` → `fd00::1`, `node-a` → `node-a`.
fn strip_port(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match instance.rsplit_once(':') {
        // More than one colon without brackets is a bare IPv6 address: no port to strip.
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => instance,
    }
}

impl NodeResolver<'_> {
    fn node(&self, labels: &BTreeMap<String, String>) -> Result<String, String> {
        for key in &self.labels.node {
            if let Some(v) = labels.get(key).filter(|v| !v.is_empty()) {
                return Ok(v.clone());
            }
        }
        let Some(instance) = labels.get(&self.labels.instance).filter(|v| !v.is_empty()) else {
            return Err(String::new());
        };
        let host = strip_port(instance);
        for key in [instance.as_str(), host] {
            if let Some(n) = self.config.static_map.get(key) {
                return Ok(n.clone());
            }
        }
        for key in [instance.as_str(), host] {
            if let Some(n) = self.dynamic.get(key) {
                return Ok(n.clone());
            }
        }
        if self.config.strip_port {
            return Ok(host.to_owned());
        }
        Err(instance.clone())
    }
}

/// Accumulates the pods seen in container series, for run detection.
#[derive(Default)]
struct PodAcc {
    pods: BTreeMap<(String, String), PodSeen>,
}

/// The Prometheus source with its queries resolved.
pub(crate) struct PrometheusSource {
    config: PrometheusConfig,
    client: Arc<PrometheusClient>,
    queries: Vec<(Signal, String, bool)>,
}

impl PrometheusSource {
    pub fn new(config: &PrometheusConfig) -> Result<Self, CollectError> {
        Ok(Self {
            client: Arc::new(PrometheusClient::new(config)?),
            queries: resolve_queries(config),
            config: config.clone(),
        })
    }

    async fn instance_map(&self, at_ms: i64, batch: &mut Batch) -> HashMap<String, String> {
        let mut map = HashMap::new();
        let Some(q) = &self.config.instance_map.query else {
            return map;
        };
        match self.client.query("instance_map", q, Some(at_ms)).await {
            Ok(r) => {
                for s in r.series {
                    let (Some(inst), Some(node)) = (
                        s.labels.get(&self.config.labels.instance),
                        s.labels.get(&self.config.instance_map.query_node_label),
                    ) else {
                        continue;
                    };
                    map.insert(strip_port(inst).to_owned(), node.clone());
                    map.insert(inst.clone(), node.clone());
                }
            }
            Err(e) => batch.errors.push(("instance_map".into(), e)),
        }
        map
    }

    /// Runs all queries (at most `concurrency` at once) at `at_ms`, or over a range.
    async fn run_queries(
        &self,
        metrics: &Metrics,
        range: Option<(i64, i64, Duration)>,
    ) -> Vec<(Signal, bool, String, Result<QueryResult, CollectError>)> {
        let semaphore = Arc::new(Semaphore::new(self.config.schedule.concurrency.max(1)));
        let mut tasks = JoinSet::new();
        let at_ms = range.map_or_else(now_ms, |r| r.1);
        for (signal, query, is_default) in self.queries.clone() {
            let client = self.client.clone();
            let semaphore = semaphore.clone();
            let metrics = metrics.clone();
            tasks.spawn(async move {
                let _permit = semaphore.acquire_owned().await.ok();
                let started = Instant::now();
                let result = match range {
                    None => client.query(signal.metric(), &query, Some(at_ms)).await,
                    Some((start, end, step)) => {
                        client
                            .query_range(signal.metric(), &query, start, end, step)
                            .await
                    }
                };
                metrics.observe_duration(SourceKind::Prometheus, started.elapsed());
                (signal, is_default, query, result)
            });
        }
        let mut out = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Ok(r) = joined {
                out.push(r);
            }
        }
        out.sort_by_key(|r| r.0);
        out
    }

    /// One cycle: every query evaluated at the same instant.
    pub async fn collect(&self, metrics: &Metrics) -> Batch {
        self.collect_inner(metrics, None).await
    }

    /// Reads `window` of history with `query_range` (no run detection from it).
    pub async fn backfill(&self, metrics: &Metrics, window: Duration) -> Batch {
        let end = now_ms();
        let start = end - i64::try_from(window.as_millis()).unwrap_or(i64::MAX / 2);
        // Prometheus refuses more than 11,000 points per series; widen the step to stay under.
        let min_step = window / 10_000;
        let step = self
            .config
            .schedule
            .interval
            .max(min_step)
            .max(Duration::from_secs(1));
        self.collect_inner(metrics, Some((start, end, step))).await
    }

    async fn collect_inner(&self, metrics: &Metrics, range: Option<(i64, i64, Duration)>) -> Batch {
        let mut batch = Batch::default();
        let at_ms = now_ms();
        let dynamic = self.instance_map(at_ms, &mut batch).await;
        let resolver = NodeResolver {
            labels: &self.config.labels,
            config: &self.config.instance_map,
            dynamic,
        };
        let results = self.run_queries(metrics, range).await;
        let mut pods = PodAcc::default();
        let mut pod_queries_ok = false;
        for (signal, is_default, query, result) in results {
            batch.requests += 1;
            let subject = signal.metric().to_owned();
            let result = match result {
                Ok(r) => r,
                Err(e) => {
                    batch.errors.push((subject, e));
                    continue;
                }
            };
            if !result.warnings.is_empty() {
                batch.errors.push((
                    subject.clone(),
                    CollectError::Partial {
                        signal: subject.clone(),
                        warnings: result.warnings.join("; "),
                    },
                ));
            }
            if result.series.is_empty() {
                batch.errors.push((
                    subject.clone(),
                    CollectError::NoData {
                        signal: subject.clone(),
                        query,
                        hint: hint(signal, is_default, &self.config.mountpoint),
                    },
                ));
                continue;
            }
            if signal.scope() == Scope::Container {
                pod_queries_ok = true;
            }
            self.map_result(
                signal,
                &result.series,
                &resolver,
                &mut batch,
                &mut pods,
                range.is_none(),
            );
        }
        if range.is_none() && pod_queries_ok {
            batch.pods = Some(PodView {
                pods: pods.pods.into_values().collect(),
                coverage: Coverage::All,
            });
        }
        batch
    }

    fn map_result(
        &self,
        signal: Signal,
        series: &[PromSeries],
        resolver: &NodeResolver<'_>,
        batch: &mut Batch,
        pods: &mut PodAcc,
        track_pods: bool,
    ) {
        let labels = &self.config.labels;
        let mut non_finite = 0usize;
        let mut unmapped = 0usize;
        let mut unmapped_example = String::new();
        for s in series {
            let node = match resolver.node(&s.labels) {
                Ok(n) => n,
                Err(example) => {
                    unmapped += 1;
                    if unmapped_example.is_empty() {
                        unmapped_example = example;
                    }
                    continue;
                }
            };
            let get = |k: &String| s.labels.get(k).filter(|v| !v.is_empty());
            for &(ts, value) in &s.points {
                let sample = match signal.scope() {
                    Scope::Node => Sample::node(signal, &node, ts, value),
                    Scope::Container => {
                        let (Some(ns), Some(pod), Some(c)) = (
                            get(&labels.namespace),
                            get(&labels.pod),
                            get(&labels.container),
                        ) else {
                            unmapped += 1;
                            break;
                        };
                        if track_pods && value.is_finite() {
                            let seen =
                                pods.pods
                                    .entry((ns.clone(), pod.clone()))
                                    .or_insert_with(|| PodSeen {
                                        uid: Uid::from(format!("{ns}/{pod}")),
                                        namespace: ns.clone(),
                                        name: pod.clone(),
                                        node: node.clone(),
                                        ts_ms: ts,
                                        cpu_cores: None,
                                        memory_bytes: None,
                                    });
                            if signal == Signal::ContainerCpuUsageCores {
                                seen.cpu_cores = sum_opt(seen.cpu_cores, Some(value));
                            } else {
                                seen.memory_bytes = sum_opt(seen.memory_bytes, Some(value));
                            }
                        }
                        Sample::container(signal, ns, pod, c, &node, ts, value)
                    }
                    Scope::Pod => {
                        let (Some(ns), Some(pod)) = (get(&labels.namespace), get(&labels.pod))
                        else {
                            unmapped += 1;
                            break;
                        };
                        Sample::pod(signal, ns, pod, &node, ts, value)
                    }
                };
                batch.push_checked(sample, &mut non_finite);
            }
        }
        let subject = signal.metric().to_owned();
        if non_finite > 0 {
            batch.errors.push((
                subject.clone(),
                CollectError::NonFinite {
                    signal: subject.clone(),
                    count: non_finite,
                },
            ));
        }
        if unmapped > 0 {
            batch.errors.push((
                subject.clone(),
                CollectError::Unmapped {
                    signal: subject,
                    count: unmapped,
                    example: unmapped_example,
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_port_forms() {
        assert_eq!(strip_port("10.0.0.1:9100"), "10.0.0.1");
        assert_eq!(strip_port("[fd00::1]:9100"), "fd00::1");
        assert_eq!(strip_port("fd00::1"), "fd00::1");
        assert_eq!(strip_port("node-a"), "node-a");
        assert_eq!(strip_port("node-a:http"), "node-a:http");
    }

    #[test]
    fn go_float_forms_parse() {
        for (s, check) in [
            ("NaN", f64::is_nan as fn(f64) -> bool),
            ("+Inf", |v: f64| v == f64::INFINITY),
            ("-Inf", |v: f64| v == f64::NEG_INFINITY),
            ("1e+06", |v: f64| v == 1e6),
            ("garbage", f64::is_nan),
        ] {
            let (_, v) = ApiPoint(1.5, s.into()).to_point();
            assert!(check(v), "{s} -> {v}");
        }
        assert_eq!(
            ApiPoint(1700000000.123, "1".into()).to_point().0,
            1_700_000_000_123
        );
    }

    #[test]
    fn format_secs_keeps_millis() {
        assert_eq!(format_secs(1_700_000_000_123), "1700000000.123");
        assert_eq!(format_secs(5), "0.005");
    }

    #[test]
    fn resolver_order() {
        let labels = LabelMapping::default();
        let mut config = InstanceMapConfig::default();
        config.static_map.insert("10.0.0.1".into(), "node-a".into());
        let mut dynamic = HashMap::new();
        dynamic.insert("10.0.0.2:9100".into(), "node-b".into());
        let r = NodeResolver {
            labels: &labels,
            config: &config,
            dynamic,
        };
        let l = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            r.node(&l(&[("node", "n"), ("instance", "10.0.0.1:1")]))
                .ok(),
            Some("n".into())
        );
        assert_eq!(
            r.node(&l(&[("instance", "10.0.0.1:9100")])).ok(),
            Some("node-a".into())
        );
        assert_eq!(
            r.node(&l(&[("instance", "10.0.0.2:9100")])).ok(),
            Some("node-b".into())
        );
        assert_eq!(
            r.node(&l(&[("instance", "node-c:9100")])).ok(),
            Some("node-c".into())
        );
        assert!(r.node(&l(&[("job", "x")])).is_err());
    }

    #[test]
    fn queries_substitute_and_disable() {
        let mut config: PrometheusConfig =
            serde_json::from_str(r#"{"url": "http://p:9090"}"#).unwrap();
        config.rate_window = "30s".into();
        config.mountpoint = "/data".into();
        config.queries.node_memory_available_bytes = Some(String::new());
        config.queries.pod_ephemeral_storage_used_bytes = Some("my_rule".into());
        let q = resolve_queries(&config);
        let find = |s| q.iter().find(|(x, _, _)| *x == s);
        assert!(find(Signal::NodeMemoryAvailableBytes).is_none());
        assert!(find(Signal::NodeCpuUsageCores).unwrap().1.contains("[30s]"));
        assert!(
            find(Signal::NodeFsAvailableBytes)
                .unwrap()
                .1
                .contains(r#"mountpoint="/data""#)
        );
        assert_eq!(
            find(Signal::PodEphemeralStorageUsedBytes).unwrap().1,
            "my_rule"
        );
        assert!(!find(Signal::PodEphemeralStorageUsedBytes).unwrap().2);
        assert!(find(Signal::NodeImagefsAvailableBytes).is_none());
    }
}
