//! What a pod will really use: its builder's profile, the bk-ci annotation, or its requests
//! (scaled by what the cluster's profiled pods use against theirs, or under `usage.coldStart:
//! image` the profiled pods that run the same container images, `usage.coldStart`).
//!
//! Computed once per cycle ([`PodUsage::of`]) and shared by every real-usage plugin through
//! the cycle state ([`pod_usage`]), so the class, the prediction and any ignored annotation
//! are decided once and read the same way by all of them.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use super::node::NodeReal;
use super::policy::{Class, ColdStart, Percentile, StalePolicy, UsagePolicy};
use crate::framework::{CycleState, Status, WrittenIn};
use crate::quantity::{Quantity, format_bytes};
use crate::selector::Labels;
use crate::snapshot::table::{NodeTable, real_capacity};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot, normalized_image_name};
use crate::usage_context::risk::Z95;
use crate::usage_context::shapes::{ShapeCounter, ShapeMix};
use crate::usage_context::whole::{WholeCounter, WholeNeed};
use crate::usage_context::{
    Calibration, MemoryDist, Ratios, RecentSums, RecentTable, UsageContext, UsageRows,
};

/// bk-ci's annotation with the builder's real usage records (seed 000).
pub const REAL_RESOURCES_ANNOTATION: &str = "bkci.dispatch.kubenetes/builder-real-resources";
/// headroom's annotation with a pod's disk need, a quantity (seed 003).
pub const DISK_REQUEST_ANNOTATION: &str = "headroom.io/disk-request";

/// Where a prediction came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The builder's profile from the usage view.
    Profile {
        /// Runs behind it.
        runs: usize,
        /// The percentile used.
        percentile: Percentile,
    },
    /// The `builder-real-resources` annotation.
    Annotation {
        /// Records in it.
        records: usize,
    },
    /// The pod's requests (no profile, no annotation).
    Requests,
    /// The pod's requests scaled by what profiled pods use against theirs
    /// (`usage.coldStart: calibrated` or `image`).
    Calibrated {
        /// Memory ratio applied.
        memory_ratio: f64,
        /// CPU ratio applied.
        cpu_ratio: f64,
        /// Profiled pods behind the ratios.
        pods: usize,
        /// The container images those pods share with this one (`coldStart: image`);
        /// `None`: every running profiled pod.
        image: Option<String>,
    },
}

/// Profiled pods needed before a calibration is trusted.
pub const CALIBRATION_MIN_PODS: usize = 5;

/// Profiled pods of an image needed before `usage.coldStart: image` prefers them to the
/// whole cluster's: one. A build image (a toolchain, an SDK) says more about a new builder
/// than every other image's builds do; measured against two on the farm families
/// (docs/configuration.md, *Pods without a profile*).
pub const IMAGE_CALIBRATION_MIN_PODS: usize = 1;

/// The pod's container images (not its init containers'), in order, each as ImageLocality
/// names it (an untagged name gets `:latest`, so `maven` and `maven:latest` share a key),
/// and joined by `,`: the key of [`Calibration::by_image`]. `None` when no container names
/// an image.
pub fn image_key(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let images: Vec<String> = spec
        .containers
        .iter()
        .filter_map(|c| c.image.as_deref())
        .map(normalized_image_name)
        .collect();
    (!images.is_empty()).then(|| images.join(","))
}

/// Per-pod ratios of profile to requests, gathered for [`Ratios`].
#[derive(Default)]
struct RatioSamples {
    mem: Vec<f64>,
    mem50: Vec<f64>,
    mem95: Vec<f64>,
    cpu: Vec<f64>,
}

impl RatioSamples {
    fn push(
        &mut self,
        profile: &crate::view::BuilderProfile,
        r: &crate::resources::Resources,
        p: Percentile,
    ) {
        if r.memory > 0 {
            let req = r.memory as f64;
            self.mem.push(p.pick(&profile.memory) / req);
            self.mem50.push(profile.memory.p50 / req);
            self.mem95.push(profile.memory.p95 / req);
        }
        if r.milli_cpu > 0 {
            self.cpu
                .push(p.pick(&profile.cpu) / (r.milli_cpu as f64 / 1000.0));
        }
    }

