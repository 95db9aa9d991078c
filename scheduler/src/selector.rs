//! Label selectors and node selector terms, compiled once and matched many times.
//!
//! Semantics follow `k8s.io/apimachinery/pkg/labels` and
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`:
//! - `In` needs the key present with one of the values; `NotIn` matches when the key is absent
//!   or its value is not listed; `Exists`/`DoesNotExist` test presence; `Gt`/`Lt` compare the
//!   label value parsed as an integer (absent or non-integer values never match).
//! - A `LabelSelector` with neither `matchLabels` nor `matchExpressions` matches everything;
//!   a missing selector matches nothing.
//! - Node selector terms are ORed, the requirements inside a term ANDed; an empty term matches
//!   nothing; a term that fails to parse matches nothing (upstream's lazy errors).
//!
//! For node labels, [`CompiledSelector`], [`CompiledTerm`] and [`CompiledNodeSelector`] are
//! the same selectors compiled once per cycle against a snapshot's label columns
//! ([`crate::labels::LabelTable`]): keys become columns, values become value ids,
//! `metadata.name` becomes node indices, `Gt`/`Lt` a table over the key's distinct values.
//! Matching a node is then a few integer comparisons.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use smallvec::SmallVec;

use crate::labels::{LabelTable, NONE};

pub use crate::labels::Labels;

/// A selector that could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SelectorError {
    /// The path of the offending requirement.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// One compiled requirement on a label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The value is one of these (sorted for binary search).
    In(Vec<String>),
    /// The key is absent or the value is none of these.
    NotIn(Vec<String>),
    /// The key is present.
    Exists,
    /// The key is absent.
    DoesNotExist,
    /// The value, as an integer, is greater than this.
    Gt(i64),
    /// The value, as an integer, is less than this.
    Lt(i64),
}

/// A compiled `key op values` requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator with its values.
    pub op: Op,
}

impl Requirement {
    /// Builds a requirement from an operator name and its values, validating arity like
    /// `labels.NewRequirement`.
    pub fn new(key: &str, op: &str, values: &[String], field: &str) -> Result<Self, SelectorError> {
        let err = |message: String| SelectorError {
            field: field.to_string(),
            message,
        };
        let sorted = || {
            let mut v = values.to_vec();
            v.sort();
            v.dedup();
            v
        };
        let int_value = || -> Result<i64, SelectorError> {
            if values.len() != 1 {
                return Err(err(format!(
                    "operator {op} needs exactly one value, got {}",
                    values.len()
                )));
            }
            values[0].parse::<i64>().map_err(|_| {
                err(format!(
                    "operator {op} needs an integer, got {:?}",
                    values[0]
                ))
            })
        };
        let op = match op {
            "In" | "NotIn" => {
                if values.is_empty() {
                    return Err(err(format!("operator {op} needs at least one value")));
                }
                if op == "In" {
                    Op::In(sorted())
                } else {
                    Op::NotIn(sorted())
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    return Err(err(format!("operator {op} takes no values")));
                }
                if op == "Exists" {
                    Op::Exists
                } else {
                    Op::DoesNotExist
                }
            }
            "Gt" => Op::Gt(int_value()?),
            "Lt" => Op::Lt(int_value()?),
            other => return Err(err(format!("unknown operator {other:?}"))),
        };
        if key.is_empty() {
            return Err(err("empty key".to_string()));
        }
        Ok(Requirement {
            key: key.to_string(),
            op,
        })
    }

    /// Whether a label set satisfies this requirement.
    #[inline]
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_value(labels.get(&self.key).map(String::as_str))
    }

    /// Whether a (possibly absent) value satisfies this requirement.
    #[inline]
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::In(vs), Some(v)) => vs.binary_search_by(|x| x.as_str().cmp(v)).is_ok(),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), Some(v)) => vs.binary_search_by(|x| x.as_str().cmp(v)).is_err(),
            (Op::NotIn(_), None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x > *n),
            (Op::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x < *n),
            (Op::Gt(_) | Op::Lt(_), None) => false,
        }
    }
}

/// A compiled `metav1.LabelSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// All must hold.
    pub requirements: Vec<Requirement>,
    /// A missing selector: matches nothing.
    pub nothing: bool,
}

