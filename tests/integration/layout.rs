//! The code's shape, checked: no import circle between modules, file by file and between
//! top-level modules, and no function over 150 lines outside tests, in the four crates
//! (`src/`, `scheduler/src/`, `storage/src/`, `collectors/src/`); the scheduling core's
//! dependencies (no HTTP server, kube client, store or dataframe library); and the
//! documented plugin tables (docs/configuration.md) against the registry.
//!
//! What the compiler now enforces is not scanned: the core (`headroom-scheduler`) cannot
//! import an adapter (`kube`, `api`, `simulate`, `engine`, `decisions`, `analytics`, the
//! store, the collectors) because it does not depend on their crates, so the direction
//! core → adapters needs no regex; the scan is left with circles *within* each crate.
//!
//! A module is a file (`a/b.rs` or `a/b/mod.rs` is `a::b`). An edge `a → b` is a
//! `crate::b…` path in `a` (comments and the `#[cfg(test)]` part left out), resolved to the
//! longest module that exists; paths to `a`'s own ancestors do not count (a child using
//! what its parent declares is what a module tree is). Modules compiled for tests only
//! (declared under `#[cfg(test)]`) have no edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{documentation, repo};

const CRATES: [&str; 4] = ["src", "scheduler/src", "storage/src", "collectors/src"];

/// Longest function allowed outside tests.
const MAX_FN_LINES: usize = 150;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The file's code before its `#[cfg(test)]` part, without `//` comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| {
            strip_strings(l)
                .split("//")
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line with string and char literals emptied (so braces and `//` in them do not count).
fn strip_strings(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push_str("\"\"");
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '\'' if matches!(chars.clone().nth(1), Some('\'')) => {
                chars.next();
                chars.next();
                out.push_str("''");
            }
            _ => out.push(c),
        }
    }
    out
}

fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn module_exists(root: &Path, segs: &[&str]) -> bool {
    let base = segs.iter().fold(root.to_path_buf(), |p, s| p.join(s));
    base.with_extension("rs").is_file() || base.join("mod.rs").is_file()
}

/// Every `crate::…` and `super::…` path in `text` (of module `from`), as absolute segments.
fn paths(text: &str, from: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    for (i, _) in text
        .match_indices("crate::")
        .chain(text.match_indices("super::"))
    {
        if text[..i].ends_with(|c: char| ident(c) || c == ':') {
            continue; // inside a longer path: `a::super::` or `super::super::`
        }
        let rest: String = text[i..]
            .chars()
            .take_while(|c| ident(*c) || *c == ':')
            .collect();
        let mut segs: Vec<&str> = rest.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = Vec::new();
        if segs.first() == Some(&"crate") {
            segs.remove(0);
        } else {
            base = from.to_vec();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                base.pop();
            }
        }
        base.extend(segs.iter().map(|s| s.to_string()));
        // A group, `use crate::a::{b::C, d}`: one path per item.
        let after = &text[i + rest.len()..];
        match after.strip_prefix('{').and_then(group_items) {
            Some(items) => {
                for item in items {
                    let mut p = base.clone();
                    let lead = item.split(' ').next().unwrap_or("");
                    p.extend(lead.split("::").filter(|s| !s.is_empty()).map(String::from));
                    out.push(p);
                }
            }
            None => out.push(base),
        }
    }
    out
}

/// The leading paths of a `{…}` group's items (`text` starts after the brace).
fn group_items(text: &str) -> Option<Vec<String>> {
    let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                return Some(items);
            }
            '}' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => {}
        }
        if depth == 0 && (c.is_alphanumeric() || c == '_' || c == ':') {
            item.push(c);
        } else if depth == 0 && !item.is_empty() && !item.ends_with(' ') && c != ',' {
            // `a as b` or `a::{…}`: the path ends here.
            item.push(' ');
        }
    }
    None
}

