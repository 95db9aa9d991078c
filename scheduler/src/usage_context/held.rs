//! What the peer schedulers' own metric pipelines have delivered so far ([`Held`]): each
//! peer reads node usage as its upstream pipeline hands it over — Koordinator's koordlet
//! reports a NodeMetric every minute, Trimaran's collector fetches load-watcher's figures
//! every 30 s, crane's annotator rewrites each node annotation once per period — not the
//! live view headroom's own plugins read.
//!
//! A plugin declares its pipelines ([`MetricPath`]: a period and whether every node
//! refreshes at once or each at its own phase, through
//! [`Plugin::metric_paths`](crate::framework::Plugin::metric_paths)); with each new usage
//! view the scheduler advances what is held ([`Held::advance`]): a node's entry is
//! replaced by the view's figures once a refresh instant of its path has passed since the
//! entry was taken, and kept otherwise. The view is published every
//! `analytics.refreshInterval`, so a path's figures are as old as its period plus up to one
//! refresh interval; a path of period 0 reads the live view.
//!
//! Why per node and not whole views: the koordlets of a cluster report independently, so
//! at any instant some nodes' figures are a second old and others a minute; holding whole
//! views would refresh them all at once (and keep a whole view alive per path).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::view::{NodeUsage, NodeWindows, UsageView};

/// An entry kept this long after its node left the view is dropped (a departed node's
/// figures must not be kept forever; every peer treats figures this old as expired).
pub const DEPARTED_MAX_AGE_MS: i64 = 24 * 3_600_000;

/// When the nodes of a [`MetricPath`] refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Every node at the same instants, multiples of the period (one fetch or annotation
    /// pass covers every node: Trimaran's collector, crane's annotator).
    Aligned,
    /// Each node at its own instants, offset by a phase drawn from its name (an agent per
    /// node reporting on its own timer: Koordinator's koordlet).
    PerNode,
}

/// One peer pipeline: how often node figures reach the plugin, and at which instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricPath {
    /// The refresh period, ms (0: the live view, nothing held).
    pub period_ms: i64,
    /// Which instants.
    pub phase: Phase,
}

impl MetricPath {
    /// The live view: no lag beyond headroom's own refresh.
    pub const LIVE: MetricPath = MetricPath {
        period_ms: 0,
        phase: Phase::Aligned,
    };

    /// A path refreshing every `period` (saturating to i64 milliseconds).
    pub fn every(period: std::time::Duration, phase: Phase) -> MetricPath {
        MetricPath {
            period_ms: i64::try_from(period.as_millis()).unwrap_or(i64::MAX),
            phase,
        }
    }

    /// The latest refresh instant of `node` at or before `t_ms`.
    pub fn last_refresh(&self, node: &str, t_ms: i64) -> i64 {
        if self.period_ms <= 0 {
            return t_ms;
        }
        let phase = match self.phase {
            Phase::Aligned => 0,
            // FNV-1a of the name: stable across runs and platforms (a node keeps its phase
            // across restarts and simulations are reproducible).
            Phase::PerNode => {
                let h = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                (h % self.period_ms as u64) as i64
            }
        };
        t_ms - (t_ms - phase).rem_euclid(self.period_ms)
    }
}

/// A node's figures as a peer's pipeline delivered them.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldNode {
    /// When the pipeline took them (the view's `generated_ms`).
    pub got_ms: i64,
    /// The node's usage then (its `newest_ms` is the newest sample they include).
    pub usage: NodeUsage,
    /// Its windows then, if the view had them.
    pub windows: Option<NodeWindows>,
}

/// What every declared [`MetricPath`] holds, by node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    paths: BTreeMap<MetricPath, HashMap<String, Arc<HeldNode>>>,
}

impl Held {
    /// The figures `path` holds for `node`.
    pub fn node(&self, path: MetricPath, node: &str) -> Option<&HeldNode> {
        self.paths.get(&path)?.get(node).map(|h| &**h)
    }

    /// The oldest `newest_ms` any path holds for `node` (how far back placements may still
    /// be missing from some peer's figures).
    pub fn oldest_newest(&self, node: &str) -> Option<i64> {
        self.paths
            .values()
            .filter_map(|m| m.get(node))
            .map(|h| h.usage.newest_ms)
            .min()
    }

