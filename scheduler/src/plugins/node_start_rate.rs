//! NodeStartRate (off by default): at most `maxStarts` placements per node per `window`,
//! against the thundering herd — a burst of builds all landing on the one emptiest node,
//! each pulling images and warming caches at once.
//!
//! Counts the scheduler's own placements (assumed pods), which the usage context keeps per
//! node; the pod that would exceed the rate waits for the next cycle (Unschedulable, moved
//! back by the queue's backoff).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::{
    CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, Registered, Status, WrittenIn,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeStartRate";
/// The reason counted in FailedScheduling messages.
pub const REASON: &str = "node(s) had too many recent pod starts";

/// NodeStartRate's args (`pluginArgs.nodeStartRate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct NodeStartRateArgs {
    /// Placements allowed per node within `window`. Default `3`.
    pub max_starts: usize,
    /// The sliding window. Default `1m`.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for NodeStartRateArgs {
    fn default() -> Self {
        NodeStartRateArgs {
            max_starts: 3,
            window: Duration::from_secs(60),
        }
    }
}

/// The NodeStartRate plugin.
#[derive(Debug)]
pub struct NodeStartRate {
    args: NodeStartRateArgs,
}

struct Since(i64);

impl NodeStartRate {
    /// Creates the plugin; `maxStarts` must be at least 1.
    pub fn new(args: NodeStartRateArgs) -> Result<Self, field::Error> {
        if args.max_starts == 0 {
            return Err(field::Error::out_of_range(
                field::Path::new("maxStarts"),
                0,
                "at least 1",
            ));
        }
        if args.window.is_zero() {
            return Err(field::Error::out_of_range(
                field::Path::new("window"),
                "0s",
                "positive",
            ));
        }
        Ok(NodeStartRate { args })
    }

    /// Registers its extension points (PreFilter, Filter).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for NodeStartRate {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Its window moves with time, which a usage refresh marks.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS
            .with(crate::framework::ClusterEvent::UsageRefreshed)
    }
}

impl PreFilterPlugin for NodeStartRate {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let usage = snapshot.usage();
        if usage.starts.is_empty() {
            return (Status::skip(), None);
        }
        let since = usage.now_ms - self.args.window.as_millis() as i64;
        state.write((Since(since), usage.clone()));
        (Status::success(), None)
    }
}

impl FilterPlugin for NodeStartRate {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let (Since(since), usage) = match state
            .written_by::<(Since, Arc<crate::usage_context::UsageContext>)>(
                NAME,
                WrittenIn::PreFilter,
            ) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let n = usage.starts_since(&node.name, *since);
        if n >= self.args.max_starts {
            let s = Status::unschedulable(REASON);
            if state.explain {
                return s.with_detail(format!(
                    "{n} pod(s) started within the last {} (at most {})",
                    humantime_serde::re::humantime::format_duration(self.args.window),
                    self.args.max_starts
                ));
            }
            return s;
        }
        Status::success()
    }
}

impl super::registry::PluginArgs for NodeStartRateArgs {
    /// `maxStarts` ≥ 1 and a positive `window`: the constructor's checks.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(NodeStartRate::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::key::PodKey;
    use crate::plugins::testutil::*;
    use crate::usage_context::RecentPlacement;
    use serde_json::json;

    #[test]
    fn table() {
        let mut snap = Snapshot::build([node("a", json!({})), node("b", json!({}))], []);
        snap.usage_mut().now_ms = NOW_MS;
        let reg = NodeStartRate::new(NodeStartRateArgs::default())
            .unwrap()
            .register();
        let p = info(pod("p", json!({})));
        assert!(
            filter_all(&reg, &snap, &p)
                .iter()
                .all(|(_, s)| s.code == Code::Skip)
        );
        // Three starts on a within the minute (one of them 61 s ago does not count).
        for (i, ago) in [61_000, 30_000, 20_000, 1_000].iter().enumerate() {
            snap.usage_mut().record_placement(
                None,
                "a",
                RecentPlacement {
                    pod: PodKey::new("default", format!("p{i}")),
                    at_ms: NOW_MS - ago,
                    cpu_cores: 0.0,
                    memory_bytes: 0.0,
                    disk_bytes: 0.0,
                    ..Default::default()
                },
            );
        }
        let got = filter_all(&reg, &snap, &p);
        assert_eq!(got[0].1.code, Code::Unschedulable);
        assert_eq!(
            got[0].1.detail.as_deref(),
            Some("3 pod(s) started within the last 1m (at most 3)")
        );
        assert_eq!(got[1].1.code, Code::Success);
        let loose = NodeStartRate::new(NodeStartRateArgs {
            max_starts: 4,
            ..Default::default()
        })
        .unwrap()
        .register();
        assert_eq!(filter_all(&loose, &snap, &p)[0].1.code, Code::Success);
        assert!(
            NodeStartRate::new(NodeStartRateArgs {
                max_starts: 0,
                ..Default::default()
            })
            .is_err()
        );
        let args: NodeStartRateArgs = serde_norway::from_str("maxStarts: 5\nwindow: 30s").unwrap();
        assert_eq!(args.window, Duration::from_secs(30));
    }
}
