//! A label index over the pods assigned in a snapshot, maintained incrementally on pod add and
//! remove, so pod (anti-)affinity and topology spread can find the pods a selector may match
//! without scanning every pod of the cluster.
//!
//! Layout: label key → label value → posting list of `(node, pod)` entries. A selector is
//! answered from its most selective `In` or `Exists` requirement (the smallest union of
//! posting lists); callers confirm every candidate with the full selector. Selectors with no
//! such requirement (`{}`, only `NotIn`/`DoesNotExist`) cannot be answered and fall back to a
//! scan. The index also keeps the (short) lists of pods that carry pod (anti-)affinity terms,
//! so the symmetric checks visit only those.
//!
//! Posting lists sit behind `Arc`s: cloning the index (when a snapshot is shared and then
//! updated) copies one pointer per distinct label, and an update copies only the posting lists
//! it touches. Memory is one `(u32, Arc)` entry (16 bytes) per pod label.

use std::collections::HashMap;
use std::sync::Arc;

use super::NodeIdx;
use super::pod_info::PodInfo;
use crate::selector::{Op, Selector};

/// One indexed pod and the node it sits on.
#[derive(Debug, Clone)]
pub struct IndexedPod {
    /// The node's index in the snapshot.
    pub node: NodeIdx,
    /// The pod.
    pub pod: Arc<PodInfo>,
}

type Posting = Arc<Vec<IndexedPod>>;

/// One required anti-affinity term of an assigned pod.
#[derive(Debug, Clone)]
pub struct IndexedTerm {
    /// The node the pod sits on.
    pub node: NodeIdx,
    /// The pod owning the term.
    pub pod: Arc<PodInfo>,
    /// The term's position in `pod.required_anti_affinity`.
    pub term: usize,
}

type TermPosting = Arc<Vec<IndexedTerm>>;

/// The `In` requirement a term's selector is indexed under: a pod can only match the term if
/// it carries `key=` one of `values`.
fn term_index_key(sel: &Selector) -> Option<(&str, &[String])> {
    sel.requirements.iter().find_map(|r| match &r.op {
        Op::In(values) => Some((r.key.as_str(), values.as_slice())),
        _ => None,
    })
}

/// Label index over assigned pods.
#[derive(Debug, Clone, Default)]
pub struct PodIndex {
    /// key → value → pods carrying `key=value`.
    by_label: HashMap<String, HashMap<String, Posting>>,
    /// Pods with any pod affinity or anti-affinity term.
    with_affinity: Posting,
    /// Pods with terms that score other pods: required affinity or preferred terms (pods with
    /// only required anti-affinity never add to InterPodAffinity's score, so scoring skips them).
    with_scoring_terms: Posting,
    /// Pods with required anti-affinity terms.
    with_required_anti_affinity: Posting,
    /// Required anti-affinity terms, by the `key=value` a pod must carry to match them.
    anti_terms_by_label: HashMap<String, HashMap<String, TermPosting>>,
    /// Required anti-affinity terms without an `In` requirement (checked for every pod).
    anti_terms_unindexed: TermPosting,
    /// Number of pods indexed.
    pods: usize,
}

fn remove_entry(list: &mut Posting, node: NodeIdx, pod: &Arc<PodInfo>) -> bool {
    let Some(pos) = list
        .iter()
        .position(|e| e.node == node && Arc::ptr_eq(&e.pod, pod))
    else {
        return false;
    };
    Arc::make_mut(list).swap_remove(pos);
    true
}

fn has_scoring_terms(pod: &PodInfo) -> bool {
    !pod.required_affinity.is_empty()
        || !pod.preferred_affinity.is_empty()
        || !pod.preferred_anti_affinity.is_empty()
}

