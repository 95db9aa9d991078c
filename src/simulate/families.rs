//! Farm families: many plausible CI farms generated from one spec, so placement quality is
//! judged on farms nobody tuned for (`headroom sweep`).
//!
//! A family draws, per farm and deterministically from the family's name and the farm's
//! index: the simulated duration, a node size mix (one or more shapes), some builder
//! families (each a kind with its requests, real-usage factors, run times and warm-cache
//! gain), an arrival rate sized to a target real-memory load, an optional daily cycle
//! (or, with `builders.loadCurve`, a window of a measured load curve instead), bursts of
//! the most memory-heavy builds, and services and databases beside the builds. Shipped
//! scenario files can be included as farms of their own.
//!
//! ```yaml
//! name: ci-farms
//! farms: 20                     # generated farms
//! seeds: 5                      # each farm runs with seeds 1..=5
//! duration: [3h, 5h]
//! nodes:
//!   count: [8, 20]
//!   maxShapes: 2                # a farm mixes up to this many node shapes
//!   shapes:
//!     - {cpu: "16", memory: 32Gi}
//!     - {cpu: "32", memory: 64Gi}
//! builders:
//!   families: [2, 4]            # builder families per farm, drawn from `kinds`
//!   buildersPerFamily: [4, 14]
//!   memoryLoad: [0.4, 0.7]      # mean real memory of the builds (cold caches), share of the farm
//!   cycleAmplitude: [0.0, 0.5]  # daily cycle of the arrival rate
//!   cyclePeriod: [6h, 24h]
//!   loadCurve:                  # instead of the daily cycle (then cycle* are ignored)
//!     file: alibaba-2018-load.csv   # `seconds,load` (or `seconds,load,memory`) rows, relative to this file
//!     usageFollows: [0.0, 0.3]  # share of the curve the builds' usage intensity follows
//!   kinds:
//!     - name: cpp
//!       requests: {cpu: "2", memory: 3Gi}
//!       usage: {cpu: [0.8, 1.5], memory: [1.5, 4.0]}
//!       duration: [20m, 30m]    # mean run time range
//!       warmSpeedup: [0.3, 0.5]
//! bursts:
//!   count: [0, 2]
//!   size: [8, 20]               # builds of the most memory-heavy family at once
//!   at: [0.15, 0.7]             # when, as a share of the duration
//! services: [0, 4]
//! databases: [0, 2]
//! include: [../ci-farm.yaml]    # scenario files, relative to this file
//! ```
//!
//! With `builders.loadCurve` each farm takes a window of the curve as long as its
//! duration, starting at a whole step of the curve drawn by the farm's generator (so farms
//! differ); its builders' arrival rate at `t` is their base rate × the curve at `t` (linear
//! between points), and a build's real CPU and memory factors are scaled by `1 +
//! usageFollows × (curve(t) − 1)` at its arrival (`usageFollows` drawn per farm; with a
//! `memory` column, the memory factor by `1 + usageFollows × (memory(t) − 1)`). The base
//! rates are sized, as for the daily cycle, by the curve's mean and peak over the window.
//! The farm's scenario carries its window's points (`workloads[].loadCurve`, see
//! [`scenario::LoadCurve`]), so `headroom sweep --write-farms` farms run alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use humantime_serde::Serde;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::scenario::{
    self, Burst, DEFAULT_MEMORY_RAMP, DailyCycle, Event, Kind, LoadCurve, NodeSpec, Overcommit,
    RateCurve, Requests, Scenario, UsageSpec, Workload,
};
use headroom_scheduler::field;
use headroom_scheduler::usage::file::{Amount, MAX_BYTES, MAX_CORES};

/// The workload name of a farm's services (one workload of `services` replicas).
pub const SERVICE_NAME: &str = "svc";
/// The workload name of a farm's databases.
pub const DATABASE_NAME: &str = "mysql";

/// A duration range `[min, max]`, humantime strings.
pub type DurationRange = [Serde<Duration>; 2];

fn dr(a: u64, b: u64) -> DurationRange {
    [
        Serde::from(Duration::from_secs(a)),
        Serde::from(Duration::from_secs(b)),
    ]
}

/// One node shape of a family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Shape {
    /// CPU capacity.
    pub cpu: Amount,
    /// Memory capacity.
    pub memory: Amount,
    /// Root filesystem. Default `500Gi`.
    #[serde(default = "disk_500")]
    pub disk: Amount,
}

fn disk_500() -> Amount {
    Amount::Text("500Gi".into())
}

/// How a family's farms get their nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct NodeMix {
    /// Nodes per farm, `[min, max]`. Default `[8, 20]`.
    pub count: [usize; 2],
    /// The shapes farms draw from. Default: 16 CPU / 32 GiB, 32 CPU / 64 GiB, 8 CPU /
    /// 32 GiB.
    pub shapes: Vec<Shape>,
    /// A farm mixes up to this many shapes. Default 2.
    pub max_shapes: usize,
    /// Real CPU of system daemons per node. Default `500m`.
    pub system_cpu: Amount,
    /// Real memory of system daemons per node. Default `2Gi`.
    pub system_memory: Amount,
}

impl Default for NodeMix {
    fn default() -> Self {
        let shape = |cpu: &str, mem: &str| Shape {
            cpu: Amount::Text(cpu.into()),
            memory: Amount::Text(mem.into()),
            disk: disk_500(),
        };
        NodeMix {
            count: [8, 20],
            shapes: vec![shape("16", "32Gi"), shape("32", "64Gi"), shape("8", "32Gi")],
            max_shapes: 2,
            system_cpu: Amount::Text("500m".into()),
            system_memory: Amount::Text("2Gi".into()),
        }
    }
}

/// A kind of builder farms draw builder families from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuilderKind {
    /// Name (the workload's name in the farm).
    pub name: String,
    /// Requests of its pods.
    pub requests: Requests,
    /// Real use relative to requests, per builder.
    pub usage: UsageSpec,
    /// Mean run time, `[min, max]`; a farm draws one.
    pub duration: DurationRange,
    /// Warm-cache speed-up, `[min, max]`. Default `[0.3, 0.5]`.
    #[serde(default = "speedups")]
    pub warm_speedup: [f64; 2],
    /// Per-sample variation of usage. Default `0.2`.
    #[serde(default = "noise")]
    pub noise: f64,
}

fn speedups() -> [f64; 2] {
    [0.3, 0.5]
}
fn noise() -> f64 {
    0.2
}

fn kind(
    name: &str,
    cpu: &str,
    mem: &str,
    ucpu: [f64; 2],
    umem: [f64; 2],
    minutes: [u64; 2],
) -> BuilderKind {
    BuilderKind {
        name: name.into(),
        requests: Requests {
            cpu: Amount::Text(cpu.into()),
            memory: Amount::Text(mem.into()),
        },
        usage: UsageSpec {
            cpu: ucpu,
            memory: umem,
        },
        duration: dr(minutes[0] * 60, minutes[1] * 60),
        warm_speedup: speedups(),
        noise: noise(),
    }
}