/// Whether module `m` is compiled for tests only: its parent declares it under
/// `#[cfg(test)]` (a test helper such as `plugins::testutil` may import anything).
fn test_only(root: &Path, m: &[String]) -> bool {
    let Some((name, parent)) = m.split_last() else {
        return false;
    };
    let dir = parent.iter().fold(root.to_path_buf(), |p, s| p.join(s));
    let decl = if parent.is_empty() {
        ["lib.rs", "main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .collect::<Vec<_>>()
    } else {
        vec![dir.with_extension("rs"), dir.join("mod.rs")]
    };
    decl.iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .any(|text| {
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            // `#[cfg(test)]`, or a test helper other crates' tests enable by a feature.
            let test_cfg = |l: &str| {
                l == "#[cfg(test)]"
                    || (l.starts_with("#[cfg(any(test, feature = ") && l.ends_with("))]"))
            };
            lines
                .windows(2)
                .any(|w| test_cfg(w[0]) && w[1].ends_with(&format!("mod {name};")))
        })
}

/// Every module's outgoing edges (modules compiled for tests only left out).
fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let from = module_of(root, &f);
        if from.is_empty() || test_only(root, &from) {
            continue;
        }
        let from_name = from.join("::");
        let text = code(&f);
        for path in paths(&text, &from) {
            let segs: Vec<&str> = path.iter().map(String::as_str).collect();
            let Some(k) = (1..=segs.len())
                .rev()
                .find(|&k| module_exists(root, &segs[..k]))
            else {
                continue;
            };
            let to = segs[..k].join("::");
            let ancestor = from_name == to || from_name.starts_with(&format!("{to}::"));
            if !ancestor {
                edges.entry(from_name.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// One cycle of the graph, if any (depth-first search with colours).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        stack.push(v.to_string());
        for w in edges.get(v).into_iter().flatten() {
            match state.get(w.as_str()).copied().unwrap_or(0) {
                0 => {
                    if let Some(c) = visit(w, edges, state, stack) {
                        return Some(c);
                    }
                }
                1 => {
                    let start = stack.iter().position(|s| s == w).unwrap();
                    let mut c = stack[start..].to_vec();
                    c.push(w.clone());
                    return Some(c);
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in edges.keys() {
        if state.get(v.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(v, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// The graph with every module folded into its top-level module (`usage::node` into
/// `usage`), edges within one module dropped.
fn top_level(edges: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            if top(from) != top(to) {
                out.entry(top(from)).or_default().insert(top(to));
            }
        }
    }
    out
}

/// No circle between top-level modules either: the layers ARCHITECTURE.md describes
/// (`key` and `usage_context` below `snapshot`, `snapshot` below `framework`, the usage
/// readers of `usage` above both) hold as modules, not only file by file.
#[test]
fn no_import_circle_between_top_level_modules() {
    for krate in CRATES {
        let edges = top_level(&graph(&repo(krate)));
        if krate == "scheduler/src" {
            // The scan sees the layers' real edges.
            assert!(edges["usage"].contains("snapshot"), "{edges:?}");
            assert!(edges["snapshot"].contains("usage_context"), "{edges:?}");
        }
        if let Some(c) = find_cycle(&edges) {
            panic!(
                "{krate}: import circle between top-level modules {}",
                c.join(" → ")
            );
        }
    }
}

#[test]
fn no_import_circle_between_modules() {
    for krate in CRATES {
        let edges = graph(&repo(krate));
        assert!(edges.len() > 5, "{krate}: the scan found no modules");
        if krate == "src" {
            // The scan sees real edges: the reporter writes through the event recorder.
            assert!(
                edges["kube::events"].contains("kube::recorder"),
                "{edges:?}"
            );
        }
        if let Some(c) = find_cycle(&edges) {
            panic!("{krate}: import circle {}", c.join(" → "));
        }
    }
}

/// The `[dependencies]` of a crate's manifest: the names before `=` or `.workspace`.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo(manifest)).unwrap();
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.']).next().unwrap().trim();
            out.insert(name.to_string());
        }
    }
    out
}

/// The scheduling core depends on no HTTP server or client, no kube client, no store and no
/// dataframe library, and on no other headroom crate; the adapters depend on it. Together
/// with Cargo refusing dependency cycles, a wrong-way import cannot compile.
#[test]
fn the_core_depends_on_no_adapter() {
    let core = dependencies("scheduler/Cargo.toml");
    assert!(
        core.contains("k8s-openapi"),
        "the scan read the core's manifest: {core:?}"
    );
    for banned in [
        "axum",
        "hyper",
        "hyper-util",
        "reqwest",
        "kube",
        "sled",
        "polars",
        "tokio-rustls",
        "headroom-storage",
        "headroom-collectors",
    ] {
        assert!(!core.contains(banned), "the core depends on {banned}");
    }
    for adapter in ["Cargo.toml", "collectors/Cargo.toml"] {
        assert!(
            dependencies(adapter).contains("headroom-scheduler"),
            "{adapter} does not depend on the core"
        );
    }
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(find_cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
    edges.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&edges), None);
}

/// Functions (`fn` items outside the `#[cfg(test)]` part) longer than [`MAX_FN_LINES`].
fn long_functions(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut out = Vec::new();
    for f in files {
        let text = code(&f);
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let t = lines[i].trim_start();
            let t = t.strip_prefix("pub ").unwrap_or(t);
            let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
            let t = t.strip_prefix("pub(super) ").unwrap_or(t);
            let t = t.strip_prefix("async ").unwrap_or(t);
            let t = t.strip_prefix("const ").unwrap_or(t);
            if !t.starts_with("fn ") {
                i += 1;
                continue;
            }
            let (mut depth, mut started, mut j) = (0i32, false, i);
            while j < lines.len() {
                for c in lines[j].chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            started = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (started && depth == 0) || (!started && lines[j].trim_end().ends_with(';')) {
                    break;
                }
                j += 1;
            }
            let n = j - i + 1;
            if n > MAX_FN_LINES {
                out.push(format!("{}:{} {} lines", f.display(), i + 1, n));
            }
            i = j + 1;
        }
    }
    out
}

#[test]
fn no_function_over_150_lines_outside_tests() {
    // The workload crate too (two files: too small for the import-circle scan).
    for krate in CRATES.iter().chain(&["workload/src"]) {
        let long = long_functions(&repo(krate));
        assert!(long.is_empty(), "{krate}: {long:#?}");
    }
}

/// The plugin tables (`| plugin | points | weight | default | what |`) of
/// docs/configuration.md list each of headroom's own plugins once, with the extension points,
/// default weight and default state of its registry row: adding a plugin is its file and one
/// registry row, and the docs cannot drift from them. Any other doc (the README, `docs/*.md`)
/// that shows such tables is held to the same.
#[test]
fn plugin_tables_in_the_docs_match_the_registry() {
    let mut checked = Vec::new();
    for (doc, text) in documentation() {
        let rows = own_plugin_rows(&doc, &text);
        if rows.is_empty() {
            continue;
        }
        check_own_plugin_rows(&doc, rows);
        checked.push(doc);
    }
    assert!(
        checked.iter().any(|d| d == "docs/configuration.md"),
        "docs/configuration.md documents headroom's own plugins in tables; docs with them: {checked:?}"
    );
}

/// The rows of `text`'s `| plugin | points | weight | default |` tables: name to (points,
/// weight, default).
fn own_plugin_rows(doc: &str, text: &str) -> BTreeMap<String, (String, String, String)> {
    let mut rows: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| plugin | points | weight | default |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (name, points, weight, default) = (cells[1], cells[2], cells[3], cells[4]);
        let row = (points.to_string(), weight.to_string(), default.to_string());
        assert!(
            rows.insert(name.to_string(), row).is_none(),
            "{doc} lists {name} twice"
        );
    }
    rows
}

/// `doc`'s rows name every own plugin of the registry once, as its row says, and nothing else.
fn check_own_plugin_rows(doc: &str, mut rows: BTreeMap<String, (String, String, String)>) {
    let own: Vec<_> = headroom_scheduler::plugins::KNOWN_PLUGINS
        .iter()
        .filter(|k| !k.upstream)
        .collect();
    assert!(own.len() >= 10, "the registry has headroom's own plugins");
    for k in &own {
        let (points, weight, default) = rows
            .remove(k.name)
            .unwrap_or_else(|| panic!("{doc}'s plugin tables lack {}", k.name));
        let want_points: Vec<String> = k.points.iter().map(|p| format!("{p:?}")).collect();
        assert_eq!(points, want_points.join(", "), "{doc}: {}: points", k.name);
        let want_weight = if k.weight == 0 {
            String::new()
        } else {
            k.weight.to_string()
        };
        assert_eq!(weight, want_weight, "{doc}: {}: default weight", k.name);
        let on = default == "on" || default.starts_with("on,");
        assert!(
            on == k.default_enabled && (on || default == "off"),
            "{}: {doc} says default {default:?}, the registry {}",
            k.name,
            k.default_enabled
        );
    }
    assert!(
        rows.is_empty(),
        "{doc} lists plugins the registry lacks: {rows:?}"
    );
}
