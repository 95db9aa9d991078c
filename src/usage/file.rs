//! The usage file of `headroom place --usage FILE`: measured node usage, builder profiles,
//! reservations and placement history, written by hand or exported, so that what-if
//! placement sees the same real-usage inputs the running scheduler would.
//!
//! ```yaml
//! now: 2026-11-22T10:00:00Z   # the decision time (default: the wall clock)
//! nodes:                      # measured usage per node
//!   - name: worker-1
//!     cpu: "2.5"              # cores in use (a quantity: 2.5, "2500m")
//!     memory: 6Gi             # working set
//!     diskTotal: 1Ti          # optional: root filesystem size
//!     diskFree: 400Gi         # optional: free on it
//!     age: 30s                # age of the newest sample at `now` (default 0s)
//! builders:                   # profiles: one value for all percentiles, or a map
//!   - name: ci/Job/build-linux
//!     runs: 12
//!     cpu: { p50: "1", p95: "1.5", max: "2" }
//!     memory: 3Gi
//! reservations:               # capacity held for a named pod (seed 002)
//!   - name: hold-db-0
//!     namespace: default
//!     pod: db-0               # or podSelector: { app: db }
//!     node: worker-1
//!     cpu: "2"
//!     memory: 1Gi
//!     ttl: 10m                # or expireAt: 2026-11-22T10:10:00Z (default: no expiry)
//! history:                    # placement history per builder, most recent first
//!   ci/Job/build-linux: [worker-2, worker-3]
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::analytics::{BuilderProfile, NodeUsage, Percentiles, Stat, UsageView};
use crate::quantity::Quantity;
use crate::reservation::{Phase, Reservation, ReservedFor};
use crate::selector::{Labels, Selector};

/// Why a usage file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Unreadable file.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML does not fit the schema or a value is invalid.
    #[error("{path}: at {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The field path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// A quantity written as a string (`"2500m"`, `6Gi`) or a plain number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    /// A number.
    Number(f64),
    /// A Kubernetes quantity.
    Text(String),
}

impl Amount {
    /// The amount as a number, or `(field, why)` when it is not a non-negative quantity.
    pub(crate) fn value(&self, field: &str) -> Result<f64, (String, String)> {
        let v = match self {
            Amount::Number(n) => *n,
            Amount::Text(t) => {
                let q =
                    Quantity::parse(t).map_err(|e| (field.to_string(), format!("{t:?}: {e}")))?;
                q.nano_value() as f64 / 1e9
            }
        };
        if !v.is_finite() || v < 0.0 {
            return Err((
                field.to_string(),
                format!("{v} is not a non-negative amount"),
            ));
        }
        Ok(v)
    }
}

/// One node's measured usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeEntry {
    /// Node name.
    pub name: String,
    /// CPU in use, cores.
    pub cpu: Amount,
    /// Memory working set, bytes.
    pub memory: Amount,
    /// Root filesystem size, bytes.
    #[serde(default)]
    pub disk_total: Option<Amount>,
    /// Free on it, bytes.
    #[serde(default)]
    pub disk_free: Option<Amount>,
    /// Age of the newest sample at `now`. Default `0s`.
    #[serde(default, with = "humantime_serde")]
    pub age: Option<Duration>,
}

/// A profile value: one amount for every percentile, or some percentiles (the missing
/// ones take the next higher given one, so the profile stays monotone and conservative).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProfileValue {
    /// Every percentile the same.
    All(Amount),
    /// Per percentile.
    Each(BTreeMap<String, Amount>),
}

