//! The `usage` section of the configuration: how real usage enters decisions — staleness,
//! the percentile a pod is predicted at, and class policies that decide which real filters
//! apply to which pods and with which reserves.
//!
//! ```yaml
//! usage:
//!   staleAfter: 2m            # usage older than this is stale
//!   onStale: fallback         # fallback: real filters pass, scores use requests; reject
//!   predictPercentile: p95    # a builder's profile percentile used as its prediction
//!   coldStart: calibrated     # a pod without a profile: requests × what profiled pods use
//!                             # (`image`: those with its container images, when some run)
//!   maxWait: 0s               # then real memory/CPU filters let a waiting pod through
//!   defaults:                 # settings of pods that match no class
//!     realMemoryFit: true
//!     memoryReservePercent: 10
//!   classes:                  # first match wins; unset fields inherit `defaults`
//!     - name: databases
//!       match:
//!         labels: { headroom.io/service: [mysql, pika] }
//!       realDiskFit: true
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;
use crate::selector::Labels;

/// What real filters do on a node whose usage is stale or missing.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum StalePolicy {
    /// The real filters let the node pass and the scores use requests instead (default):
    /// missing metrics must never block scheduling.
    #[default]
    Fallback,
    /// The real filters reject the node (`node(s) had stale usage metrics`).
    Reject,
}

/// How a pod whose builder has no profile yet (and no `builder-real-resources`
/// annotation) is predicted.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ColdStart {
    /// By its requests, as kube-scheduler judges it.
    Requests,
    /// By its requests scaled by how much the cluster's pods with a profile really use
    /// against their requests: the p90 of that ratio over the running pods whose builder
    /// has a profile (at least 5), recomputed at every usage refresh (default). A farm
    /// whose builds use twice their requests predicts a new builder at twice its requests.
    #[default]
    Calibrated,
    /// As `calibrated`, but over the running profiled pods that run the same container
    /// images as the pod, when at least one does (a new builder on a Rust toolchain image
    /// is judged by the Rust builds, not by the JVM ones); else over all of them.
    Image,
}

/// Which percentile of a builder's profile predicts its next run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Percentile {
    /// Median.
    P50,
    /// 90th.
    P90,
    /// 95th (default).
    #[default]
    P95,
    /// 99th.
    P99,
    /// Maximum.
    Max,
}

impl Percentile {
    /// The value of this percentile in `p`.
    pub fn pick(self, p: &crate::view::Percentiles) -> f64 {
        match self {
            Percentile::P50 => p.p50,
            Percentile::P90 => p.p90,
            Percentile::P95 => p.p95,
            Percentile::P99 => p.p99,
            Percentile::Max => p.max,
        }
    }

    /// As a fraction in `[0, 1]` (max = 1).
    pub fn fraction(self) -> f64 {
        match self {
            Percentile::P50 => 0.5,
            Percentile::P90 => 0.9,
            Percentile::P95 => 0.95,
            Percentile::P99 => 0.99,
            Percentile::Max => 1.0,
        }
    }

    /// Its name (`p95`).
    pub fn as_str(self) -> &'static str {
        match self {
            Percentile::P50 => "p50",
            Percentile::P90 => "p90",
            Percentile::P95 => "p95",
            Percentile::P99 => "p99",
            Percentile::Max => "max",
        }
    }
}

/// Which pods a class applies to: every listed key must match (labels and annotations
/// alike); a key lists the values it accepts, or none to accept any value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ClassMatch {
    /// Pod labels: key → accepted values (empty: the key must exist).
    pub labels: BTreeMap<String, Vec<String>>,
    /// Pod annotations: key → accepted values (empty: the key must exist).
    pub annotations: BTreeMap<String, Vec<String>>,
}

impl ClassMatch {
    /// Whether a pod with these labels and annotations matches. An empty match matches
    /// nothing (a class must say whom it is for).
    pub fn matches(&self, labels: &Labels, annotations: &Labels) -> bool {
        if self.labels.is_empty() && self.annotations.is_empty() {
            return false;
        }
        let ok = |want: &BTreeMap<String, Vec<String>>, have: &Labels| {
            want.iter().all(|(k, vals)| {
                have.get(k)
                    .is_some_and(|v| vals.is_empty() || vals.iter().any(|w| w == v))
            })
        };
        ok(&self.labels, labels) && ok(&self.annotations, annotations)
    }
}