impl Selector {
    /// The selector that matches every label set.
    pub fn everything() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: false,
        }
    }

    /// The selector that matches no label set.
    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Compiles an optional `LabelSelector` (`None` matches nothing), as
    /// `metav1.LabelSelectorAsSelector` does.
    pub fn from_label_selector(
        sel: Option<&LabelSelector>,
        field: &str,
    ) -> Result<Self, SelectorError> {
        let Some(sel) = sel else {
            return Ok(Self::nothing());
        };
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            requirements.push(Requirement::new(
                k,
                "In",
                std::slice::from_ref(v),
                &format!("{field}.matchLabels[{k}]"),
            )?);
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let LabelSelectorRequirement {
                key,
                operator,
                values,
            } = e;
            if operator == "Gt" || operator == "Lt" {
                // LabelSelector (unlike NodeSelector) only allows set-based operators.
                return Err(SelectorError {
                    field: format!("{field}.matchExpressions[{i}]"),
                    message: format!("operator {operator:?} is not valid in a label selector"),
                });
            }
            requirements.push(Requirement::new(
                key,
                operator,
                values.as_deref().unwrap_or(&[]),
                &format!("{field}.matchExpressions[{i}]"),
            )?);
        }
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// A selector requiring every `key=value` of the map (`labels.SelectorFromSet`).
    pub fn from_map(map: &Labels) -> Self {
        Selector {
            requirements: map
                .iter()
                .map(|(k, v)| Requirement {
                    key: k.clone(),
                    op: Op::In(vec![v.clone()]),
                })
                .collect(),
            nothing: false,
        }
    }

    /// Whether a label set is selected.
    #[inline]
    pub fn matches(&self, labels: &Labels) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True when this selector matches every label set.
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }
}

/// One compiled node selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// Requirements on node labels (ANDed).
    pub labels: Vec<Requirement>,
    /// Requirements on `metadata.name` (ANDed).
    pub fields: Vec<Requirement>,
    /// Why the term could not be compiled; such a term matches nothing.
    pub error: Option<SelectorError>,
}

impl Term {
    /// Compiles a `NodeSelectorTerm`; errors are kept in the term (lazy, as upstream).
    pub fn new(term: &NodeSelectorTerm, field: &str) -> Self {
        let mut t = Term {
            labels: Vec::new(),
            fields: Vec::new(),
            error: None,
        };
        let compile = |reqs: &[NodeSelectorRequirement], sub: &str, fields: bool| {
            reqs.iter()
                .enumerate()
                .map(|(i, r)| {
                    let f = format!("{field}.{sub}[{i}]");
                    let values = r.values.as_deref().unwrap_or(&[]);
                    if fields {
                        // Field selectors support only In/NotIn with exactly one value.
                        if r.operator != "In" && r.operator != "NotIn" {
                            return Err(SelectorError {
                                field: f,
                                message: format!(
                                    "operator {:?} is not supported for a node field selector",
                                    r.operator
                                ),
                            });
                        }
                        if values.len() != 1 {
                            return Err(SelectorError {
                                field: f,
                                message: format!(
                                    "unexpected number of values ({}) for node field selector operator {:?}",
                                    values.len(),
                                    r.operator
                                ),
                            });
                        }
                    }
                    Requirement::new(&r.key, &r.operator, values, &f)
                })
                .collect::<Result<Vec<_>, _>>()
        };
        match compile(
            term.match_expressions.as_deref().unwrap_or(&[]),
            "matchExpressions",
            false,
        ) {
            Ok(v) => t.labels = v,
            Err(e) => t.error = Some(e),
        }
        match compile(
            term.match_fields.as_deref().unwrap_or(&[]),
            "matchFields",
            true,
        ) {
            Ok(v) => t.fields = v,
            Err(e) => {
                t.error.get_or_insert(e);
            }
        }
        t
    }

    /// True for a term with no requirements at all (it matches nothing).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && self.error.is_none()
    }

    /// Whether a node (its labels and name) satisfies the term.
    pub fn matches(&self, labels: &Labels, name: &str) -> bool {
        if self.error.is_some() || self.is_empty() {
            return false;
        }
        self.labels.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| {
                let value = if r.key == "metadata.name" {
                    Some(name)
                } else {
                    // Unknown fields read as empty, as fields.Set does.
                    Some("")
                };
                r.matches_value(value)
            })
    }
}

/// Compiled `NodeSelectorTerms` (ORed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSelector {
    /// The terms; an empty list matches nothing.
    pub terms: Vec<Term>,
}

impl NodeSelector {
    /// Compiles a list of terms.
    pub fn new(terms: &[NodeSelectorTerm], field: &str) -> Self {
        NodeSelector {
            terms: terms
                .iter()
                .enumerate()
                .map(|(i, t)| Term::new(t, &format!("{field}[{i}]")))
                .collect(),
        }
    }

    /// Whether any term matches the node.
    pub fn matches(&self, labels: &Labels, name: &str) -> bool {
        self.terms.iter().any(|t| t.matches(labels, name))
    }
}

