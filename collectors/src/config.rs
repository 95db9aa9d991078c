//! Configuration: one section per source under [`CollectorsConfig`].
//!
//! Every struct rejects unknown fields, so a typo in a config file is an error rather than a
//! silently ignored setting. Durations are written the humantime way (`15s`, `500ms`, `2m`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::CollectError;

/// The whole collectors configuration. A source is enabled by having its section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CollectorsConfig {
    /// Prometheus HTTP API source (`/api/v1/query`, `/api/v1/query_range`).
    #[serde(default)]
    pub prometheus: Option<PrometheusConfig>,
    /// Kubelet summary API source (`/stats/summary`).
    #[serde(default)]
    pub kubelet: Option<KubeletConfig>,
    /// Prometheus text exposition scrape source (kubelet `/metrics/resource`, node-exporter).
    #[serde(default)]
    pub scrape: Option<ScrapeConfig>,
    /// How a pod is mapped to the builder it belongs to.
    #[serde(default)]
    pub identity: IdentityConfig,
    /// Run detection (finished builder pods → run records and placement history).
    #[serde(default)]
    pub runs: RunsConfig,
}

impl CollectorsConfig {
    /// Checks what serde cannot: URLs parse, durations and limits are usable.
    pub fn validate(&self) -> Result<(), CollectError> {
        if let Some(p) = &self.prometheus {
            check_url("prometheus.url", &p.url)?;
            p.schedule.validate("prometheus.schedule")?;
        }
        if let Some(k) = &self.kubelet {
            k.schedule.validate("kubelet.schedule")?;
            match &k.endpoint {
                KubeletEndpoint::ApiServerProxy { api_server } => {
                    check_url("kubelet.endpoint.api_server", api_server)?
                }
                KubeletEndpoint::Template { url } => {
                    if !url.contains("{node}") && !url.contains("{address}") {
                        return Err(CollectError::Config(format!(
                            "kubelet.endpoint.url {url:?} must contain {{node}} or {{address}}"
                        )));
                    }
                    let example = url.replace("{node}", "node").replace("{address}", "node");
                    check_url("kubelet.endpoint.url", &example)?
                }
                KubeletEndpoint::ReadOnlyPort { .. } => {}
            }
        }
        if let Some(s) = &self.scrape {
            s.schedule.validate("scrape.schedule")?;
            for t in &s.targets {
                check_url("scrape.targets[].url", &t.url)?;
            }
        }
        Ok(())
    }
}

fn check_url(field: &str, url: &str) -> Result<(), CollectError> {
    match reqwest::Url::parse(url) {
        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => Ok(()),
        Ok(u) => Err(CollectError::Config(format!(
            "{field} {url:?}: scheme {:?} is not http or https",
            u.scheme()
        ))),
        Err(e) => Err(CollectError::Config(format!("{field} {url:?}: {e}"))),
    }
}

/// Timing of one source's collection loop and of its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScheduleConfig {
    /// Time between the starts of two cycles. Default `15s`.
    #[serde(with = "humantime_serde", default = "default_interval")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub interval: Duration,
    /// Up to this much random delay is added to each wait, so that many collectors (and many
    /// nodes) do not hit the same servers in lock step. Default `1s`.
    #[serde(with = "humantime_serde", default = "default_jitter")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub jitter: Duration,
    /// Timeout of one HTTP request, body included. Default `10s`.
    #[serde(with = "humantime_serde", default = "default_timeout")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub timeout: Duration,
    /// Retries of a failed request (connect errors, timeouts, HTTP 5xx/429). Default `2`.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Delay before the first retry; doubled for each further retry. Default `500ms`.
    #[serde(with = "humantime_serde", default = "default_backoff")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub backoff: Duration,
    /// Upper bound of the retry delay. Default `5s`.
    #[serde(with = "humantime_serde", default = "default_max_backoff")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub max_backoff: Duration,
    /// Requests in flight at once (per source), so thousands of nodes are polled without
    /// opening thousands of connections. Default `64`.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
}

fn default_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_jitter() -> Duration {
    Duration::from_secs(1)
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> Duration {
    Duration::from_millis(500)
}
fn default_max_backoff() -> Duration {
    Duration::from_secs(5)
}
fn default_concurrency() -> usize {
    64
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            interval: default_interval(),
            jitter: default_jitter(),
            timeout: default_timeout(),
            retries: default_retries(),
            backoff: default_backoff(),
            max_backoff: default_max_backoff(),
            concurrency: default_concurrency(),
        }
    }
}

