//! Property tests over every parser of untrusted bytes: mutations of real inputs (the
//! bundled examples, recorded kube-scheduler cases and extender requests) never panic, and
//! a rejected input is an `Err` with a message. A bounded number of cases per parser keeps
//! the suite fast; `scripts/fuzz.sh` runs the same parsers under cargo-fuzz for longer.
//!
//! Mutations work on the parsed document (replace or delete one node with an interesting
//! value: negative, huge, non-finite, empty, very long, wrong type) and on the bytes
//! (insert a YAML/JSON token, overwrite bytes, truncate), so both the schema checks and
//! the parsers themselves are reached.

use std::sync::Arc;

use headroom::config::Config;
use headroom::config::serve::ExtenderConfig;
use headroom::kube::extender::{ExtenderArgs, ExtenderBindingArgs, ExtenderState, parse};
use headroom::place::{PlaceOptions, place_objects};
use headroom::simulate::Scenario;
use headroom_scheduler::objects::Objects;
use headroom_scheduler::plugins::{PluginDeps, build_framework_with};
use headroom_scheduler::quantity::{Quantity, format_bytes, format_milli};
use headroom_scheduler::snapshot::Snapshot;
use headroom_scheduler::usage::file::UsageFile;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::repo;

/// One change to a seed document.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the n-th node (pre-order, modulo the count) with the i-th interesting value.
    Replace(usize, usize),
    /// Delete the n-th node from its parent.
    Delete(usize),
    /// Insert the i-th token at byte n of the rendered text.
    Insert(usize, usize),
    /// Overwrite the byte at n.
    Byte(usize, u8),
    /// Keep the first n bytes (modulo the length).
    Truncate(usize),
}

fn interesting() -> Vec<Value> {
    vec![
        json!(-1),
        json!("-1"),
        json!(0),
        json!("0"),
        json!(1e300),
        json!("1e300"),
        json!("-1Gi"),
        json!("100E"),
        json!("9E"),
        json!("1e-300"),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(""),
        json!("Not_A-Name"),
        json!("x".repeat(300)),
        json!("ünïcödé/ключ"),
        Value::Null,
        json!(true),
        json!([]),
        json!({}),
        json!([1, "a", null]),
        json!({"a": {"b": [1]}}),
        json!("NaN"),
        json!("10000000000h"),
        json!("500us"),
        json!(0.5),
        json!(7),
    ]
}

const TOKENS: &[&str] = &[
    "\n",
    " ",
    ":",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\"",
    "'",
    "#",
    "&a ",
    "*a",
    "!!binary ",
    "~",
    ".inf",
    "-.inf",
    ".nan",
    "0x1F",
    "-1",
    "1e309",
    "---\n",
    "\t",
    "? ",
    "|\n  ",
    "\\u0000",
];

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(m) => m.values().map(count).sum(),
        _ => 0,
    }
}

/// Applies `f` to the n-th node's parent slot: `Some(parent, key)`.
fn edit(v: &mut Value, n: &mut usize, f: &mut dyn FnMut(&mut Value, Option<&str>, usize)) -> bool {
    match v {
        Value::Array(a) => {
            for i in 0..a.len() {
                if *n == 0 {
                    f(v, None, i);
                    return true;
                }
                *n -= 1;
                let Value::Array(a) = v else { unreachable!() };
                if edit(&mut a[i], n, f) {
                    return true;
                }
            }
            false
        }
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if *n == 0 {
                    f(v, Some(&k), 0);
                    return true;
                }
                *n -= 1;
                let Value::Object(m) = v else { unreachable!() };
                if edit(m.get_mut(&k).expect("key"), n, f) {
                    return true;
                }
            }
            false
        }
        _ => false,
    }
}

