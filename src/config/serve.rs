//! The `serve` section of the configuration: how `headroom serve` talks to the cluster.
//!
//! ```yaml
//! serve:
//!   listen: 0.0.0.0:10260          # extender, /healthz, /readyz (and later the API)
//!   schedule: true                 # bind pods whose schedulerName is one of our profiles
//!   leaderElection: {enabled: true, leaseName: headroom, leaseDuration: 15s}
//!   extender:
//!     enabled: true
//!     plugins: {TaintToleration: {enabled: true}}   # in-tree plugins are off by default
//!   events: {qps: 0, burst: 100, maxInFlight: 64, seriesWindow: 6m}
//!   decisionAnnotation: true
//!   builderHistoryAnnotation: false
//!   reservations: {enabled: true, gcInterval: 1m, keepFinished: 10m}
//! ```
//!
//! Every field has a default; unknown fields are errors.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{PluginArgs, PluginSetting, ProfileConfig};

/// The name of the profile extender requests are scheduled with (in decision records).
pub const EXTENDER_PROFILE: &str = "extender";

/// How `headroom serve` runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ServeConfig {
    /// Address of the extender's listener: `/extender/*`, `/healthz` and `/readyz`.
    /// Default `0.0.0.0:10260`.
    pub listen: String,
    /// Address of the inspection API's listener: `/explain`, `/nodes`, `/builders`,
    /// `/queue`, `/metrics`, `/healthz`, `/readyz`. Default `0.0.0.0:10261`.
    pub api_listen: String,
    /// Address of the read-only viewer listener for `kubectl headroom`, which reaches it
    /// through the API server's service proxy (`get services/proxy` in RBAC decides who may).
    /// The proxy drops the caller's credentials, so this listener is plain HTTP without
    /// authentication and serves only the inspection routes that read (`/explain`,
    /// `/nodes`, `/builders`, `/queue`, `/advice`, the `/ui` pages), never the extender nor
    /// `/metrics`;
    /// restrict it to the control plane with a NetworkPolicy. Default none (off).
    pub viewer_listen: Option<String>,
    /// Who may call the listeners: TLS, client certificates or TokenReview,
    /// SubjectAccessReview (default), or `mode: none` on loopback only; see
    /// `src/kube/auth.rs`.
    pub security: SecurityConfig,
    /// Schedule and bind the unassigned pods whose `spec.schedulerName` names one of the
    /// profiles. Default true. Set false to run as an extender only (kube-scheduler then
    /// schedules; headroom filters, scores and optionally binds for it).
    pub schedule: bool,
    /// Leader election on a `coordination.k8s.io/v1` Lease: only the leader schedules and
    /// binds; the others keep their caches warm and answer read-only requests.
    pub leader_election: LeaderElectionConfig,
    /// The kube-scheduler extender endpoints.
    pub extender: ExtenderConfig,
    /// Events (`Scheduled`, `FailedScheduling`): rate limits and aggregation.
    pub events: EventsConfig,
    /// Annotate each bound pod with a short decision summary (`headroom.io/decision`: node,
    /// top scores, data freshness). It travels in the `Binding`, which the API server
    /// copies onto the pod: no API call of its own. Default true.
    pub decision_annotation: bool,
    /// Also write bk-ci's `bkci.dispatch.kubenetes/builder-history-nodes` annotation (a JSON
    /// array of node names, newest first) on each bound pod, so tooling that reads it keeps
    /// working. Default false.
    pub builder_history_annotation: bool,
    /// Build the numbers behind every node's verdict and score in each decision — what
    /// `headroom place` prints: free memory against the pod's predicted demand, the memory
    /// risk with `usage.memoryRiskPercent`, each score's inputs — so `/explain` shows them
    /// under `serve` too. Off by default: without it `/explain` gives each node's verdict
    /// (plugin and upstream reason) and every score, but not the numbers behind them;
    /// building them costs a few strings per node per cycle, cheap on a few hundred nodes,
    /// not at thousands. Default false.
    pub detailed_explanations: bool,
    /// The `Reservation` custom resource (`headroom.io/v1alpha1`).
    pub reservations: ReservationsConfig,
    /// How long an assumed pod may wait for the watch to show it bound after its bind call
    /// returned; then it is dropped from the snapshot. Default `30s` (kube-scheduler's
    /// `durationToExpireAssumedPod` is 15 min; a lost watch event then hides capacity that
    /// long, so headroom keeps it short).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub assume_ttl: Duration,
    /// Timeout of one API request (binding, patch, event). Default `10s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub request_timeout: Duration,
    /// After SIGTERM, how long binds in flight and pending writes (events, conditions,
    /// annotations, reservation status, the Lease release) may take; whatever is left is
    /// abandoned, and the store still gets its final flush. Default `20s`: inside
    /// Kubernetes' default 30 s termination grace period, with room for the flush.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub shutdown_grace_period: Duration,
    /// Flow control of binds toward the API server: a congestion window on binds in
    /// flight (`initialWindow` 16, `minWindow` 2, `maxWindow` 512, `latencyTarget` 1s) and
    /// an optional client-side rate limit (`qps` 0 = none, `burst` 100), see
    /// `src/kube/flow.rs`.
    pub binding: FlowConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "0.0.0.0:10260".to_string(),
            api_listen: "0.0.0.0:10261".to_string(),
            viewer_listen: None,
            security: SecurityConfig::default(),
            schedule: true,
            leader_election: LeaderElectionConfig::default(),
            extender: ExtenderConfig::default(),
            events: EventsConfig::default(),
            decision_annotation: true,
            builder_history_annotation: false,
            detailed_explanations: false,
            reservations: ReservationsConfig::default(),
            assume_ttl: headroom_scheduler::config::DEFAULT_ASSUME_TTL,
            request_timeout: Duration::from_secs(10),
            shutdown_grace_period: Duration::from_secs(20),
            binding: FlowConfig::default(),
        }
    }
}