impl ScheduleConfig {
    fn validate(&self, field: &str) -> Result<(), CollectError> {
        if self.interval.is_zero() {
            return Err(CollectError::Config(format!(
                "{field}.interval must be > 0"
            )));
        }
        if self.timeout.is_zero() {
            return Err(CollectError::Config(format!("{field}.timeout must be > 0")));
        }
        if self.concurrency == 0 {
            return Err(CollectError::Config(format!(
                "{field}.concurrency must be >= 1"
            )));
        }
        if self.retries > 10 {
            return Err(CollectError::Config(format!(
                "{field}.retries {} is more than 10",
                self.retries
            )));
        }
        Ok(())
    }
}

/// HTTP client settings shared by all sources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpConfig {
    /// Authentication sent with every request. Default none.
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// PEM file of CA certificate(s) trusted in addition to the built-in web roots
    /// (a cluster CA such as `/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
}

/// Authentication of HTTP requests, e.g. `{kind: bearer, tokenFile: ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    rename_all_fields = "camelCase"
)]
pub enum AuthConfig {
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password given inline.
        #[serde(default)]
        password: Option<String>,
        /// File holding the password (read at start; trailing newline stripped).
        #[serde(default)]
        password_file: Option<PathBuf>,
    },
    /// Bearer token, inline or from a file (e.g. a service-account token).
    Bearer {
        /// Token given inline.
        #[serde(default)]
        token: Option<String>,
        /// File holding the token (read at start; trailing newline stripped).
        #[serde(default)]
        token_file: Option<PathBuf>,
    },
}

/// Prometheus HTTP API source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrometheusConfig {
    /// Base URL, e.g. `http://prometheus-k8s.monitoring.svc:9090` (no `/api/v1`).
    pub url: String,
    /// Authentication and TLS.
    #[serde(default)]
    pub http: HttpConfig,
    /// Loop timing.
    #[serde(default)]
    pub schedule: ScheduleConfig,
    /// Window of the `rate()` in the default CPU queries (`{window}`). Default `2m`, which
    /// spans several scrapes at kube-prometheus' 30 s interval.
    #[serde(default = "default_rate_window")]
    pub rate_window: String,
    /// Mountpoint of the node filesystem reported as `node_fs_*` (`{mountpoint}`). Default `/`.
    #[serde(default = "default_mountpoint")]
    pub mountpoint: String,
    /// PromQL per stored signal; unset fields use the defaults in [`QueriesConfig`].
    #[serde(default)]
    pub queries: QueriesConfig,
    /// Which Prometheus labels name the node, namespace, pod and container.
    #[serde(default)]
    pub labels: LabelMapping,
    /// How an `instance` label (`10.0.3.7:9100`) becomes a node name.
    #[serde(default)]
    pub instance_map: InstanceMapConfig,
    /// On the first cycle of [`crate::run`], read this much history with `query_range`
    /// so that a fresh store starts with data. Default none.
    #[serde(with = "humantime_serde", default)]
    #[schemars(with = "Option<String>", extend("x-duration" = true))]
    pub backfill: Option<Duration>,
}

fn default_rate_window() -> String {
    "2m".into()
}
fn default_mountpoint() -> String {
    "/".into()
}

/// PromQL per stored signal. Unset (`null`/absent) means the default shown; an empty string
/// disables the signal. `{window}` and `{mountpoint}` are replaced by
/// [`PrometheusConfig::rate_window`] and [`PrometheusConfig::mountpoint`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)] // keys are the stored metric names, kept as they are
pub struct QueriesConfig {
    /// Default: `sum by (instance, node) (rate(node_cpu_seconds_total{mode!~"idle|iowait|steal"}[{window}]))`.
    #[serde(default)]
    pub node_cpu_usage_cores: Option<String>,
    /// Default: `node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes`.
    #[serde(default)]
    pub node_memory_working_set_bytes: Option<String>,
    /// Default: `node_memory_MemAvailable_bytes`.
    #[serde(default)]
    pub node_memory_available_bytes: Option<String>,
    /// Default: `max by (instance, node) (node_filesystem_avail_bytes{mountpoint="{mountpoint}"})`.
    #[serde(default)]
    pub node_fs_available_bytes: Option<String>,
    /// Default: `max by (instance, node) (node_filesystem_size_bytes{mountpoint="{mountpoint}"})`.
    #[serde(default)]
    pub node_fs_capacity_bytes: Option<String>,
    /// No default (node-exporter does not know which filesystem holds images).
    #[serde(default)]
    pub node_imagefs_available_bytes: Option<String>,
    /// No default.
    #[serde(default)]
    pub node_imagefs_capacity_bytes: Option<String>,
    /// Default: `sum by (namespace, pod, container, node, instance) (rate(container_cpu_usage_seconds_total{container!="", container!="POD", image!=""}[{window}]))`.
    #[serde(default)]
    pub container_cpu_usage_cores: Option<String>,
    /// Default: `sum by (namespace, pod, container, node, instance) (container_memory_working_set_bytes{container!="", container!="POD", image!=""})`.
    #[serde(default)]
    pub container_memory_working_set_bytes: Option<String>,
    /// No default (cAdvisor has no per-pod ephemeral-storage usage).
    #[serde(default)]
    pub pod_ephemeral_storage_used_bytes: Option<String>,
}