/// How a family's farms get their builds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct BuilderMix {
    /// Builder families per farm, `[min, max]`. Default `[2, 4]`.
    pub families: [usize; 2],
    /// Distinct builders per family, `[min, max]`. Default `[4, 14]`.
    pub builders_per_family: [usize; 2],
    /// The mean real memory the builds use over the simulated time, as a share of the
    /// farm's memory (less the system daemons'), `[min, max]`: the arrival rates are sized
    /// to it, then scaled down where the cycle's peak would ask for more than 60 % of the
    /// farm's allocatable CPU or memory by requests, or 60 % of its CPU in real use.
    /// Default `[0.4, 0.7]` (warm caches make the real load lower).
    pub memory_load: [f64; 2],
    /// Amplitude of the arrival rate's daily cycle, `[min, max]` (0: flat). Default
    /// `[0.0, 0.5]`.
    pub cycle_amplitude: [f64; 2],
    /// Period of that cycle, `[min, max]`. Default `[6h, 24h]`.
    pub cycle_period: DurationRange,
    /// A measured load curve that replaces the daily cycle (`cycleAmplitude` and
    /// `cyclePeriod` are then ignored). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_curve: Option<LoadCurveSpec>,
    /// The kinds families are drawn from. Default: cpp, java, web, go, rust, android.
    pub kinds: Vec<BuilderKind>,
}

/// Where a family's load curve comes from and how much the builds follow it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadCurveSpec {
    /// A CSV file, relative to the family file: `#` comment lines, the header
    /// `seconds,load` (or `seconds,load,memory`), then one row per point: seconds from 0 in
    /// equal steps, and the relative load (finite, at least 0, not all 0; 1 is the usual
    /// intensity, e.g. the mean), and with the third column the relative memory in use
    /// (then the builds' memory intensity follows it, their CPU the load: see
    /// [`scenario::LoadCurve::memory`]). It must span the family's longest duration.
    pub file: String,
    /// How much of the curve the builds' usage intensity follows, `[min, max]` within
    /// `[0, 1]`; a farm draws one (see [`scenario::LoadCurve::usage_follows`]). Default
    /// `[0, 0]`: only the arrival rate follows the curve.
    #[serde(default)]
    pub usage_follows: [f64; 2],
}

/// A load curve as read from its file.
#[derive(Debug, Clone, PartialEq)]
struct Trace {
    /// The file name as the family gives it (for the farms' `source` note).
    file: String,
    /// Time between points.
    step: Duration,
    /// The relative load at `0, step, 2 × step, …`.
    points: Vec<f64>,
    /// The relative memory in use at the same instants (a third column `memory`).
    memory: Option<Vec<f64>>,
}

impl Default for BuilderMix {
    fn default() -> Self {
        BuilderMix {
            families: [2, 4],
            builders_per_family: [4, 14],
            memory_load: [0.4, 0.7],
            cycle_amplitude: [0.0, 0.5],
            cycle_period: dr(6 * 3600, 24 * 3600),
            load_curve: None,
            kinds: vec![
                kind("cpp", "2", "3Gi", [0.8, 1.5], [1.5, 4.0], [20, 30]),
                kind("java", "2", "4Gi", [0.2, 0.8], [0.15, 0.5], [20, 30]),
                kind("web", "1", "2Gi", [0.3, 1.0], [0.5, 1.5], [15, 25]),
                kind("go", "2", "2Gi", [0.5, 1.2], [0.8, 2.0], [8, 20]),
                kind("rust", "4", "4Gi", [0.6, 1.3], [1.0, 2.5], [20, 40]),
                kind("android", "4", "8Gi", [0.5, 1.0], [0.6, 1.4], [25, 45]),
            ],
        }
    }
}

/// Bursts of builds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct BurstMix {
    /// Bursts per farm, `[min, max]`. Default `[0, 2]`.
    pub count: [usize; 2],
    /// Builds per burst, `[min, max]`, of the farm's most memory-heavy family, at most as
    /// many as would use a fifth of the farm's memory at their highest usage factor.
    /// Default `[8, 20]`.
    pub size: [usize; 2],
    /// When, as a share of the duration, `[min, max]`. Default `[0.15, 0.7]`.
    pub at: [f64; 2],
}

impl Default for BurstMix {
    fn default() -> Self {
        BurstMix {
            count: [0, 2],
            size: [8, 20],
            at: [0.15, 0.7],
        }
    }
}

/// A family of farms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Family {
    /// Name (farms are `<name>-<index>`; also seeds the generator).
    pub name: String,
    /// Generated farms. Default 20.
    #[serde(default = "twenty")]
    pub farms: usize,
    /// Seeds per farm: each farm runs with seeds `1..=seeds`. Default 5.
    #[serde(default = "five")]
    pub seeds: usize,
    /// Simulated duration, `[min, max]`. Default `[3h, 5h]`.
    #[serde(default = "hours")]
    pub duration: DurationRange,
    /// Simulation step. Default `15s`.
    #[serde(default = "step", with = "humantime_serde")]
    pub step: Duration,
    /// Nodes.
    #[serde(default)]
    pub nodes: NodeMix,
    /// Builds.
    #[serde(default)]
    pub builders: BuilderMix,
    /// Bursts.
    #[serde(default)]
    pub bursts: BurstMix,
    /// Long-running services per farm, `[min, max]`. Default `[0, 4]`.
    #[serde(default = "services")]
    pub services: [usize; 2],
    /// Databases (MySQL, with disk) per farm, `[min, max]`. Default `[0, 2]`.
    #[serde(default = "databases")]
    pub databases: [usize; 2],
    /// Scenario files that join the generated farms, relative to the family file.
    #[serde(default)]
    pub include: Vec<String>,
    /// `builders.loadCurve`'s points, read when the family is parsed.
    #[serde(skip)]
    trace: Option<Arc<Trace>>,
}

fn twenty() -> usize {
    20
}
fn five() -> usize {
    5
}
fn hours() -> DurationRange {
    dr(3 * 3600, 5 * 3600)
}
fn step() -> Duration {
    Duration::from_secs(15)
}
fn services() -> [usize; 2] {
    [0, 4]
}
fn databases() -> [usize; 2] {
    [0, 2]
}

/// One farm of a family: a name and its scenario.
#[derive(Debug, Clone)]
pub struct Farm {
    /// `<family>-<index>` for generated farms, the file stem for included ones.
    pub name: String,
    /// The scenario.
    pub scenario: Scenario,
}

fn invalid(path: &str, field: &str, message: impl Into<String>) -> scenario::Error {
    scenario::Error::Invalid {
        path: path.to_string(),
        field: field.to_string(),
        message: message.into(),
    }
}

fn check_range<T: PartialOrd + std::fmt::Debug>(
    path: &str,
    field: &str,
    r: &[T; 2],
) -> Result<(), scenario::Error> {
    if r[0] > r[1] {
        return Err(invalid(
            path,
            field,
            format!("{r:?} is not a range [min, max]"),
        ));
    }
    Ok(())
}