/// A requirement compiled against a snapshot's node label columns
/// ([`crate::labels::LabelTable`]): the key is a column, the values are value
/// ids, so matching a node is an array read and a comparison of integers.
#[derive(Debug, Clone)]
pub struct CompiledRequirement {
    /// The key's column; `None` when no node has the key (the result is then fixed).
    column: Option<u32>,
    test: ValueTest,
}

#[derive(Debug, Clone)]
enum ValueTest {
    /// The value is one of these ids (an absent value fails).
    In(SmallVec<[u32; 4]>),
    /// The value is none of these ids (an absent value passes).
    NotIn(SmallVec<[u32; 4]>),
    Exists,
    DoesNotExist,
    /// Per value id, whether it passes (`Gt`, `Lt`: decided once per distinct value).
    Table(Vec<bool>),
    /// The same for every node.
    Fixed(bool),
}

impl CompiledRequirement {
    /// Compiles `r` against the node label columns.
    pub fn new(r: &Requirement, labels: &LabelTable) -> CompiledRequirement {
        let Some(column) = labels.key_id(&r.key) else {
            return CompiledRequirement {
                column: None,
                test: ValueTest::Fixed(r.matches_value(None)),
            };
        };
        let dict = &labels.by_id(column).dict;
        let ids = |vs: &[String]| -> SmallVec<[u32; 4]> {
            let mut ids: SmallVec<[u32; 4]> = vs.iter().filter_map(|v| dict.get(v)).collect();
            ids.sort_unstable();
            ids
        };
        let test = match &r.op {
            Op::In(vs) => ValueTest::In(ids(vs)),
            Op::NotIn(vs) => ValueTest::NotIn(ids(vs)),
            Op::Exists => ValueTest::Exists,
            Op::DoesNotExist => ValueTest::DoesNotExist,
            Op::Gt(_) | Op::Lt(_) => {
                let mut pass = vec![false; dict.capacity()];
                for (id, v) in dict.iter() {
                    pass[id as usize] = r.matches_value(Some(v));
                }
                ValueTest::Table(pass)
            }
        };
        CompiledRequirement {
            column: Some(column),
            test,
        }
    }

    /// Whether node `idx` satisfies the requirement.
    #[inline]
    pub fn matches(&self, labels: &LabelTable, idx: u32) -> bool {
        let Some(column) = self.column else {
            return matches!(self.test, ValueTest::Fixed(true));
        };
        let v = labels.by_id(column).at(idx);
        match &self.test {
            ValueTest::In(ids) => v != NONE && ids.contains(&v),
            ValueTest::NotIn(ids) => v == NONE || !ids.contains(&v),
            ValueTest::Exists => v != NONE,
            ValueTest::DoesNotExist => v == NONE,
            ValueTest::Table(pass) => v != NONE && pass.get(v as usize).copied().unwrap_or(false),
            ValueTest::Fixed(b) => *b,
        }
    }
}

/// A label selector compiled against node label columns (all requirements must hold).
#[derive(Debug, Clone)]
pub struct CompiledSelector {
    requirements: Vec<CompiledRequirement>,
    nothing: bool,
}

impl CompiledSelector {
    /// Compiles `s` against the node label columns.
    pub fn new(s: &Selector, labels: &LabelTable) -> CompiledSelector {
        CompiledSelector {
            requirements: s
                .requirements
                .iter()
                .map(|r| CompiledRequirement::new(r, labels))
                .collect(),
            nothing: s.nothing,
        }
    }

    /// Whether node `idx`'s labels are selected.
    #[inline]
    pub fn matches(&self, labels: &LabelTable, idx: u32) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels, idx))
    }
}

/// A `matchFields` requirement, compiled.
#[derive(Debug, Clone)]
enum FieldTest {
    /// `metadata.name` is the name of one of these nodes.
    NameIn(SmallVec<[u32; 2]>),
    /// `metadata.name` is the name of none of these nodes.
    NameNotIn(SmallVec<[u32; 2]>),
    /// Unknown fields read as empty: the result is fixed.
    Fixed(bool),
}

/// A node selector term compiled against node label columns and node names.
#[derive(Debug, Clone)]
pub struct CompiledTerm {
    labels: Vec<CompiledRequirement>,
    fields: Vec<FieldTest>,
    /// Unparsable or empty: matches nothing.
    never: bool,
}

impl CompiledTerm {
    /// Compiles `t`; `index_of` finds a node's index by name.
    pub fn new(
        t: &Term,
        labels: &LabelTable,
        index_of: &dyn Fn(&str) -> Option<u32>,
    ) -> CompiledTerm {
        let fields = t
            .fields
            .iter()
            .map(|r| {
                if r.key != "metadata.name" {
                    return FieldTest::Fixed(r.matches_value(Some("")));
                }
                let ids = |vs: &[String]| vs.iter().filter_map(|v| index_of(v)).collect();
                match &r.op {
                    Op::In(vs) => FieldTest::NameIn(ids(vs)),
                    Op::NotIn(vs) => FieldTest::NameNotIn(ids(vs)),
                    // Node field selectors only take In and NotIn (checked when compiled).
                    _ => FieldTest::Fixed(false),
                }
            })
            .collect();
        CompiledTerm {
            labels: t
                .labels
                .iter()
                .map(|r| CompiledRequirement::new(r, labels))
                .collect(),
            fields,
            never: t.error.is_some() || t.is_empty(),
        }
    }