impl PodIndex {
    /// Records a pod assigned to node `node`.
    pub fn add(&mut self, node: NodeIdx, pod: &Arc<PodInfo>) {
        let entry = IndexedPod {
            node,
            pod: pod.clone(),
        };
        for (k, v) in pod.labels() {
            let values = match self.by_label.get_mut(k.as_str()) {
                Some(values) => values,
                None => self.by_label.entry(k.clone()).or_default(),
            };
            let list = match values.get_mut(v.as_str()) {
                Some(list) => list,
                None => values.entry(v.clone()).or_default(),
            };
            Arc::make_mut(list).push(entry.clone());
        }
        if pod.has_affinity() {
            Arc::make_mut(&mut self.with_affinity).push(entry.clone());
        }
        if has_scoring_terms(pod) {
            Arc::make_mut(&mut self.with_scoring_terms).push(entry.clone());
        }
        if pod.has_required_anti_affinity() {
            Arc::make_mut(&mut self.with_required_anti_affinity).push(entry);
            for (i, t) in pod.required_anti_affinity.iter().enumerate() {
                if t.selector.nothing {
                    continue;
                }
                let e = IndexedTerm {
                    node,
                    pod: pod.clone(),
                    term: i,
                };
                match term_index_key(&t.selector) {
                    Some((key, values)) => {
                        let by_value = self.anti_terms_by_label.entry(key.to_string()).or_default();
                        for v in values {
                            Arc::make_mut(by_value.entry(v.clone()).or_default()).push(e.clone());
                        }
                    }
                    None => Arc::make_mut(&mut self.anti_terms_unindexed).push(e),
                }
            }
        }
        self.pods += 1;
    }

    /// Forgets a pod previously added on node `node` (the same `Arc`).
    pub fn remove(&mut self, node: NodeIdx, pod: &Arc<PodInfo>) {
        let mut found = false;
        for (k, v) in pod.labels() {
            let Some(values) = self.by_label.get_mut(k.as_str()) else {
                continue;
            };
            if let Some(list) = values.get_mut(v.as_str()) {
                found |= remove_entry(list, node, pod);
                if list.is_empty() {
                    values.remove(v.as_str());
                }
            }
            if values.is_empty() {
                self.by_label.remove(k.as_str());
            }
        }
        if pod.has_affinity() {
            found |= remove_entry(&mut self.with_affinity, node, pod);
        }
        if has_scoring_terms(pod) {
            remove_entry(&mut self.with_scoring_terms, node, pod);
        }
        if pod.has_required_anti_affinity() {
            found |= remove_entry(&mut self.with_required_anti_affinity, node, pod);
            let same = |e: &IndexedTerm| e.node == node && Arc::ptr_eq(&e.pod, pod);
            for t in &pod.required_anti_affinity {
                if t.selector.nothing {
                    continue;
                }
                match term_index_key(&t.selector) {
                    Some((key, values)) => {
                        let Some(by_value) = self.anti_terms_by_label.get_mut(key) else {
                            continue;
                        };
                        for v in values {
                            if let Some(list) = by_value.get_mut(v.as_str()) {
                                Arc::make_mut(list).retain(|e| !same(e));
                                if list.is_empty() {
                                    by_value.remove(v.as_str());
                                }
                            }
                        }
                        if by_value.is_empty() {
                            self.anti_terms_by_label.remove(key);
                        }
                    }
                    None => {
                        if self.anti_terms_unindexed.iter().any(same) {
                            Arc::make_mut(&mut self.anti_terms_unindexed).retain(|e| !same(e));
                        }
                    }
                }
            }
        }
        if found || pod.labels().is_empty() {
            self.pods = self.pods.saturating_sub(1);
        }
    }

    /// Number of pods indexed.
    pub fn len(&self) -> usize {
        self.pods
    }

    /// True when no pod is indexed.
    pub fn is_empty(&self) -> bool {
        self.pods == 0
    }

    /// Pods that have any pod affinity or anti-affinity term (required or preferred).
    pub fn with_affinity(&self) -> &[IndexedPod] {
        &self.with_affinity
    }

