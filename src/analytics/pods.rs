//! Pod usage: what each running pod uses now, the sum of its containers' newest samples.
//!
//! The scheduler counts a pod it placed at `max(0, predicted − measured)` while it warms
//! up ([`headroom_scheduler::usage_context::UsageContext::uncounted`]); this is the
//! measured part. Only series sampled within the node window are read
//! ([`Store::select_active`]): the containers of finished pods stay in the store until
//! retention and must not cost every refresh.

use std::collections::HashMap;

use headroom_scheduler::key::PodKey;
use headroom_storage::{Matcher, Store};

use super::Error;

pub use headroom_scheduler::view::{PodUsage, PodWindow};

/// The stored per-pod signals read here and which field of [`PodUsage`] each adds to.
const METRICS: [(&str, Field); 3] = [
    ("container_cpu_usage_cores", Field::Cpu),
    ("container_memory_working_set_bytes", Field::Memory),
    ("pod_ephemeral_storage_used_bytes", Field::Disk),
];

/// How far before the node window a pod's samples are read for its one sample there: a
/// kubelet samples its node's root cgroup and its containers at different instants, so
/// the node's first samples in the window may precede its pods' first ones there, and a
/// pod that left is taken off each node sample by its newest sample at or before it
/// ([`PodWindow::at`]). Without the sample before the window, the node's first samples kept
/// the whole of every pod that had left, and the window's p95 picked exactly those (on the
/// kit: nodes believed a gigabyte fuller than their cgroups). Four of the collectors'
/// default 15-second polls.
pub const LOOKBACK_MS: i64 = 60_000;

#[derive(Clone, Copy)]
enum Field {
    Cpu,
    Memory,
    Disk,
}

/// Every pod with a container sample at or after `since_ms`, by pod: its usage now, and
/// its containers' CPU and memory samples from `since_ms` to `end_ms` with the newest one
/// before `since_ms` (within [`LOOKBACK_MS`]): what comes off its node's window once it
/// has left ([`headroom_scheduler::view::NodeWindow::without`]).
pub fn pod_usage(store: &Store, since_ms: i64, end_ms: i64) -> Result<PodsInWindow, Error> {
    let mut pods: HashMap<PodKey, PodUsage> = HashMap::new();
    let mut windows: HashMap<PodKey, PodWindow> = HashMap::new();
    for (metric, field) in METRICS {
        store.for_each_active_series(
            &[Matcher::metric(metric)],
            since_ms,
            since_ms.saturating_sub(LOOKBACK_MS),
            end_ms,
            |info, samples| {
                let (Some(namespace), Some(pod), Some(last)) = (
                    info.labels.get("namespace"),
                    info.labels.get("pod"),
                    info.last,
                ) else {
                    return Ok(());
                };
                let key = PodKey::new(namespace, pod);
                let u = pods.entry(key.clone()).or_default();
                let slot = match field {
                    Field::Cpu => &mut u.cpu_cores,
                    Field::Memory => &mut u.memory_bytes,
                    Field::Disk => &mut u.disk_bytes,
                };
                *slot = Some(slot.unwrap_or(0.0) + last.value);
                u.newest_ms = u.newest_ms.max(last.ts_ms);
                let series = match field {
                    Field::Cpu => &mut windows.entry(key).or_default().cpu,
                    Field::Memory => &mut windows.entry(key).or_default().memory,
                    Field::Disk => return Ok(()),
                };
                let first = samples
                    .partition_point(|x| x.ts_ms < since_ms)
                    .saturating_sub(1);
                series.push(
                    samples[first..]
                        .iter()
                        .map(|x| (x.ts_ms, x.value))
                        .collect(),
                );
                Ok(())
            },
        )?;
    }
    Ok((pods, windows))
}

/// What [`pod_usage`] returns: each pod's usage now and its samples over the window.
pub type PodsInWindow = (HashMap<PodKey, PodUsage>, HashMap<PodKey, PodWindow>);

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_storage::{Labels, StoreConfig};

    /// Containers add up per pod; a pod whose containers stopped reporting before the cut
    /// is left out; a series without a pod label is ignored.
    #[test]
    fn containers_add_up_per_pod_and_stopped_pods_are_left_out() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let c = |pod: &str, container: &str| {
            Labels::new([
                ("container", container),
                ("namespace", "ci"),
                ("node", "n1"),
                ("pod", pod),
            ])
            .unwrap()
        };
        let m = "container_memory_working_set_bytes";
        store
            .append(m, &c("build-1", "main"), 50_000, 100.0)
            .unwrap();
        store
            .append(m, &c("build-1", "main"), 60_000, 300.0)
            .unwrap();
        store
            .append(m, &c("build-1", "sidecar"), 59_000, 20.0)
            .unwrap();
        store
            .append(
                "container_cpu_usage_cores",
                &c("build-1", "main"),
                60_000,
                1.5,
            )
            .unwrap();
        store.append(m, &c("done", "main"), 10_000, 900.0).unwrap();
        store
            .append(m, &Labels::new([("node", "n1")]).unwrap(), 60_000, 5.0)
            .unwrap();
        let (got, windows) = pod_usage(&store, 30_000, 60_000).unwrap();
        assert_eq!(got.len(), 1);
        let u = got[&PodKey::new("ci", "build-1")];
        assert_eq!(u.memory_bytes, Some(320.0));
        assert_eq!(u.cpu_cores, Some(1.5));
        assert_eq!(u.disk_bytes, None);
        assert_eq!(u.newest_ms, 60_000);
        // Its samples in the window, a series per container (the finished pod has none).
        let w = &windows[&PodKey::new("ci", "build-1")];
        let mut memory = w.memory.clone();
        memory.sort_by_key(|s| s.first().map(|(t, _)| *t));
        assert_eq!(
            memory,
            vec![vec![(50_000, 100.0), (60_000, 300.0)], vec![(59_000, 20.0)]]
        );
        assert_eq!(w.cpu, vec![vec![(60_000, 1.5)]]);
        assert_eq!(windows.len(), 1);
    }

    /// A pod's window starts with its newest sample before the cut (within
    /// [`LOOKBACK_MS`]): the node's first sample in the window, taken before the pod's first
    /// there, finds what the pod used then. Older samples stay out.
    #[test]
    fn a_pods_window_starts_with_its_sample_before_the_cut() {
        use headroom_scheduler::view::{NodeWindow, Signal};
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let l = Labels::new([("container", "main"), ("namespace", "ci"), ("pod", "b")]).unwrap();
        let m = "container_memory_working_set_bytes";
        for (t, v) in [
            (40_000, 1.0),
            (95_000, 400.0),
            (110_000, 500.0),
            (125_000, 500.0),
        ] {
            store.append(m, &l, t, v).unwrap();
        }
        let (_, windows) = pod_usage(&store, 100_000, 130_000).unwrap();
        let w = &windows[&PodKey::new("ci", "b")];
        assert_eq!(
            w.memory,
            vec![vec![(95_000, 400.0), (110_000, 500.0), (125_000, 500.0)]]
        );
        // The node sampled at 102 s, 112 s and 122 s with the pod in it, which then left:
        // each node sample comes off by what the pod used then (the first by its sample at
        // 95 s), leaving the node's own 50.
        let node = NodeWindow {
            quantile: 0.95,
            cpu: vec![],
            memory: vec![(102_000, 450.0), (112_000, 550.0), (122_000, 550.0)],
        };
        assert_eq!(node.without(Signal::Memory, &[w]), Some(50.0));
    }
}