impl ProfileValue {
    fn percentiles(&self, field: &str) -> Result<Percentiles, (String, String)> {
        match self {
            ProfileValue::All(a) => {
                let v = a.value(field)?;
                Ok(Percentiles {
                    p50: v,
                    p90: v,
                    p95: v,
                    p99: v,
                    max: v,
                })
            }
            ProfileValue::Each(map) => {
                const KEYS: [&str; 5] = ["p50", "p90", "p95", "p99", "max"];
                if let Some(k) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
                    return Err((
                        format!("{field}.{k}"),
                        "unknown percentile (p50, p90, p95, p99, max)".into(),
                    ));
                }
                let mut vals = [None; 5];
                for (i, k) in KEYS.iter().enumerate() {
                    if let Some(a) = map.get(*k) {
                        vals[i] = Some(a.value(&format!("{field}.{k}"))?);
                    }
                }
                let mut next = None;
                for v in vals.iter_mut().rev() {
                    match v {
                        Some(x) => next = Some(*x),
                        None => *v = next,
                    }
                }
                if next.is_none() {
                    return Err((field.to_string(), "no percentile given".into()));
                }
                let [p50, p90, p95, p99, max] = vals.map(|v| v.unwrap_or(0.0));
                if !(p50 <= p90 && p90 <= p95 && p95 <= p99 && p99 <= max) {
                    return Err((
                        field.to_string(),
                        "percentiles must not decrease (p50 ≤ p90 ≤ p95 ≤ p99 ≤ max)".into(),
                    ));
                }
                Ok(Percentiles {
                    p50,
                    p90,
                    p95,
                    p99,
                    max,
                })
            }
        }
    }
}

/// One builder's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuilderEntry {
    /// Builder identity (label value, annotation, or `namespace/Kind/name`).
    pub name: String,
    /// Runs behind the profile. Default `1`.
    #[serde(default = "one")]
    pub runs: usize,
    /// Per-run CPU, cores.
    pub cpu: ProfileValue,
    /// Per-run memory, bytes.
    pub memory: ProfileValue,
}

fn one() -> usize {
    1
}

/// One reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReservationEntry {
    /// Identifier.
    pub name: String,
    /// Namespace of the reserving pod. Default `default`.
    #[serde(default = "default_ns")]
    pub namespace: String,
    /// The reserving pod's name.
    #[serde(default)]
    pub pod: Option<String>,
    /// Or: labels the reserving pod carries.
    #[serde(default)]
    pub pod_selector: Option<Labels>,
    /// Node holding the capacity.
    pub node: String,
    /// CPU held.
    #[serde(default)]
    pub cpu: Option<Amount>,
    /// Memory held.
    #[serde(default)]
    pub memory: Option<Amount>,
    /// Disk held.
    #[serde(default)]
    pub disk: Option<Amount>,
    /// Expires this long after `now`.
    #[serde(default, with = "humantime_serde")]
    pub ttl: Option<Duration>,
    /// Or: expires at this time (RFC 3339).
    #[serde(default)]
    pub expire_at: Option<String>,
}

fn default_ns() -> String {
    "default".into()
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct UsageFile {
    /// Decision time, RFC 3339. Default: the wall clock.
    pub now: Option<String>,
    /// Node usage.
    pub nodes: Vec<NodeEntry>,
    /// Builder profiles.
    pub builders: Vec<BuilderEntry>,
    /// Reservations.
    pub reservations: Vec<ReservationEntry>,
    /// Placement history per builder, most recent first.
    pub history: BTreeMap<String, Vec<String>>,
}

/// What a usage file resolves to.
#[derive(Debug, Clone)]
pub struct UsageInputs {
    /// The decision time, ms since the epoch.
    pub now_ms: i64,
    /// The view (nodes, builders, history).
    pub view: UsageView,
    /// Reservations.
    pub reservations: Vec<Reservation>,
}

fn parse_time(t: &str, field: &str) -> Result<i64, (String, String)> {
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|d| d.timestamp_millis())
        .map_err(|e| {
            (
                field.to_string(),
                format!("{t:?} is not an RFC 3339 time: {e}"),
            )
        })
}