/// Names of the Prometheus labels that identify where a series belongs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelMapping {
    /// Labels holding the node name, tried in order. Default `["node"]`; when none is
    /// present the `instance` label is mapped (see [`InstanceMapConfig`]).
    #[serde(default = "default_node_labels")]
    pub node: Vec<String>,
    /// Label holding the scrape target address. Default `instance`.
    #[serde(default = "default_instance_label")]
    pub instance: String,
    /// Label holding the pod's namespace. Default `namespace`.
    #[serde(default = "default_namespace_label")]
    pub namespace: String,
    /// Label holding the pod's name. Default `pod`.
    #[serde(default = "default_pod_label")]
    pub pod: String,
    /// Label holding the container's name. Default `container`.
    #[serde(default = "default_container_label")]
    pub container: String,
}

fn default_node_labels() -> Vec<String> {
    vec!["node".into()]
}
fn default_instance_label() -> String {
    "instance".into()
}
fn default_namespace_label() -> String {
    "namespace".into()
}
fn default_pod_label() -> String {
    "pod".into()
}
fn default_container_label() -> String {
    "container".into()
}

impl Default for LabelMapping {
    fn default() -> Self {
        Self {
            node: default_node_labels(),
            instance: default_instance_label(),
            namespace: default_namespace_label(),
            pod: default_pod_label(),
            container: default_container_label(),
        }
    }
}

/// Mapping of `instance` values to node names, used when a series has no node label.
///
/// Order: the `static` table (exact value, then without port), then the table built from
/// `query`, then (if `strip_port`) the instance without its port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstanceMapConfig {
    /// Fixed `instance` (or host without port) → node name entries.
    #[serde(default, rename = "static")]
    pub static_map: BTreeMap<String, String>,
    /// A query whose series carry both the instance label and a node-name label, evaluated
    /// each cycle, e.g. `node_uname_info` (node-exporter) with `query_node_label: nodename`.
    /// Default none.
    #[serde(default)]
    pub query: Option<String>,
    /// Label of `query`'s series holding the node name. Default `nodename`.
    #[serde(default = "default_query_node_label")]
    pub query_node_label: String,
    /// Fall back to the instance without `:port`. Default `true` (kube-prometheus relabels
    /// node-exporter's instance to the node name, so this is usually right).
    #[serde(default = "default_true")]
    pub strip_port: bool,
}

fn default_query_node_label() -> String {
    "nodename".into()
}
fn default_true() -> bool {
    true
}

impl Default for InstanceMapConfig {
    fn default() -> Self {
        Self {
            static_map: BTreeMap::new(),
            query: None,
            query_node_label: default_query_node_label(),
            strip_port: true,
        }
    }
}

/// Kubelet summary API source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletConfig {
    /// Nodes to poll: a name, or `{name, address}` when the name does not resolve.
    #[serde(default)]
    pub nodes: Vec<NodeTarget>,
    /// How the summary is reached. Default: the read-only port 10255.
    #[serde(default)]
    pub endpoint: KubeletEndpoint,
    /// Authentication and TLS (for the API-server proxy: a bearer token and the cluster CA).
    #[serde(default)]
    pub http: HttpConfig,
    /// Loop timing.
    #[serde(default)]
    pub schedule: ScheduleConfig,
}

/// A node to poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum NodeTarget {
    /// Node name, also used as the host to connect to.
    Name(String),
    /// Node name and the address to connect to.
    Addressed(NodeAddress),
}

/// A node name with an explicit address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeAddress {
    /// Node name (used in stored labels and in the API-server proxy path).
    pub name: String,
    /// Host (or `host:port` for templates) to connect to.
    pub address: String,
}

impl NodeTarget {
    /// The node's name.
    pub fn name(&self) -> &str {
        match self {
            NodeTarget::Name(n) => n,
            NodeTarget::Addressed(a) => &a.name,
        }
    }

    /// The host to connect to.
    pub fn address(&self) -> &str {
        match self {
            NodeTarget::Name(n) => n,
            NodeTarget::Addressed(a) => &a.address,
        }
    }
}

