//! The peers tuned (issue #74): each peer's plugin over a small grid of the settings its
//! own documentation tells operators to change, the best setting chosen on one family by
//! the peers' own goal, then judged as `…@tuned` on families that did not choose it.
//!
//! - **Grids** ([`grid`]): crane's `maxLimitPecent` pairs (5-minute mean / 1-hour maximum,
//!   CPU and memory); Koordinator's `usageThresholds` (CPU × memory, at
//!   `estimatedScalingFactors` 85 / 70) and the example of its user manual
//!   (`docs/user-manuals/load-aware-scheduling.md`: 75 / 85 with factors 80 / 70, p99
//!   aggregated 65 / 75); TargetLoadPacking's `targetUtilization` (its README: "10 less than
//!   what you desire"); LoadVariationRiskBalancing's `safeVarianceMargin` ×
//!   `safeVarianceSensitivity`. Each setting is args over the peer's policy (the args its
//!   users install it with, [`Policy::config`]).
//! - **The goal** ([`choose`]): the peers' own — fewest node-hours above 90 % real memory
//!   (net of the hours one pod alone keeps a node hot) on the family's mean, among the
//!   settings that leave no more pods pending after the drain than the request baseline
//!   (ties: fewer OOM kills, then the grid's order, which starts with the defaults). Not
//!   headroom's goal: warm caches do not count.
//! - **The file** ([`TunedPeers`], `sweep --tune-peers FILE` writes it, `--tuned FILE`
//!   reads it): per peer policy, the chosen `pluginArgs`, and the family that chose them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Policy;

/// `pluginArgs` entries: args key → args.
pub type PluginArgs = BTreeMap<String, Value>;

/// The tuned peers' args, as `sweep --tune-peers` writes them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TunedPeers {
    /// The family (and farms, seeds) the settings were chosen on.
    #[serde(default)]
    pub chosen_on: String,
    /// Per peer policy (`crane`, `koordinator`, `trimaran-tlp`, `trimaran-lvrb`), the
    /// grid setting chosen and its `pluginArgs`.
    #[serde(default)]
    pub peers: BTreeMap<String, Setting>,
}

/// One grid setting of a peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Setting {
    /// A short name (`cpu75-mem85`).
    pub label: String,
    /// `pluginArgs` over the peer policy's own.
    pub plugin_args: PluginArgs,
}

/// Errors reading a tuned-peers file.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The file could not be read.
    #[error("{path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A peer the file names is not a peer policy.
    #[error("{path}: peers.{name}: not one of trimaran-tlp, trimaran-lvrb, koordinator, crane")]
    UnknownPeer {
        /// The file.
        path: String,
        /// The name.
        name: String,
    },
}

impl TunedPeers {
    /// Reads a file `sweep --tune-peers` wrote.
    pub fn load(path: &Path) -> Result<TunedPeers, TuneError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TuneError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let t: TunedPeers = serde_norway::from_str(&text).map_err(|e| TuneError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        for name in t.peers.keys() {
            let peer = Policy::ALL
                .iter()
                .any(|p| p.is_peer() && p.as_str() == name.as_str());
            if !peer {
                return Err(TuneError::UnknownPeer {
                    path: shown,
                    name: name.clone(),
                });
            }
        }
        Ok(t)
    }

    /// The args a tuned policy runs with (`None` for any other policy, or a peer the file
    /// does not tune).
    pub fn args(&self, policy: Policy) -> Option<&PluginArgs> {
        if !policy.is_tuned() {
            return None;
        }
        self.peers
            .get(policy.untuned().as_str())
            .map(|s| &s.plugin_args)
    }
}

fn setting(label: impl Into<String>, key: &str, args: Value) -> Setting {
    Setting {
        label: label.into(),
        plugin_args: BTreeMap::from([(key.to_string(), args)]),
    }
}

/// LoadAwareScheduling's args as koordinator's Helm chart v1.8.0 sets them
/// (`koord-scheduler-config.yaml`), with these `usageThresholds`.
pub fn koordinator_helm_args(cpu: i64, memory: i64) -> Value {
    json!({
        "filterExpiredNodeMetrics": false,
        "nodeMetricExpirationSeconds": 300,
        "usageThresholds": {"cpu": cpu, "memory": memory},
        "estimatedScalingFactors": {"cpu": 85, "memory": 70},
    })
}

/// The grid a peer is tuned over, its defaults first (empty for headroom and requests).
pub fn grid(peer: Policy) -> Vec<Setting> {
    match peer.untuned() {
        Policy::Crane => [
            (0.65, 0.75),
            (0.75, 0.85),
            (0.85, 0.9),
            (0.9, 0.95),
            (0.95, 0.98),
        ]
        .iter()
        .map(|&(avg, max)| {
            // Both resources: crane's policy sets CPU and memory alike.
            let pred = |name: &str, l: f64| json!({"name": name, "maxLimitPecent": l});
            setting(
                format!("avg{:.0}-max{:.0}", avg * 100.0, max * 100.0),
                "dynamic",
                json!({"predicate": [
                    pred("cpu_usage_avg_5m", avg), pred("cpu_usage_max_avg_1h", max),
                    pred("mem_usage_avg_5m", avg), pred("mem_usage_max_avg_1h", max),
                ]}),
            )
        })
        .collect(),
        Policy::Koordinator => {
            let mut g = Vec::new();
            for cpu in [65, 75, 85, 95] {
                for mem in [95, 85, 75] {
                    g.push(setting(
                        format!("cpu{cpu}-mem{mem}"),
                        "loadAwareScheduling",
                        koordinator_helm_args(cpu, mem),
                    ));
                }
            }
            g.push(setting(
                "manual-p99",
                "loadAwareScheduling",
                json!({
                    "filterExpiredNodeMetrics": true,
                    "nodeMetricExpirationSeconds": 300,
                    "usageThresholds": {"cpu": 75, "memory": 85},
                    "estimatedScalingFactors": {"cpu": 80, "memory": 70},
                    "aggregated": {"usageThresholds": {"cpu": 65, "memory": 75},
                        "usageAggregationType": "p99", "scoreAggregationType": "p99"},
                }),
            ));
            g
        }
        Policy::TrimaranTlp => [40, 50, 60, 70, 80]
            .iter()
            .map(|t| {
                setting(
                    format!("target{t}"),
                    "targetLoadPacking",
                    json!({"defaultRequestsMultiplier": "1", "targetUtilization": t}),
                )
            })
            .collect(),
        Policy::TrimaranLvrb => {
            let mut g = Vec::new();
            for sensitivity in [2.0, 1.0] {
                for margin in [1.0, 0.5, 2.0, 4.0] {
                    g.push(setting(
                        format!("margin{margin}-sensitivity{sensitivity}"),
                        "loadVariationRiskBalancing",
                        json!({"safeVarianceMargin": margin,
                               "safeVarianceSensitivity": sensitivity}),
                    ));
                }
            }
            g
        }
        _ => Vec::new(),
    }
}