/// Settings a class may set; unset fields inherit the `defaults`, then the built-in
/// defaults (documented per field).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ClassSettings {
    /// Whether RealMemoryFit applies. Built-in default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_memory_fit: Option<bool>,
    /// RealMemoryFit keeps this share of the node's memory free, percent. Built-in
    /// default: 10 (seed 003's MySQL rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_reserve_percent: Option<f64>,
    /// Whether RealDiskFit applies. Built-in default: false (the default `databases` class
    /// turns it on for MySQL and pika).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_disk_fit: Option<bool>,
    /// RealDiskFit's hold as a share of the node's disk, percent. Built-in default: 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_hold_percent: Option<f64>,
    /// RealDiskFit's minimum hold, a quantity. Built-in default: `250Gi`. The hold is
    /// `max(total × diskHoldPercent, diskHoldMin)` (seed 003).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_hold_min: Option<String>,
    /// Whether RealCpuFit applies (the plugin itself is off by default). Built-in
    /// default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_cpu_fit: Option<bool>,
    /// RealCpuFit's limit on real CPU utilisation after placing the pod, percent.
    /// Built-in default: 90.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_threshold_percent: Option<f64>,
}

/// A named class: which pods, and their settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClassRule {
    /// Class name (shown in decision records).
    pub name: String,
    /// Which pods.
    #[serde(rename = "match")]
    pub matches: ClassMatch,
    /// Their settings.
    #[serde(flatten)]
    pub settings: ClassSettings,
}

/// The resolved settings of one pod's class.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    /// Class name (`default` when no rule matched).
    pub name: String,
    /// RealMemoryFit applies.
    pub real_memory_fit: bool,
    /// Memory reserve, fraction of total.
    pub memory_reserve: f64,
    /// RealDiskFit applies.
    pub real_disk_fit: bool,
    /// Disk hold, fraction of total.
    pub disk_hold: f64,
    /// Minimum disk hold, bytes.
    pub disk_hold_min_bytes: i64,
    /// RealCpuFit applies.
    pub real_cpu_fit: bool,
    /// CPU utilisation limit, fraction.
    pub cpu_threshold: f64,
}

/// The `usage` configuration section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct UsagePolicy {
    /// Usage older than this (by its newest sample) is stale. Default `2m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub stale_after: Duration,
    /// How long a newly placed pod's predicted usage still counts on its node after the
    /// node's samples include it: usage ramps up after start (compilers, JVMs, caches), so
    /// the part of the prediction the pod's own measured usage does not show yet
    /// (`max(0, predicted − measured)`; the whole prediction while its containers have no
    /// sample) is counted, decaying linearly to zero over this window after placement.
    /// A pod that ends or is deleted stops counting at once. `0s` counts a pod only until
    /// the first sample that includes it. Default `5m`, for
    /// builds whose memory ramps up over a minute or two; a farm of builds of a few
    /// minutes that reach their memory in seconds wants less
    /// (`examples/real-nodes-config.yaml`).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub warmup: Duration,
    /// What the real filters do on stale or missing usage. Default `fallback`.
    pub on_stale: StalePolicy,
    /// The percentile of a builder's profile that predicts its usage. Default `p95`.
    pub predict_percentile: Percentile,
    /// How a pod without a profile is predicted: `calibrated` (default: its requests
    /// scaled by what profiled pods really use against theirs), `image` (scaled by what
    /// the profiled pods with the same container images use, when some run) or
    /// `requests`.
    pub cold_start: ColdStart,
    /// How long real usage alone may keep a pod off every node, counted from its first
    /// scheduling attempt. Once a pod has waited this long and RealMemoryFit or
    /// RealCpuFit still reject every node that would otherwise fit, those two filters let
    /// it through for that cycle (the *fallback*): the pod goes to the least-hot node that
    /// fits by requests (RealHeadroom's score decides; History does not pull it to a warm
    /// node) — but not to a node where its expected memory (every mean, no reserve) passes
    /// the node's memory while another schedulable node has that room (the pod waits for
    /// it: such a placement would more likely than not start the OOM killer) —, the
    /// decision record carries the fallback (`/explain`), the `Scheduled` event
    /// says so and `headroom_scheduler_fallback_placements_total` counts it. Disk holds
    /// (RealDiskFit) and reservations are never relaxed. `0s` (default) falls back at the
    /// first attempt: a pod that no node has real room for goes at once to the node with
    /// the most real free memory; a longer duration lets it wait for real room that long
    /// (a long one, `24h`, waits as RealMemoryFit alone would). Tuned on the farm families
    /// (docs/simulate.md, *Farm families*): waiting `30s` cut OOM kills a little further but made
    /// time to schedule p99 miss the baseline's + 10 % + 5 s on 5 farms of 22.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub max_wait: Duration,
    /// The warm wait: a returning builder whose cycle chose a node none of its runs used
    /// waits for one of its warm nodes when its own runs say the warm cache saves more
    /// than the expected wait, and only within the queue's existing tail (p99 − p50 of
    /// the time to schedule, with no more builds held than its p99 has room for; a queue
    /// that places everything at once holds nothing). A held
    /// pod's FailedScheduling says so, `/explain` gives the numbers and
    /// `headroom_scheduler_warm_holds_total` counts holds. See [`crate::usage::warm`].
    pub warm_wait: super::WarmWait,
    /// The memory fit built on risk (`src/usage/risk.rs`): the largest probability,
    /// percent, that a node's real memory passes what it can give (its memory less the
    /// class's `memoryReservePercent`) once the pod is placed. Each pod's memory is a
    /// distribution from its builder's profile (median and p95), its
    /// `builder-real-resources` records or the cluster's calibration, and the pods placed
    /// recently add theirs; RealMemoryFit rejects a node whose risk passes this target, and
    /// `/explain` shows each node's risk. Unset (`null`): RealMemoryFit adds point
    /// predictions at `predictPercentile` instead. In `(0, 50]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_risk_percent: Option<f64>,
    /// Settings of pods that match no class.
    pub defaults: ClassSettings,
    /// Class rules, first match wins. Default: one class `databases` for pods labelled or
    /// annotated `headroom.io/service` = `mysql` or `pika`, with RealDiskFit on (seed 003).
    pub classes: Vec<ClassRule>,
}

