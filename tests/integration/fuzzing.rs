//! Every fuzz target (`headroom::fuzzing`, the bodies of `fuzz/`'s cargo-fuzz binaries) run
//! in CI: over its seed corpus (`fuzz/seeds.txt`, `fuzz/seeds/TARGET/`) and a bounded,
//! deterministic series of mutations of it (bit flips, interesting bytes, deletions,
//! duplications, splices between seeds, truncations). Not coverage-guided — the long
//! libFuzzer runs are `scripts/fuzz.sh` — but the same code on the same seeds, so a
//! shallow panic or a target that stops compiling fails CI.
//!
//! A panic names the target and writes the input under `target/fuzz-failures/`, to replay
//! with `cargo fuzz run -s none TARGET FILE`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::repo;

/// Mutations per target at most, and the wall-clock budget that may cut them short on a
/// slow machine (the series is deterministic, so a cut run is a prefix of a full one).
const MUTATIONS: usize = 3_000;
const BUDGET: Duration = Duration::from_secs(20);

/// `*`, `?` and `[a-z]` within one path component.
fn matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            matches(&pattern[1..], name) || (!name.is_empty() && matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => matches(&pattern[1..], &name[1..]),
        (Some(b'['), Some(&c)) => {
            let Some(end) = pattern.iter().position(|&b| b == b']') else {
                return false;
            };
            let class = &pattern[1..end];
            let hit = class
                .windows(3)
                .any(|w| w[1] == b'-' && (w[0]..=w[2]).contains(&c))
                || class.contains(&c);
            hit && matches(&pattern[end + 1..], &name[1..])
        }
        (Some(p), Some(n)) => p == n && matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// The files under `root` that `pattern` (components separated by `/`) names.
fn glob(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![root.to_path_buf()];
    for component in pattern.split('/') {
        let mut next = Vec::new();
        for dir in &found {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                if matches(component.as_bytes(), e.file_name().as_encoded_bytes()) {
                    next.push(e.path());
                }
            }
        }
        found = next;
    }
    found.retain(|p| p.is_file());
    found.sort();
    found
}

/// `target`'s seeds, from `fuzz/seeds.txt` and `fuzz/seeds/<target>/`.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let root = repo("");
    let list = std::fs::read_to_string(repo("fuzz/seeds.txt")).unwrap();
    let mut out = Vec::new();
    for line in list.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(t), Some(pattern)) = (words.next(), words.next()) else {
            panic!("fuzz/seeds.txt: `{line}`: TARGET GLOB [SELECTOR]");
        };
        if t != target {
            continue;
        }
        let selector: Option<u8> = words.next().map(|s| s.parse().unwrap());
        let files = glob(&root, pattern);
        assert!(!files.is_empty(), "fuzz/seeds.txt: {pattern} names no file");
        for f in files {
            let mut bytes: Vec<u8> = selector.into_iter().collect();
            bytes.extend(std::fs::read(&f).unwrap());
            out.push(bytes);
        }
    }
    if let Ok(entries) = std::fs::read_dir(repo("fuzz/seeds").join(target)) {
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        out.extend(files.iter().map(|f| std::fs::read(f).unwrap()));
    }
    out
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that parsers of YAML, JSON, quantities and exposition text branch on.
const INTERESTING: &[u8] = b"\0\xff-+.:{}[]\",'\n #0123456789eEiKMGTPm*&!|>";

/// One to four random edits of a seed.
fn mutate(seed: &[u8], others: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = d.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                d[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                d.drain(a..b);
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                let chunk = d[a..b].to_vec();
                let at = rng.below(len);
                d.splice(at..at, chunk);
            }
            4 => {
                let other = &others[rng.below(others.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = (a + 1 + rng.below(256)).min(other.len());
                    let at = rng.below(len + 1);
                    d.splice(at..at, other[a..b].iter().copied());
                }
            }
            5 if len > 0 => d.truncate(rng.below(len)),
            _ => {
                let at = rng.below(len + 1);
                let digits = format!("{}", rng.next() as i64 >> rng.below(64));
                d.splice(at..at, digits.bytes());
            }
        }
    }
    d
}

/// Runs `body` on every seed, then on mutations until [`MUTATIONS`] or [`BUDGET`].
fn run(target: &str, body: fn(&[u8])) {
    let seeds = seeds(target);
    let inputs = if seeds.is_empty() {
        vec![Vec::new()]
    } else {
        seeds.clone()
    };
    let check = |input: &[u8]| {
        if std::panic::catch_unwind(|| body(input)).is_err() {
            let dir = repo("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{target}-{:016x}", fnv(input)));
            let _ = std::fs::write(&file, input);
            panic!(
                "fuzz target {target} panicked on {} bytes (written to {}; replay with \
                 `cargo fuzz run -s none {target} {}`): {:?}",
                input.len(),
                file.display(),
                file.display(),
                String::from_utf8_lossy(&input[..input.len().min(300)])
            );
        }
    };
    for s in &inputs {
        check(s);
    }
    let start = Instant::now();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ fnv(target.as_bytes()));
    let mut done = 0;
    while done < MUTATIONS && start.elapsed() < BUDGET {
        let seed = &inputs[rng.below(inputs.len())];
        check(&mutate(seed, &inputs, &mut rng));
        done += 1;
    }
    eprintln!(
        "fuzz target {target}: {} seeds, {done} mutations in {:.1} s",
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(done > 0, "{target}: no mutation ran");
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Every target of `headroom::fuzzing::TARGETS` has a test here (and a cargo-fuzz binary).
#[test]
fn every_fuzz_target_has_a_ci_run_and_a_cargo_fuzz_binary() {
    let here = std::fs::read_to_string(repo("tests/integration/fuzzing.rs")).unwrap();
    let manifest = std::fs::read_to_string(repo("fuzz/Cargo.toml")).unwrap();
    for (name, _) in headroom::fuzzing::TARGETS {
        assert!(
            here.contains(&format!("fuzz_{name} => {name}")),
            "no CI run for {name}"
        );
        assert!(
            manifest.contains(&format!("path = \"fuzz_targets/{name}.rs\"")),
            "no cargo-fuzz binary for {name}"
        );
    }
}

#[test]
fn seed_globs_match_like_the_shell() {
    assert!(matches(b"0[0-4]?", b"042"));
    assert!(!matches(b"0[0-4]?", b"052"));
    assert!(matches(b"seed-00*", b"seed-003-databases"));
    assert!(!matches(b"*.json", b"a.yaml"));
}

macro_rules! targets {
    ($($test:ident => $name:ident),* $(,)?) => {$(
        #[test]
        fn $test() {
            run(stringify!($name), headroom::fuzzing::$name);
        }
    )*};
}

targets! {
    fuzz_quantity => quantity,
    fuzz_objects => objects,
    fuzz_usage_file => usage_file,
    fuzz_scenario => scenario,
    fuzz_family => family,
    fuzz_config => config,
    fuzz_kubelet_summary => kubelet_summary,
    fuzz_prometheus_response => prometheus_response,
    fuzz_exposition => exposition,
    fuzz_extender_args => extender_args,
    fuzz_store_open => store_open,
    fuzz_watch_objects => watch_objects,
}
