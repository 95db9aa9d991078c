//! The configuration reference (docs/configuration-reference.md) is what the code generates:
//! a field added, renamed or re-documented without regenerating the file fails here.

use super::{repo, run_ok};

/// The checked-in reference is `headroom config-reference`'s output.
#[test]
fn config_reference_doc_is_the_generated_one() {
    let generated = headroom::config::reference::markdown();
    let file =
        std::fs::read_to_string(repo("docs/configuration-reference.md")).unwrap_or_else(|e| {
            panic!(
                "docs/configuration-reference.md: {e}; generate it with `{}`",
                headroom::config::reference::REGENERATE
            )
        });
    if file != generated {
        let first = file
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| file.lines().count().min(generated.lines().count()));
        panic!(
            "docs/configuration-reference.md differs from what the configuration's types \
             generate (first at line {}):\n  file:      {}\n  generated: {}\nregenerate it with `{}`",
            first + 1,
            file.lines().nth(first).unwrap_or("(end of file)"),
            generated.lines().nth(first).unwrap_or("(end of output)"),
            headroom::config::reference::REGENERATE
        );
    }
    let out = run_ok(&["config-reference"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), file);
}

/// Every field path of the reference is one the configuration accepts: setting a scalar
/// field (outside lists, maps and optional sections) to its documented default loads.
#[test]
fn config_reference_paths_are_accepted() {
    let fields = headroom::config::reference::fields();
    let mut set = 0;
    for f in &fields {
        let Some(value) = f
            .default
            .strip_prefix('`')
            .and_then(|d| d.strip_suffix('`'))
        else {
            continue;
        };
        // Inside a list item, a map or a section absent by default (`collectors.kubelet`),
        // setting the field would add what the default lacks.
        let keys: Vec<&str> = f.path.split('.').collect();
        let in_present_sections = (1..keys.len()).all(|n| {
            let prefix = keys[..n].join(".");
            fields.iter().any(|g| g.path == prefix && g.default == "—")
        });
        if f.path.contains("[]") || f.path.contains("<name>") || !in_present_sections {
            continue;
        }
        // The path as nested flow mappings: `serve.leaderElection.leaseDuration: 15s` is
        // `{serve: {leaderElection: {leaseDuration: 15s}}}`.
        let mut yaml = value.to_string();
        for key in keys.iter().rev() {
            yaml = format!("{{{key}: {yaml}}}");
        }
        let config = headroom::config::Config::from_yaml(&yaml, "reference")
            .unwrap_or_else(|e| panic!("{}: {yaml}: {e}", f.path));
        assert_eq!(
            config,
            headroom::config::Config::default(),
            "{}: its documented default is not the default",
            f.path
        );
        set += 1;
    }
    assert!(set > 60, "{set} fields set");
}