/// A seed after mutations, as text (JSON when the document was changed, which YAML reads
/// too; the seed's own text otherwise).
fn mutate(seed: &str, mutations: &[Mutation]) -> String {
    let values = interesting();
    let mut doc: Option<Value> = serde_norway::from_str(seed).ok();
    let mut changed = false;
    let mut bytes: Option<Vec<u8>> = None;
    for m in mutations {
        match (m, &mut doc, &mut bytes) {
            (Mutation::Replace(n, i), Some(d), None) => {
                let mut n = n % count(d).max(1);
                let new = values[i % values.len()].clone();
                if n == 0 {
                    *d = new;
                } else {
                    n -= 1;
                    edit(d, &mut n, &mut |parent, key, idx| match (parent, key) {
                        (Value::Object(m), Some(k)) => {
                            m.insert(k.to_string(), new.clone());
                        }
                        (Value::Array(a), None) => a[idx] = new.clone(),
                        _ => {}
                    });
                }
                changed = true;
            }
            (Mutation::Delete(n), Some(d), None) => {
                let mut n = n % count(d).max(1);
                edit(d, &mut n, &mut |parent, key, idx| match (parent, key) {
                    (Value::Object(m), Some(k)) => {
                        m.remove(k);
                    }
                    (Value::Array(a), None) => {
                        a.remove(idx);
                    }
                    _ => {}
                });
                changed = true;
            }
            (Mutation::Replace(..) | Mutation::Delete(_), _, _) => {}
            (byte_level, _, _) => {
                let b = bytes.get_or_insert_with(|| match (&doc, changed) {
                    (Some(d), true) => serde_json::to_vec(d).unwrap_or_default(),
                    _ => seed.as_bytes().to_vec(),
                });
                match byte_level {
                    Mutation::Insert(n, i) => {
                        let at = n % (b.len() + 1);
                        let t = TOKENS[i % TOKENS.len()].as_bytes();
                        b.splice(at..at, t.iter().copied());
                    }
                    Mutation::Byte(n, x) if !b.is_empty() => {
                        let at = n % b.len();
                        b[at] = *x;
                    }
                    Mutation::Truncate(n) => {
                        let keep = n % (b.len() + 1);
                        b.truncate(keep);
                    }
                    _ => {}
                }
            }
        }
    }
    match (bytes, doc, changed) {
        (Some(b), _, _) => String::from_utf8_lossy(&b).into_owned(),
        (None, Some(d), true) => serde_json::to_string(&d).unwrap_or_default(),
        _ => seed.to_string(),
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<usize>()).prop_map(|(n, i)| Mutation::Replace(n, i)),
        2 => any::<usize>().prop_map(Mutation::Delete),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(n, i)| Mutation::Insert(n, i)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(n, b)| Mutation::Byte(n, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// A seed (by index into `seeds`) and 1–3 mutations of it.
fn mutated(seeds: Vec<String>) -> impl Strategy<Value = String> {
    let n = seeds.len();
    (0..n, prop::collection::vec(mutation(), 1..4)).prop_map(move |(i, ms)| mutate(&seeds[i], &ms))
}

fn read(paths: &[&str]) -> Vec<String> {
    paths
        .iter()
        .map(|p| std::fs::read_to_string(repo(p)).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect()
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        // Failures are reported with the minimal input; no persistence files in the tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn cluster_seeds() -> Vec<String> {
    let mut s = read(&[
        "examples/cluster.yaml",
        "examples/pods.yaml",
        "examples/seed-002/cluster.yaml",
        "examples/seed-003/cluster.yaml",
    ]);
    for case in ["000", "042", "100", "127"] {
        let dir = format!("tests/fixtures/kube-scheduler-cases/{case}");
        if let Ok(c) = std::fs::read_to_string(repo(&format!("{dir}/cluster.yaml"))) {
            let pod = std::fs::read_to_string(repo(&format!("{dir}/pod.yaml"))).unwrap_or_default();
            s.push(format!("{c}\n---\n{pod}"));
        }
    }
    s
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn quantities_never_panic(
        s in prop_oneof![
            "[-+]?[0-9]{0,40}(\\.[0-9]{0,40})?([eE][-+]?[0-9]{1,6}|[KMGTPE]i|[numkMGTPE])?",
            "\\PC{0,24}",
        ]
    ) {
        match Quantity::parse(&s) {
            Ok(q) => {
                let _ = (q.value(), q.milli_value(), q.nano_value(), q.to_string());
                let _ = (format_bytes(q.value()), format_milli(q.milli_value()));
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}

proptest! {
    #![proptest_config(cases(160))]

    /// Cluster and pod manifests: read, then placed and rendered as `place` does.
    #[test]
    fn objects_never_panic(text in mutated(cluster_seeds())) {
        match Objects::parse(&text, "fuzz.yaml") {
            Ok(objects) => {
                let mut config = Config::default();
                config.scheduler.seed = Some(1);
                let report = place_objects(&config, &objects, &objects, &PlaceOptions::default())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let _ = report.to_text();
                prop_assert!(serde_json::to_string(&report.results).is_ok());
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.starts_with("fuzz.yaml: "), "{m}");
            }
        }
    }

    #[test]
    fn usage_files_never_panic(
        text in mutated(read(&["examples/seed-000/usage.yaml", "examples/seed-002/usage.yaml"]))
    ) {
        if let Err(e) = UsageFile::parse(&text, "fuzz.yaml", 0) {
            let m = e.to_string();
            prop_assert!(m.starts_with("fuzz.yaml: "), "{m}");
        }
    }

    #[test]
    fn scenarios_never_panic(
        text in mutated(read(&[
            "examples/ci-farm.yaml",
            "examples/ci-farm-small.yaml",
            "examples/databases.yaml",
            "examples/reservations.yaml",
        ]))
    ) {
        if let Err(e) = Scenario::parse(&text, "fuzz.yaml") {
            let m = e.to_string();
            prop_assert!(m.starts_with("fuzz.yaml: "), "{m}");
        }
    }

    #[test]
    fn configs_never_panic(text in mutated(read(&["examples/config.yaml"]))) {
        match headroom::config::config_from_yaml(&text, "fuzz.yaml") {
            // The configuration, and the effective one (plugin args filled in), read back
            // as themselves.
            Ok(c) => {
                let again = Config::from_yaml(&c.to_yaml(), "again")
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&again, &c);
                let effective = headroom::config::effective(&c);
                let again = headroom::config::config_from_yaml(&effective.to_yaml(), "again")
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(headroom::config::effective(&again), effective);
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.contains("fuzz.yaml: ") || m.starts_with("invalid configuration"), "{m}");
            }
        }
    }
}

fn extender_state() -> ExtenderState {
    let (nodes, pods) = headroom_scheduler::synthetic::cluster(6, 3, 1);
    let snap = Arc::new(Snapshot::build(nodes, pods));
    let cfg: ExtenderConfig = serde_norway::from_str(
        "plugins: {TaintToleration: {enabled: true}, NodeResourcesFit: {enabled: true}}",
    )
    .unwrap();
    let fw = build_framework_with(&cfg.profile(), &PluginDeps::default()).unwrap();
    ExtenderState {
        framework: Arc::new(fw),
        snapshot: Arc::new(move || snap.clone()),
        binder: None,
        settle: None,
        recent: Default::default(),
        metrics: Default::default(),
    }
}

fn extender_seeds() -> Vec<String> {
    let dir = repo("tests/fixtures/kube-captures/kube-scheduler-extender");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            out.push(v["request"].to_string());
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(cases(256))]

    /// Extender request bodies: parsed, then answered (filter, prioritize) without panic;
    /// every name of the request is answered exactly once.
    #[test]
    fn extender_requests_never_panic(text in mutated(extender_seeds())) {
        let state = extender_state();
        match parse::<ExtenderArgs>("ExtenderArgs", text.as_bytes()) {
            Ok(args) => {
                let names = args.node_names.as_ref().map(Vec::len);
                if let Ok(r) = state.filter(args.clone())
                    && let (Some(n), Some(passed)) = (names, r.node_names.as_ref())
                    && r.error.is_empty()
                {
                    let unique: std::collections::BTreeSet<&String> = args.node_names.iter().flatten().collect();
                    prop_assert!(passed.len() <= n);
                    prop_assert!(
                        passed.len() + r.failed_nodes.len() + r.failed_and_unresolvable_nodes.len() >= unique.len()
                    );
                }
                let _ = state.prioritize(args);
            }
            Err(e) => prop_assert!(e.to_string().starts_with("invalid ExtenderArgs")),
        }
        let _ = parse::<ExtenderBindingArgs>("ExtenderBindingArgs", text.as_bytes());
    }
}