/// Leader election settings (client-go's defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Elect a leader. Default true: with one replica this costs one Lease write per
    /// `retryPeriod`; with several, it is what keeps two schedulers from binding at once.
    pub enabled: bool,
    /// Lease name. Default `headroom`.
    pub lease_name: String,
    /// Lease namespace. Default: the `POD_NAMESPACE` environment variable (the downward
    /// API), else `default`.
    pub lease_namespace: Option<String>,
    /// This replica's identity. Default: `POD_NAME`, else `HOSTNAME`, else `headroom`.
    pub identity: Option<String>,
    /// How long a lease is valid without renewal. Default `15s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down. Default `10s`; must be
    /// shorter than `leaseDuration`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub renew_deadline: Duration,
    /// Interval between acquire or renew attempts. Default `2s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            enabled: true,
            lease_name: "headroom".to_string(),
            lease_namespace: None,
            identity: None,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderElectionConfig {
    /// The lease namespace in effect.
    pub fn namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| "default".to_string())
    }

    /// The identity in effect.
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "headroom".to_string())
    }
}

/// The extender endpoints and the plugins they apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ExtenderConfig {
    /// Serve `POST /extender/filter`, `/extender/prioritize` and `/extender/bind`.
    /// Default true.
    pub enabled: bool,
    /// Plugin switches and weights over the defaults, as in a profile. kube-scheduler has
    /// already applied its in-tree plugins, so those are off unless enabled here; headroom's
    /// own plugins keep their defaults.
    pub plugins: BTreeMap<String, PluginSetting>,
    /// Plugin arguments, as in a profile.
    pub plugin_args: PluginArgs,
}

impl Default for ExtenderConfig {
    fn default() -> Self {
        ExtenderConfig {
            enabled: true,
            plugins: BTreeMap::new(),
            plugin_args: PluginArgs::default(),
        }
    }
}

impl ExtenderConfig {
    /// The profile extender requests run: kube-scheduler has already applied its in-tree
    /// plugins, so those not enabled here are off
    /// ([`ProfileConfig::upstream_plugins_off`]); headroom's own keep their defaults.
    pub fn profile(&self) -> ProfileConfig {
        ProfileConfig {
            scheduler_name: EXTENDER_PROFILE.to_string(),
            plugins: self.plugins.clone(),
            plugin_args: self.plugin_args.clone(),
            upstream_plugins_off: true,
            // The extender judges every node kube-scheduler asks about.
            ..ProfileConfig::default()
        }
    }
}

/// Event rate limits and aggregation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct EventsConfig {
    /// Client-side rate limit of event writes, per second, as kube-scheduler's
    /// `clientConnection.qps` limits its event client: a write waits for a token. Default
    /// `0`: no limit (writes follow the binds; at most `maxInFlight` at once). Events the
    /// writer's queue (1,000, as client-go's broadcaster's) has no room for are dropped and
    /// counted (`headroom_events_dropped_total`).
    pub qps: f64,
    /// Burst of the rate limit. Default 100 (kube-scheduler's `clientConnection.burst`);
    /// unused while `qps` is 0.
    pub burst: u32,
    /// Event writes in flight at most. Default 64.
    pub max_in_flight: u32,
    /// An event identical to one written less than this long ago (same pod, reason and
    /// message) updates that event's `series` instead of creating a new one. Default `6m`
    /// (client-go's).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub series_window: Duration,
    /// Within a series, at most one update per this interval; repeats in between are only
    /// counted and go out with the next update. Default `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub series_update_interval: Duration,
    /// `reportingController` of the events. Default `headroom`.
    pub reporting_controller: String,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            qps: 0.0,
            burst: 100,
            max_in_flight: 64,
            series_window: Duration::from_secs(6 * 60),
            series_update_interval: Duration::from_secs(30),
            reporting_controller: "headroom".to_string(),
        }
    }
}

