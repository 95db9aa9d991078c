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

#[derive(Clone, Copy)]
enum Field {
    Cpu,
    Memory,
    Disk,
}

/// Every pod with a container sample at or after `since_ms`, by pod: its usage now, and
/// its containers' CPU and memory samples from `since_ms` to `end_ms` (what comes off its
/// node's window once it has left, [`headroom_scheduler::view::NodeWindow::without`]).
pub fn pod_usage(store: &Store, since_ms: i64, end_ms: i64) -> Result<PodsInWindow, Error> {
    let mut pods: HashMap<PodKey, PodUsage> = HashMap::new();
    let mut windows: HashMap<PodKey, PodWindow> = HashMap::new();
    for (metric, field) in METRICS {
        store.for_each_active_series(
            &[Matcher::metric(metric)],
            since_ms,
            since_ms,
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
                series.push(samples.iter().map(|x| (x.ts_ms, x.value)).collect());
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
}