/// The default `usage.maxWait`.
pub const DEFAULT_MAX_WAIT: Duration = Duration::ZERO;

/// The label/annotation naming a database service (seed 003).
pub const SERVICE_KEY: &str = "headroom.io/service";

impl Default for UsagePolicy {
    fn default() -> Self {
        let dbs = vec!["mysql".to_string(), "pika".to_string()];
        let disk_on = ClassSettings {
            real_disk_fit: Some(true),
            ..ClassSettings::default()
        };
        UsagePolicy {
            stale_after: Duration::from_secs(120),
            warmup: Duration::from_secs(300),
            on_stale: StalePolicy::Fallback,
            predict_percentile: Percentile::P95,
            cold_start: ColdStart::Calibrated,
            max_wait: DEFAULT_MAX_WAIT,
            warm_wait: super::WarmWait::default(),
            memory_risk_percent: None,
            defaults: ClassSettings::default(),
            classes: vec![
                ClassRule {
                    name: "databases".into(),
                    matches: ClassMatch {
                        labels: [(SERVICE_KEY.to_string(), dbs.clone())].into(),
                        annotations: BTreeMap::new(),
                    },
                    settings: disk_on.clone(),
                },
                ClassRule {
                    name: "databases".into(),
                    matches: ClassMatch {
                        labels: BTreeMap::new(),
                        annotations: [(SERVICE_KEY.to_string(), dbs)].into(),
                    },
                    settings: disk_on,
                },
            ],
        }
    }
}

fn percent(field: &str, v: Option<f64>, default: f64) -> Result<f64, String> {
    let v = v.unwrap_or(default);
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("{field}: {v} is not a percentage in [0, 100]"));
    }
    Ok(v / 100.0)
}

impl UsagePolicy {
    /// The standard normal quantile of `1 − memoryRiskPercent / 100`, when the risk-based
    /// fit is on: the demand's standard deviations a node must leave room for.
    pub fn memory_risk_z(&self) -> Option<f64> {
        self.memory_risk_percent
            .map(|r| crate::usage_context::risk::normal_quantile(1.0 - r / 100.0))
    }

    /// [`UsagePolicy::warmup`] in milliseconds (saturating).
    pub fn warmup_ms(&self) -> i64 {
        i64::try_from(self.warmup.as_millis()).unwrap_or(i64::MAX)
    }