/// The `Reservation` custom resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ReservationsConfig {
    /// Watch `reservations.headroom.io` (the CRD must be installed) and honour them.
    /// Default true.
    pub enabled: bool,
    /// How often the GC loop marks expired reservations and deletes finished ones.
    /// Default `1m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub gc_interval: Duration,
    /// How long a Consumed or Expired reservation stays (for `kubectl get`) before the GC
    /// loop deletes it. Default `10m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub keep_finished: Duration,
}

impl Default for ReservationsConfig {
    fn default() -> Self {
        ReservationsConfig {
            enabled: true,
            gc_interval: Duration::from_secs(60),
            keep_finished: Duration::from_secs(600),
        }
    }
}

impl ServeConfig {
    /// Checks what serde cannot; errors name the field under `serve.`.
    pub fn validate(&self) -> Result<(), crate::config::ConfigError> {
        let invalid = |field: &str, message: String| crate::config::ConfigError::Invalid {
            field: format!("serve.{field}"),
            message,
        };
        let Ok(listen) = self.listen.parse::<std::net::SocketAddr>() else {
            return Err(invalid(
                "listen",
                format!("{:?} is not an address like 0.0.0.0:10260", self.listen),
            ));
        };
        let Ok(api_listen) = self.api_listen.parse::<std::net::SocketAddr>() else {
            return Err(invalid(
                "apiListen",
                format!("{:?} is not an address like 0.0.0.0:10261", self.api_listen),
            ));
        };
        if let Some(v) = &self.viewer_listen
            && v.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(invalid(
                "viewerListen",
                format!("{v:?} is not an address like 0.0.0.0:10262"),
            ));
        }
        if let Err((field, message)) = self
            .security
            .validate(&[("listen", listen), ("apiListen", api_listen)])
        {
            return Err(crate::config::ConfigError::Invalid { field, message });
        }
        if let Err((field, message)) = self.binding.validate() {
            return Err(crate::config::ConfigError::Invalid { field, message });
        }
        let le = &self.leader_election;
        if le.retry_period.is_zero() {
            return Err(invalid(
                "leaderElection.retryPeriod",
                "must be > 0".to_string(),
            ));
        }
        if le.renew_deadline >= le.lease_duration {
            return Err(invalid(
                "leaderElection.renewDeadline",
                "must be shorter than leaseDuration".to_string(),
            ));
        }
        if le.retry_period >= le.renew_deadline {
            return Err(invalid(
                "leaderElection.retryPeriod",
                "must be shorter than renewDeadline".to_string(),
            ));
        }
        if le.lease_name.is_empty() {
            return Err(invalid(
                "leaderElection.leaseName",
                "must not be empty".to_string(),
            ));
        }
        if !(self.events.qps >= 0.0 && self.events.qps.is_finite()) {
            return Err(invalid(
                "events.qps",
                "must be a finite number >= 0 (0: no limit)".to_string(),
            ));
        }
        if self.events.burst == 0 {
            return Err(invalid("events.burst", "must be > 0".to_string()));
        }
        if self.events.max_in_flight == 0 {
            return Err(invalid("events.maxInFlight", "must be > 0".to_string()));
        }
        if self.reservations.gc_interval.is_zero() {
            return Err(invalid(
                "reservations.gcInterval",
                "must be > 0".to_string(),
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(invalid("requestTimeout", "must be > 0".to_string()));
        }
        Ok(())
    }
}

/// How `serve`'s listeners authenticate and authorise callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SecurityMode {
    /// TLS; client certificates or TokenReview; SubjectAccessReview. The default.
    Delegated,
    /// Plain HTTP, no authentication: only on loopback listeners (a local test, a sidecar
    /// proxy that authenticates in front).
    None,
}

/// The `serve.security` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct SecurityConfig {
    /// `delegated` (default) or `none` (loopback listeners only).
    pub mode: SecurityMode,
    /// Serving certificate (PEM chain). Default none: a self-signed certificate is made at
    /// start (give kube-scheduler's extender `tlsConfig.insecure: true`, or a real one).
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    pub key_file: Option<PathBuf>,
    /// CA bundle (PEM) whose client certificates authenticate their subject (CN = user,
    /// O = groups), e.g. the cluster CA that signed kube-scheduler's client certificate.
    /// Default none: callers authenticate by bearer token only.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
    /// Paths anyone may call. Default `[/healthz, /readyz]`.
    pub always_allow_paths: Vec<String>,
    /// How long a TokenReview or SubjectAccessReview answer is reused. Default `10s`.
    #[serde(rename = "cacheTTL", with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub cache_ttl: Duration,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            mode: SecurityMode::Delegated,
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            always_allow_paths: vec!["/healthz".into(), "/readyz".into()],
            cache_ttl: Duration::from_secs(10),
        }
    }
}

