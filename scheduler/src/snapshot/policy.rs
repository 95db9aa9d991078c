//! What preemption reads besides nodes and pods: PodDisruptionBudgets (`policy/v1`) and
//! PriorityClasses (`scheduling.k8s.io/v1`), kept in the snapshot so that the PostFilter
//! stays pure over it.
//!
//! A budget is compiled once when it arrives (its selector) and shared by `Arc`; a snapshot
//! copy copies pointers. Priority classes are informational for the cycle (admission has
//! already written `spec.priority` and `spec.preemptionPolicy` into every pod), and are kept
//! so that `/explain` and the engine can name them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::PodInfo;
use crate::key::PodKey;
use crate::selector::Selector;

/// One PodDisruptionBudget as preemption reads it.
#[derive(Debug, Clone)]
pub struct DisruptionBudget {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.selector`, compiled; `None` when it does not compile (upstream skips such a
    /// budget: `LabelSelectorAsSelector` fails).
    pub selector: Option<Selector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// The keys of `status.disruptedPods`: pods already being evicted under this budget,
    /// which do not count again.
    pub disrupted_pods: HashSet<String>,
}

impl DisruptionBudget {
    /// Reads a budget. Never fails: a selector that does not compile is kept as `None`.
    pub fn new(pdb: &PodDisruptionBudget) -> DisruptionBudget {
        let selector = pdb
            .spec
            .as_ref()
            .and_then(|s| Selector::from_label_selector(s.selector.as_ref(), "spec.selector").ok());
        let status = pdb.status.as_ref();
        DisruptionBudget {
            namespace: pdb
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string()),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector,
            disruptions_allowed: status.map_or(0, |s| s.disruptions_allowed),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Whether evicting `pod` counts against this budget (upstream's
    /// `filterPodsWithPDBViolation`: same namespace, a non-empty selector matching the
    /// pod's labels, and the pod not already in `disruptedPods`).
    pub fn covers(&self, pod: &PodInfo) -> bool {
        if *self.namespace != *pod.namespace || pod.labels().is_empty() {
            return false;
        }
        let Some(sel) = &self.selector else {
            return false;
        };
        if sel.is_everything() || !sel.matches(pod.labels()) {
            return false;
        }
        !self.disrupted_pods.contains(&*pod.name)
    }
}

/// One PriorityClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClassInfo {
    /// `value`.
    pub value: i32,
    /// `preemptionPolicy` (`PreemptLowerPriority` when absent).
    pub preemption_policy: String,
    /// `globalDefault`.
    pub global_default: bool,
}

/// The policy objects of a snapshot.
#[derive(Debug, Clone, Default)]
pub struct PolicyObjects {
    /// Budgets by `namespace/name`.
    pdbs: BTreeMap<String, Arc<DisruptionBudget>>,
    /// Priority classes by name.
    priority_classes: BTreeMap<String, PriorityClassInfo>,
    /// Pods nominated to a node by preemption and not placed yet (upstream's nominator),
    /// by node name.
    nominated: BTreeMap<String, Vec<Arc<PodInfo>>>,
    /// The node each nominated pod is on.
    nominated_pods: BTreeMap<PodKey, String>,
}

/// A budget's `namespace/name` (the order budgets are listed in).
fn pdb_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl PolicyObjects {
    /// Adds or replaces a budget.
    pub fn upsert_pdb(&mut self, pdb: &PodDisruptionBudget) {
        let b = DisruptionBudget::new(pdb);
        self.pdbs
            .insert(pdb_key(&b.namespace, &b.name), Arc::new(b));
    }

    /// Removes a budget; true when it was there.
    pub fn remove_pdb(&mut self, namespace: &str, name: &str) -> bool {
        self.pdbs.remove(&pdb_key(namespace, name)).is_some()
    }

    /// Replaces every budget.
    pub fn replace_pdbs(&mut self, pdbs: &[PodDisruptionBudget]) {
        self.pdbs.clear();
        for p in pdbs {
            self.upsert_pdb(p);
        }
    }

    /// Every budget, by `namespace/name` (upstream lists them from the informer; the order
    /// only matters for which budget's count goes negative first, not for the verdict).
    pub fn pdbs(&self) -> impl Iterator<Item = &Arc<DisruptionBudget>> {
        self.pdbs.values()
    }

    /// Adds or replaces a priority class.
    pub fn upsert_priority_class(&mut self, pc: &PriorityClass) {
        let name = pc.metadata.name.clone().unwrap_or_default();
        self.priority_classes.insert(
            name,
            PriorityClassInfo {
                value: pc.value,
                preemption_policy: pc
                    .preemption_policy
                    .clone()
                    .unwrap_or_else(|| "PreemptLowerPriority".to_string()),
                global_default: pc.global_default.unwrap_or(false),
            },
        );
    }

    /// Removes a priority class; true when it was there.
    pub fn remove_priority_class(&mut self, name: &str) -> bool {
        self.priority_classes.remove(name).is_some()
    }

    /// Replaces every priority class.
    pub fn replace_priority_classes(&mut self, pcs: &[PriorityClass]) {
        self.priority_classes.clear();
        for p in pcs {
            self.upsert_priority_class(p);
        }
    }

    /// A priority class by name.
    pub fn priority_class(&self, name: &str) -> Option<&PriorityClassInfo> {
        self.priority_classes.get(name)
    }

    /// Records that `pod` is nominated to `node` (replacing an earlier nomination). Pods
    /// of lower priority nominated to the same node lose their nomination (upstream's
    /// executor clears their `nominatedNodeName`): they are returned.
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) -> Vec<Arc<PodInfo>> {
        let k = pod.key();
        self.unnominate(&k);
        let lower: Vec<Arc<PodInfo>> = self
            .nominated
            .get(node)
            .map(|pods| {
                pods.iter()
                    .filter(|p| p.priority < pod.priority)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for p in &lower {
            self.unnominate(&p.key());
        }
        self.nominated_pods.insert(k, node.to_string());
        self.nominated
            .entry(node.to_string())
            .or_default()
            .push(pod);
        lower
    }

    /// Forgets a pod's nomination (placed, deleted); true when it had one.
    pub fn unnominate(&mut self, pod: &PodKey) -> bool {
        let Some(node) = self.nominated_pods.remove(pod) else {
            return false;
        };
        if let Some(pods) = self.nominated.get_mut(&node) {
            pods.retain(|p| !p.is(pod));
            if pods.is_empty() {
                self.nominated.remove(&node);
            }
        }
        true
    }

    /// Whether any pod is nominated anywhere (the cycle's check before doing any work).
    pub fn has_nominations(&self) -> bool {
        !self.nominated_pods.is_empty()
    }

    /// Whether this pod has a nomination.
    pub fn is_nominated(&self, pod: &PodKey) -> bool {
        self.nominated_pods.contains_key(pod)
    }

    /// The pods nominated to `node` that count against `pod` (upstream's
    /// `addGENominatedPods`): priority at least the pod's, the pod itself excluded.
    pub fn nominated_against(&self, node: &str, pod: &PodInfo) -> Vec<Arc<PodInfo>> {
        let key = pod.key();
        self.nominated
            .get(node)
            .map(|pods| {
                pods.iter()
                    .filter(|p| p.priority >= pod.priority && !p.is(&key))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(v: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(v).unwrap()
    }

    fn pod(ns: &str, name: &str, labels: serde_json::Value) -> PodInfo {
        PodInfo::new(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": name, "labels": labels},
                "spec": {"containers": []}
            }))
            .unwrap(),
        ))
    }

    #[test]
    fn covers_table() {
        let b = DisruptionBudget::new(&pdb(json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1,
                       "expectedPods": 2, "disruptedPods": {"web-gone": "2024-01-01T00:00:00Z"}}
        })));
        assert_eq!(b.disruptions_allowed, 1);
        let cases = [
            (pod("default", "web-1", json!({"app": "web"})), true),
            (pod("other", "web-1", json!({"app": "web"})), false),
            (pod("default", "db-1", json!({"app": "db"})), false),
            (pod("default", "bare", json!({})), false),
            (pod("default", "web-gone", json!({"app": "web"})), false),
        ];
        for (p, want) in cases {
            assert_eq!(b.covers(&p), want, "{}", p.name);
        }
        // An empty selector selects nothing for preemption (upstream skips `Empty()`).
        let empty = DisruptionBudget::new(&pdb(json!({
            "metadata": {"namespace": "default", "name": "all"},
            "spec": {"selector": {}}
        })));
        assert!(!empty.covers(&pod("default", "web-1", json!({"app": "web"}))));
        let none = DisruptionBudget::new(&pdb(json!({
            "metadata": {"namespace": "default", "name": "none"}, "spec": {}
        })));
        assert!(!none.covers(&pod("default", "web-1", json!({"app": "web"}))));
    }

    #[test]
    fn nominations_count_for_lower_or_equal_priority() {
        let mut p = PolicyObjects::default();
        let with_priority = |name: &str, prio: i32| {
            let mut i = pod("default", name, json!({}));
            i.priority = prio;
            Arc::new(i)
        };
        assert!(!p.has_nominations());
        p.nominate(with_priority("big", 1000), "n1");
        assert!(p.has_nominations() && p.is_nominated(&PodKey::new("default", "big")));
        let names = |v: Vec<Arc<PodInfo>>| v.iter().map(|x| x.name.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(p.nominated_against("n1", &with_priority("low", 10))),
            ["big"]
        );
        assert_eq!(
            names(p.nominated_against("n1", &with_priority("same", 1000))),
            ["big"]
        );
        assert!(
            p.nominated_against("n1", &with_priority("higher", 1001))
                .is_empty()
        );
        assert!(
            p.nominated_against("n1", &with_priority("big", 1000))
                .is_empty()
        );
        assert!(
            p.nominated_against("n2", &with_priority("low", 10))
                .is_empty()
        );
        // A higher-priority nomination to the same node clears the lower one.
        let cleared = p.nominate(with_priority("bigger", 5000), "n1");
        assert_eq!(names(cleared), ["big"]);
        assert!(!p.is_nominated(&PodKey::new("default", "big")));
        assert!(p.unnominate(&PodKey::new("default", "bigger")));
        // A new nomination moves it.
        p.nominate(with_priority("big", 1000), "n1");
        p.nominate(with_priority("big", 1000), "n2");
        assert!(
            p.nominated_against("n1", &with_priority("low", 10))
                .is_empty()
        );
        assert!(p.unnominate(&PodKey::new("default", "big")));
        assert!(!p.unnominate(&PodKey::new("default", "big")));
        assert!(!p.has_nominations());
    }

    #[test]
    fn upsert_remove_replace() {
        let mut p = PolicyObjects::default();
        let b = pdb(json!({"metadata": {"namespace": "a", "name": "x"}, "spec": {}}));
        p.upsert_pdb(&b);
        p.upsert_pdb(&b);
        assert_eq!(p.pdbs().count(), 1);
        assert!(p.remove_pdb("a", "x"));
        assert!(!p.remove_pdb("a", "x"));
        p.replace_pdbs(&[b]);
        assert_eq!(p.pdbs().count(), 1);
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 100000,
                "preemptionPolicy": "Never"}))
            .unwrap();
        p.upsert_priority_class(&pc);
        assert_eq!(p.priority_class("high").map(|c| c.value), Some(100000));
        assert_eq!(
            p.priority_class("high")
                .map(|c| c.preemption_policy.as_str()),
            Some("Never")
        );
        assert!(p.remove_priority_class("high"));
    }
}