    /// The ratios, with `min` pods or more; CPU from `min` CPU ratios, else `cpu_default`.
    fn ratios(mut self, min: usize, cpu_default: f64) -> Option<Ratios> {
        if self.mem.len() < min {
            return None;
        }
        let cpu_ratio = if self.cpu.len() >= min {
            quantile(&mut self.cpu, 0.9)
        } else {
            cpu_default
        };
        let median = quantile(&mut self.mem50, 0.5);
        let sd = (quantile(&mut self.mem95, 0.95) - median).max(0.0) / Z95;
        Some(Ratios {
            memory_ratio: quantile(&mut self.mem, 0.9),
            cpu_ratio,
            pods: self.mem.len(),
            memory_ratio_dist: MemoryDist {
                mean: median,
                var: sd * sd,
            },
        })
    }
}

/// What a new usage view gives the cycles besides itself, from one walk over the running
/// pods and one over the view's profiles ([`derive()`]).
#[derive(Debug, Clone, Default)]
pub struct Derived {
    /// The calibration of pods without a profile; `None` with fewer than
    /// [`CALIBRATION_MIN_PODS`] pods whose builder has a profile.
    pub calibration: Option<Calibration>,
    /// The running builds' shapes (the Fragmentation score's; empty unless counted).
    pub shapes: Arc<ShapeMix>,
    /// How many nodes the running big builds need kept whole (RealHeadroom's `keepWhole`).
    pub whole: WholeNeed,
    /// The cluster's warm run length over the cold one, for builders with no warm run yet
    /// (the warm wait's, [`super::warm::cluster_warm_ratio`]); `None` with the warm wait
    /// off.
    pub warm_ratio: Option<f64>,
}

/// The calibration, what the big builds need kept whole and, with `count_shapes`, the
/// shape mix over the snapshot's running pods and the profiles of `view`, and the warm
/// wait's cluster warm ratio over the profiles alone. It reads every
/// pod (140 ms at 150,000 profiled pods, benches/README), so the scheduler computes it
/// before taking the cache's lock.
pub fn derive(
    snapshot: &Snapshot,
    view: &crate::view::UsageView,
    policy: &UsagePolicy,
    identity: &crate::identity::IdentityConfig,
    count_shapes: bool,
) -> Derived {
    // No profile, no calibration: the walk is only for the shapes.
    if view.builders.is_empty() && !count_shapes {
        return Derived::default();
    }
    let p = policy.predict_percentile;
    let per_image = policy.cold_start == ColdStart::Image;
    let mut all = RatioSamples::default();
    let mut images: HashMap<String, RatioSamples> = HashMap::new();
    let mut shapes = ShapeCounter::default();
    let largest =
        |f: fn(&NodeInfo) -> i64| snapshot.nodes().iter().map(|n| f(n)).max().unwrap_or(0);
    let mut whole = WholeCounter::new(largest(|n| n.capacity.0), largest(|n| n.capacity.1));
    for node in snapshot.nodes() {
        for pod in &node.pods {
            let builder = crate::identity::builder_identity(&pod.pod.metadata, identity);
            let r = &pod.requests.requests;
            let profile = view.builder(builder.as_str());
            // Read once: both the shapes and the big builds count only builds.
            let build = (count_shapes || profile.is_some())
                && !super::lifetime::runs_until_removed(&pod.pod, &builder);
            if count_shapes && build {
                shapes.add(r.milli_cpu, r.memory);
            }
            let Some(profile) = profile else {
                continue;
            };
            if build {
                let run_s = profile.warm_run_s.or(profile.cold_run_s);
                whole.add(p.pick(&profile.memory), r.milli_cpu, r.memory, run_s);
            }
            all.push(profile, r, p);
            if let Some(key) = per_image.then(|| image_key(&pod.pod)).flatten() {
                images.entry(key).or_default().push(profile, r, p);
            }
        }
    }
    let calibration = all.ratios(CALIBRATION_MIN_PODS, 1.0).map(|all| {
        let by_image = images
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.ratios(IMAGE_CALIBRATION_MIN_PODS, all.cpu_ratio)?)))
            .collect();
        Calibration { all, by_image }
    });
    Derived {
        calibration,
        shapes: Arc::new(shapes.finish()),
        whole: whole.finish(),
        // Only the warm wait reads it: with it off, the walk over the profiles is saved.
        warm_ratio: if policy.warm_wait.enabled {
            super::warm::cluster_warm_ratio(view)
        } else {
            None
        },
    }
}