impl SecurityConfig {
    /// Checks the section against the listeners it protects; errors name the field.
    pub fn validate(&self, listeners: &[(&str, SocketAddr)]) -> Result<(), (String, String)> {
        if self.mode == SecurityMode::None
            && let Some((field, addr)) = listeners.iter().find(|(_, a)| !a.ip().is_loopback())
        {
            return Err((
                "serve.security.mode".into(),
                format!(
                    "none serves without authentication, allowed only on loopback listeners; serve.{field} is {addr}"
                ),
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err((
                "serve.security.certFile".into(),
                "certFile and keyFile go together".into(),
            ));
        }
        if self.cache_ttl > Duration::from_secs(600) {
            return Err((
                "serve.security.cacheTTL".into(),
                "at most 10m (a revoked token must stop working)".into(),
            ));
        }
        Ok(())
    }
}

/// The `serve.binding` section: flow control of binds toward the API server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct FlowConfig {
    /// Binds in flight at start. Default `16`.
    pub initial_window: u32,
    /// The window never shrinks below this. Default `2`.
    pub min_window: u32,
    /// The window never grows above this. Default `512`.
    pub max_window: u32,
    /// A bind answered slower than this is a congestion signal. Default `1s` (a healthy
    /// API server binds in milliseconds; seconds mean its queues are filling).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub latency_target: Duration,
    /// Client-side rate limit, requests per second for binds, as kube-scheduler's
    /// `clientConnection.qps`. Default `0`: no limit (the window adapts instead).
    pub qps: f64,
    /// Burst of the rate limit, as kube-scheduler's `clientConnection.burst`. Default
    /// `100`; unused while `qps` is 0.
    pub burst: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            initial_window: 16,
            min_window: 2,
            max_window: 512,
            latency_target: Duration::from_secs(1),
            qps: 0.0,
            burst: 100,
        }
    }
}

impl FlowConfig {
    /// Checks the bounds; errors name the field under `serve.binding`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((format!("serve.binding.{f}"), m));
        if self.min_window == 0 {
            return bad("minWindow", "must be at least 1".into());
        }
        if self.max_window < self.min_window {
            return bad(
                "maxWindow",
                format!(
                    "{} is below minWindow ({})",
                    self.max_window, self.min_window
                ),
            );
        }
        if !(self.min_window..=self.max_window).contains(&self.initial_window) {
            return bad(
                "initialWindow",
                format!(
                    "{} is not within minWindow..=maxWindow ({}..={})",
                    self.initial_window, self.min_window, self.max_window
                ),
            );
        }
        if self.latency_target.is_zero() {
            return bad("latencyTarget", "must be positive".into());
        }
        if !self.qps.is_finite() || self.qps < 0.0 {
            return bad(
                "qps",
                format!("{} is not a rate (0 turns the limit off)", self.qps),
            );
        }
        if self.qps > 0.0 && self.burst == 0 {
            return bad("burst", "must be at least 1 when qps is set".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_and_field_errors() {
        let c: ServeConfig = serde_norway::from_str("{}").unwrap();
        assert_eq!(c, ServeConfig::default());
        c.validate().unwrap();
        let text = serde_norway::to_string(&c).unwrap();
        assert_eq!(serde_norway::from_str::<ServeConfig>(&text).unwrap(), c);

        let c: ServeConfig =
            serde_norway::from_str("leaderElection: {leaseDuration: 2s, renewDeadline: 3s}\n")
                .unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("serve.leaderElection.renewDeadline"), "{e}");
        assert!(serde_norway::from_str::<ServeConfig>("bogus: 1").is_err());
    }

    #[test]
    fn mode_none_only_on_loopback() {
        let none = SecurityConfig {
            mode: SecurityMode::None,
            ..SecurityConfig::default()
        };
        let lo: SocketAddr = "127.0.0.1:10260".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:10261".parse().unwrap();
        assert!(none.validate(&[("listen", lo)]).is_ok());
        let (field, message) = none
            .validate(&[("listen", lo), ("apiListen", any)])
            .unwrap_err();
        assert_eq!(field, "serve.security.mode");
        assert!(
            message.contains("serve.apiListen is 0.0.0.0:10261"),
            "{message}"
        );
        assert!(
            SecurityConfig::default()
                .validate(&[("listen", any)])
                .is_ok()
        );
    }
}
