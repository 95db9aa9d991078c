//! SchedulingGates: a pod with `spec.schedulingGates` is not scheduled until they are removed.

use std::sync::Arc;

use crate::framework::{Plugin, PreEnqueuePlugin, Registered, Status};
use crate::snapshot::PodInfo;

/// Plugin name.
pub const NAME: &str = "SchedulingGates";

/// The SchedulingGates plugin (no args).
#[derive(Debug, Default)]
pub struct SchedulingGates;

impl SchedulingGates {
    /// Creates the plugin.
    pub fn new() -> Self {
        SchedulingGates
    }

    /// Registers its extension points (PreEnqueue).
    pub fn register(self) -> Registered {
        Registered {
            pre_enqueue: Some(Arc::new(self)),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates: Vec<&str> = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|g| g.iter().map(|g| g.name.as_str()).collect())
            .unwrap_or_default();
        if gates.is_empty() {
            Status::success()
        } else {
            Status::unresolvable(format!(
                "waiting for scheduling gates: [{}]",
                gates.join(" ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    #[test]
    fn gates() {
        let pl = SchedulingGates::new();
        assert!(pl.pre_enqueue(&info(pod("p", json!({})))).is_success());
        let gated = info(pod(
            "p",
            json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}}),
        ));
        let s = pl.pre_enqueue(&gated);
        assert!(s.is_rejected());
        assert_eq!(s.message(), "waiting for scheduling gates: [a b]");
    }
}
