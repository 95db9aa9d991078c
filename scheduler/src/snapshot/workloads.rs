//! The workload objects PodTopologySpread's default constraints need: Services,
//! ReplicationControllers, ReplicaSets and StatefulSets, reduced to their selectors, and
//! upstream's `helper.DefaultSelector` over them.
//!
//! Default constraints (`pluginArgs.podTopologySpread.defaultConstraints`, or the `System`
//! ones) apply to a pod without constraints of its own, with the selector of the workloads
//! the pod belongs to: the merged `spec.selector` of every Service in its namespace that
//! selects it, then that of its controlling owner when that is a `v1`
//! ReplicationController, an `apps/v1` ReplicaSet or an `apps/v1` StatefulSet found in the
//! pod's namespace. The snapshot holds them behind an `Arc` (copied on the first update
//! after a cycle shared the snapshot), fed by `place --cluster` files and, under `serve`,
//! by list/watch (`kube::reflect` in the `headroom` crate).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::selector::{Labels, Requirement, Selector};
use crate::snapshot::PodInfo;

/// The workload kinds, as the API names them (`as usize` is the position in
/// [`WorkloadKind::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// `v1` Service.
    Service,
    /// `v1` ReplicationController.
    ReplicationController,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
}

impl WorkloadKind {
    /// Every kind.
    pub const ALL: [WorkloadKind; 4] = [
        WorkloadKind::Service,
        WorkloadKind::ReplicationController,
        WorkloadKind::ReplicaSet,
        WorkloadKind::StatefulSet,
    ];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Service => "Service",
            WorkloadKind::ReplicationController => "ReplicationController",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }

    /// The controller kind an owner reference names (`apiVersion`, `kind`), as upstream's
    /// `DefaultSelector` matches it: exactly `v1` ReplicationController, `apps/v1`
    /// ReplicaSet or StatefulSet.
    fn of_owner(api_version: &str, kind: &str) -> Option<WorkloadKind> {
        match (api_version, kind) {
            ("v1", "ReplicationController") => Some(WorkloadKind::ReplicationController),
            ("apps/v1", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
            ("apps/v1", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            _ => None,
        }
    }
}

/// What a controller contributes to a default selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Contribution {
    /// A ReplicationController's `spec.selector` map, merged into the Services' labels.
    Set(Labels),
    /// A ReplicaSet's or StatefulSet's compiled `spec.selector`, whose requirements are
    /// added; `None` when it is missing or invalid (upstream adds nothing then).
    Requirements(Option<Vec<Requirement>>),
}

/// One workload object, reduced to what default selectors read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Namespace (`default` when the object names none).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// A Service's `spec.selector` (`None`: a Service without one selects nothing).
    service_selector: Option<Labels>,
    /// A controller's contribution.
    controller: Option<Contribution>,
}

fn meta_key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string()),
        meta.name.clone().unwrap_or_default(),
    )
}

fn requirements(sel: Option<&LabelSelector>) -> Option<Vec<Requirement>> {
    // `LabelSelectorAsSelector`: nil selects nothing (no requirements to add), an invalid
    // one is skipped; `{}` selects everything (nothing to add either).
    let s = Selector::from_label_selector(sel, "spec.selector").ok()?;
    (!s.nothing).then_some(s.requirements)
}

impl Workload {
    /// A Service.
    pub fn service(s: &Service) -> Workload {
        let (namespace, name) = meta_key(&s.metadata);
        Workload {
            kind: WorkloadKind::Service,
            namespace,
            name,
            service_selector: s.spec.as_ref().and_then(|sp| sp.selector.clone()),
            controller: None,
        }
    }

    /// A ReplicationController.
    pub fn replication_controller(rc: &ReplicationController) -> Workload {
        let (namespace, name) = meta_key(&rc.metadata);
        let set = rc
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        Workload {
            kind: WorkloadKind::ReplicationController,
            namespace,
            name,
            service_selector: None,
            controller: Some(Contribution::Set(set)),
        }
    }

    /// A ReplicaSet.
    pub fn replica_set(rs: &ReplicaSet) -> Workload {
        Workload::selecting(
            WorkloadKind::ReplicaSet,
            &rs.metadata,
            rs.spec.as_ref().map(|s| &s.selector),
        )
    }

    /// A StatefulSet.
    pub fn stateful_set(ss: &StatefulSet) -> Workload {
        Workload::selecting(
            WorkloadKind::StatefulSet,
            &ss.metadata,
            ss.spec.as_ref().map(|s| &s.selector),
        )
    }