impl UsageFile {
    /// Reads and resolves a usage file; `wall_ms` is used when it sets no `now`.
    pub fn load(path: &Path, wall_ms: i64) -> Result<UsageInputs, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: origin.clone(),
            source,
        })?;
        UsageFile::parse(&text, &origin, wall_ms)
    }

    /// Parses and resolves YAML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str, wall_ms: i64) -> Result<UsageInputs, Error> {
        let invalid = |(field, message): (String, String)| Error::Invalid {
            path: origin.to_string(),
            field,
            message,
        };
        let de = serde_norway::Deserializer::from_str(text);
        let file: UsageFile = serde_path_to_error::deserialize(de)
            .map_err(|e| invalid((e.path().to_string(), e.into_inner().to_string())))?;
        file.resolve(wall_ms).map_err(invalid)
    }

    pub(crate) fn resolve(&self, wall_ms: i64) -> Result<UsageInputs, (String, String)> {
        let now_ms = match &self.now {
            Some(t) => parse_time(t, "now")?,
            None => wall_ms,
        };
        let mut view = UsageView {
            generated_ms: now_ms,
            ..UsageView::default()
        };
        for (i, n) in self.nodes.iter().enumerate() {
            let f = |k: &str| format!("nodes[{i}].{k}");
            if n.name.is_empty() {
                return Err((f("name"), "must not be empty".into()));
            }
            let stat = |v: f64| Stat {
                current: v,
                windowed: v,
            };
            let disk_free = n
                .disk_free
                .as_ref()
                .map(|a| a.value(&f("diskFree")))
                .transpose()?;
            let disk_total = n
                .disk_total
                .as_ref()
                .map(|a| a.value(&f("diskTotal")))
                .transpose()?;
            if disk_free.is_some() != disk_total.is_some() {
                return Err((f("diskTotal"), "diskTotal and diskFree go together".into()));
            }
            let age = n.age.unwrap_or_default().as_millis() as i64;
            let usage = NodeUsage {
                node: n.name.clone(),
                cpu_cores: stat(n.cpu.value(&f("cpu"))?),
                memory_working_set_bytes: stat(n.memory.value(&f("memory"))?),
                fs_available_bytes: disk_free.map(stat),
                fs_capacity_bytes: disk_total,
                newest_ms: now_ms - age,
            };
            if view.nodes.insert(n.name.clone(), usage).is_some() {
                return Err((f("name"), format!("node {:?} listed twice", n.name)));
            }
        }
        for (i, b) in self.builders.iter().enumerate() {
            let f = |k: &str| format!("builders[{i}].{k}");
            if b.name.is_empty() {
                return Err((f("name"), "must not be empty".into()));
            }
            if b.runs == 0 {
                return Err((f("runs"), "must be at least 1".into()));
            }
            let profile = BuilderProfile {
                builder: b.name.clone(),
                runs: b.runs,
                cpu: b.cpu.percentiles(&f("cpu"))?,
                memory: b.memory.percentiles(&f("memory"))?,
                newest_ms: now_ms,
            };
            view.builders.insert(b.name.clone(), profile);
        }
        for (builder, nodes) in &self.history {
            view.placements.insert(builder.clone(), nodes.clone());
        }
        let mut reservations = Vec::new();
        for (i, r) in self.reservations.iter().enumerate() {
            let f = |k: &str| format!("reservations[{i}].{k}");
            let pod = match (&r.pod, &r.pod_selector) {
                (Some(p), None) if !p.is_empty() => ReservedFor::Name(p.clone()),
                (None, Some(sel)) if !sel.is_empty() => {
                    ReservedFor::Selector(Selector::from_map(sel))
                }
                _ => return Err((f("pod"), "give exactly one of pod or podSelector".into())),
            };
            let expire_at_ms = match (&r.ttl, &r.expire_at) {
                (Some(ttl), None) => now_ms.saturating_add(ttl.as_millis() as i64),
                (None, Some(t)) => parse_time(t, &f("expireAt"))?,
                (None, None) => i64::MAX,
                (Some(_), Some(_)) => {
                    return Err((f("ttl"), "give ttl or expireAt, not both".into()));
                }
            };
            let amount =
                |a: &Option<Amount>, k: &str| a.as_ref().map(|a| a.value(&f(k))).transpose();
            reservations.push(Reservation {
                id: r.name.clone(),
                namespace: r.namespace.clone(),
                pod,
                node: r.node.clone(),
                cpu_milli: (amount(&r.cpu, "cpu")?.unwrap_or(0.0) * 1000.0).round() as i64,
                memory_bytes: amount(&r.memory, "memory")?.unwrap_or(0.0).round() as i64,
                disk_bytes: amount(&r.disk, "disk")?.unwrap_or(0.0).round() as i64,
                expire_at_ms,
                phase: Phase::Active,
            });
        }
        Ok(UsageInputs {
            now_ms,
            view,
            reservations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
now: 2026-11-22T10:00:00Z
nodes:
  - {name: w1, cpu: "2500m", memory: 6Gi, diskTotal: 1Ti, diskFree: 400Gi, age: 30s}
  - {name: w2, cpu: 1, memory: 1073741824}
builders:
  - {name: ci/Job/x, runs: 12, cpu: {p50: "1", p95: "1.5", max: "2"}, memory: 3Gi}
reservations:
  - {name: r, pod: db-0, node: w1, cpu: "2", memory: 1Gi, ttl: 10m}
  - {name: s, namespace: ci, podSelector: {app: db}, node: w2, cpu: 500m}
history:
  ci/Job/x: [w2, w1]
"#;

    #[test]
    fn example_resolves() {
        let u = UsageFile::parse(EXAMPLE, "usage.yaml", 0).unwrap();
        let now = 1_795_341_600_000; // 2026-11-22T10:00:00Z
        assert_eq!(u.now_ms, now);
        let w1 = u.view.node("w1").unwrap();
        assert_eq!(w1.cpu_cores.current, 2.5);
        assert_eq!(w1.newest_ms, now - 30_000);
        assert_eq!(w1.fs_capacity_bytes, Some((1u64 << 40) as f64));
        let b = u.view.builder("ci/Job/x").unwrap();
        assert_eq!(
            (b.cpu.p50, b.cpu.p90, b.cpu.p95, b.cpu.p99, b.cpu.max),
            (1.0, 1.5, 1.5, 2.0, 2.0)
        );
        assert_eq!(b.memory.p50, 3.0 * (1u64 << 30) as f64);
        assert_eq!(u.reservations[0].cpu_milli, 2000);
        assert_eq!(u.reservations[0].expire_at_ms, now + 600_000);
        assert_eq!(u.reservations[1].expire_at_ms, i64::MAX);
        assert_eq!(u.view.placements["ci/Job/x"], ["w2", "w1"]);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("nodes: [{name: a, cpu: lots, memory: 1}]", "nodes[0].cpu"),
            ("nodes: [{name: a, cpu: 1, memory: -1}]", "nodes[0].memory"),
            (
                "nodes: [{name: a, cpu: 1, memory: 1, diskFree: 1Gi}]",
                "nodes[0].diskTotal",
            ),
            (
                "nodes: [{name: a, cpu: 1, memory: 1, bogus: 1}]",
                "nodes[0].bogus",
            ),
            (
                "builders: [{name: b, cpu: {p50: 2, p95: 1}, memory: 1}]",
                "builders[0].cpu",
            ),
            (
                "builders: [{name: b, cpu: {p42: 2}, memory: 1}]",
                "builders[0].cpu.p42",
            ),
            ("reservations: [{name: r, node: n}]", "reservations[0].pod"),
            (
                "reservations: [{name: r, pod: p, node: n, expireAt: tomorrow}]",
                "reservations[0].expireAt",
            ),
            ("now: yesterday", "now"),
        ];
        for (text, field) in cases {
            match UsageFile::parse(text, "u.yaml", 0) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
