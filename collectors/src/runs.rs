//! Run detection: follows builder pods across cycles and, when one ends or stops being
//! reported, produces its run record (node, start, end, mean/p95/max cpu and memory).

use std::collections::{HashMap, HashSet};

use crate::config::RunsConfig;
use crate::identity::{BuilderId, PodIndex};
use crate::samples::PodView;
use crate::sink::{RunRecord, UsageSummary};
use headroom_scheduler::key::Uid;

#[derive(Debug)]
struct OpenRun {
    builder: BuilderId,
    node: String,
    start_ms: i64,
    last_ms: i64,
    missed: u32,
    cpu: Vec<f64>,
    memory: Vec<f64>,
}

/// Open runs by pod UID.
#[derive(Debug)]
pub(crate) struct RunTracker {
    config: RunsConfig,
    open: HashMap<Uid, OpenRun>,
}

/// Mean, nearest-rank p95 and max of `values` (all zero when empty).
pub fn summarize(values: &[f64]) -> UsageSummary {
    if values.is_empty() {
        return UsageSummary::default();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let rank = (0.95 * n as f64).ceil() as usize;
    UsageSummary {
        mean: sorted.iter().sum::<f64>() / n as f64,
        p95: sorted[rank.clamp(1, n) - 1],
        max: sorted[n - 1],
    }
}

fn push_bounded(values: &mut Vec<f64>, v: f64, max: usize) {
    values.push(v);
    if values.len() > max.max(2) {
        // Halve the resolution instead of dropping the oldest: the p95 of a long run must
        // still see its whole span.
        let mut i = 0;
        values.retain(|_| {
            i += 1;
            i % 2 == 1
        });
    }
}

impl RunTracker {
    pub fn new(config: &RunsConfig) -> Self {
        Self {
            config: config.clone(),
            open: HashMap::new(),
        }
    }

    /// Number of runs open.
    #[cfg(test)]
    pub fn open_runs(&self) -> usize {
        self.open.len()
    }

    /// Feeds one cycle's pods; returns the runs that ended, with their builder.
    pub fn observe(&mut self, view: &PodView, index: &PodIndex) -> Vec<(BuilderId, RunRecord)> {
        let mut ended = Vec::new();
        let mut seen = HashSet::new();
        for pod in &view.pods {
            let info = index.get(&pod.uid, &pod.namespace, &pod.name);
            let builder = info.map_or_else(
                || BuilderId::pod(&pod.namespace, &pod.name),
                |i| i.builder.clone(),
            );
            seen.insert(pod.uid.clone());
            let run = self.open.entry(pod.uid.clone()).or_insert_with(|| OpenRun {
                builder: builder.clone(),
                node: pod.node.clone(),
                start_ms: pod.ts_ms,
                last_ms: i64::MIN,
                missed: 0,
                cpu: Vec::new(),
                memory: Vec::new(),
            });
            // Metadata may arrive after the first stats, and the pod may leave the lister
            // (deleted once it ended) before its stats do: the latest *known* identity
            // wins, never the bare-pod fallback over a real one.
            if info.is_some() || run.builder.is_pod() {
                run.builder = builder;
            }
            run.missed = 0;
            // The kubelet refreshes stats more slowly than it may be polled; a repeated
            // observation time is the same sample and must not weigh twice.
            if pod.ts_ms > run.last_ms {
                run.last_ms = pod.ts_ms;
                if let Some(c) = pod.cpu_cores.filter(|v| v.is_finite()) {
                    push_bounded(&mut run.cpu, c, self.config.max_samples);
                }
                if let Some(m) = pod.memory_bytes.filter(|v| v.is_finite()) {
                    push_bounded(&mut run.memory, m, self.config.max_samples);
                }
            }
            if info.is_some_and(|i| i.ended) {
                ended.push(pod.uid.clone());
            }
        }
        for (uid, run) in &mut self.open {
            if seen.contains(uid) {
                continue;
            }
            let finished = index.get(uid, "", "").is_some_and(|i| i.ended);
            // Only a successful poll of the pod's node says it is gone; a failed poll says
            // nothing, so the run stays open.
            if finished {
                ended.push(uid.clone());
            } else if view.coverage.covers(&run.node) {
                run.missed += 1;
                if run.missed >= self.config.missing_cycles.max(1) {
                    ended.push(uid.clone());
                }
            }
        }
        ended
            .into_iter()
            .filter_map(|uid| {
                let run = self.open.remove(&uid)?;
                Some((
                    run.builder,
                    RunRecord {
                        pod_uid: uid.to_string(),
                        node: run.node,
                        start_ms: run.start_ms,
                        end_ms: run.last_ms.max(run.start_ms),
                        cpu: summarize(&run.cpu),
                        memory: summarize(&run.memory),
                    },
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdentityConfig;
    use crate::samples::{Coverage, PodSeen};
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn seen(uid: &str, node: &str, ts: i64, cpu: f64, mem: f64) -> PodSeen {
        PodSeen {
            uid: uid.into(),
            namespace: "ci".into(),
            name: format!("pod-{uid}"),
            node: node.into(),
            ts_ms: ts,
            cpu_cores: Some(cpu),
            memory_bytes: Some(mem),
        }
    }

    fn view(pods: Vec<PodSeen>, nodes: &[&str]) -> PodView {
        PodView {
            pods,
            coverage: Coverage::Nodes(nodes.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn summary_stats() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!(s.mean, 50.5);
        assert_eq!(s.p95, 95.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(summarize(&[]), UsageSummary::default());
        assert_eq!(summarize(&[3.0]).p95, 3.0);
    }

    #[test]
    fn run_closes_after_missing_cycles_on_a_polled_node() {
        let mut t = RunTracker::new(&RunsConfig::default());
        let idx = PodIndex::default();
        assert!(
            t.observe(&view(vec![seen("a", "n1", 1000, 1.0, 10.0)], &["n1"]), &idx)
                .is_empty()
        );
        assert!(
            t.observe(&view(vec![seen("a", "n1", 2000, 3.0, 30.0)], &["n1"]), &idx)
                .is_empty()
        );
        // Node n1 failed to answer: nothing is concluded.
        assert!(t.observe(&view(vec![], &[]), &idx).is_empty());
        assert!(t.observe(&view(vec![], &["n2"]), &idx).is_empty());
        // Missing from two successful polls of n1: ended.
        assert!(t.observe(&view(vec![], &["n1"]), &idx).is_empty());
        let done = t.observe(&view(vec![], &["n1"]), &idx);
        assert_eq!(done.len(), 1);
        let (builder, run) = &done[0];
        assert_eq!(builder, "ci/Pod/pod-a");
        assert_eq!((run.start_ms, run.end_ms), (1000, 2000));
        assert_eq!(run.cpu.mean, 2.0);
        assert_eq!(run.cpu.max, 3.0);
        assert_eq!(run.memory.p95, 30.0);
        assert_eq!(t.open_runs(), 0);
    }

    #[test]
    fn repeated_observation_time_counts_once() {
        let mut t = RunTracker::new(&RunsConfig {
            missing_cycles: 1,
            ..RunsConfig::default()
        });
        let idx = PodIndex::default();
        t.observe(&view(vec![seen("a", "n1", 1000, 1.0, 1.0)], &["n1"]), &idx);
        t.observe(&view(vec![seen("a", "n1", 1000, 1.0, 1.0)], &["n1"]), &idx);
        t.observe(&view(vec![seen("a", "n1", 2000, 4.0, 1.0)], &["n1"]), &idx);
        let done = t.observe(&view(vec![], &["n1"]), &idx);
        assert_eq!(done[0].1.cpu.mean, 2.5);
    }

    #[test]
    fn ended_phase_closes_immediately_with_identity() {
        let mut t = RunTracker::new(&RunsConfig::default());
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("pod-a".into()),
                namespace: Some("ci".into()),
                uid: Some("a".into()),
                annotations: Some(
                    [("headroom.io/builder".to_string(), "android".to_string())].into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let idx = PodIndex::build(std::slice::from_ref(&pod), &IdentityConfig::default());
        assert!(
            t.observe(&view(vec![seen("a", "n1", 1000, 1.0, 1.0)], &["n1"]), &idx)
                .is_empty()
        );
        pod.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let idx = PodIndex::build(&[pod], &IdentityConfig::default());
        let done = t.observe(&view(vec![seen("a", "n1", 2000, 1.0, 1.0)], &["n1"]), &idx);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].0, "android");
        assert_eq!(done[0].1.end_ms, 2000);
    }

    #[test]
    fn identity_survives_the_pod_leaving_the_lister_before_its_stats() {
        let mut t = RunTracker::new(&RunsConfig {
            missing_cycles: 1,
            ..RunsConfig::default()
        });
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("pod-a".into()),
                namespace: Some("ci".into()),
                uid: Some("a".into()),
                annotations: Some(
                    [("headroom.io/builder".to_string(), "android".to_string())].into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let idx = PodIndex::build(&[pod], &IdentityConfig::default());
        t.observe(&view(vec![seen("a", "n1", 1000, 1.0, 1.0)], &["n1"]), &idx);
        // The pod was deleted (the scheduler forgot it) while the kubelet still reports it.
        let gone = PodIndex::default();
        t.observe(&view(vec![seen("a", "n1", 2000, 1.0, 1.0)], &["n1"]), &gone);
        let done = t.observe(&view(vec![], &["n1"]), &gone);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].0, "android");
        assert!(!done[0].0.is_pod());
    }

    #[test]
    fn samples_are_bounded() {
        let mut v = Vec::new();
        for i in 0..1000 {
            push_bounded(&mut v, f64::from(i), 64);
        }
        assert!(v.len() <= 64);
        assert_eq!(v[0], 0.0);
    }
}
