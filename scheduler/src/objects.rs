//! Reading Kubernetes objects from YAML or JSON files: what `kubectl get nodes,pods -A -o yaml`
//! prints (a `v1` `List`), a multi-document YAML stream, or single objects: Nodes, Pods,
//! Namespaces, and the volume objects (PersistentVolumes, PersistentVolumeClaims,
//! StorageClasses, CSINodes). Errors name the file, the object (`Pod default/web-1`) and the
//! field.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Container, Namespace, Node, Pod, ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::field::{self, Error as FieldError, ErrorList, Path as FieldPath};
use crate::key::PodKey;
use crate::quantity::Quantity;
use crate::snapshot::workloads::Workload;

/// Why a file of objects could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The text is not YAML/JSON.
    #[error("{path}: document {document}: not valid YAML/JSON: {message}")]
    Syntax {
        /// File.
        path: String,
        /// 1-based document number in the stream.
        document: usize,
        /// Parser message.
        message: String,
    },
    /// Objects do not fit their kind's schema or hold invalid values: every error, each
    /// line naming the file, the object (`items[3]: Node "n1"`) and the field.
    #[error("{0}")]
    Invalid(ErrorList),
}

/// Objects read from files, by kind.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// Namespaces.
    pub namespaces: Vec<Namespace>,
    /// Services, ReplicationControllers, ReplicaSets and StatefulSets, reduced to what
    /// default topology spreading reads ([`crate::snapshot::workloads`]).
    pub workloads: Vec<Workload>,
    /// PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes (the
    /// volume plugins read them).
    pub volumes: Vec<crate::snapshot::volumes::VolumeObject>,
    /// PodDisruptionBudgets (`policy/v1`; preemption reads them).
    pub pdbs: Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// PriorityClasses (`scheduling.k8s.io/v1`).
    pub priority_classes: Vec<k8s_openapi::api::scheduling::v1::PriorityClass>,
    /// Kinds that were present but are not used (reported, not fatal).
    pub ignored: Vec<String>,
}

fn describe(v: &Value) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("object");
    let meta = v.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    match meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{kind} {ns}/{}", field::shown(name)),
        None => format!("{kind} {}", field::shown(name)),
    }
}

/// How an object is named in errors: its position (`items[3]`, `document 2`), its kind
/// and its name (`Node "n1"`, `Pod "default/web-1"`).
fn label(position: &str, kind: &str, v: &Value) -> String {
    let meta = v.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str);
    let what = match (name, ns, kind) {
        (Some(""), _, _) => kind.to_string(),
        (Some(n), ns, "Pod") => {
            let key = PodKey::new(ns.unwrap_or("default"), n);
            format!("{kind} {:?}", field::shown(&key.to_string()))
        }
        (Some(n), _, _) => format!("{kind} {:?}", field::shown(n)),
        (None, _, _) => kind.to_string(),
    };
    if position.is_empty() {
        what
    } else {
        format!("{position}: {what}")
    }
}

fn typed<T: DeserializeOwned>(v: Value, object: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(v)
        .map_err(|e| FieldError::from_serde(e.path(), &e.inner().to_string()).in_object(object))
}

fn check_labels(
    labels: Option<&BTreeMap<String, String>>,
    at: &FieldPath,
    out: &mut Vec<FieldError>,
) {
    for (k, v) in labels.into_iter().flatten() {
        let p = at.key(k.clone());
        out.extend(field::label_key(&p, k));
        out.extend(field::label_value(&p, v));
    }
}

/// Negative quantities in a resource list (requests, limits, overhead, capacity): the API
/// server rejects them, and the scheduler's arithmetic assumes they cannot occur.
/// Unparseable ones are left to the scheduler, which makes the pod or node unschedulable
/// with the reason.
fn check_non_negative(
    list: Option<&BTreeMap<String, K8sQuantity>>,
    at: &FieldPath,
    out: &mut Vec<FieldError>,
) {
    for (name, q) in list.into_iter().flatten() {
        if Quantity::parse(&q.0).is_ok_and(|v| v.is_negative()) {
            out.push(FieldError::invalid(
                at.key(name.clone()),
                field::quoted(&q.0),
                "must not be negative",
            ));
        }
    }
}