    /// Whether node `idx` satisfies the term.
    #[inline]
    pub fn matches(&self, labels: &LabelTable, idx: u32) -> bool {
        !self.never
            && self.labels.iter().all(|r| r.matches(labels, idx))
            && self.fields.iter().all(|f| match f {
                FieldTest::NameIn(ids) => ids.contains(&idx),
                FieldTest::NameNotIn(ids) => !ids.contains(&idx),
                FieldTest::Fixed(b) => *b,
            })
    }
}

/// Node selector terms (ORed), compiled.
#[derive(Debug, Clone)]
pub struct CompiledNodeSelector {
    terms: Vec<CompiledTerm>,
}

impl CompiledNodeSelector {
    /// Compiles `ns`; `index_of` finds a node's index by name.
    pub fn new(
        ns: &NodeSelector,
        labels: &LabelTable,
        index_of: &dyn Fn(&str) -> Option<u32>,
    ) -> CompiledNodeSelector {
        CompiledNodeSelector {
            terms: ns
                .terms
                .iter()
                .map(|t| CompiledTerm::new(t, labels, index_of))
                .collect(),
        }
    }

    /// Whether any term matches node `idx`.
    #[inline]
    pub fn matches(&self, labels: &LabelTable, idx: u32) -> bool {
        self.terms.iter().any(|t| t.matches(labels, idx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn requirement_table() {
        let l = labels(&[("zone", "a"), ("gen", "5"), ("bad", "x")]);
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: &[(&str, &str, Vec<String>, bool)] = &[
            ("zone", "In", s(&["a", "b"]), true),
            ("zone", "In", s(&["b"]), false),
            ("missing", "In", s(&["a"]), false),
            ("zone", "NotIn", s(&["a"]), false),
            ("zone", "NotIn", s(&["b"]), true),
            ("missing", "NotIn", s(&["a"]), true),
            ("zone", "Exists", s(&[]), true),
            ("missing", "Exists", s(&[]), false),
            ("zone", "DoesNotExist", s(&[]), false),
            ("missing", "DoesNotExist", s(&[]), true),
            ("gen", "Gt", s(&["4"]), true),
            ("gen", "Gt", s(&["5"]), false),
            ("gen", "Lt", s(&["6"]), true),
            ("gen", "Lt", s(&["5"]), false),
            ("bad", "Gt", s(&["1"]), false),
            ("missing", "Lt", s(&["100"]), false),
        ];
        for (key, op, values, want) in cases {
            let r = Requirement::new(key, op, values, "f").unwrap();
            assert_eq!(r.matches(&l), *want, "{key} {op} {values:?}");
        }
        for (op, values) in [
            ("In", s(&[])),
            ("Exists", s(&["a"])),
            ("Gt", s(&["a"])),
            ("Lt", s(&["1", "2"])),
            ("Foo", s(&[])),
        ] {
            assert!(Requirement::new("k", op, &values, "f").is_err(), "{op}");
        }
    }

    #[test]
    fn label_selector_semantics() {
        let l = labels(&[("app", "web")]);
        assert!(
            !Selector::from_label_selector(None, "s")
                .unwrap()
                .matches(&l)
        );
        let empty: LabelSelector = serde_json::from_value(json!({})).unwrap();
        assert!(
            Selector::from_label_selector(Some(&empty), "s")
                .unwrap()
                .matches(&l)
        );
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        let c = Selector::from_label_selector(Some(&sel), "s").unwrap();
        assert!(c.matches(&l));
        assert!(!c.matches(&labels(&[("app", "web"), ("tier", "x")])));
    }

    #[test]
    fn node_selector_terms() {
        let terms: Vec<NodeSelectorTerm> = serde_json::from_value(json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            {},
            {"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["x"]}]}
        ]))
        .unwrap();
        let ns = NodeSelector::new(&terms, "t");
        let l = labels(&[("zone", "a"), ("gpu", "4")]);
        assert!(ns.matches(&l, "n1"));
        assert!(!ns.matches(&l, "n2"), "fields are ANDed with expressions");
        assert!(ns.terms[1].is_empty());
        assert!(ns.terms[2].error.is_some());
        assert!(!NodeSelector::default().matches(&l, "n1"));
    }
}
