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
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::field::{self, Error as FieldError, ErrorList, Path};
use crate::quantity::Quantity;
use crate::reservation::{Phase, Reservation, ReservedFor};
use crate::selector::{Labels, Selector};
use crate::view::{BuilderProfile, NodeUsage, Percentiles, Stat, UsageView};

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
    /// The YAML does not fit the schema, or values are invalid: every error, each naming
    /// the file and the field (`u.yaml: nodes[0].cpu: ...`).
    #[error("{0}")]
    Fields(ErrorList),
}

/// The largest CPU amount accepted anywhere in the file (cores).
pub const MAX_CORES: f64 = 1_000_000.0;
/// The largest byte amount accepted (1 EiB), so sums of a few stay far from `i64::MAX`.
pub const MAX_BYTES: f64 = (1u64 << 60) as f64;
/// The longest duration accepted (`age`, `ttl`): 10 years.
pub const MAX_DURATION: Duration = Duration::from_secs(3660 * 24 * 3600);

/// A quantity written as a string (`"2500m"`, `6Gi`) or a plain number.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Amount {
    /// A number.
    Number(f64),
    /// A Kubernetes quantity.
    Text(String),
}

/// Says what an amount may be written as, instead of serde's "did not match any variant".
struct AmountVisitor;

impl<'de> serde::de::Visitor<'de> for AmountVisitor {
    type Value = Amount;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a quantity (\"2500m\", 6Gi) or a number")
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Amount, E> {
        Ok(Amount::Number(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Amount, E> {
        Ok(Amount::Number(v as f64))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Amount, E> {
        Ok(Amount::Number(v as f64))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Amount, E> {
        Ok(Amount::Text(v.to_string()))
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Amount, D::Error> {
        d.deserialize_any(AmountVisitor)
    }
}

impl Amount {
    /// The amount as a number, or `(field, why)` when it is not a non-negative quantity.
    pub fn value(&self, field: &str) -> Result<f64, (String, String)> {
        self.value_at(&Path::new(field), f64::INFINITY)
            .map_err(|e| (field.to_string(), e.kind.to_string()))
    }

    /// The amount as a number: a quantity or a finite number, at least 0 and at most `max`.
    pub fn value_at(&self, path: &Path, max: f64) -> Result<f64, FieldError> {
        let v = match self {
            Amount::Number(n) => *n,
            Amount::Text(t) => {
                let q = Quantity::parse(t)
                    .map_err(|e| FieldError::invalid(path.clone(), "", e.to_string()))?;
                q.nano_value() as f64 / 1e9
            }
        };
        let shown = match self {
            Amount::Number(n) => format!("{n:?}"),
            Amount::Text(t) => field::quoted(t),
        };
        if !v.is_finite() || v < 0.0 || v > max {
            let range = if max.is_finite() {
                format!("a non-negative amount of at most {max}")
            } else {
                "a finite, non-negative amount".to_string()
            };
            return Err(FieldError::out_of_range(path.clone(), shown, range));
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
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ProfileValue {
    /// Every percentile the same.
    All(Amount),
    /// Per percentile.
    Each(BTreeMap<String, Amount>),
}

struct ProfileVisitor;

impl<'de> serde::de::Visitor<'de> for ProfileVisitor {
    type Value = ProfileValue;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a quantity, a number, or a map of percentiles (p50, p90, p95, p99, max)")
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ProfileValue, E> {
        AmountVisitor.visit_f64(v).map(ProfileValue::All)
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ProfileValue, E> {
        AmountVisitor.visit_i64(v).map(ProfileValue::All)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ProfileValue, E> {
        AmountVisitor.visit_u64(v).map(ProfileValue::All)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ProfileValue, E> {
        AmountVisitor.visit_str(v).map(ProfileValue::All)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ProfileValue, A::Error> {
        BTreeMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            .map(ProfileValue::Each)
    }
}

impl<'de> Deserialize<'de> for ProfileValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ProfileValue, D::Error> {
        d.deserialize_any(ProfileVisitor)
    }
}

impl ProfileValue {
    fn percentiles(&self, path: &Path, max: f64) -> Result<Percentiles, FieldError> {
        match self {
            ProfileValue::All(a) => {
                let v = a.value_at(path, max)?;
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
                    return Err(FieldError::unknown_field(path.key(k.clone()), &KEYS));
                }
                let mut vals = [None; 5];
                for (i, k) in KEYS.iter().enumerate() {
                    if let Some(a) = map.get(*k) {
                        vals[i] = Some(a.value_at(&path.key(*k), max)?);
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
                    return Err(FieldError::required(
                        path.clone(),
                        "give at least one percentile (p50, p90, p95, p99, max)",
                    ));
                }
                let [p50, p90, p95, p99, max] = vals.map(|v| v.unwrap_or(0.0));
                if !(p50 <= p90 && p90 <= p95 && p95 <= p99 && p99 <= max) {
                    return Err(FieldError::invalid(
                        path.clone(),
                        "",
                        "percentiles must not decrease (p50 ≤ p90 ≤ p95 ≤ p99 ≤ max)",
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

fn parse_time(t: &str, path: Path) -> Result<i64, FieldError> {
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|d| d.timestamp_millis())
        .map_err(|e| {
            FieldError::invalid(path, field::quoted(t), format!("not an RFC 3339 time: {e}"))
        })
}

/// A duration in ms, at most [`MAX_DURATION`].
fn bounded_ms(d: Duration, path: Path) -> Result<i64, FieldError> {
    if d > MAX_DURATION {
        return Err(FieldError::out_of_range(
            path,
            humantime_serde::re::humantime::format_duration(d),
            "at most 3660 days",
        ));
    }
    Ok(d.as_millis() as i64)
}

/// Collects `Err`s into `errors`, passing values through.
fn keep<T>(errors: &mut ErrorList, r: Result<T, FieldError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

impl UsageFile {
    /// Reads and resolves a usage file; `wall_ms` is used when it sets no `now`.
    pub fn load(path: &std::path::Path, wall_ms: i64) -> Result<UsageInputs, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: origin.clone(),
            source,
        })?;
        UsageFile::parse(&text, &origin, wall_ms)
    }

    /// Parses and resolves YAML text; `origin` names it in errors. Every invalid value is
    /// reported, not only the first.
    pub fn parse(text: &str, origin: &str, wall_ms: i64) -> Result<UsageInputs, Error> {
        let de = serde_norway::Deserializer::from_str(text);
        let file: UsageFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let fe = FieldError::from_serde(e.path(), &e.inner().to_string());
            Error::Fields(ErrorList::from(fe).with_origin(origin))
        })?;
        file.resolve_all(wall_ms)
            .map_err(|e| Error::Fields(e.with_origin(origin)))
    }

    /// [`UsageFile::resolve_all`], reporting the first error as `(field, message)`.
    pub fn resolve(&self, wall_ms: i64) -> Result<UsageInputs, (String, String)> {
        self.resolve_all(wall_ms).map_err(|list| {
            let first = &list.errors()[0];
            (first.path.to_string(), first.kind.to_string())
        })
    }

    /// Checks every entry and resolves the file into a usage view and reservations, or
    /// lists every invalid field.
    pub fn resolve_all(&self, wall_ms: i64) -> Result<UsageInputs, ErrorList> {
        let mut errors = ErrorList::new();
        let now_ms = match &self.now {
            Some(t) => keep(&mut errors, parse_time(t, Path::new("now"))).unwrap_or(wall_ms),
            None => wall_ms,
        };
        let mut view = UsageView {
            generated_ms: now_ms,
            ..UsageView::default()
        };
        self.resolve_nodes(&mut errors, now_ms, &mut view);
        self.resolve_builders(&mut errors, now_ms, &mut view);
        for (builder, nodes) in &self.history {
            let at = Path::new("history").key(builder.clone());
            if builder.is_empty() {
                errors.push(FieldError::required(
                    at.clone(),
                    "builder must not be empty",
                ));
            }
            for (j, n) in nodes.iter().enumerate() {
                errors.extend(field::dns1123_subdomain(&at.index(j), n));
            }
            view.placements.insert(builder.clone(), nodes.clone());
        }
        let reservations = self.resolve_reservations(&mut errors, now_ms);
        errors.into_result(UsageInputs {
            now_ms,
            view,
            reservations,
        })
    }

    /// `nodes`: each node's usage into `view`, every invalid field into `errors`.
    fn resolve_nodes(&self, errors: &mut ErrorList, now_ms: i64, view: &mut UsageView) {
        let mut node_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let at = Path::new("nodes").index(i);
            let mut ok = true;
            if let Some(e) = field::dns1123_subdomain(&at.child("name"), &n.name) {
                errors.push(e);
                ok = false;
            } else if let Some(first) = node_index.insert(&n.name, i) {
                errors.push(FieldError::duplicate(
                    at.child("name"),
                    format!("nodes[{first}] ({:?})", n.name),
                ));
                ok = false;
            }
            let stat = |v: f64| Stat {
                current: v,
                windowed: v,
            };
            let mut amount = |a: &Option<Amount>, k: &str| {
                a.as_ref()
                    .and_then(|a| keep(errors, a.value_at(&at.child(k), MAX_BYTES)))
            };
            let disk_free = amount(&n.disk_free, "diskFree");
            let disk_total = amount(&n.disk_total, "diskTotal");
            if n.disk_free.is_some() != n.disk_total.is_some() {
                errors.push(FieldError::required(
                    at.child("diskTotal"),
                    "diskTotal and diskFree go together",
                ));
                ok = false;
            }
            let cpu = keep(errors, n.cpu.value_at(&at.child("cpu"), MAX_CORES));
            let memory = keep(errors, n.memory.value_at(&at.child("memory"), MAX_BYTES));
            let age = keep(
                errors,
                bounded_ms(n.age.unwrap_or_default(), at.child("age")),
            );
            let (Some(cpu), Some(memory), Some(age), true) = (cpu, memory, age, ok) else {
                continue;
            };
            let usage = NodeUsage {
                node: n.name.clone(),
                cpu_cores: stat(cpu),
                memory_working_set_bytes: stat(memory),
                fs_available_bytes: disk_free.map(stat),
                fs_capacity_bytes: disk_total,
                newest_ms: now_ms.saturating_sub(age),
                window: None,
            };
            view.nodes.insert(n.name.clone(), usage);
        }
    }

    /// `builders`: each builder's profile into `view`, every invalid field into `errors`.
    fn resolve_builders(&self, errors: &mut ErrorList, now_ms: i64, view: &mut UsageView) {
        let mut builder_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, b) in self.builders.iter().enumerate() {
            let at = Path::new("builders").index(i);
            if b.name.is_empty() {
                errors.push(FieldError::required(at.child("name"), "must not be empty"));
            } else if b.name.len() > 1024 {
                errors.push(FieldError::too_long(at.child("name"), 1024, b.name.len()));
            } else if let Some(first) = builder_index.insert(&b.name, i) {
                errors.push(FieldError::duplicate(
                    at.child("name"),
                    format!("builders[{first}]"),
                ));
            }
            if b.runs == 0 {
                errors.push(FieldError::out_of_range(at.child("runs"), 0, "at least 1"));
            }
            let cpu = keep(errors, b.cpu.percentiles(&at.child("cpu"), MAX_CORES));
            let memory = keep(errors, b.memory.percentiles(&at.child("memory"), MAX_BYTES));
            if let (Some(cpu), Some(memory)) = (cpu, memory) {
                let profile = BuilderProfile {
                    builder: b.name.clone(),
                    runs: b.runs,
                    cpu,
                    memory,
                    newest_ms: now_ms,
                    cold_run_s: None,
                    warm_run_s: None,
                };
                view.builders.insert(b.name.clone(), profile);
            }
        }
    }

    /// `reservations`: the valid ones, every invalid field into `errors`.
    fn resolve_reservations(&self, errors: &mut ErrorList, now_ms: i64) -> Vec<Reservation> {
        let mut reservations = Vec::new();
        let mut reservation_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, r) in self.reservations.iter().enumerate() {
            let at = Path::new("reservations").index(i);
            let before = errors.len();
            if r.name.is_empty() {
                errors.push(FieldError::required(at.child("name"), "must not be empty"));
            } else if r.name.len() > 253 {
                errors.push(FieldError::too_long(at.child("name"), 253, r.name.len()));
            } else if let Some(first) = reservation_index.insert(&r.name, i) {
                errors.push(FieldError::duplicate(
                    at.child("name"),
                    format!("reservations[{first}]"),
                ));
            }
            errors.extend(field::dns1123_label(&at.child("namespace"), &r.namespace));
            errors.extend(field::dns1123_subdomain(&at.child("node"), &r.node));
            let pod = match (&r.pod, &r.pod_selector) {
                (Some(p), None) if !p.is_empty() => {
                    errors.extend(field::dns1123_subdomain(&at.child("pod"), p));
                    Some(ReservedFor::Name(p.clone()))
                }
                (None, Some(sel)) if !sel.is_empty() => {
                    for (k, v) in sel {
                        let kp = at.child("podSelector").key(k.clone());
                        errors.extend(field::label_key(&kp, k));
                        errors.extend(field::label_value(&kp, v));
                    }
                    Some(ReservedFor::Selector(Selector::from_map(sel)))
                }
                _ => {
                    errors.push(FieldError::required(
                        at.child("pod"),
                        "give exactly one of pod or podSelector",
                    ));
                    None
                }
            };
            let expire_at_ms = match (&r.ttl, &r.expire_at) {
                (Some(ttl), None) => keep(errors, bounded_ms(*ttl, at.child("ttl")))
                    .map(|ms| now_ms.saturating_add(ms)),
                (None, Some(t)) => keep(errors, parse_time(t, at.child("expireAt"))),
                (None, None) => Some(i64::MAX),
                (Some(_), Some(_)) => {
                    errors.push(FieldError::invalid(
                        at.child("ttl"),
                        "",
                        "give ttl or expireAt, not both",
                    ));
                    None
                }
            };
            let mut amount = |a: &Option<Amount>, k: &str, max: f64| {
                a.as_ref()
                    .map(|a| keep(errors, a.value_at(&at.child(k), max)))
                    .unwrap_or(Some(0.0))
            };
            let cpu = amount(&r.cpu, "cpu", MAX_CORES);
            let memory = amount(&r.memory, "memory", MAX_BYTES);
            let disk = amount(&r.disk, "disk", MAX_BYTES);
            if errors.len() > before {
                continue;
            }
            let (Some(pod), Some(expire_at_ms), Some(cpu), Some(memory), Some(disk)) =
                (pod, expire_at_ms, cpu, memory, disk)
            else {
                continue;
            };
            reservations.push(Reservation {
                id: r.name.clone(),
                namespace: r.namespace.clone(),
                pod,
                node: r.node.clone(),
                cpu_milli: (cpu * 1000.0).round() as i64,
                memory_bytes: memory.round() as i64,
                disk_bytes: disk.round() as i64,
                expire_at_ms,
                phase: Phase::Active,
            });
        }
        reservations
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
            // Regression: serde's "did not match any variant of untagged enum Amount".
            ("nodes: [{name: a, cpu: [1], memory: 1}]", "nodes[0].cpu"),
            (
                "builders: [{name: b, cpu: [1], memory: 1}]",
                "builders[0].cpu",
            ),
            ("nodes: [{name: a, cpu: .inf, memory: 1}]", "nodes[0].cpu"),
            (
                "nodes: [{name: a, cpu: 1, memory: 1e300}]",
                "nodes[0].memory",
            ),
            (
                "nodes: [{name: a, cpu: 1, memory: 1, age: 100000000h}]",
                "nodes[0].age",
            ),
            (
                "reservations: [{name: r, pod: p, node: n, ttl: 100000000h}]",
                "reservations[0].ttl",
            ),
            (
                "nodes: [{name: 'No Such', cpu: 1, memory: 1}]",
                "nodes[0].name",
            ),
        ];
        for (text, field) in cases {
            match UsageFile::parse(text, "u.yaml", 0) {
                Err(Error::Fields(list)) => {
                    assert_eq!(list.errors()[0].path.to_string(), field, "{text}");
                    let shown = list.to_string();
                    assert!(shown.starts_with(&format!("u.yaml: {field}: ")), "{shown}");
                    assert!(!shown.contains("untagged"), "{shown}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn every_error_is_listed() {
        let text = "nodes: [{name: a, cpu: lots, memory: -1}, {name: a, cpu: 1, memory: 1}]\n\
                    reservations: [{name: r, node: n}]\n";
        let Err(Error::Fields(list)) = UsageFile::parse(text, "u.yaml", 0) else {
            panic!("accepted")
        };
        let fields: Vec<String> = list.iter().map(|e| e.path.to_string()).collect();
        assert_eq!(
            fields,
            [
                "nodes[0].cpu",
                "nodes[0].memory",
                "nodes[1].name",
                "reservations[0].pod"
            ],
            "{list}"
        );
        assert!(list.to_string().contains("duplicate of nodes[0]"), "{list}");
        let e = UsageFile::parse("nodes: [{name: a, cpu: [1], memory: 1}]", "u.yaml", 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected a quantity (\"2500m\", 6Gi) or a number"),
            "{e}"
        );
    }
}