fn check_container(c: &Container, at: &FieldPath, out: &mut Vec<FieldError>) {
    if let Some(r) = &c.resources {
        let rp = at.child("resources");
        check_non_negative(r.requests.as_ref(), &rp.child("requests"), out);
        check_non_negative(r.limits.as_ref(), &rp.child("limits"), out);
    }
}

/// What the API server would reject in a Node and the scheduler relies on: the name (a
/// DNS-1123 subdomain), label keys and values, no negative capacity or allocatable.
/// Paths start at the object (`metadata.name`).
pub fn check_node(node: &Node) -> Vec<FieldError> {
    let mut out = Vec::new();
    let meta = FieldPath::new("metadata");
    match node.metadata.name.as_deref() {
        None => out.push(FieldError::required(
            meta.child("name"),
            "must not be empty",
        )),
        Some(n) => out.extend(field::dns1123_subdomain(&meta.child("name"), n)),
    }
    check_labels(
        node.metadata.labels.as_ref(),
        &meta.child("labels"),
        &mut out,
    );
    if let Some(st) = &node.status {
        let sp = FieldPath::new("status");
        check_non_negative(st.capacity.as_ref(), &sp.child("capacity"), &mut out);
        check_non_negative(st.allocatable.as_ref(), &sp.child("allocatable"), &mut out);
    }
    out
}

/// What the API server would reject in a Pod and the scheduler relies on: the name (a
/// DNS-1123 subdomain), the namespace (a DNS-1123 label), label keys and values, no
/// negative requests or limits (containers, init containers, pod-level resources,
/// overhead). Paths start at the object (`spec.containers[0].resources.requests.cpu`).
pub fn check_pod(pod: &Pod) -> Vec<FieldError> {
    let mut out = Vec::new();
    let meta = FieldPath::new("metadata");
    match pod.metadata.name.as_deref() {
        None => out.push(FieldError::required(
            meta.child("name"),
            "must not be empty",
        )),
        Some(n) => out.extend(field::dns1123_subdomain(&meta.child("name"), n)),
    }
    if let Some(ns) = pod.metadata.namespace.as_deref() {
        out.extend(field::dns1123_label(&meta.child("namespace"), ns));
    }
    check_labels(
        pod.metadata.labels.as_ref(),
        &meta.child("labels"),
        &mut out,
    );
    if let Some(spec) = &pod.spec {
        let sp = FieldPath::new("spec");
        for (i, c) in spec.containers.iter().enumerate() {
            check_container(c, &sp.child("containers").index(i), &mut out);
        }
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            check_container(c, &sp.child("initContainers").index(i), &mut out);
        }
        if let Some(r) = &spec.resources {
            let rp = sp.child("resources");
            check_non_negative(r.requests.as_ref(), &rp.child("requests"), &mut out);
            check_non_negative(r.limits.as_ref(), &rp.child("limits"), &mut out);
        }
        check_non_negative(spec.overhead.as_ref(), &sp.child("overhead"), &mut out);
        check_scheduling_numbers(spec, &sp, &mut out);
    }
    out
}