    /// Resolves the settings of one class rule (or the defaults when `rule` is None).
    pub fn resolve(&self, rule: Option<&ClassRule>) -> Result<Class, String> {
        let d = &self.defaults;
        let s = rule.map(|r| &r.settings);
        let pick = |f: fn(&ClassSettings) -> Option<f64>| s.and_then(f).or_else(|| f(d));
        let pick_b = |f: fn(&ClassSettings) -> Option<bool>| s.and_then(f).or_else(|| f(d));
        let hold_min = s
            .and_then(|s| s.disk_hold_min.clone())
            .or_else(|| d.disk_hold_min.clone())
            .unwrap_or_else(|| "250Gi".into());
        let hold_min = Quantity::parse(&hold_min)
            .map_err(|e| format!("diskHoldMin {hold_min:?}: {e}"))?
            .value();
        Ok(Class {
            name: rule.map_or_else(|| "default".to_string(), |r| r.name.clone()),
            real_memory_fit: pick_b(|s| s.real_memory_fit).unwrap_or(true),
            memory_reserve: percent(
                "memoryReservePercent",
                pick(|s| s.memory_reserve_percent),
                10.0,
            )?,
            real_disk_fit: pick_b(|s| s.real_disk_fit).unwrap_or(false),
            disk_hold: percent("diskHoldPercent", pick(|s| s.disk_hold_percent), 10.0)?,
            disk_hold_min_bytes: hold_min,
            real_cpu_fit: pick_b(|s| s.real_cpu_fit).unwrap_or(true),
            cpu_threshold: percent(
                "cpuThresholdPercent",
                pick(|s| s.cpu_threshold_percent),
                90.0,
            )?,
        })
    }

    /// Checks every class resolves; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        self.warm_wait.validate()?;
        if let Some(r) = self.memory_risk_percent
            && !(r > 0.0 && r <= 50.0)
        {
            return Err((
                "usage.memoryRiskPercent".to_string(),
                format!("{r} is not a percentage in (0, 50]"),
            ));
        }
        self.resolve(None)
            .map_err(|m| ("usage.defaults".to_string(), m))?;
        for (i, r) in self.classes.iter().enumerate() {
            if r.name.trim().is_empty() {
                return Err((
                    format!("usage.classes[{i}].name"),
                    "must not be empty".into(),
                ));
            }
            if r.matches.labels.is_empty() && r.matches.annotations.is_empty() {
                return Err((
                    format!("usage.classes[{i}].match"),
                    "must name at least one label or annotation".into(),
                ));
            }
            self.resolve(Some(r))
                .map_err(|m| (format!("usage.classes[{i}]"), m))?;
        }
        Ok(())
    }

    /// The class of a pod with these labels and annotations.
    pub fn class_of(&self, labels: &Labels, annotations: &Labels) -> Class {
        let rule = self
            .classes
            .iter()
            .find(|r| r.matches.matches(labels, annotations));
        // `validate` ran at load time; a policy built in code that does not resolve falls
        // back to the built-in defaults rather than failing the cycle.
        self.resolve(rule).unwrap_or_else(|_| {
            UsagePolicy::default()
                .resolve(None)
                .expect("built-in defaults resolve")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_classes() {
        let p = UsagePolicy::default();
        p.validate().unwrap();
        let none = Labels::new();
        let c = p.class_of(&none, &none);
        assert_eq!(c.name, "default");
        assert!(c.real_memory_fit && !c.real_disk_fit);
        assert_eq!(c.memory_reserve, 0.1);
        assert_eq!(c.disk_hold_min_bytes, 250 << 30);
        let mysql = labels(&[("headroom.io/service", "mysql")]);
        assert!(p.class_of(&mysql, &none).real_disk_fit);
        assert!(p.class_of(&none, &mysql).real_disk_fit);
        let redis = labels(&[("headroom.io/service", "redis")]);
        assert!(!p.class_of(&redis, &none).real_disk_fit);
    }

    #[test]
    fn yaml_overrides_and_errors() {
        let p: UsagePolicy = serde_norway::from_str(
            "onStale: reject\ndefaults: {memoryReservePercent: 5}\nclasses:\n- name: big\n  match: {annotations: {team: []}}\n  memoryReservePercent: 20\n  diskHoldMin: 1Ti\n",
        )
        .unwrap();
        p.validate().unwrap();
        assert_eq!(p.on_stale, StalePolicy::Reject);
        let none = Labels::new();
        assert_eq!(p.class_of(&none, &none).memory_reserve, 0.05);
        let team = labels(&[("team", "x")]);
        let c = p.class_of(&none, &team);
        assert_eq!((c.name.as_str(), c.memory_reserve), ("big", 0.2));
        assert_eq!(c.disk_hold_min_bytes, 1 << 40);
        assert!(serde_norway::from_str::<UsagePolicy>("bogus: 1").is_err());
        let bad: UsagePolicy =
            serde_norway::from_str("defaults: {memoryReservePercent: 150}").unwrap();
        assert!(bad.validate().is_err());
        let bad: UsagePolicy = serde_norway::from_str("classes: [{name: x, match: {}}]").unwrap();
        assert_eq!(bad.validate().unwrap_err().0, "usage.classes[0].match");
    }
}