/// The ratios of `c` for a pod without a profile: its images' when some running profiled
/// pod runs the same ones (`by_image` is empty unless `coldStart: image`), with the key;
/// else every profiled pod's.
fn calibration_for<'a>(c: &'a Calibration, pod: &Pod) -> (&'a Ratios, Option<String>) {
    if !c.by_image.is_empty()
        && let Some(key) = image_key(pod)
        && let Some(r) = c.by_image.get(&key)
    {
        return (r, Some(key));
    }
    (&c.all, None)
}

/// A pod's predicted real usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// CPU, cores.
    pub cpu_cores: f64,
    /// Memory, bytes.
    pub memory_bytes: f64,
    /// Memory as a distribution (the risk-based fit, [`crate::usage_context::risk`]).
    pub memory_dist: MemoryDist,
    /// Where it came from.
    pub source: Source,
}

impl Prediction {
    /// `predicted 1.50 CPU, 2.0 GiB (profile p95 of 12 runs)`.
    pub fn describe(&self) -> String {
        let from = match &self.source {
            Source::Profile { runs, percentile } => {
                format!("profile {} of {runs} runs", percentile.as_str())
            }
            Source::Annotation { records } => {
                format!("{REAL_RESOURCES_ANNOTATION}, {records} records")
            }
            Source::Requests => "requests".to_string(),
            Source::Calibrated {
                memory_ratio,
                cpu_ratio,
                pods,
                image,
            } => {
                let of = match image {
                    Some(i) => format!(" with image {i}"),
                    None => String::new(),
                };
                format!(
                    "no profile yet: requests × {memory_ratio:.2} memory, × {cpu_ratio:.2} CPU, p90 of {pods} profiled pods{of}"
                )
            }
        };
        format!(
            "predicted {:.2} CPU, {} ({from})",
            self.cpu_cores,
            format_bytes(self.memory_bytes as i64)
        )
    }
}

/// Everything the real-usage plugins need to know about the pod being scheduled.
#[derive(Debug, Clone)]
pub struct PodUsage {
    /// The builder identity (the collectors' rule).
    pub builder: crate::identity::BuilderId,
    /// The pod's class and its settings.
    pub class: Class,
    /// Predicted usage.
    pub prediction: Prediction,
    /// Disk the pod needs, bytes (annotation, else the ephemeral-storage request).
    pub disk_bytes: i64,
    /// Problems with the pod's annotations (ignored, with the reason).
    pub notes: Vec<String>,
    /// The pod runs until it is removed (a service, a database), not to completion
    /// ([`super::lifetime`]).
    pub long_running: bool,
}

#[derive(Deserialize)]
struct Record {
    #[serde(default)]
    cpu: Option<serde_json::Value>,
    #[serde(default)]
    memory: Option<serde_json::Value>,
}

fn quantity_of(v: &serde_json::Value, what: &str) -> Result<f64, String> {
    let q = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(format!("{what} is {other}, not a quantity")),
    };
    let parsed = Quantity::parse(&q).map_err(|e| format!("{what} {q:?}: {e}"))?;
    if parsed.is_negative() {
        return Err(format!("{what} {q:?} is negative"));
    }
    Ok(parsed.nano_value() as f64 / 1e9)
}

/// Linear-interpolated quantile of `v` at `q` (the analytics module's method).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let pos = (v.len() - 1) as f64 * q;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// What the `builder-real-resources` annotation says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RealResources {
    /// CPU cores at the percentile.
    pub cpu: f64,
    /// Memory bytes at the percentile.
    pub memory: f64,
    /// Memory as a distribution: the records' median and p95 ([`MemoryDist::from_percentiles`]).
    pub memory_dist: MemoryDist,
    /// Records in it.
    pub records: usize,
}

/// Reads the `builder-real-resources` annotation at the percentile, or why it is ignored.
pub fn parse_real_resources(text: &str, p: Percentile) -> Result<RealResources, String> {
    let records: Vec<Record> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON list of records: {e}"))?;
    let mut cpu = Vec::new();
    let mut mem = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if let Some(c) = &r.cpu {
            cpu.push(quantity_of(c, &format!("record {i} cpu"))?);
        }
        if let Some(m) = &r.memory {
            mem.push(quantity_of(m, &format!("record {i} memory"))?);
        }
    }
    if cpu.is_empty() && mem.is_empty() {
        return Err("no cpu or memory values".into());
    }
    let q = p.fraction();
    let memory_dist =
        MemoryDist::from_percentiles(quantile(&mut mem, 0.5), quantile(&mut mem, 0.95), mem.len());
    Ok(RealResources {
        cpu: quantile(&mut cpu, q),
        memory: quantile(&mut mem, q),
        memory_dist,
        records: records.len(),
    })
}