/// The numbers the API server bounds and the scheduling plugins compute with: topology
/// spread `maxSkew` and `minDomains` at least 1, `whenUnsatisfiable` known, preferred
/// (anti-)affinity weights in 1..=100.
fn check_scheduling_numbers(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    sp: &FieldPath,
    out: &mut Vec<FieldError>,
) {
    const WHEN: [&str; 2] = ["DoNotSchedule", "ScheduleAnyway"];
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let at = sp.child("topologySpreadConstraints").index(i);
        if c.max_skew < 1 {
            out.push(FieldError::out_of_range(
                at.child("maxSkew"),
                c.max_skew,
                "at least 1",
            ));
        }
        if let Some(m) = c.min_domains
            && m < 1
        {
            out.push(FieldError::out_of_range(
                at.child("minDomains"),
                m,
                "at least 1",
            ));
        }
        if !WHEN.contains(&c.when_unsatisfiable.as_str()) {
            out.push(FieldError::not_supported(
                at.child("whenUnsatisfiable"),
                &c.when_unsatisfiable,
                &WHEN,
            ));
        }
    }
    let Some(a) = &spec.affinity else { return };
    let ap = sp.child("affinity");
    let weight = |w: i32, at: FieldPath, out: &mut Vec<FieldError>| {
        if !(1..=100).contains(&w) {
            out.push(FieldError::out_of_range(at, w, "in 1..=100"));
        }
    };
    if let Some(na) = &a.node_affinity {
        let p = ap
            .child("nodeAffinity")
            .child("preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            weight(t.weight, p.index(i).child("weight"), out);
        }
    }
    let terms = [
        (
            "podAffinity",
            a.pod_affinity.as_ref().and_then(|x| {
                x.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        ),
        (
            "podAntiAffinity",
            a.pod_anti_affinity.as_ref().and_then(|x| {
                x.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        ),
    ];
    for (name, list) in terms {
        let p = ap
            .child(name)
            .child("preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in list.into_iter().flatten().enumerate() {
            weight(t.weight, p.index(i).child("weight"), out);
        }
    }
}

/// Reading state: the objects so far, where each node and pod came from (for duplicates),
/// and every error.
#[derive(Default)]
struct Reader {
    out: Objects,
    nodes: BTreeMap<String, String>,
    pods: BTreeMap<(String, String), String>,
    errors: ErrorList,
}

impl Reader {
    /// Adds one object (or the items of a `List`) found at `position`.
    fn add(&mut self, v: Value, position: &str) {
        if v.is_null() {
            return;
        }
        let Some(kind) = v.get("kind").and_then(Value::as_str).map(str::to_string) else {
            let object = label(position, "object", &v);
            self.errors.push(
                FieldError::required(
                    FieldPath::new("kind"),
                    "missing `kind` (expected Node, Pod, Namespace, PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode or List)",
                )
                .in_object(object),
            );
            return;
        };
        let object = label(position, &kind, &v);
        match kind.as_str() {
            "List"
            | "NodeList"
            | "PodList"
            | "NamespaceList"
            | "ServiceList"
            | "ReplicationControllerList"
            | "ReplicaSetList"
            | "StatefulSetList"
            | "PodDisruptionBudgetList"
            | "PriorityClassList"
            | "PersistentVolumeList"
            | "PersistentVolumeClaimList"
            | "StorageClassList"
            | "CSINodeList" => {
                self.list(&kind, v, position, object);
            }
            "Node" => self.node(v, position, object),
            "Pod" => self.pod(v, position, object),
            "Namespace" => match typed::<Namespace>(v, &object) {
                Ok(ns) => {
                    let name = FieldPath::new("metadata").child("name");
                    match ns.metadata.name.as_deref() {
                        None => self.errors.push(
                            FieldError::required(name, "must not be empty").in_object(object),
                        ),
                        Some(n) => match field::dns1123_label(&name, n) {
                            Some(e) => self.errors.push(e.in_object(object)),
                            None => self.out.namespaces.push(ns),
                        },
                    }
                }
                Err(e) => self.errors.push(e),
            },
            "Service" => self.workload(typed::<Service>(v, &object).map(|o| Workload::service(&o))),
            "ReplicationController" => self.workload(
                typed::<ReplicationController>(v, &object)
                    .map(|o| Workload::replication_controller(&o)),
            ),
            "ReplicaSet" => {
                self.workload(typed::<ReplicaSet>(v, &object).map(|o| Workload::replica_set(&o)))
            }
            "StatefulSet" => {
                self.workload(typed::<StatefulSet>(v, &object).map(|o| Workload::stateful_set(&o)))
            }
            "PersistentVolume" | "PersistentVolumeClaim" | "StorageClass" | "CSINode" => {
                match crate::snapshot::volumes::read_object(&kind, v, &object) {
                    Ok(o) => self.out.volumes.push(o),
                    Err(e) => self.errors.push(e),
                }
            }
            "PodDisruptionBudget" => {
                match typed::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(v, &object) {
                    Ok(pdb) => match named(&pdb.metadata) {
                        Some(e) => self.errors.push(e.in_object(object)),
                        None => self.out.pdbs.push(pdb),
                    },
                    Err(e) => self.errors.push(e),
                }
            }
            "PriorityClass" => {
                match typed::<k8s_openapi::api::scheduling::v1::PriorityClass>(v, &object) {
                    Ok(pc) => match named(&pc.metadata) {
                        Some(e) => self.errors.push(e.in_object(object)),
                        None => self.out.priority_classes.push(pc),
                    },
                    Err(e) => self.errors.push(e),
                }
            }
            other => self
                .out
                .ignored
                .push(format!("{} ({})", field::shown(other), describe(&v))),
        }
    }
}

impl Reader {
    /// The items of a `List` (or `NodeList`, ...), each added as if given alone.
    fn list(&mut self, kind: &str, v: Value, position: &str, object: String) {
        let items = v.get("items").cloned().unwrap_or(Value::Array(Vec::new()));
        let Value::Array(items) = items else {
            self.errors.push(
                FieldError::invalid(FieldPath::new("items"), "", "expected a list")
                    .in_object(object),
            );
            return;
        };
        let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
        for (i, mut item) in items.into_iter().enumerate() {
            if let (Some(k), Value::Object(m)) = (item_kind, &mut item) {
                m.entry("kind")
                    .or_insert_with(|| Value::String(k.to_string()));
            }
            let at = if position.is_empty() {
                format!("items[{i}]")
            } else {
                format!("{position}.items[{i}]")
            };
            self.add(item, &at);
        }
    }

    /// A Node: valid, and not named twice.
    fn node(&mut self, v: Value, position: &str, object: String) {
        let node = match typed::<Node>(v, &object) {
            Ok(node) => node,
            Err(e) => return self.errors.push(e),
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        if admit(
            &mut self.errors,
            &mut self.nodes,
            check_node(&node),
            name,
            position,
            object,
        ) {
            self.out.nodes.push(node);
        }
    }

    /// A Pod: valid, and not named twice in its namespace (`default` when it has none).
    fn pod(&mut self, v: Value, position: &str, object: String) {
        let mut pod = match typed::<Pod>(v, &object) {
            Ok(pod) => pod,
            Err(e) => return self.errors.push(e),
        };
        let errs = check_pod(&pod);
        // As kubectl does: no namespace means `default`.
        let ns = pod
            .metadata
            .namespace
            .get_or_insert_with(|| "default".to_string())
            .clone();
        let key = (ns, pod.metadata.name.clone().unwrap_or_default());
        if admit(
            &mut self.errors,
            &mut self.pods,
            errs,
            key,
            position,
            object,
        ) {
            self.out.pods.push(pod);
        }
    }

    /// Keeps a workload, or its error.
    fn workload(&mut self, w: Result<Workload, FieldError>) {
        match w {
            Ok(w) => self.out.workloads.push(w),
            Err(e) => self.errors.push(e),
        }
    }
}

/// `metadata.name` must be present (PodDisruptionBudget, PriorityClass): the error when
/// it is not.
fn named(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<FieldError> {
    match meta.name.as_deref() {
        None | Some("") => Some(FieldError::required(
            FieldPath::new("metadata").child("name"),
            "must not be empty",
        )),
        Some(_) => None,
    }
}

/// The position of an object, for "duplicate of ..." (the object label when the file
/// holds a single object).
/// Whether an object is kept: no validation errors (else they go to `errors`, in the
/// object) and no earlier object with its `key` (else a duplicate error naming where the
/// first one was); a kept object's key is remembered with where it was found.
fn admit<K: Ord>(
    errors: &mut ErrorList,
    seen: &mut BTreeMap<K, String>,
    errs: Vec<FieldError>,
    key: K,
    position: &str,
    object: String,
) -> bool {
    if !errs.is_empty() {
        errors.extend(errs.into_iter().map(|e| e.in_object(object.clone())));
        return false;
    }
    if let Some(first) = seen.get(&key) {
        errors.push(FieldError::duplicate(FieldPath::root(), first.clone()).in_object(object));
        return false;
    }
    seen.insert(key, position_or(position, &object));
    true
}

fn position_or(position: &str, object: &str) -> String {
    if position.is_empty() {
        object.to_string()
    } else {
        position.to_string()
    }
}

impl Objects {
    /// Parses YAML or JSON text (one or more documents). Every invalid object is reported
    /// (not only the first): Nodes and Pods need valid names, namespaces and label keys
    /// and values, Pods no negative requests or limits; a Node or Pod may appear once.
    /// Pods without a namespace get `default`, as kubectl gives them.
    pub fn parse(text: &str, path: &str) -> Result<Objects, LoadError> {
        let mut docs = Vec::new();
        for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
            let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| LoadError::Syntax {
                path: path.to_string(),
                document: i + 1,
                message: e.to_string(),
            })?;
            docs.push(v);
        }
        let several = docs.iter().filter(|v| !v.is_null()).count() > 1;
        let mut r = Reader::default();
        for (i, v) in docs.into_iter().enumerate() {
            let position = if several {
                format!("document {}", i + 1)
            } else {
                String::new()
            };
            r.add(v, &position);
        }
        if !r.errors.is_empty() {
            return Err(LoadError::Invalid(r.errors.with_origin(path)));
        }
        Ok(r.out)
    }

    /// Reads a file.
    pub fn load(path: &Path) -> Result<Objects, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Objects::parse(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_streams_and_errors() {
        let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}, "spec": {"containers": []}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]}"#;
        let o = Objects::parse(list, "f").unwrap();
        assert_eq!((o.nodes.len(), o.pods.len(), o.ignored.len()), (1, 1, 1));
        assert_eq!(o.workloads.len(), 1);
        assert_eq!(
            (
                o.workloads[0].namespace.as_str(),
                o.workloads[0].name.as_str()
            ),
            ("default", "s")
        );
        let e = Objects::parse(
            "kind: ReplicaSet\nmetadata: {name: r}\nspec: {selector: 3}\n",
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("spec.selector"), "{e}");

        let stream = "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b}\n---\n";
        assert_eq!(Objects::parse(stream, "f").unwrap().nodes.len(), 2);

        let typed_list = "kind: NodeList\nitems: [{metadata: {name: a}}]\n";
        assert_eq!(Objects::parse(typed_list, "f").unwrap().nodes.len(), 1);

        let bad = "kind: Pod\nmetadata: {name: p, namespace: d}\nspec: {containers: [{name: c, ports: [{containerPort: eighty}]}]}\n";
        let e = Objects::parse(bad, "pod.yaml").unwrap_err().to_string();
        assert!(e.starts_with("pod.yaml: Pod \"d/p\": "), "{e}");
        assert!(
            e.contains("spec.containers[0].ports[0].containerPort"),
            "{e}"
        );

        let e = Objects::parse("metadata: {name: x}\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing `kind`"), "{e}");
        let e = Objects::parse("kind: [\n", "f").unwrap_err().to_string();
        assert!(e.contains("document 1"), "{e}");
    }

    fn errors(text: &str) -> String {
        match Objects::parse(text, "f.yaml") {
            Err(LoadError::Invalid(list)) => list.to_string(),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn pdbs_and_priority_classes_are_read_from_lists() {
        let text = r#"{"kind": "List", "items": [
            {"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1",
             "metadata": {"name": "high"}, "value": 100000, "preemptionPolicy": "Never"},
            {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1",
             "metadata": {"name": "web", "namespace": "default"},
             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
             "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}
        ]}"#;
        let o = Objects::parse(text, "c.json").unwrap();
        assert_eq!(o.priority_classes.len(), 1);
        assert_eq!(o.priority_classes[0].value, 100000);
        assert_eq!(o.pdbs.len(), 1);
        assert_eq!(
            o.pdbs[0].status.as_ref().map(|s| s.disruptions_allowed),
            Some(0)
        );
        assert!(o.ignored.is_empty(), "{:?}", o.ignored);
        let e = errors(
            r#"{"kind": "List", "items": [{"kind": "PodDisruptionBudget", "metadata": {"namespace": "default"}},
                {"kind": "PriorityClass", "metadata": {"name": "x"}, "value": "high"}]}"#,
        );
        assert!(e.contains("items[0]") && e.contains("metadata.name"), "{e}");
        assert!(e.contains("items[1]") && e.contains("value"), "{e}");
    }

    #[test]
    fn names_must_be_present_valid_and_unique() {
        // Regression (issue #15, 8): a Pod without metadata was placed as `default/`, a
        // Node named "" was used, and two Nodes of one name were merged silently.
        let e = errors("kind: Pod\nspec: {containers: []}\n");
        assert_eq!(e, "f.yaml: Pod: metadata.name: must not be empty");
        let list = r#"{"kind": "List", "items": [
            {"kind": "Node", "metadata": {"name": "n0"}},
            {"kind": "Node", "metadata": {"name": "n1"}},
            {"kind": "Node", "metadata": {"name": "n2"}},
            {"kind": "Node", "metadata": {"name": ""}},
            {"kind": "Node", "metadata": {"name": "n4"}},
            {"kind": "Node", "metadata": {"name": "n1"}}]}"#;
        let e = errors(list);
        assert_eq!(
            e,
            "f.yaml: items[3]: Node: metadata.name: must not be empty\n\
             f.yaml: items[5]: Node \"n1\": duplicate of items[1]"
        );
        let stream = "kind: Pod\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: a, namespace: default}\n";
        assert_eq!(
            errors(stream),
            "f.yaml: document 2: Pod \"default/a\": duplicate of document 1"
        );
        // Pods without a namespace get `default`, as kubectl gives them.
        let o = Objects::parse("kind: Pod\nmetadata: {name: a}\n", "f").unwrap();
        assert_eq!(o.pods[0].metadata.namespace.as_deref(), Some("default"));
        // Regression (issue #15, 5): a 65,536-character node name reached `place`.
        let long = format!("kind: Node\nmetadata: {{name: {}}}\n", "a".repeat(65_536));
        let e = errors(&long);
        assert!(
            e.ends_with("metadata.name: must be at most 253 characters, got 65536"),
            "{e}"
        );
        assert!(e.len() < 200, "{e}");
        let e =
            errors("kind: Pod\nmetadata: {name: Web_1, namespace: My.NS, labels: {'a b': x}}\n");
        assert_eq!(e.lines().count(), 3, "{e}");
        assert!(
            e.contains("metadata.name: must be a DNS-1123 subdomain"),
            "{e}"
        );
        assert!(
            e.contains("metadata.namespace: must be a DNS-1123 label"),
            "{e}"
        );
        assert!(
            e.contains("metadata.labels[a b]: must be a qualified name"),
            "{e}"
        );
    }

    #[test]
    fn scheduling_numbers_are_bounded_as_the_api_server_bounds_them() {
        // maxSkew feeds `maxSkew - 1` in PodTopologySpread's score (i32::MIN overflowed).
        let pod = "kind: Pod\nmetadata: {name: x}\nspec:\n  containers: []\n  topologySpreadConstraints: [{maxSkew: -2147483648, topologyKey: zone, whenUnsatisfiable: Never, minDomains: 0}]\n  affinity: {podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 101, podAffinityTerm: {topologyKey: zone}}]}}\n";
        let e = errors(pod);
        let fields: Vec<&str> = e
            .lines()
            .map(|l| l.split(": ").nth(2).unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.topologySpreadConstraints[0].maxSkew",
                "spec.topologySpreadConstraints[0].minDomains",
                "spec.topologySpreadConstraints[0].whenUnsatisfiable",
                "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            ],
            "{e}"
        );
    }

    #[test]
    fn negative_requests_and_limits_are_rejected() {
        // Regression (issue #15, 7): `cpu: "-1"` gave an out-of-range score, `memory: "-1"`
        // was placed.
        let pod = "kind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: '-1', memory: 1Gi}, limits: {memory: '-1'}}\n  initContainers:\n  - {name: i, resources: {requests: {memory: -5Mi}}}\n  overhead: {cpu: -100m}\n";
        let e = errors(pod);
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(
            lines,
            [
                "f.yaml: Pod \"default/x\": spec.containers[0].resources.requests.cpu: must not be negative, got \"-1\"",
                "f.yaml: Pod \"default/x\": spec.containers[0].resources.limits.memory: must not be negative, got \"-1\"",
                "f.yaml: Pod \"default/x\": spec.initContainers[0].resources.requests.memory: must not be negative, got \"-5Mi\"",
                "f.yaml: Pod \"default/x\": spec.overhead.cpu: must not be negative, got \"-100m\"",
            ]
        );
        let node = "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {memory: '-1'}}\n";
        assert_eq!(
            errors(node),
            "f.yaml: Node \"n\": status.allocatable.memory: must not be negative, got \"-1\""
        );
        // Unparseable quantities stay the scheduler's business (unschedulable with a reason).
        assert!(Objects::parse("kind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n", "f").is_ok());
    }
}