/// Where the kubelet summary is fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    rename_all_fields = "camelCase"
)]
pub enum KubeletEndpoint {
    /// `{scheme}://<node address>:{port}/stats/summary`.
    ReadOnlyPort {
        /// The kubelet's read-only port. Default `10255`.
        #[serde(default = "default_read_only_port")]
        port: u16,
        /// `http` or `https`. Default `http`.
        #[serde(default = "default_scheme")]
        scheme: String,
    },
    /// `{api_server}/api/v1/nodes/<node name>/proxy/stats/summary`, for clusters with the
    /// read-only port off. Needs `nodes/proxy` get permission.
    ApiServerProxy {
        /// API server base URL, e.g. `https://kubernetes.default.svc`.
        api_server: String,
    },
    /// Any URL with `{node}` (node name) and/or `{address}` placeholders.
    Template {
        /// E.g. `https://{address}:10250/stats/summary`.
        url: String,
    },
}

fn default_read_only_port() -> u16 {
    10255
}
fn default_scheme() -> String {
    "http".into()
}

impl Default for KubeletEndpoint {
    fn default() -> Self {
        KubeletEndpoint::ReadOnlyPort {
            port: default_read_only_port(),
            scheme: default_scheme(),
        }
    }
}

impl KubeletEndpoint {
    /// The summary URL of `node`.
    pub fn url_for(&self, node: &NodeTarget) -> String {
        match self {
            KubeletEndpoint::ReadOnlyPort { port, scheme } => {
                format!("{scheme}://{}:{port}/stats/summary", node.address())
            }
            KubeletEndpoint::ApiServerProxy { api_server } => format!(
                "{}/api/v1/nodes/{}/proxy/stats/summary",
                api_server.trim_end_matches('/'),
                node.name()
            ),
            KubeletEndpoint::Template { url } => url
                .replace("{node}", node.name())
                .replace("{address}", node.address()),
        }
    }
}

/// Prometheus text exposition scrape source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScrapeConfig {
    /// Endpoints to scrape.
    #[serde(default)]
    pub targets: Vec<ScrapeTarget>,
    /// Mountpoint reported as `node_fs_*` from node-exporter targets. Default `/`.
    #[serde(default = "default_mountpoint")]
    pub mountpoint: String,
    /// Authentication and TLS.
    #[serde(default)]
    pub http: HttpConfig,
    /// Loop timing.
    #[serde(default)]
    pub schedule: ScheduleConfig,
}

/// One scrape endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScrapeTarget {
    /// Full URL, e.g. `http://node-1:10255/metrics/resource` or `http://node-1:9100/metrics`.
    pub url: String,
    /// What the endpoint exposes.
    pub kind: ScrapeKind,
    /// Node name for the stored labels. Default: the URL's host.
    #[serde(default)]
    pub node: Option<String>,
}

/// Kinds of exposition endpoints understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScrapeKind {
    /// kubelet `/metrics/resource` (node, pod and container CPU/memory).
    KubeletResource,
    /// node-exporter `/metrics` (node CPU, memory, filesystem).
    NodeExporter,
}

pub use headroom_scheduler::identity::IdentityConfig;

/// The sources, as named in metrics and reports.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Prometheus HTTP API.
    Prometheus,
    /// Kubelet summary API.
    Kubelet,
    /// Text exposition scrape.
    Scrape,
}

impl SourceKind {
    /// The `source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Prometheus => "prometheus",
            SourceKind::Kubelet => "kubelet",
            SourceKind::Scrape => "scrape",
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Run detection settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunsConfig {
    /// Detect runs: follow builder pods across cycles and, when one ends, record its run
    /// (node, start, end, mean/p95/max CPU and memory), what builder profiles and placement
    /// history are built from. Default `true`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Source whose pod list drives run detection. Default: kubelet if configured, else
    /// scrape, else prometheus (only one, so a pod seen by two sources is not two runs).
    #[serde(default)]
    pub source: Option<SourceKind>,
    /// A pod absent from this many successful polls of its node in a row has ended.
    /// Default `2`, so one glitch does not split a run.
    #[serde(default = "default_missing_cycles")]
    pub missing_cycles: u32,
    /// Samples kept per open run for the p95; past it, every other sample is dropped
    /// (halving resolution), bounding memory for long runs. Default `4096`.
    #[serde(default = "default_max_samples")]
    pub max_samples: usize,
}

fn default_missing_cycles() -> u32 {
    2
}
fn default_max_samples() -> usize {
    4096
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            source: None,
            missing_cycles: default_missing_cycles(),
            max_samples: default_max_samples(),
        }
    }
}

impl RunsConfig {
    /// The source that drives run detection under `config`.
    pub fn effective_source(&self, config: &CollectorsConfig) -> Option<SourceKind> {
        if !self.enabled {
            return None;
        }
        if self.source.is_some() {
            return self.source;
        }
        if config.kubelet.is_some() {
            Some(SourceKind::Kubelet)
        } else if config.scrape.is_some() {
            Some(SourceKind::Scrape)
        } else if config.prometheus.is_some() {
            Some(SourceKind::Prometheus)
        } else {
            None
        }
    }
}