impl NodeMix {
    /// Checks `nodes` (`o` names the family file in errors).
    fn validate(&self, o: &str) -> Result<(), scenario::Error> {
        check_range_max(o, "nodes.count", &self.count, MAX_COUNT)?;
        if self.count[0] == 0 {
            return Err(invalid(o, "nodes.count", "a farm needs at least one node"));
        }
        if self.shapes.is_empty() {
            return Err(invalid(o, "nodes.shapes", "at least one shape is required"));
        }
        if self.max_shapes == 0 {
            return Err(invalid(o, "nodes.maxShapes", "must be at least 1"));
        }
        for (i, s) in self.shapes.iter().enumerate() {
            for (k, a, max) in [
                ("cpu", &s.cpu, MAX_CORES),
                ("memory", &s.memory, MAX_BYTES),
                ("disk", &s.disk, MAX_BYTES),
            ] {
                let field = format!("nodes.shapes[{i}].{k}");
                let v = amount(o, &field, a, max)?;
                if v <= 0.0 {
                    return Err(invalid(o, &field, "must be positive"));
                }
            }
        }
        // The system daemons take their share of every node: each shape must keep some
        // room for pods (the arrival rates are sized to what is left).
        for (k, a, of, max) in [
            ("nodes.systemCpu", &self.system_cpu, "cpu", MAX_CORES),
            (
                "nodes.systemMemory",
                &self.system_memory,
                "memory",
                MAX_BYTES,
            ),
        ] {
            let sys = amount(o, k, a, max)?;
            for (i, s) in self.shapes.iter().enumerate() {
                let field = format!("nodes.shapes[{i}].{of}");
                let cap = if of == "cpu" { &s.cpu } else { &s.memory };
                let cap = amount(o, &field, cap, max)?;
                if sys >= cap {
                    let shown = |v: f64| match of {
                        "cpu" => format!("{v}"),
                        _ => headroom_scheduler::quantity::format_bytes(v as i64),
                    };
                    return Err(invalid(
                        o,
                        k,
                        format!(
                            "{} must be less than every shape's {of}: {field} is {}",
                            shown(sys),
                            shown(cap)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks builder kind `i`, `k`, against the workload names taken before it (`taken`).
fn validate_kind(
    o: &str,
    i: usize,
    k: &BuilderKind,
    taken: &[&str],
) -> Result<(), scenario::Error> {
    let f = |x: &str| format!("builders.kinds[{i}].{x}");
    // A kind's name is its workload's name in every farm that draws it.
    let path = field::Path::new("builders")
        .child("kinds")
        .index(i)
        .child("name");
    if let Some(e) = scenario::check_workload_name(&path, &k.name) {
        return Err(invalid(o, &f("name"), e.kind.to_string()));
    }
    if taken.contains(&k.name.as_str()) {
        return Err(invalid(
            o,
            &f("name"),
            format!(
                "duplicate name {:?}: each kind, the services ({SERVICE_NAME:?}) and the databases ({DATABASE_NAME:?}) are workloads of their own",
                k.name
            ),
        ));
    }
    for (x, a, max) in [
        ("requests.cpu", &k.requests.cpu, MAX_CORES),
        ("requests.memory", &k.requests.memory, MAX_BYTES),
    ] {
        let v = amount(o, &f(x), a, max)?;
        if v <= 0.0 {
            return Err(invalid(o, &f(x), "must be positive"));
        }
    }
    check_fraction(o, &f("usage.cpu"), &k.usage.cpu, scenario::MAX_USAGE_FACTOR)?;
    check_fraction(
        o,
        &f("usage.memory"),
        &k.usage.memory,
        scenario::MAX_USAGE_FACTOR,
    )?;
    let d = [*k.duration[0], *k.duration[1]];
    check_range_max(o, &f("duration"), &d, scenario::MAX_DURATION)?;
    if d[0].is_zero() {
        return Err(invalid(o, &f("duration"), "must be positive"));
    }
    if !(k.warm_speedup[0] >= 0.0
        && k.warm_speedup[0] <= k.warm_speedup[1]
        && k.warm_speedup[1] < 1.0)
    {
        return Err(invalid(
            o,
            &f("warmSpeedup"),
            "must be a range within [0, 1)",
        ));
    }
    if !(0.0..1.0).contains(&k.noise) {
        return Err(invalid(o, &f("noise"), "must be in [0, 1)"));
    }
    Ok(())
}

/// The most of anything a family counts per farm (nodes, builders per family, bursts and
/// their pods, services, databases): far above any farm one machine simulates, and below
/// the scenario file's node total. (A farm's pods, its arrivals over its duration, can
/// still pass the scenario's total; generating that farm then fails, naming it.)
pub const MAX_COUNT: usize = 10_000;

/// A range `[min, max]` whose max is at most `limit`.
fn check_range_max<T: PartialOrd + std::fmt::Debug>(
    path: &str,
    field: &str,
    r: &[T; 2],
    limit: T,
) -> Result<(), scenario::Error> {
    check_range(path, field, r)?;
    if r[1] > limit {
        return Err(invalid(
            path,
            field,
            format!("{:?} is above the most a farm may have, {limit:?}", r[1]),
        ));
    }
    Ok(())
}

/// An amount of the family file (`field` names it), a non-negative quantity of at most
/// `max`: the limits a scenario file's amounts have, which every generated farm must pass.
fn amount(path: &str, field: &str, a: &Amount, max: f64) -> Result<f64, scenario::Error> {
    a.value_at(&field::Path::new(field), max)
        .map_err(|e| invalid(path, field, e.kind.to_string()))
}

fn check_fraction(path: &str, field: &str, r: &[f64; 2], max: f64) -> Result<(), scenario::Error> {
    if !(r[0] >= 0.0 && r[0] <= r[1] && r[1] <= max) {
        return Err(invalid(
            path,
            field,
            format!("{r:?} is not a range [min, max] within [0, {max}]"),
        ));
    }
    Ok(())
}

impl Trace {
    /// The time the points span.
    fn span(&self) -> Duration {
        self.step
            .saturating_mul(u32::try_from(self.points.len().saturating_sub(1)).unwrap_or(u32::MAX))
    }
}

/// Reads a load curve's CSV (`file` is how the family names it), every error naming the
/// family's `builders.loadCurve.file` field, the file and the line.
fn read_trace(path: &Path, file: &str, origin: &str) -> Result<Trace, scenario::Error> {
    const FIELD: &str = "builders.loadCurve.file";
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(origin, FIELD, format!("reading {}: {e}", path.display())))?;
    let at = |line: usize, m: String| invalid(origin, FIELD, format!("{file}: line {line}: {m}"));
    let mut rows = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let header = match rows.next() {
        Some((_, h @ ("seconds,load" | "seconds,load,memory"))) => h,
        Some((n, l)) => {
            return Err(at(
                n,
                format!(
                    "the header must be `seconds,load` or `seconds,load,memory`, got {:?}",
                    field::shown(l)
                ),
            ));
        }
        None => return Err(invalid(origin, FIELD, format!("{file}: no rows"))),
    };
    let with_memory = header.ends_with(",memory");
    let mut times = Vec::new();
    let mut points = Vec::new();
    let mut memory = Vec::new();
    for (n, l) in rows {
        let cols: Vec<&str> = l.split(',').map(str::trim).collect();
        let (t, v, m) = match cols[..] {
            [t, v] if !with_memory => (t, v, None),
            [t, v, m] if with_memory => (t, v, Some(m)),
            _ => {
                return Err(at(
                    n,
                    format!("expected `{header}`, got {:?}", field::shown(l)),
                ));
            }
        };
        let num = |x: &str, name: &str| -> Result<f64, scenario::Error> {
            match x.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(at(
                    n,
                    format!("{name}: {:?} is not a finite number ≥ 0", field::shown(x)),
                )),
            }
        };
        times.push(num(t, "seconds")?);
        let v = num(v, "load")?;
        if v > scenario::MAX_CURVE_LOAD {
            return Err(at(
                n,
                format!("load: {v} is above {}", scenario::MAX_CURVE_LOAD),
            ));
        }
        points.push(v);
        if let Some(m) = m {
            let m = num(m, "memory")?;
            if m > scenario::MAX_CURVE_LOAD {
                return Err(at(
                    n,
                    format!("memory: {m} is above {}", scenario::MAX_CURVE_LOAD),
                ));
            }
            memory.push(m);
        }
        if points.len() > scenario::MAX_CURVE_POINTS {
            return Err(at(
                n,
                format!("more than {} points", scenario::MAX_CURVE_POINTS),
            ));
        }
    }
    if points.len() < 2 {
        return Err(invalid(
            origin,
            FIELD,
            format!(
                "{file}: at least two points are needed, got {}",
                points.len()
            ),
        ));
    }
    if points.iter().all(|&v| v == 0.0) {
        return Err(invalid(origin, FIELD, format!("{file}: every load is 0")));
    }
    let step = times[1] - times[0];
    if times[0] != 0.0 || step < 1.0 || step.fract() != 0.0 {
        return Err(invalid(
            origin,
            FIELD,
            format!("{file}: seconds must start at 0 and go up in equal whole steps of at least 1"),
        ));
    }
    for (i, t) in times.iter().enumerate() {
        if (t - step * i as f64).abs() > 1e-6 {
            return Err(invalid(
                origin,
                FIELD,
                format!(
                    "{file}: point {}: seconds {t}, expected {} (equal steps of {step})",
                    i + 1,
                    step * i as f64
                ),
            ));
        }
    }
    Ok(Trace {
        file: file.to_string(),
        step: Duration::from_secs(step as u64),
        points,
        memory: with_memory.then_some(memory),
    })
}

impl Family {
    /// Reads a family file.
    pub fn load(path: &Path) -> Result<Family, scenario::Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| scenario::Error::Io {
            path: origin.clone(),
            source,
        })?;
        Family::parse_in(&text, &origin, path.parent().unwrap_or(Path::new(".")))
    }

    /// Parses family YAML; `origin` names it in errors; a load curve's file is relative
    /// to the current directory.
    pub fn parse(text: &str, origin: &str) -> Result<Family, scenario::Error> {
        Family::parse_in(text, origin, Path::new("."))
    }

    /// Parses family YAML whose files (`builders.loadCurve.file`) are relative to `base`;
    /// `origin` names it in errors.
    pub fn parse_in(text: &str, origin: &str, base: &Path) -> Result<Family, scenario::Error> {
        let mut f = Family::parse_unloaded(text, origin)?;
        if let Some(spec) = &f.builders.load_curve {
            let trace = read_trace(&base.join(&spec.file), &spec.file, origin)?;
            let longest = *f.duration[1];
            // A farm's window: its duration (rounded to whole simulation steps, so up to a
            // step longer) in whole steps of the curve, rounded up.
            let steps = ((longest + f.step).as_secs_f64() / trace.step.as_secs_f64()).ceil();
            if (trace.points.len() as f64) < steps + 1.0 {
                return Err(invalid(
                    origin,
                    "builders.loadCurve.file",
                    format!(
                        "{}: the curve spans {}, farms of up to {} (in steps of {}) need {}",
                        spec.file,
                        humantime_serde::re::humantime::format_duration(trace.span()),
                        humantime_serde::re::humantime::format_duration(longest),
                        humantime_serde::re::humantime::format_duration(f.step),
                        humantime_serde::re::humantime::format_duration(
                            trace.step.saturating_mul(steps as u32)
                        )
                    ),
                ));
            }
            f.trace = Some(Arc::new(trace));
        }
        Ok(f)
    }

    /// Parses and checks family YAML without reading the files it names (the fuzz target's
    /// entry). A family with a `builders.loadCurve` comes back without its curve, and its
    /// farms would draw a daily cycle instead: everything else reads families through
    /// [`Family::parse_in`].
    pub(crate) fn parse_unloaded(text: &str, origin: &str) -> Result<Family, scenario::Error> {
        let de = serde_norway::Deserializer::from_str(text);
        let f: Family = serde_path_to_error::deserialize(de)
            .map_err(|e| invalid(origin, &e.path().to_string(), e.into_inner().to_string()))?;
        f.validate(origin)?;
        Ok(f)
    }

    fn validate(&self, o: &str) -> Result<(), scenario::Error> {
        if self.name.trim().is_empty() {
            return Err(invalid(o, "name", "must not be empty"));
        }
        if self.farms == 0 && self.include.is_empty() {
            return Err(invalid(o, "farms", "no farms: set farms or include"));
        }
        if self.seeds == 0 {
            return Err(invalid(o, "seeds", "must be at least 1"));
        }
        let d = [*self.duration[0], *self.duration[1]];
        check_range_max(o, "duration", &d, scenario::MAX_DURATION)?;
        if self.step.is_zero() || self.step > d[0] {
            return Err(invalid(
                o,
                "step",
                "must be positive and at most the shortest duration",
            ));
        }
        if d[1].as_millis() / self.step.as_millis().max(1) > scenario::MAX_TICKS {
            return Err(invalid(
                o,
                "step",
                format!(
                    "the longest duration is more than {} steps of it",
                    scenario::MAX_TICKS
                ),
            ));
        }
        self.nodes.validate(o)?;
        let b = &self.builders;
        check_range(o, "builders.families", &b.families)?;
        check_range_max(
            o,
            "builders.buildersPerFamily",
            &b.builders_per_family,
            MAX_COUNT,
        )?;
        if b.builders_per_family[0] == 0 {
            return Err(invalid(
                o,
                "builders.buildersPerFamily",
                "a family needs at least one builder",
            ));
        }
        check_fraction(o, "builders.memoryLoad", &b.memory_load, 1.0)?;
        if let Some(c) = &b.load_curve {
            if c.file.trim().is_empty() {
                return Err(invalid(o, "builders.loadCurve.file", "must not be empty"));
            }
            check_fraction(o, "builders.loadCurve.usageFollows", &c.usage_follows, 1.0)?;
        }
        check_fraction(o, "builders.cycleAmplitude", &b.cycle_amplitude, 1.0)?;
        let p = [*b.cycle_period[0], *b.cycle_period[1]];
        check_range_max(o, "builders.cyclePeriod", &p, scenario::MAX_DURATION)?;
        if p[0].is_zero() {
            return Err(invalid(o, "builders.cyclePeriod", "must be positive"));
        }
        if b.families[1] > 0 && b.kinds.is_empty() {
            return Err(invalid(
                o,
                "builders.kinds",
                "at least one kind is required",
            ));
        }
        if b.families[1] > b.kinds.len() {
            return Err(invalid(
                o,
                "builders.families",
                format!(
                    "at most {} families: each draws a different kind",
                    b.kinds.len()
                ),
            ));
        }
        let mut names: Vec<&str> = vec![SERVICE_NAME, DATABASE_NAME];
        for (i, k) in b.kinds.iter().enumerate() {
            validate_kind(o, i, k, &names)?;
            names.push(&k.name);
        }
        check_range_max(o, "bursts.count", &self.bursts.count, MAX_COUNT)?;
        check_range_max(o, "bursts.size", &self.bursts.size, MAX_COUNT)?;
        check_fraction(o, "bursts.at", &self.bursts.at, 1.0)?;
        check_range_max(o, "services", &self.services, MAX_COUNT)?;
        check_range_max(o, "databases", &self.databases, MAX_COUNT)?;
        Ok(())
    }

    /// Every farm: the generated ones, then the included scenario files (paths relative
    /// to `base`, the family file's directory).
    pub fn farms(&self, base: &Path) -> Result<Vec<Farm>, scenario::Error> {
        let mut out = Vec::with_capacity(self.farms + self.include.len());
        for i in 0..self.farms {
            out.push(Farm {
                name: format!("{}-{:02}", self.name, i + 1),
                scenario: self.generate(i)?,
            });
        }
        for inc in &self.include {
            let path = base.join(inc);
            let name = path
                .file_stem()
                .map_or_else(|| inc.clone(), |s| s.to_string_lossy().to_string());
            out.push(Farm {
                name,
                scenario: Scenario::load(&path)?,
            });
        }
        Ok(out)
    }

    /// The generator's seed for farm `index`: from the family's name, so two families
    /// differ and a family's farms do not depend on how many there are.
    fn rng(&self, index: usize) -> SmallRng {
        // FNV-1a: stable across runs and platforms (std's hasher is not).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        SmallRng::seed_from_u64(h ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Generates farm `index`. The draws happen in a fixed order (duration, nodes, builder
    /// families, services, databases, bursts), so a farm never changes when the code that
    /// draws a later part does.
    pub fn generate(&self, index: usize) -> Result<Scenario, scenario::Error> {
        let mut g = Draw {
            origin: format!("family {} farm {}", self.name, index + 1),
            rng: self.rng(index),
        };
        // Duration, whole steps.
        let step_s = self.step.as_secs_f64();
        let duration = g.span(&self.duration);
        let duration =
            Duration::from_secs_f64((duration.as_secs_f64() / step_s).round().max(1.0) * step_s);
        let farm = self.draw_nodes(&mut g)?;
        let builds = self.draw_builds(&mut g, duration, &farm)?;
        let mut workloads = builds.workloads(&self.builders);
        self.draw_services(&mut g, &mut workloads);
        let events = self.draw_bursts(&mut g, duration, &farm, &builds);
        let s = Scenario {
            duration,
            step: self.step,
            drain: Duration::from_secs(1800),
            seed: 1,
            nodes: farm.nodes,
            workloads,
            reservations: Vec::new(),
            events,
            overcommit: Overcommit::default(),
        };
        // What the scenario file would have to pass.
        let text = serde_norway::to_string(&s).map_err(|e| {
            invalid(
                &g.origin,
                "",
                format!("generated an unwritable scenario: {e}"),
            )
        })?;
        Scenario::parse(&text, &g.origin)
    }

    /// The node size mix: up to `maxShapes` distinct shapes, every shape at least one node.
    fn draw_nodes(&self, g: &mut Draw) -> Result<Nodes, scenario::Error> {
        let n_nodes = g.count(self.nodes.count);
        let n_shapes = g
            .rng
            .random_range(1..=self.nodes.max_shapes.min(self.nodes.shapes.len()))
            .min(n_nodes);
        let shape_ids = g.pick(self.nodes.shapes.len(), n_shapes);
        // Split the nodes: every shape gets at least one.
        let mut counts = vec![1usize; n_shapes];
        for _ in n_shapes..n_nodes {
            counts[g.rng.random_range(0..n_shapes)] += 1;
        }
        let sys_cpu = g.val(&self.nodes.system_cpu, "nodes.systemCpu")?;
        let sys_mem = g.val(&self.nodes.system_memory, "nodes.systemMemory")?;
        let (mut total_mem, mut total_cpu) = (0.0, 0.0);
        let mut nodes = Vec::new();
        for (k, (&sid, &c)) in shape_ids.iter().zip(&counts).enumerate() {
            let sh = &self.nodes.shapes[sid];
            total_mem += g.val(&sh.memory, "shape.memory")? * c as f64;
            total_cpu += g.val(&sh.cpu, "shape.cpu")? * c as f64;
            let prefix = ["a", "b", "c", "d", "e", "f"].get(k).copied();
            nodes.push(NodeSpec {
                count: c,
                name_prefix: format!("{}-", prefix.unwrap_or("x")),
                cpu: sh.cpu.clone(),
                memory: sh.memory.clone(),
                disk: sh.disk.clone(),
                system_cpu: self.nodes.system_cpu.clone(),
                system_memory: self.nodes.system_memory.clone(),
                ..NodeSpec::default()
            });
        }
        Ok(Nodes {
            nodes,
            usable_mem: total_mem - sys_mem * n_nodes as f64,
            usable_cpu: total_cpu - sys_cpu * n_nodes as f64,
        })
    }

    /// The builder families with their arrival rates, sized so the window's mean real
    /// memory load is the drawn target and its peak still leaves room.
    fn draw_builds(
        &self,
        g: &mut Draw,
        duration: Duration,
        farm: &Nodes,
    ) -> Result<Builds, scenario::Error> {
        let b = &self.builders;
        let n_fam = g.count(b.families).min(b.kinds.len());
        let kinds = g.pick(b.kinds.len(), n_fam);
        let load = g.uniform(b.memory_load);
        let (window, cycle, curve) = match (&self.trace, &b.load_curve) {
            (Some(trace), Some(spec)) => {
                let curve = trace_window(g, trace, spec, duration);
                (curve_window(&curve, duration), None, Some(curve))
            }
            _ => {
                let amplitude = g.uniform(b.cycle_amplitude);
                let period = g.span(&b.cycle_period);
                let peak_at =
                    Duration::from_secs_f64(duration.as_secs_f64() * g.rng.random::<f64>());
                let (mean, peak) = cycle_mean_peak(duration, amplitude, period, peak_at);
                let cycle = (amplitude > 0.0).then(|| DailyCycle {
                    amplitude: (amplitude * 100.0).round() / 100.0,
                    period: Duration::from_secs(period.as_secs()),
                    peak_at: Duration::from_secs(peak_at.as_secs()),
                });
                let window = Window {
                    peak,
                    real_mean: mean,
                    real_peak: peak,
                };
                (window, cycle, None)
            }
        };
        let mut drafts = Vec::new();
        for &k in &kinds {
            let bk = &b.kinds[k];
            let req_cpu = g.val(&bk.requests.cpu, "requests.cpu")?;
            let req_mem = g.val(&bk.requests.memory, "requests.memory")?;
            drafts.push(Draft {
                kind: k,
                builders: g.count(b.builders_per_family),
                mean: g.span(&bk.duration),
                speedup: g.uniform(bk.warm_speedup),
                weight: 0.5 + g.rng.random::<f64>(),
                req_cpu,
                req_mem,
            });
        }
        let mut builds = Builds {
            drafts,
            rates: Vec::new(),
            cycle,
            curve,
        };
        builds.size_rates(b, farm, load, &window);
        Ok(builds)
    }

    /// Services and databases beside the builds.
    fn draw_services(&self, g: &mut Draw, workloads: &mut Vec<Workload>) {
        let n_svc = g.count(self.services);
        if n_svc > 0 {
            workloads.push(Workload {
                name: SERVICE_NAME.into(),
                kind: Kind::Service,
                namespace: "apps".into(),
                count: n_svc,
                requests: Requests {
                    cpu: Amount::Text("1".into()),
                    memory: Amount::Text("2Gi".into()),
                },
                usage: UsageSpec {
                    cpu: [0.2, 0.6],
                    memory: [0.5, 1.0],
                },
                ..service_defaults()
            });
        }
        let n_db = g.count(self.databases);
        if n_db > 0 {
            workloads.push(Workload {
                name: DATABASE_NAME.into(),
                kind: Kind::Database,
                namespace: "db".into(),
                count: n_db,
                requests: Requests {
                    cpu: Amount::Text("2".into()),
                    memory: Amount::Text("6Gi".into()),
                },
                disk: Some(Amount::Text("100Gi".into())),
                usage: UsageSpec {
                    cpu: [0.2, 0.5],
                    memory: [0.6, 0.9],
                },
                labels: [("headroom.io/service".to_string(), "mysql".to_string())].into(),
                ..service_defaults()
            });
        }
    }

    /// Bursts of the most memory-heavy family, each within a fifth of the farm's real
    /// memory: a dozen heavy builds on a big farm, fewer on a small one.
    fn draw_bursts(
        &self,
        g: &mut Draw,
        duration: Duration,
        farm: &Nodes,
        builds: &Builds,
    ) -> Vec<Event> {
        let kinds = &self.builders.kinds;
        let heavy_of = |d: &Draft| d.req_mem * kinds[d.kind].usage.memory[1];
        let heavy = builds
            .drafts
            .iter()
            .max_by(|x, y| heavy_of(x).total_cmp(&heavy_of(y)))
            .map(|d| kinds[d.kind].name.clone());
        let heavy_mem = builds.drafts.iter().map(heavy_of).fold(0.0, f64::max);
        let burst_cap = ((0.2 * farm.usable_mem / heavy_mem.max(1.0)) as usize).max(1);
        let mut events = Vec::new();
        let Some(heavy) = heavy else {
            return events;
        };
        let step_s = self.step.as_secs_f64();
        for _ in 0..g.count(self.bursts.count) {
            let at = g.uniform(self.bursts.at) * duration.as_secs_f64();
            let at = (at / step_s).round() * step_s;
            events.push(Event {
                at: Duration::from_secs_f64(at),
                cordon: None,
                uncordon: None,
                remove_node: None,
                add_nodes: None,
                burst: Some(Burst {
                    workload: heavy.clone(),
                    count: g.count(self.bursts.size).min(burst_cap),
                }),
            });
        }
        events.sort_by_key(|e| e.at);
        events
    }
}

/// The generator of one farm: its random stream and its name for errors.
struct Draw {
    origin: String,
    rng: SmallRng,
}

impl Draw {
    fn val(&self, a: &Amount, field: &str) -> Result<f64, scenario::Error> {
        a.value(field)
            .map_err(|(f, m)| invalid(&self.origin, &f, m))
    }
    fn span(&mut self, r: &DurationRange) -> Duration {
        let (a, b) = (r[0].as_secs_f64(), r[1].as_secs_f64());
        Duration::from_secs_f64(a + (b - a) * self.rng.random::<f64>())
    }
    fn uniform(&mut self, r: [f64; 2]) -> f64 {
        r[0] + (r[1] - r[0]) * self.rng.random::<f64>()
    }
    fn count(&mut self, r: [usize; 2]) -> usize {
        self.rng.random_range(r[0]..=r[1])
    }
    /// `k` distinct indices of `0..n` (a partial Fisher–Yates shuffle).
    fn pick(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut ids: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = self.rng.random_range(i..ids.len());
            ids.swap(i, j);
        }
        ids.truncate(k);
        ids
    }
}

/// A farm's nodes and what they leave to pods.
struct Nodes {
    nodes: Vec<NodeSpec>,
    usable_mem: f64,
    usable_cpu: f64,
}

/// One builder family as drawn, before its rate is sized.
struct Draft {
    kind: usize,
    builders: usize,
    mean: Duration,
    speedup: f64,
    weight: f64,
    req_cpu: f64,
    req_mem: f64,
}

/// A farm's builder families, their arrival rates and the daily cycle or load curve they
/// share.
struct Builds {
    drafts: Vec<Draft>,
    rates: Vec<f64>,
    cycle: Option<DailyCycle>,
    curve: Option<LoadCurve>,
}

/// How the arrival rate's factor behaves over a farm's duration: its peak (for requests),
/// and the mean and peak of the factor times the usage intensity (the real load; the
/// rate's own without a load curve's `usageFollows`).
struct Window {
    peak: f64,
    real_mean: f64,
    real_peak: f64,
}

impl Builds {
    /// Arrival rates: concurrent builds (rate × mean run time, as if every cache were cold)
    /// × real memory per build = the family's share of the load (over the window: the
    /// rate's mean, times the usage intensity with a load curve); then scaled down so that
    /// at the cycle's peak requests and real CPU still leave room (a farm is sized for its
    /// builds: the baseline rarely waits for requests).
    fn size_rates(&mut self, b: &BuilderMix, farm: &Nodes, load: f64, window: &Window) {
        let weights: f64 = self.drafts.iter().map(|d| d.weight).sum::<f64>().max(1e-9);
        let hours = |d: &Draft| d.mean.as_secs_f64() / 3600.0;
        self.rates = self
            .drafts
            .iter()
            .map(|d| {
                let bk = &b.kinds[d.kind];
                let mem = d.req_mem * (bk.usage.memory[0] + bk.usage.memory[1]) / 2.0;
                load * farm.usable_mem * d.weight
                    / weights
                    / (mem.max(1.0) * hours(d).max(1e-6) * window.real_mean.max(1e-6))
            })
            .collect();
        let peak = |at: f64, f: &dyn Fn(&Draft) -> f64| -> f64 {
            self.drafts
                .iter()
                .zip(&self.rates)
                .map(|(d, r)| r * hours(d) * at * f(d))
                .sum()
        };
        let req_mem = peak(window.peak, &|d| d.req_mem);
        let req_cpu = peak(window.peak, &|d| d.req_cpu);
        let real_cpu = peak(window.real_peak, &|d| {
            let u = &b.kinds[d.kind].usage.cpu;
            d.req_cpu * (u[0] + u[1]) / 2.0
        });
        let scale = [
            1.0,
            0.6 * farm.usable_mem / req_mem.max(1e-9),
            0.6 * farm.usable_cpu / req_cpu.max(1e-9),
            0.6 * farm.usable_cpu / real_cpu.max(1e-9),
        ]
        .into_iter()
        .fold(f64::MAX, f64::min);
        for r in &mut self.rates {
            *r *= scale;
        }
    }

    /// The builder workloads.
    fn workloads(&self, b: &BuilderMix) -> Vec<Workload> {
        self.drafts
            .iter()
            .zip(&self.rates)
            .map(|(d, rate)| {
                let bk = &b.kinds[d.kind];
                Workload {
                    name: bk.name.clone(),
                    kind: Kind::Builder,
                    namespace: "ci".into(),
                    builders: d.builders,
                    arrivals_per_hour: (rate * 10.0).round() / 10.0,
                    duration: Duration::from_secs(d.mean.as_secs()),
                    warm_speedup: (d.speedup * 100.0).round() / 100.0,
                    memory_ramp: DEFAULT_MEMORY_RAMP,
                    count: 1,
                    requests: bk.requests.clone(),
                    disk: None,
                    usage: bk.usage.clone(),
                    noise: bk.noise,
                    labels: BTreeMap::new(),
                    node_selector: BTreeMap::new(),
                    tolerations: Vec::new(),
                    daily_cycle: self.cycle.clone(),
                    load_curve: self.curve.clone(),
                    scheduler_name: None,
                    priority: None,
                }
            })
            .collect()
    }
}

/// The daily cycle's mean and peak over the simulated window (the window may sit near a
/// peak of a long cycle).
fn cycle_mean_peak(
    duration: Duration,
    amplitude: f64,
    period: Duration,
    peak_at: Duration,
) -> (f64, f64) {
    let n = 200;
    let f = |i: usize| {
        let t = duration.as_secs_f64() * i as f64 / n as f64;
        let phase =
            (t - peak_at.as_secs_f64()) / period.as_secs_f64().max(1.0) * std::f64::consts::TAU;
        1.0 + amplitude * phase.cos()
    };
    let v: Vec<f64> = (0..=n).map(f).collect();
    (
        v.iter().sum::<f64>() / v.len() as f64,
        v.iter().copied().fold(0.0, f64::max),
    )
}

fn service_defaults() -> Workload {
    Workload {
        name: String::new(),
        kind: Kind::Service,
        namespace: "default".into(),
        builders: 1,
        arrivals_per_hour: 0.0,
        duration: Duration::from_secs(900),
        warm_speedup: 0.0,
        memory_ramp: DEFAULT_MEMORY_RAMP,
        count: 1,
        requests: Requests {
            cpu: Amount::Text("1".into()),
            memory: Amount::Text("1Gi".into()),
        },
        disk: None,
        usage: UsageSpec::default(),
        noise: 0.1,
        labels: BTreeMap::new(),
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        daily_cycle: None,
        load_curve: None,
        scheduler_name: None,
        priority: None,
    }
}

/// A farm's window of the load curve: as long as `duration` (whole steps, rounded up),
/// starting at a step drawn by the farm's generator; with the drawn `usageFollows`.
fn trace_window(
    g: &mut Draw,
    trace: &Trace,
    spec: &LoadCurveSpec,
    duration: Duration,
) -> LoadCurve {
    let step = trace.step.as_secs_f64().max(1.0);
    let segments = ((duration.as_secs_f64() / step).ceil() as usize).max(1);
    // The family checked that the curve spans the longest duration.
    let last_start = trace.points.len().saturating_sub(segments + 1);
    let start = g.rng.random_range(0..=last_start);
    let end = (start + segments + 1).min(trace.points.len());
    let follows = (g.uniform(spec.usage_follows) * 100.0).round() / 100.0;
    let offset = Duration::from_secs(trace.step.as_secs() * start as u64);
    LoadCurve {
        source: Some(format!(
            "{} from {}",
            trace.file,
            humantime_serde::re::humantime::format_duration(offset)
        )),
        step: trace.step,
        points: trace.points[start..end].to_vec(),
        usage_follows: follows,
        memory: trace.memory.as_ref().map(|m| m[start..end].to_vec()),
    }
}

/// The load curve over the farm's duration: the rate factor's peak, and the mean and peak
/// of the factor × the usage intensity; sampled at every quarter step (every point among
/// them), the mean by the trapezoidal rule.
fn curve_window(curve: &LoadCurve, duration: Duration) -> Window {
    let end = duration.as_secs_f64() * 1000.0;
    let dt = (curve.step.as_secs_f64() * 1000.0 / 4.0).max(1.0);
    let mut ts: Vec<f64> = (0..)
        .map(|k| k as f64 * dt)
        .take_while(|&t| t < end)
        .collect();
    ts.push(end);
    let rate: Vec<f64> = ts.iter().map(|&t| curve.at_ms(t)).collect();
    // The farm is sized on real memory: the builds' memory intensity.
    let real: Vec<f64> = ts
        .iter()
        .zip(&rate)
        .map(|(&t, r)| r * curve.memory_usage_at_ms(t))
        .collect();
    let mean = |v: &[f64]| -> f64 {
        if ts.len() < 2 || end <= 0.0 {
            return v.first().copied().unwrap_or(1.0);
        }
        let area: f64 = ts
            .windows(2)
            .zip(v.windows(2))
            .map(|(t, y)| (t[1] - t[0]) * (y[0] + y[1]) / 2.0)
            .sum();
        area / end
    };
    let peak = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    Window {
        peak: peak(&rate),
        real_mean: mean(&real),
        real_peak: peak(&real),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn farms_are_deterministic_varied_and_valid() {
        let f = Family::parse("name: t\nfarms: 6\n", "t").unwrap();
        let farms = f.farms(Path::new(".")).unwrap();
        assert_eq!(farms.len(), 6);
        assert_eq!(farms[0].name, "t-01");
        // Same family, same farms; the farms differ from each other.
        let again = f.farms(Path::new(".")).unwrap();
        for (a, b) in farms.iter().zip(&again) {
            assert_eq!(a.scenario, b.scenario);
        }
        assert_ne!(farms[0].scenario, farms[1].scenario);
        let node_counts: Vec<usize> = farms
            .iter()
            .map(|x| x.scenario.nodes.iter().map(|n| n.count).sum())
            .collect();
        assert!(
            node_counts.iter().all(|n| (8..=20).contains(n)),
            "{node_counts:?}"
        );
        for farm in &farms {
            let s = &farm.scenario;
            let builders: Vec<&Workload> = s
                .workloads
                .iter()
                .filter(|w| w.kind == Kind::Builder)
                .collect();
            assert!((2..=4).contains(&builders.len()), "{}", farm.name);
            assert!(builders.iter().all(|w| w.arrivals_per_hour > 0.0));
            for e in &s.events {
                let b = e.burst.as_ref().unwrap();
                assert!(builders.iter().any(|w| w.name == b.workload));
                assert!(e.at <= s.duration);
            }
        }
        // Another family name, other farms.
        let g = Family::parse("name: u\nfarms: 1\n", "u").unwrap();
        assert_ne!(g.generate(0).unwrap(), farms[0].scenario);
    }

    #[test]
    fn bad_families_name_the_field() {
        for (text, field) in [
            ("farms: 1\n", "name"),
            ("name: x\nseeds: 0\n", "seeds"),
            ("name: x\nnodes: {count: [5, 2]}\n", "nodes.count"),
            (
                "name: x\nbuilders: {memoryLoad: [0.5, 1.5]}\n",
                "builders.memoryLoad",
            ),
            (
                "name: x\nbuilders: {families: [2, 9]}\n",
                "builders.families",
            ),
            (
                "name: x\nnodes: {shapes: [{cpu: lots, memory: 1Gi}]}\n",
                "nodes.shapes[0].cpu",
            ),
            ("name: x\nbogus: 1\n", "bogus"),
            ("name: x\nfarms: 0\n", "farms"),
        ] {
            let e = Family::parse(text, "f.yaml").unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }

    /// What the generated farms would fail on as scenario files is caught by the family's
    /// own checks, naming the family's field (the `family` fuzz target found each).
    #[test]
    fn families_that_would_make_bad_farms_name_the_field() {
        let kinds =
            |kind: &str| format!("name: x\nbuilders: {{families: [1, 1], kinds: [{kind}]}}\n");
        let k = |name: &str, usage: &str, duration: &str| {
            format!(
                "{{name: {name}, requests: {{cpu: '1', memory: 1Gi}}, usage: {{cpu: [0.5, 1], memory: {usage}}}, duration: {duration}}}"
            )
        };
        for (text, field, why) in [
            (
                kinds(&k("Web_1", "[0.5, 1]", "[10m, 20m]")),
                "builders.kinds[0].name",
                "DNS-1123 label",
            ),
            (
                kinds(&format!(
                    "{}, {}",
                    k("web", "[0.5, 1]", "[10m, 20m]"),
                    k("web", "[1, 2]", "[10m, 20m]")
                )),
                "builders.kinds[1].name",
                "duplicate name \"web\"",
            ),
            (
                kinds(&k("svc", "[0.5, 1]", "[10m, 20m]")),
                "builders.kinds[0].name",
                "duplicate name \"svc\"",
            ),
            (
                kinds(&k("web", "[0.5, 1000]", "[10m, 20m]")),
                "builders.kinds[0].usage.memory",
                "within [0, 100]",
            ),
            (
                kinds(&k("web", "[0.5, 1]", "[10m, 40years]")),
                "builders.kinds[0].duration",
                "above the most",
            ),
            (
                "name: x\nnodes: {shapes: [{cpu: '4', memory: 16Gi}], systemCpu: '500'}\n".into(),
                "nodes.systemCpu",
                "less than every shape's cpu: nodes.shapes[0].cpu is 4",
            ),
            (
                "name: x\nnodes: {shapes: [{cpu: '64191403149165315', memory: 16Gi}]}\n".into(),
                "nodes.shapes[0].cpu",
                "at most 1000000",
            ),
            (
                "name: x\nnodes: {count: [1, 1000000]}\n".into(),
                "nodes.count",
                "above the most",
            ),
            (
                "name: x\nduration: [1h, 1000days]\nstep: 1s\n".into(),
                "step",
                "more than 10000000 steps",
            ),
        ] {
            let e = Family::parse(&text, "f.yaml").unwrap_err().to_string();
            assert!(
                e.contains(&format!("f.yaml: {field}: ")) && e.contains(why),
                "{text}: {e}"
            );
        }
    }

    fn shipped(file: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/families")
            .join(file)
    }

    /// Every family shipped in `examples/families/` parses and generates its farms.
    #[test]
    fn shipped_families_parse_and_generate() {
        let dir = shipped("");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        names.sort();
        for name in ["alibaba-trace.yaml", "mixed-shapes.yaml", "ci-farms.yaml"] {
            assert!(names.iter().any(|n| n == name), "{names:?}");
        }
        for name in &names {
            let f = Family::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let farms = f.farms(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(farms.len(), f.farms + f.include.len(), "{name}");
        }
    }

    /// The shipped curve: Alibaba 2018's CPU load per 300 s over about 8 days, mean 1.
    #[test]
    fn the_alibaba_curve_has_mean_one() {
        let t = read_trace(&shipped("alibaba-2018-load.csv"), "a.csv", "t").unwrap();
        assert_eq!(t.step, Duration::from_secs(300));
        assert_eq!(t.points.len(), 2243);
        let mean = t.points.iter().sum::<f64>() / t.points.len() as f64;
        assert!((mean - 1.0).abs() < 1e-3, "{mean}");
        let min = t.points.iter().copied().fold(f64::MAX, f64::min);
        let max = t.points.iter().copied().fold(0.0, f64::max);
        assert!(
            (0.35..0.45).contains(&min) && (1.9..2.0).contains(&max),
            "{min} {max}"
        );
        assert!(t.span() > Duration::from_secs(7 * 24 * 3600));
    }

    /// Each farm of the trace family carries a window of the curve as long as its
    /// duration, from an offset of its own, instead of a daily cycle; its rates are sized
    /// by that window (a window of higher load, a lower base rate for the same load).
    #[test]
    fn trace_farms_take_windows_of_the_curve() {
        let f = Family::load(&shipped("alibaba-trace.yaml")).unwrap();
        let trace = f.trace.clone().unwrap();
        let mut starts = Vec::new();
        for i in 0..8 {
            let s = f.generate(i).unwrap();
            let builders: Vec<&Workload> = s
                .workloads
                .iter()
                .filter(|w| w.kind == Kind::Builder)
                .collect();
            assert!(!builders.is_empty());
            let c = builders[0].load_curve.clone().unwrap();
            for w in &builders {
                assert_eq!(w.load_curve.as_ref(), Some(&c));
                assert!(w.daily_cycle.is_none());
            }
            assert!(c.span() >= s.duration && c.span() < s.duration + c.step);
            assert!(
                (0.0..=0.3).contains(&c.usage_follows),
                "{}",
                c.usage_follows
            );
            let start = (0..trace.points.len())
                .find(|&k| trace.points[k..].starts_with(&c.points))
                .unwrap();
            let source = c.source.clone().unwrap();
            assert!(
                source.starts_with("alibaba-2018-load.csv from "),
                "{source}"
            );
            starts.push(start);
        }
        starts.sort_unstable();
        starts.dedup();
        assert!(starts.len() >= 6, "{starts:?}");
    }

    /// Bad curves: the error names `builders.loadCurve…`, the file and the line.
    #[test]
    fn bad_load_curves_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let family = "name: x\nduration: [1h, 1h]\nbuilders: {loadCurve: {file: c.csv}}\n";
        let ok_rows = "seconds,load\n0,1\n1800,1.5\n3600,0.5\n5400,1\n";
        for (csv, want) in [
            ("", "c.csv: no rows"),
            ("# only a comment\n", "c.csv: no rows"),
            ("seconds,load\n", "at least two points are needed, got 0"),
            (
                "time,value\n0,1\n",
                "line 1: the header must be `seconds,load`",
            ),
            (
                "seconds,load\n0,1\n1800,-2\n3600,1\n",
                "line 3: load: \"-2\" is not a finite number ≥ 0",
            ),
            (
                "seconds,load\n0,1\n1800,lots\n3600,1\n",
                "line 3: load: \"lots\" is not a finite number ≥ 0",
            ),
            (
                "seconds,load\n0,1\n1800,NaN\n3600,1\n",
                "line 3: load: \"NaN\" is not a finite number",
            ),
            (
                "seconds,load\n0,1\n1800\n",
                "line 3: expected `seconds,load`",
            ),
            ("seconds,load\n0,0\n1800,0\n3600,0\n", "every load is 0"),
            (
                "seconds,load\n0,1\n1800,1\n3000,1\n",
                "point 3: seconds 3000, expected 3600",
            ),
            ("seconds,load\n5,1\n1800,1\n", "seconds must start at 0"),
            (
                "seconds,load,memory\n0,1,1\n1800,1\n",
                "line 3: expected `seconds,load,memory`",
            ),
            (
                "seconds,load,memory\n0,1,1\n1800,1,-1\n",
                "line 3: memory: \"-1\" is not a finite number ≥ 0",
            ),
            (
                "seconds,load\n0,1,1\n1800,1,1\n",
                "line 2: expected `seconds,load`",
            ),
            (
                "seconds,load\n0,1\n1800,1\n",
                "the curve spans 30m, farms of up to 1h (in steps of 15s) need 1h 30m",
            ),
        ] {
            std::fs::write(dir.path().join("c.csv"), csv).unwrap();
            let e = Family::parse_in(family, "f.yaml", dir.path())
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("f.yaml: builders.loadCurve.file: "),
                "{csv:?}: {e}"
            );
            assert!(e.contains(want), "{csv:?}: {e}");
        }
        std::fs::write(dir.path().join("c.csv"), ok_rows).unwrap();
        let f = Family::parse_in(family, "f.yaml", dir.path()).unwrap();
        assert_eq!(f.trace.as_ref().unwrap().points, [1.0, 1.5, 0.5, 1.0]);
        assert_eq!(f.trace.as_ref().unwrap().memory, None);
        // A memory column reaches every farm's window, point for point.
        let with_memory = "seconds,load,memory\n0,1,0.8\n1800,1.5,1.2\n3600,0.5,0.9\n5400,1,1.1\n";
        std::fs::write(dir.path().join("c.csv"), with_memory).unwrap();
        let f = Family::parse_in(family, "f.yaml", dir.path()).unwrap();
        assert_eq!(
            f.trace.as_ref().unwrap().memory.as_deref(),
            Some(&[0.8, 1.2, 0.9, 1.1][..])
        );
        for farm in f.farms(dir.path()).unwrap() {
            for w in farm
                .scenario
                .workloads
                .iter()
                .filter_map(|w| w.load_curve.as_ref())
            {
                let m = w
                    .memory
                    .as_ref()
                    .expect("the window carries the memory series");
                assert_eq!(m.len(), w.points.len());
                let mem = [0.8, 1.2, 0.9, 1.1];
                let start = mem.windows(m.len()).position(|x| x == &m[..]);
                assert!(start.is_some(), "{m:?} is not a window of {mem:?}");
            }
        }
        let e = Family::parse_in(
            "name: x\nbuilders: {loadCurve: {file: gone.csv}}\n",
            "f.yaml",
            dir.path(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("builders.loadCurve.file: reading "), "{e}");
        for (text, field) in [
            (
                "name: x\nbuilders: {loadCurve: {file: c.csv, bogus: 1}}\n",
                "builders.loadCurve.bogus",
            ),
            (
                "name: x\nbuilders: {loadCurve: {file: c.csv, usageFollows: [0.5, 1.5]}}\n",
                "builders.loadCurve.usageFollows",
            ),
            (
                "name: x\nbuilders: {loadCurve: {file: ''}}\n",
                "builders.loadCurve.file",
            ),
            (
                "name: x\nbuilders: {loadCurve: {usageFollows: [0, 1]}}\n",
                "builders.loadCurve",
            ),
        ] {
            let e = Family::parse_in(text, "f.yaml", dir.path())
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }
}