fn annotations(pod: &PodInfo) -> &Labels {
    static EMPTY: Labels = Labels::new();
    pod.pod.metadata.annotations.as_ref().unwrap_or(&EMPTY)
}

impl PodUsage {
    /// Decides class, prediction and disk need of `pod` against the snapshot's usage view.
    pub fn of(
        pod: &PodInfo,
        snapshot: &Snapshot,
        policy: &UsagePolicy,
        identity: &crate::identity::IdentityConfig,
    ) -> PodUsage {
        let annotations = annotations(pod);
        let class = policy.class_of(pod.labels(), annotations);
        let builder = crate::identity::builder_identity(&pod.pod.metadata, identity);
        let mut notes = Vec::new();
        let p = policy.predict_percentile;
        let view = &snapshot.usage().view;
        let prediction = if let Some(profile) = view.builder(&builder) {
            Prediction {
                cpu_cores: p.pick(&profile.cpu),
                memory_bytes: p.pick(&profile.memory),
                memory_dist: MemoryDist::from_percentiles(
                    profile.memory.p50,
                    profile.memory.p95,
                    profile.runs,
                ),
                source: Source::Profile {
                    runs: profile.runs,
                    percentile: p,
                },
            }
        } else {
            let from_annotation = annotations.get(REAL_RESOURCES_ANNOTATION).and_then(|text| {
                parse_real_resources(text, p)
                    .map_err(|e| notes.push(format!("ignored {REAL_RESOURCES_ANNOTATION}: {e}")))
                    .ok()
            });
            match from_annotation {
                Some(RealResources {
                    cpu,
                    memory,
                    memory_dist,
                    records,
                }) => Prediction {
                    cpu_cores: cpu,
                    memory_bytes: memory,
                    memory_dist,
                    source: Source::Annotation { records },
                },
                None => {
                    let r = &pod.requests;
                    let (cpu, mem) = (
                        r.requests.milli_cpu as f64 / 1000.0,
                        r.requests.memory as f64,
                    );
                    match &snapshot.usage().calibration {
                        Some(c) if policy.cold_start != ColdStart::Requests => {
                            let (r, image) = calibration_for(c, &pod.pod);
                            Prediction {
                                cpu_cores: cpu * r.cpu_ratio,
                                memory_bytes: mem * r.memory_ratio,
                                memory_dist: MemoryDist {
                                    mean: mem * r.memory_ratio_dist.mean,
                                    var: mem * mem * r.memory_ratio_dist.var,
                                },
                                source: Source::Calibrated {
                                    memory_ratio: r.memory_ratio,
                                    cpu_ratio: r.cpu_ratio,
                                    pods: r.pods,
                                    image,
                                },
                            }
                        }
                        _ => Prediction {
                            cpu_cores: cpu,
                            memory_bytes: mem,
                            memory_dist: MemoryDist::exact(mem),
                            source: Source::Requests,
                        },
                    }
                }
            }
        };
        let mut disk_bytes = pod.requests.requests.ephemeral_storage;
        if let Some(text) = annotations.get(DISK_REQUEST_ANNOTATION) {
            match Quantity::parse(text) {
                Ok(q) if !q.is_negative() => disk_bytes = q.value(),
                Ok(_) => notes.push(format!(
                    "ignored {DISK_REQUEST_ANNOTATION} {text:?}: negative; using the ephemeral-storage request"
                )),
                Err(e) => notes.push(format!(
                    "ignored {DISK_REQUEST_ANNOTATION} {text:?}: {e}; using the ephemeral-storage request"
                )),
            }
        }
        PodUsage {
            long_running: super::lifetime::runs_until_removed(&pod.pod, &builder),
            builder,
            class,
            prediction,
            disk_bytes,
            notes,
        }
    }
}

/// The disk a pod already on a node needs (the same rule as for the pod being placed).
pub fn disk_of(pod: &PodInfo) -> i64 {
    annotations(pod)
        .get(DISK_REQUEST_ANNOTATION)
        .and_then(|t| Quantity::parse(t).ok())
        .filter(|q| !q.is_negative())
        .map_or(pod.requests.requests.ephemeral_storage, |q| q.value())
}