    /// A controller whose `spec.selector` is a `LabelSelector` (ReplicaSet, StatefulSet).
    fn selecting(kind: WorkloadKind, meta: &ObjectMeta, sel: Option<&LabelSelector>) -> Workload {
        let (namespace, name) = meta_key(meta);
        Workload {
            kind,
            namespace,
            name,
            service_selector: None,
            controller: Some(Contribution::Requirements(requirements(sel))),
        }
    }
}

/// The workloads by namespace, kind and name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workloads {
    by_namespace: HashMap<String, BTreeMap<(WorkloadKind, String), Workload>>,
}

impl Workloads {
    /// Adds or replaces a workload.
    pub fn upsert(&mut self, w: Workload) {
        self.by_namespace
            .entry(w.namespace.clone())
            .or_default()
            .insert((w.kind, w.name.clone()), w);
    }

    /// Whether exactly this workload is already known (a ReplicaSet's status updates change
    /// nothing here; the feed skips them).
    pub fn contains(&self, w: &Workload) -> bool {
        self.by_namespace
            .get(&w.namespace)
            .and_then(|m| m.get(&(w.kind, w.name.clone())))
            == Some(w)
    }

    /// Removes a workload.
    pub fn delete(&mut self, kind: WorkloadKind, namespace: &str, name: &str) {
        if let Some(m) = self.by_namespace.get_mut(namespace) {
            m.remove(&(kind, name.to_string()));
            if m.is_empty() {
                self.by_namespace.remove(namespace);
            }
        }
    }

    /// Replaces every workload of `kind` by `list` (a complete list).
    pub fn replace(&mut self, kind: WorkloadKind, list: impl IntoIterator<Item = Workload>) {
        for m in self.by_namespace.values_mut() {
            m.retain(|(k, _), _| *k != kind);
        }
        self.by_namespace.retain(|_, m| !m.is_empty());
        for w in list {
            self.upsert(w);
        }
    }

    /// Number of workloads of `kind`.
    pub fn count(&self, kind: WorkloadKind) -> usize {
        self.by_namespace
            .values()
            .map(|m| m.keys().filter(|(k, _)| *k == kind).count())
            .sum()
    }

    /// Upstream's `helper.DefaultSelector`: the Services selecting the pod, merged, plus
    /// its controlling ReplicationController's selector (merged) or ReplicaSet's /
    /// StatefulSet's requirements (added). Empty (no requirements) when nothing applies.
    pub fn default_selector(&self, pod: &PodInfo) -> Selector {
        let Some(objects) = self.by_namespace.get(&*pod.namespace) else {
            return Selector::everything();
        };
        let labels = pod.labels();
        let mut set = Labels::new();
        for w in objects.values() {
            // A Service without a selector selects nothing (not everything).
            if let Some(sel) = &w.service_selector
                && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
            {
                set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let owner = pod
            .pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let mut added: Vec<Requirement> = Vec::new();
        if let Some(o) = owner
            && let Some(kind) = WorkloadKind::of_owner(&o.api_version, &o.kind)
            && let Some(w) = objects.get(&(kind, o.name.clone()))
        {
            match &w.controller {
                Some(Contribution::Set(s)) => {
                    set.extend(s.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                Some(Contribution::Requirements(Some(r))) => added.extend(r.iter().cloned()),
                _ => {}
            }
        }
        let mut selector = Selector::from_map(&set);
        selector.requirements.extend(added);
        selector
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::Op;
    use serde_json::json;
    use std::sync::Arc;

    fn equals(key: &str, value: &str) -> Requirement {
        Requirement {
            key: key.to_string(),
            op: Op::In(vec![value.to_string()]),
        }
    }

    fn pod(labels: serde_json::Value, owner: Option<(&str, &str, &str)>) -> PodInfo {
        let mut meta = json!({"name": "p", "namespace": "ns", "labels": labels});
        if let Some((api, kind, name)) = owner {
            meta["ownerReferences"] = json!([
                {"apiVersion": "v1", "kind": "Node", "name": "x", "uid": "0"},
                {"apiVersion": api, "kind": kind, "name": name, "uid": "1", "controller": true}
            ]);
        }
        PodInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": meta, "spec": {"containers": []}})).unwrap(),
        ))
    }

    fn workloads() -> Workloads {
        let mut w = Workloads::default();
        let svc = |name: &str, sel: serde_json::Value| {
            Workload::service(
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns"}, "spec": {"selector": sel}
                }))
                .unwrap(),
            )
        };
        w.upsert(svc("web", json!({"app": "web"})));
        w.upsert(svc("tier", json!({"tier": "fe"})));
        w.upsert(svc("other", json!({"app": "db"})));
        // No selector: selects nothing.
        w.upsert(Workload::service(
            &serde_json::from_value(
                json!({"metadata": {"name": "ext", "namespace": "ns"}, "spec": {}}),
            )
            .unwrap(),
        ));
        w.upsert(Workload::replica_set(
            &serde_json::from_value(json!({
                "metadata": {"name": "rs", "namespace": "ns"},
                "spec": {"selector": {"matchExpressions": [{"key": "pod-template-hash", "operator": "In", "values": ["h1"]}]}}
            }))
            .unwrap(),
        ));
        w.upsert(Workload::replication_controller(
            &serde_json::from_value(json!({
                "metadata": {"name": "rc", "namespace": "ns"}, "spec": {"selector": {"rc": "x"}}
            }))
            .unwrap(),
        ));
        // Same name, other namespace: never consulted for pods of `ns`.
        w.upsert(Workload::stateful_set(
            &serde_json::from_value(json!({
                "metadata": {"name": "ss", "namespace": "elsewhere"},
                "spec": {"selector": {"matchLabels": {"s": "1"}}, "serviceName": "s", "template": {}}
            }))
            .unwrap(),
        ));
        w
    }

