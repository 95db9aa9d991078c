//! headroom's integration tests, in one binary (one link step, one process start).

mod api;
mod cli;
mod collect;
mod config_reference;
mod conformance;
mod fuzzing;
mod grafana;
mod kube;
mod layout;
mod prometheus;
mod properties;
mod simulate;
mod spreading;
mod usage;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Output, Stdio};

/// The `headroom` binary under test: cargo's, or `HEADROOM_TEST_BIN` when set (several
/// checkouts sharing one target directory overwrite each other's `target/debug/headroom`;
/// each can test a copy of its own).
pub fn headroom() -> Command {
    match std::env::var_os("HEADROOM_TEST_BIN") {
        Some(bin) => Command::new(bin),
        None => Command::new(env!("CARGO_BIN_EXE_headroom")),
    }
}

/// Runs `headroom` with args.
pub fn run(args: &[&str]) -> Output {
    headroom().args(args).output().expect("run headroom")
}

/// Runs `headroom` with args and checks it exits 0 (its stderr in the failure).
pub fn run_ok(args: &[&str]) -> Output {
    let o = run(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "headroom {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A path under the repository root.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The documentation a reader copies from: `README.md` and every markdown file of `docs/`,
/// each with its path from the repository root (`docs/configuration.md`) and its text, in
/// that order (the docs sorted by name).
pub fn documentation() -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(repo("docs"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| format!("docs/{}", e.file_name().to_str().unwrap()))
        .collect();
    names.sort();
    names.insert(0, "README.md".to_string());
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(repo(&name)).unwrap();
            (name, text)
        })
        .collect()
}

/// Writes `text` to the file `name` in `dir` (a scenario, a config, a pod) and returns its
/// path, as the command lines take it.
pub fn write(dir: impl AsRef<Path>, name: &str, text: impl AsRef<[u8]>) -> String {
    let p = dir.as_ref().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Starts `headroom simulate ARGS --serve LISTEN` and reads its stderr up to the line with
/// the inspection API's address: the child, that address (`http://HOST:PORT`) and the rest
/// of its stderr (the caller reads on or drains it, so the child never blocks writing).
pub fn simulate_serving(args: &[&str], listen: &str) -> (Child, String, BufReader<ChildStderr>) {
    let mut child = headroom()
        .arg("simulate")
        .args(args)
        .args(["--serve", listen])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("simulate --serve exited without printing its address");
        }
        if let Some(a) = line.trim().strip_prefix("serving the inspection API on ") {
            break a.to_string();
        }
    };
    (child, addr, err)
}