    /// What is held once `view` is published, for `paths` (others are dropped), and
    /// whether any node's figures changed (the peers' own refresh event).
    pub fn advance(&self, view: &UsageView, paths: &[MetricPath]) -> (Held, bool) {
        let t = view.generated_ms;
        let mut changed = false;
        let mut out = Held::default();
        for &path in paths.iter().filter(|p| p.period_ms > 0) {
            if out.paths.contains_key(&path) {
                continue;
            }
            let old = self.paths.get(&path);
            let mut held: HashMap<String, Arc<HeldNode>> = HashMap::with_capacity(view.nodes.len());
            for (name, usage) in &view.nodes {
                let kept = old.and_then(|m| m.get(name));
                match kept {
                    Some(h) if h.got_ms >= path.last_refresh(name, t) => {
                        held.insert(name.clone(), h.clone());
                    }
                    _ => {
                        changed = true;
                        let node = HeldNode {
                            got_ms: t,
                            usage: usage.clone(),
                            windows: view.windows.get(name).cloned(),
                        };
                        held.insert(name.clone(), Arc::new(node));
                    }
                }
            }
            // A node the view has no figures for keeps its last ones (the peer's own
            // expiry judges them), until they are a day old.
            for (name, h) in old.into_iter().flatten() {
                if !view.nodes.contains_key(name) && t - h.got_ms <= DEPARTED_MAX_AGE_MS {
                    held.insert(name.clone(), h.clone());
                }
            }
            out.paths.insert(path, held);
        }
        (out, changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Stat;

    fn view(t: i64, nodes: &[(&str, f64)]) -> UsageView {
        UsageView {
            generated_ms: t,
            nodes: nodes
                .iter()
                .map(|(n, cpu)| {
                    let u = NodeUsage {
                        node: n.to_string(),
                        cpu_cores: Stat {
                            current: *cpu,
                            windowed: *cpu,
                        },
                        memory_working_set_bytes: Stat::default(),
                        fs_available_bytes: None,
                        fs_capacity_bytes: None,
                        newest_ms: t,
                        window: None,
                    };
                    (n.to_string(), u)
                })
                .collect(),
            ..UsageView::default()
        }
    }

    fn cpu(h: &Held, p: MetricPath, n: &str) -> Option<f64> {
        h.node(p, n).map(|h| h.usage.cpu_cores.current)
    }

    #[test]
    fn an_aligned_path_refreshes_every_node_once_per_period() {
        let p = MetricPath::every(std::time::Duration::from_secs(60), Phase::Aligned);
        let (h, changed) = Held::default().advance(&view(0, &[("a", 1.0), ("b", 1.0)]), &[p]);
        assert!(changed);
        // 15 s views: nothing moves until the minute passes.
        let mut h = h;
        for (i, t) in [15_000, 30_000, 45_000].into_iter().enumerate() {
            let (next, changed) = h.advance(&view(t, &[("a", 2.0 + i as f64), ("b", 2.0)]), &[p]);
            assert!(!changed, "at {t}");
            h = next;
        }
        assert_eq!(cpu(&h, p, "a"), Some(1.0));
        let (h, changed) = h.advance(&view(60_000, &[("a", 9.0), ("b", 8.0)]), &[p]);
        assert!(changed);
        assert_eq!((cpu(&h, p, "a"), cpu(&h, p, "b")), (Some(9.0), Some(8.0)));
        assert_eq!(h.node(p, "a").unwrap().got_ms, 60_000);
        // The live path holds nothing; an undeclared path is dropped.
        assert_eq!(cpu(&h, MetricPath::LIVE, "a"), None);
        let (h, _) = h.advance(&view(75_000, &[("a", 1.0)]), &[]);
        assert_eq!(h, Held::default());
    }

    #[test]
    fn per_node_phases_spread_the_refreshes_over_the_period() {
        let p = MetricPath::every(std::time::Duration::from_secs(60), Phase::PerNode);
        let names: Vec<String> = (0..200).map(|i| format!("node-{i}")).collect();
        let nodes = |t: i64, v: f64| {
            let list: Vec<(&str, f64)> = names.iter().map(|n| (n.as_str(), v)).collect();
            view(t, &list)
        };
        let (mut h, _) = Held::default().advance(&nodes(0, 0.0), &[p]);
        let mut refreshed_per_step = Vec::new();
        for step in 1..=8 {
            let t = step * 15_000;
            let (next, _) = h.advance(&nodes(t, step as f64), &[p]);
            let n = names
                .iter()
                .filter(|n| cpu(&next, p, n) == Some(step as f64))
                .count();
            refreshed_per_step.push(n);
            h = next;
        }
        // Every node refreshes once a minute, each at its own time: about a quarter of the
        // nodes per 15 s view, never all at once.
        for (i, n) in refreshed_per_step.iter().enumerate() {
            assert!((20..=80).contains(n), "step {i}: {n} of 200 refreshed");
        }
        for n in &names {
            let got = h.node(p, n).unwrap().got_ms;
            assert!(got > 120_000 - 60_000, "{n} last refreshed at {got}");
            assert_eq!(p.last_refresh(n, 120_000), p.last_refresh(n, got));
        }
    }

    #[test]
    fn a_node_without_figures_keeps_its_last_ones_for_a_day() {
        let p = MetricPath::every(std::time::Duration::from_secs(60), Phase::Aligned);
        let (h, _) = Held::default().advance(&view(0, &[("a", 1.0), ("gone", 3.0)]), &[p]);
        let (h, _) = h.advance(&view(120_000, &[("a", 2.0)]), &[p]);
        assert_eq!(cpu(&h, p, "gone"), Some(3.0));
        assert_eq!(h.oldest_newest("gone"), Some(0));
        let (h, _) = h.advance(&view(DEPARTED_MAX_AGE_MS + 60_000, &[("a", 2.0)]), &[p]);
        assert_eq!(cpu(&h, p, "gone"), None);
    }
}