    #[test]
    fn default_selector_as_upstream() {
        let w = workloads();
        let labels = json!({"app": "web", "tier": "fe", "pod-template-hash": "h1", "rc": "x"});
        // Services only: merged, as a set (sorted by key).
        let s = w.default_selector(&pod(labels.clone(), None));
        assert_eq!(
            s.requirements,
            vec![equals("app", "web"), equals("tier", "fe")]
        );
        // A ReplicaSet owner adds its requirements after the Services'.
        let s = w.default_selector(&pod(labels.clone(), Some(("apps/v1", "ReplicaSet", "rs"))));
        assert_eq!(
            s.requirements,
            vec![
                equals("app", "web"),
                equals("tier", "fe"),
                equals("pod-template-hash", "h1")
            ]
        );
        // A ReplicationController merges its map into the set.
        let s = w.default_selector(&pod(
            labels.clone(),
            Some(("v1", "ReplicationController", "rc")),
        ));
        assert_eq!(
            s.requirements,
            vec![
                equals("app", "web"),
                equals("rc", "x"),
                equals("tier", "fe")
            ]
        );
        // Other API versions, unknown owners and other namespaces add nothing.
        for owner in [
            ("extensions/v1beta1", "ReplicaSet", "rs"),
            ("apps/v1", "StatefulSet", "ss"),
            ("apps/v1", "ReplicaSet", "missing"),
        ] {
            let s = w.default_selector(&pod(labels.clone(), Some(owner)));
            assert_eq!(s.requirements.len(), 2, "{owner:?}");
        }
        // Nothing selects it: an empty selector (default constraints then do not apply).
        let s = w.default_selector(&pod(json!({"x": "y"}), None));
        assert!(s.requirements.is_empty());
    }

    #[test]
    fn kinds_index_all() {
        for (i, k) in WorkloadKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{k:?}");
        }
    }

    #[test]
    fn replace_and_delete() {
        let mut w = workloads();
        let rs = w.by_namespace["ns"][&(WorkloadKind::ReplicaSet, "rs".to_string())].clone();
        assert!(w.contains(&rs));
        let mut changed = rs.clone();
        changed.controller = Some(Contribution::Requirements(None));
        assert!(!w.contains(&changed));
        assert_eq!(w.count(WorkloadKind::Service), 4);
        w.replace(WorkloadKind::Service, Vec::new());
        assert_eq!(w.count(WorkloadKind::Service), 0);
        assert_eq!(w.count(WorkloadKind::ReplicaSet), 1);
        w.delete(WorkloadKind::ReplicaSet, "ns", "rs");
        assert_eq!(w.count(WorkloadKind::ReplicaSet), 0);
        w.delete(WorkloadKind::StatefulSet, "elsewhere", "ss");
        assert!(!w.by_namespace.contains_key("elsewhere"));
    }
}