/// One grid setting's family means, as the goal reads them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scored {
    /// The setting.
    pub label: String,
    /// Node-hours above 90 % real memory, net of the one-pod hours.
    pub hot_hours_net: f64,
    /// Pods still pending after the drain.
    pub pending_after_drain: f64,
    /// OOM kills.
    pub oom_kills: f64,
}

/// The peers' goal: the setting with the fewest net hot node-hours among those that leave
/// no more pending than `baseline_pending` (ties: fewer OOM kills, then the earlier);
/// `None` when every setting leaves more pending.
pub fn choose(scored: &[Scored], baseline_pending: f64) -> Option<usize> {
    let eligible = scored
        .iter()
        .enumerate()
        .filter(|(_, s)| s.pending_after_drain <= baseline_pending + 1e-9);
    eligible
        .min_by(|(ia, a), (ib, b)| {
            a.hot_hours_net
                .total_cmp(&b.hot_hours_net)
                .then(a.oom_kills.total_cmp(&b.oom_kills))
                .then(ia.cmp(ib))
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn scored(label: &str, hot: f64, pending: f64, oom: f64) -> Scored {
        Scored {
            label: label.into(),
            hot_hours_net: hot,
            pending_after_drain: pending,
            oom_kills: oom,
        }
    }

    #[test]
    fn the_goal_is_fewest_hot_hours_without_more_pending_than_the_baseline() {
        let s = [
            scored("defaults", 1.0, 0.0, 5.0),
            scored("strict", 0.2, 3.0, 1.0),
            scored("loose", 0.5, 0.0, 4.0),
            scored("loose-too", 0.5, 0.0, 2.0),
        ];
        // "strict" has the fewest hot hours but leaves pods pending.
        assert_eq!(choose(&s, 0.0), Some(3));
        assert_eq!(choose(&s, 3.0), Some(1));
        assert_eq!(choose(&[scored("x", 0.1, 2.0, 0.0)], 1.0), None);
    }

    /// Every setting of every grid builds its plugin (the args decode and validate), and
    /// each grid starts with the args the peer's policy runs by default.
    #[test]
    fn every_grid_setting_is_valid_args() {
        let base = Config::default();
        for peer in Policy::ALL.into_iter().filter(|p| p.is_peer()) {
            let g = grid(peer);
            assert!(g.len() >= 4, "{peer:?}");
            let tuned = peer.tuned().unwrap();
            for s in &g {
                let t = TunedPeers {
                    chosen_on: "test".into(),
                    peers: BTreeMap::from([(peer.as_str().to_string(), s.clone())]),
                };
                let c = tuned.config_tuned(&base, &t);
                headroom_scheduler::plugins::build_framework(&c.profiles[0])
                    .unwrap_or_else(|e| panic!("{peer:?} {}: {e}", s.label));
            }
            let default_args = peer.config(&base).profiles[0].plugin_args.clone();
            let first = TunedPeers {
                chosen_on: String::new(),
                peers: BTreeMap::from([(peer.as_str().to_string(), g[0].clone())]),
            };
            let first = tuned.config_tuned(&base, &first).profiles[0]
                .plugin_args
                .clone();
            for (k, v) in &default_args {
                // The first setting is the policy's own args (crane: its defaults).
                if let Some(f) = first.get(k)
                    && peer != Policy::Crane
                {
                    assert_eq!(f, v, "{peer:?}");
                }
            }
        }
        assert!(grid(Policy::Headroom).is_empty());
    }

    #[test]
    fn the_file_names_only_peers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.yaml");
        std::fs::write(
            &p,
            "chosenOn: ci-farms\npeers:\n  crane: {label: x, pluginArgs: {dynamic: {}}}\n",
        )
        .unwrap();
        let t = TunedPeers::load(&p).unwrap();
        assert!(t.args(Policy::CraneTuned).is_some());
        assert!(t.args(Policy::Crane).is_none());
        assert!(t.args(Policy::KoordinatorTuned).is_none());
        std::fs::write(&p, "peers:\n  headroom: {label: x, pluginArgs: {}}\n").unwrap();
        let e = TunedPeers::load(&p).unwrap_err().to_string();
        assert!(e.contains("peers.headroom: not one of"), "{e}");
        std::fs::write(&p, "peers: {crane: {label: x}}\n").unwrap();
        assert!(TunedPeers::load(&p).is_err());
    }
}