/// The usage side of one cycle: the pod's [`PodUsage`] and the context it was decided in.
#[derive(Debug)]
pub struct CycleUsage {
    /// The pod.
    pub pod: PodUsage,
    /// The snapshot's usage context (view, clock, recent placements).
    pub ctx: Arc<UsageContext>,
    /// Nodes of the snapshot whose usage is stale or missing.
    pub degraded_nodes: usize,
    /// The view's usage per node index of the cycle's snapshot.
    pub rows: Arc<UsageRows>,
    /// Recent placements folded by node index (read at the cycle's clock).
    pub recent: Arc<RecentTable>,
    /// `usage.warmup` in milliseconds (how long a sampled placement still counts).
    pub warmup_ms: i64,
}

impl CycleUsage {
    /// [`NodeReal::of`] for a node of the cycle's snapshot, from the rows resolved once per
    /// view and the recent placements resolved once per cycle.
    #[inline]
    pub fn node_real(&self, node: &NodeInfo, policy: &UsagePolicy) -> NodeReal {
        NodeReal::from_parts(
            real_capacity(node.capacity),
            node.disk_annotations,
            self.rows.row(node.idx),
            self.rows.fs(node.idx),
            self.ctx.now_ms,
            self.recent_at(node.idx),
            policy,
        )
    }

    /// [`CycleUsage::node_real`] for node `idx`, from the snapshot's node table.
    // Hot: once per node per cycle from RealMemoryFit/RealCpuFit's filter and, through
    // `FreeAfter::at`, History's PreScore and RealHeadroom's Score. Since the core became a
    // crate of its own, `#[inline]` was no longer enough (called out of line from all three,
    // returning the `NodeReal` through memory); forced, `cycle usage 5000 200 1` runs
    // 5.68 M → 5.21 M instructions a decision under callgrind (benches/README).
    #[inline(always)]
    pub fn node_real_at(&self, table: &NodeTable, idx: NodeIdx, policy: &UsagePolicy) -> NodeReal {
        let i = idx as usize;
        NodeReal::from_parts(
            table.capacity[i],
            table.disk_annotations[i],
            self.rows.row(idx),
            self.rows.fs(idx),
            self.ctx.now_ms,
            self.recent_at(idx),
            policy,
        )
    }

    /// What recent placements add on node `idx`.
    #[inline]
    pub fn recent_at(&self, idx: NodeIdx) -> RecentSums {
        self.recent.sums(idx, self.ctx.now_ms, self.warmup_ms)
    }

    /// Whether node `idx` has usage fresh at the cycle's clock.
    #[inline]
    pub fn is_fresh(&self, idx: NodeIdx, policy: &UsagePolicy) -> bool {
        self.rows.row(idx).is_some_and(|r| {
            self.ctx.now_ms.saturating_sub(r.newest_ms) <= policy.stale_after.as_millis() as i64
        })
    }
}

struct Slot(Arc<CycleUsage>);

/// The cycle's [`CycleUsage`], computed by the first real-usage plugin that asks and shared
/// with the others (and with the scheduler's compensation bookkeeping after Reserve).
/// The first call also leaves the decision-record notes: ignored annotations, and how many
/// nodes have stale or missing usage (so degraded decisions are always visible).
pub fn pod_usage(
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    policy: &UsagePolicy,
    identity: &crate::identity::IdentityConfig,
) -> Arc<CycleUsage> {
    if let Some(Slot(u)) = state.read::<Slot>() {
        return u.clone();
    }
    let ctx = snapshot.usage().clone();
    let pod_usage = PodUsage::of(pod, snapshot, policy, identity);
    for n in &pod_usage.notes {
        state.note(n.clone());
    }
    // Fresh entries of the view, counted over the rows' sorted sample times; nodes the view
    // has but the snapshot lacks (just deleted) are rare enough to ignore.
    let rows = snapshot.usage_rows();
    let oldest_fresh = ctx
        .now_ms
        .saturating_sub(policy.stale_after.as_millis() as i64);
    let fresh = rows.fresh_count(oldest_fresh);
    let degraded_nodes = snapshot.len().saturating_sub(fresh);
    if degraded_nodes > 0 {
        let what = match policy.on_stale {
            StalePolicy::Fallback => "real filters pass them and real scores use requests",
            StalePolicy::Reject => "real filters reject them",
        };
        state.note(format!(
            "usage of {degraded_nodes}/{} node(s) is stale (older than {}) or missing: {what}",
            snapshot.len(),
            humantime_serde::re::humantime::format_duration(policy.stale_after)
        ));
    }
    let u = Arc::new(CycleUsage {
        pod: pod_usage,
        ctx,
        degraded_nodes,
        rows,
        recent: snapshot.recent_table(),
        warmup_ms: policy.warmup_ms(),
    });
    state.write(Slot(u.clone()));
    u
}