    /// Pods whose terms can add to another pod's InterPodAffinity score (required affinity,
    /// preferred affinity or anti-affinity).
    pub fn with_scoring_terms(&self) -> &[IndexedPod] {
        &self.with_scoring_terms
    }

    /// Pods with required anti-affinity terms.
    pub fn with_required_anti_affinity(&self) -> &[IndexedPod] {
        &self.with_required_anti_affinity
    }

    /// Every required anti-affinity term of an assigned pod that a pod with `labels` may match
    /// (a superset: confirm with the full term). Each term appears once.
    pub fn anti_affinity_terms_for<'a>(
        &'a self,
        labels: &'a crate::selector::Labels,
    ) -> impl Iterator<Item = &'a IndexedTerm> + 'a {
        let indexed = labels.iter().flat_map(move |(k, v)| {
            self.anti_terms_by_label
                .get(k.as_str())
                .and_then(|by_value| by_value.get(v.as_str()))
                .into_iter()
                .flat_map(|l| l.iter())
        });
        self.anti_terms_unindexed.iter().chain(indexed)
    }

    /// The pods labelled `key=value`.
    pub fn with_label(&self, key: &str, value: &str) -> &[IndexedPod] {
        self.by_label
            .get(key)
            .and_then(|values| values.get(value))
            .map_or(&[], |l| l.as_slice())
    }

    /// The pods that carry label `key` (any value), as posting lists.
    fn with_key(&self, key: &str) -> impl Iterator<Item = &[IndexedPod]> {
        self.by_label
            .get(key)
            .into_iter()
            .flat_map(|values| values.values().map(|l| l.as_slice()))
    }

    /// A superset of the pods `selector` matches, as posting lists (no pod appears twice), or
    /// `None` when the index cannot narrow the selector down and every pod must be scanned.
    /// Callers must confirm each candidate with the full selector.
    pub fn candidates(&self, selector: &Selector) -> Option<Vec<&[IndexedPod]>> {
        if selector.nothing {
            return Some(Vec::new());
        }
        let mut best: Option<(usize, Vec<&[IndexedPod]>)> = None;
        for r in &selector.requirements {
            let lists: Vec<&[IndexedPod]> = match &r.op {
                // A pod has one value per key: the postings of distinct values are disjoint.
                Op::In(values) => values
                    .iter()
                    .map(|v| self.with_label(&r.key, v))
                    .filter(|l| !l.is_empty())
                    .collect(),
                Op::Exists | Op::Gt(_) | Op::Lt(_) => self.with_key(&r.key).collect(),
                Op::NotIn(_) | Op::DoesNotExist => continue,
            };
            let size: usize = lists.iter().map(|l| l.len()).sum();
            if best.as_ref().is_none_or(|(s, _)| size < *s) {
                let empty = size == 0;
                best = Some((size, lists));
                if empty {
                    break;
                }
            }
        }
        best.map(|(_, lists)| lists)
    }

    /// An estimate of how many candidates [`PodIndex::candidates`] would return, without
    /// collecting them (`None`: the selector needs a full scan).
    pub fn candidate_count(&self, selector: &Selector) -> Option<usize> {
        if selector.nothing {
            return Some(0);
        }
        selector
            .requirements
            .iter()
            .filter_map(|r| match &r.op {
                Op::In(values) => Some(
                    values
                        .iter()
                        .map(|v| self.with_label(&r.key, v).len())
                        .sum(),
                ),
                Op::Exists | Op::Gt(_) | Op::Lt(_) => {
                    Some(self.with_key(&r.key).map(<[IndexedPod]>::len).sum())
                }
                Op::NotIn(_) | Op::DoesNotExist => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::json;

    fn pod(name: &str, labels: serde_json::Value) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"containers": []}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    fn sel(v: serde_json::Value) -> Selector {
        let ls: LabelSelector = serde_json::from_value(v).unwrap();
        Selector::from_label_selector(Some(&ls), "s").unwrap()
    }

    fn names(lists: Option<Vec<&[IndexedPod]>>) -> Option<Vec<String>> {
        lists.map(|ls| {
            let mut v: Vec<String> = ls
                .iter()
                .flat_map(|l| l.iter().map(|e| format!("{}@{}", e.pod.name, e.node)))
                .collect();
            v.sort();
            v
        })
    }

    #[test]
    fn postings_follow_adds_and_removes() {
        let mut idx = PodIndex::default();
        let a = pod("a", json!({"app": "web", "tier": "fe"}));
        let b = pod("b", json!({"app": "db"}));
        let c = pod("c", json!({"app": "web"}));
        idx.add(0, &a);
        idx.add(1, &b);
        idx.add(1, &c);
        assert_eq!(idx.len(), 3);
        let s = |idx: &PodIndex, v| names(idx.candidates(&sel(v)));
        assert_eq!(
            s(&idx, json!({"matchLabels": {"app": "web"}})).unwrap(),
            ["a@0", "c@1"]
        );
        assert_eq!(
            s(&idx, json!({"matchLabels": {"app": "web", "tier": "fe"}})).unwrap(),
            ["a@0"],
            "the smallest posting wins"
        );
        assert_eq!(
            s(&idx, json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web", "x"]}]}))
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            s(
                &idx,
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})
            )
            .unwrap(),
            ["a@0"]
        );
        assert!(s(&idx, json!({})).is_none());
        assert!(
            s(
                &idx,
                json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]})
            )
            .is_none()
        );
        assert_eq!(idx.candidates(&Selector::nothing()).unwrap().len(), 0);
        assert_eq!(
            idx.candidate_count(&sel(json!({"matchLabels": {"app": "web"}}))),
            Some(2)
        );

        idx.remove(0, &a);
        idx.remove(1, &c);
        assert_eq!(idx.len(), 1);
        assert!(
            s(&idx, json!({"matchLabels": {"app": "web"}}))
                .unwrap()
                .is_empty()
        );
        assert!(!idx.by_label.contains_key("tier"), "empty keys are dropped");
        idx.add(3, &c);
        assert_eq!(
            s(&idx, json!({"matchLabels": {"app": "web"}})).unwrap(),
            ["c@3"]
        );
    }

    #[test]
    fn anti_affinity_terms_by_label() {
        let anti = |name: &str, sel: serde_json::Value| {
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [], "affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": sel, "topologyKey": "zone"}]}}}
            }))
            .unwrap();
            Arc::new(PodInfo::new(Arc::new(p)))
        };
        let mut idx = PodIndex::default();
        let a = anti(
            "a",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}),
        );
        let b = anti(
            "b",
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}),
        );
        let c = anti("c", json!({"matchLabels": {"app": "db"}}));
        idx.add(0, &a);
        idx.add(1, &b);
        idx.add(2, &c);
        let names = |idx: &PodIndex, l: serde_json::Value| {
            let labels: crate::selector::Labels = serde_json::from_value(l).unwrap();
            let mut v: Vec<String> = idx
                .anti_affinity_terms_for(&labels)
                .map(|e| e.pod.name.to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&idx, json!({"app": "web"})), ["a", "b"]);
        assert_eq!(names(&idx, json!({"app": "db", "x": "y"})), ["b", "c"]);
        assert_eq!(names(&idx, json!({})), ["b"]);
        idx.remove(0, &a);
        idx.remove(1, &b);
        assert!(names(&idx, json!({"app": "web"})).is_empty());
        assert!(idx.anti_terms_unindexed.is_empty());
        assert!(!idx.anti_terms_by_label["app"].contains_key("web"));
    }

    #[test]
    fn shared_clones_do_not_see_later_updates() {
        let mut idx = PodIndex::default();
        let a = pod("a", json!({"app": "web"}));
        idx.add(0, &a);
        let copy = idx.clone();
        idx.add(1, &pod("b", json!({"app": "web"})));
        assert_eq!(copy.with_label("app", "web").len(), 1);
        assert_eq!(idx.with_label("app", "web").len(), 2);
    }
}
