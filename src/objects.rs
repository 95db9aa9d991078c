//! Reading Kubernetes objects from YAML or JSON files: what `kubectl get nodes,pods -A -o yaml`
//! prints (a `v1` `List`), a multi-document YAML stream, or single objects. Errors name the
//! file, the object (`Pod default/web-1`) and the field.

use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use serde::de::DeserializeOwned;
use serde_json::Value;

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
    /// An object does not fit its kind's schema.
    #[error("{path}: {object}: at {field}: {message}")]
    Object {
        /// File.
        path: String,
        /// `Kind namespace/name`.
        object: String,
        /// Field path inside the object.
        field: String,
        /// What is wrong.
        message: String,
    },
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
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn typed<T: DeserializeOwned>(v: Value, path: &str, object: &str) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(v).map_err(|e| LoadError::Object {
        path: path.to_string(),
        object: object.to_string(),
        field: e.path().to_string(),
        message: e.into_inner().to_string(),
    })
}

impl Objects {
    /// Adds one object (or the items of a `List`).
    fn add(&mut self, v: Value, path: &str) -> Result<(), LoadError> {
        if v.is_null() {
            return Ok(());
        }
        let object = describe(&v);
        let Some(kind) = v.get("kind").and_then(Value::as_str).map(str::to_string) else {
            return Err(LoadError::Object {
                path: path.to_string(),
                object,
                field: "kind".into(),
                message: "missing `kind` (expected Node, Pod, Namespace or List)".into(),
            });
        };
        match kind.as_str() {
            "List" | "NodeList" | "PodList" | "NamespaceList" => {
                let items = v.get("items").cloned().unwrap_or(Value::Array(Vec::new()));
                let Value::Array(items) = items else {
                    return Err(LoadError::Object {
                        path: path.to_string(),
                        object,
                        field: "items".into(),
                        message: "expected a list".into(),
                    });
                };
                let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
                for mut item in items {
                    if let (Some(k), Value::Object(m)) = (item_kind, &mut item) {
                        m.entry("kind")
                            .or_insert_with(|| Value::String(k.to_string()));
                    }
                    self.add(item, path)?;
                }
            }
            "Node" => self.nodes.push(typed(v, path, &object)?),
            "Pod" => self.pods.push(typed(v, path, &object)?),
            "Namespace" => self.namespaces.push(typed(v, path, &object)?),
            other => self.ignored.push(format!("{other} ({object})")),
        }
        Ok(())
    }

    /// Parses YAML or JSON text (one or more documents).
    pub fn parse(text: &str, path: &str) -> Result<Objects, LoadError> {
        let mut out = Objects::default();
        for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
            let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| LoadError::Syntax {
                path: path.to_string(),
                document: i + 1,
                message: e.to_string(),
            })?;
            out.add(v, path)?;
        }
        Ok(out)
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
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}]}"#;
        let o = Objects::parse(list, "f").unwrap();
        assert_eq!((o.nodes.len(), o.pods.len(), o.ignored.len()), (1, 1, 1));

        let stream = "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b}\n---\n";
        assert_eq!(Objects::parse(stream, "f").unwrap().nodes.len(), 2);

        let typed_list = "kind: NodeList\nitems: [{metadata: {name: a}}]\n";
        assert_eq!(Objects::parse(typed_list, "f").unwrap().nodes.len(), 1);

        let bad = "kind: Pod\nmetadata: {name: p, namespace: d}\nspec: {containers: [{name: c, ports: [{containerPort: eighty}]}]}\n";
        let e = Objects::parse(bad, "pod.yaml").unwrap_err().to_string();
        assert!(e.contains("Pod d/p"), "{e}");
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
}