/// The [`CycleUsage`] a plugin computed earlier in this cycle, if any.
pub fn cycle_usage(state: &CycleState) -> Option<Arc<CycleUsage>> {
    state.read::<Slot>().map(|s| s.0.clone())
}

/// Takes the cycle's [`CycleUsage`] out of its state once the cycle no longer reads it
/// (after Reserve): it holds the snapshot's usage context, and while anything holds that,
/// recording the placement in the snapshot (`Snapshot::usage_mut`) copies the whole
/// context — every recent placement of every node — per decision (measured on the kit:
/// about 40 % of `serve`'s CPU at 5,000 nodes, copying and freeing it).
pub fn release_cycle_usage(state: &mut CycleState) -> Option<Arc<CycleUsage>> {
    state.take::<Slot>().map(|s| s.0)
}

/// [`cycle_usage`] by reference (no reference count touched: for per-node paths).
pub fn cycle_usage_ref(state: &CycleState) -> Option<&CycleUsage> {
    state.read::<Slot>().map(|s| &*s.0)
}

/// [`cycle_usage_ref`] for a Filter or Score whose `plugin`'s PreFilter or PreScore
/// (`point`) computed it, or the error status every plugin gives when that point did not
/// run ([`CycleState::written_by`]: `RealHeadroom: PreScore did not run`).
pub fn cycle_usage_written<'a>(
    state: &'a CycleState,
    plugin: &str,
    point: WrittenIn,
) -> Result<&'a CycleUsage, Status> {
    state.written_by::<Slot>(plugin, point).map(|s| &*s.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of `coldStart: image`: the containers' images in order, init containers
    /// aside; none without an image.
    #[test]
    fn image_key_joins_the_containers_images() {
        let pod = |spec: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
                .unwrap()
        };
        let two = pod(serde_json::json!({
            "initContainers": [{"name": "i", "image": "init:1"}],
            "containers": [{"name": "a", "image": "rust:1"}, {"name": "b", "image": "sidecar:2"}]
        }));
        assert_eq!(image_key(&two).as_deref(), Some("rust:1,sidecar:2"));
        // Untagged names are `:latest`, as ImageLocality reads them.
        let untagged = pod(serde_json::json!({
            "containers": [{"name": "a", "image": "maven"}, {"name": "b", "image": "reg:5000/tool"}]
        }));
        assert_eq!(
            image_key(&untagged).as_deref(),
            Some("maven:latest,reg:5000/tool:latest")
        );
        let bare = pod(serde_json::json!({"containers": [{"name": "a"}]}));
        assert_eq!(image_key(&bare), None);
        assert_eq!(image_key(&Pod::default()), None);
    }

    #[test]
    fn real_resources_annotation() {
        let r = parse_real_resources(
            r#"[{"cpu":"1","memory":"1Gi"},{"cpu":"3000m","memory":"3Gi"},{"cpu":2,"memory":"2Gi"}]"#,
            Percentile::P50,
        )
        .unwrap();
        let gi = (1u64 << 30) as f64;
        assert_eq!((r.cpu, r.memory, r.records), (2.0, 2.0 * gi, 3));
        // Median 2 GiB, p95 2.9 GiB of three records: sd 0.9/1.645 GiB widened by √(4/3).
        assert_eq!(r.memory_dist.mean, 2.0 * gi);
        let sd = 0.9 * gi / Z95 * (4.0f64 / 3.0).sqrt();
        assert!((r.memory_dist.sd() - sd).abs() < 1e-6 * gi);
        let r = parse_real_resources(r#"[{"cpu":"1"},{"cpu":"3"}]"#, Percentile::Max).unwrap();
        assert_eq!(r.cpu, 3.0);
        for bad in [
            "nope",
            "{}",
            "[]",
            r#"[{"cpu":"lots"}]"#,
            r#"[{"cpu":"-1"}]"#,
            r#"[{"cpu":true}]"#,
        ] {
            assert!(parse_real_resources(bad, Percentile::P95).is_err(), "{bad}");
        }
    }
}
