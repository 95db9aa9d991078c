//! Damage testing: a small reference store with every kind of file and value, ways to
//! damage its files, and the check that opening and reading a damaged copy either
//! returns exactly the original contents or an error — never a panic, never different
//! data. Used by the byte-flip sweep and the property test in `tests/it/damage.rs`, and
//! meant as the body of a `cargo fuzz` target:
//!
//! ```no_run
//! // fuzz/fuzz_targets/open_damaged.rs
//! // #![no_main]
//! // libfuzzer_sys::fuzz_target!(|data: &[u8]| {
//!     # let data: &[u8] = &[];
//!     headroom_storage::damage::fuzz_open_damaged(data);
//! // });
//! ```
//!
//! Nothing here is needed to run a store; it is public so that tests and fuzzers outside
//! the crate exercise exactly the same code.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{DecisionKey, Error, Labels, Result, RunRecord, Store, StoreConfig, UsageSummary};

const T0: i64 = 1_700_000_000_000;
const STEP: i64 = 15_000;
const HOUR: i64 = 3_600_000;
const SERIES: usize = 4;
const BUILDERS: [&str; 2] = ["ci/Job/build", "ci/Job/test"];
const PODS: [(&str, &str, &str); 3] = [
    ("ci", "build-1", "uid-1"),
    ("ci", "build-2", "uid-2"),
    ("ci", "test-1", "uid-3"),
];
/// Size of the typed-tree value that sled stores as a separate blob file.
const BLOB_BYTES: usize = 200_000;

/// The configuration the reference store is written and read with (2 h raw retention,
/// so a maintenance pass leaves rollup blocks).
pub fn reference_config() -> StoreConfig {
    StoreConfig {
        raw_retention: Duration::from_secs(2 * 3600),
        ..StoreConfig::default()
    }
}

fn labels(i: usize) -> Labels {
    // Infallible for these names and values; `Labels::new` checks them anyway.
    Labels::new([("node", format!("n{i}")), ("pod", format!("p{i}"))])
        .unwrap_or_else(|_| Labels::default())
}

fn value(i: usize, k: i64) -> f64 {
    ((k * 7919 + i as i64 * 104_729) % 1_000_003) as f64 / 7.0
}

fn appended(store: &Store, from: i64, to: i64) -> Result<()> {
    for k in from..to {
        for i in 0..SERIES {
            store.append("mem", &labels(i), T0 + k * STEP, value(i, k))?;
        }
    }
    Ok(())
}

/// Writes the reference store into `dir` (which must not exist or be empty) in two
/// sessions, as a real store is written: the second reopens it (so sled has a snapshot
/// of the first) and adds to it. Every value kind is present: series definitions, sealed
/// and partial chunks, rollup blocks, log segments, the raw-retention watermark, run
/// records, placements, decision records and both their indexes, typed-tree values
/// (one large enough to be a sled blob file). Everything is flushed.
pub fn write_reference_store(dir: &Path) -> Result<()> {
    {
        let s = Store::open(dir, reference_config())?;
        // 6 h at 15 s: sealed chunks, some older than the raw retention at the pass below.
        appended(&s, 0, 1440)?;
        s.maintain(T0 + 1440 * STEP)?;
        for (i, b) in BUILDERS.iter().enumerate() {
            let summary = |x: f64| UsageSummary {
                mean: x,
                p95: 2.0 * x,
                max: 3.0 * x,
            };
            s.put_run(
                b,
                &RunRecord {
                    pod_uid: format!("uid-{i}"),
                    node: format!("n{i}"),
                    start_ms: T0 + i as i64 * HOUR,
                    end_ms: T0 + (i as i64 + 1) * HOUR,
                    cpu: summary(1.5 + i as f64),
                    memory: summary(1e9 + i as f64),
                },
            )?;
            s.record_placement(b, &format!("n{i}"), 1)?;
            s.record_placement(b, "n3", 1)?;
        }
        s.flush()?;
    }
    let s = Store::open(dir, reference_config())?;
    // 40 more minutes: open chunks that live only in the log, partial checkpoints.
    appended(&s, 1440, 1600)?;
    for (n, (namespace, name, uid)) in PODS.iter().enumerate() {
        let key = DecisionKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
            ts_ms: T0 + n as i64 * 1000,
        };
        s.put_decision(
            &key,
            format!("{{\"node\":\"n{n}\",\"score\":{}}}", 90 - n).as_bytes(),
        )?;
    }
    let small = s.tree::<String>("small")?;
    small.insert("a", &"alpha".to_string())?;
    small.insert("b", &"beta".to_string())?;
    let big = s.tree::<String>("big")?;
    big.insert("blob", &"x".repeat(BLOB_BYTES))?;
    s.flush()?;
    Ok(())
}

/// Everything readable from a store written by [`write_reference_store`], as text: every
/// series with all its samples, rollups and newest sample, runs and placements of every
/// builder, decisions by pod and by uid, and every typed-tree value. Two stores with the
/// same contents give the same text.
pub fn contents(store: &Store) -> Result<String> {
    use std::fmt::Write;
    let mut out = String::new();
    for info in store.select(&[])? {
        let samples = store.query_range(info.id, 0, crate::MAX_TIMESTAMP_MS)?;
        let rollups = store.rollups(info.id, 0, crate::MAX_TIMESTAMP_MS)?;
        let _ = writeln!(
            out,
            "{}{} last={:?} samples={samples:?} rollups={rollups:?}",
            info.metric, info.labels, info.last
        );
    }
    for b in store.builders()? {
        let _ = writeln!(out, "runs {b}: {:?}", store.runs(&b)?);
    }
    for (b, nodes) in store.placement_histories()? {
        let _ = writeln!(out, "placements {b}: {nodes:?}");
    }
    let text = |r: Option<Vec<u8>>| r.map(|b| String::from_utf8_lossy(&b).into_owned());
    for (namespace, name, uid) in PODS {
        let by_pod = text(store.decision_by_pod(namespace, name)?);
        let by_uid = text(store.decision_by_uid(uid)?);
        let _ = writeln!(
            out,
            "decision {namespace}/{name} {by_pod:?} {uid} {by_uid:?}"
        );
    }
    let _ = writeln!(out, "decisions {}", store.decision_count());
    for tree in ["small", "big"] {
        for kv in store.tree::<String>(tree)?.iter() {
            let (k, v) = kv?;
            let _ = writeln!(
                out,
                "tree {tree} {k}: {} bytes, {:x}",
                v.len(),
                crc32fast::hash(v.as_bytes())
            );
        }
    }
    Ok(out)
}

/// One kind of damage to one file (paths relative to the store directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    /// XOR the byte at `offset` with `xor` (≠ 0).
    Flip {
        /// The file.
        file: PathBuf,
        /// Byte offset (taken modulo the file length).
        offset: u64,
        /// Bits to flip.
        xor: u8,
    },
    /// Cut the file to `len` bytes (at most its length).
    Truncate {
        /// The file.
        file: PathBuf,
        /// New length.
        len: u64,
    },
}

impl Damage {
    /// The file damaged.
    pub fn file(&self) -> &Path {
        match self {
            Damage::Flip { file, .. } | Damage::Truncate { file, .. } => file,
        }
    }

    /// Applies the damage to the store in `dir`.
    pub fn apply(&self, dir: &Path) -> std::io::Result<()> {
        let path = dir.join(self.file());
        let mut bytes = std::fs::read(&path)?;
        match self {
            Damage::Flip { offset, xor, .. } => {
                if bytes.is_empty() {
                    return Ok(());
                }
                let at = (*offset % bytes.len() as u64) as usize;
                bytes[at] ^= *xor;
            }
            Damage::Truncate { len, .. } => {
                bytes.truncate((*len).min(bytes.len() as u64) as usize);
            }
        }
        std::fs::write(&path, bytes)
    }
}

/// Every file of the store in `dir`, relative to it, sorted (the marker, sled's `conf`,
/// `db`, `snap.*` and `blobs/*`).
pub fn store_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let path = e?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Copies the directory tree `src` to `dst` (which must not exist).
pub fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let to = dst.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &to)?;
        } else {
            std::fs::copy(e.path(), &to)?;
        }
    }
    Ok(())
}

/// What opening and reading a damaged store gave.
#[derive(Debug)]
pub enum Outcome {
    /// It opened and every value read back exactly as written (the damage hit bytes
    /// nothing reads, such as free space in sled's file or an obsolete blob).
    Intact,
    /// Open or a read returned this error.
    Detected(Error),
    /// It opened and read back **different** contents without an error. Never expected;
    /// the text is the contents read.
    Silent(String),
}

/// Opens the store in `dir` with [`Store::open_existing`] and reads all of it with
/// [`contents`], comparing to `expected`.
pub fn open_and_check(dir: &Path, expected: &str) -> Outcome {
    let store = match Store::open_existing(dir, reference_config()) {
        Ok(s) => s,
        Err(e) => return Outcome::Detected(e),
    };
    match contents(&store) {
        Ok(got) if got == expected => Outcome::Intact,
        Ok(got) => Outcome::Silent(got),
        Err(e) => Outcome::Detected(e),
    }
}

fn scratch_dir(what: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "headroom-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The reference store of this process (written once, into the temporary directory, and
/// left there for the life of the process) and its contents.
fn reference() -> &'static (PathBuf, Vec<PathBuf>, String) {
    static REF: OnceLock<(PathBuf, Vec<PathBuf>, String)> = OnceLock::new();
    REF.get_or_init(|| {
        let dir = scratch_dir("damage-reference");
        let built = write_reference_store(&dir)
            .and_then(|_| contents(&Store::open_existing(&dir, reference_config())?));
        let expected = match built {
            Ok(c) => c,
            Err(e) => panic!("writing the reference store in {}: {e}", dir.display()),
        };
        let files = store_files(&dir).unwrap_or_default();
        (dir, files, expected)
    })
}

/// Decodes fuzzer input into damage: 6 bytes per damage (file index, u32 LE offset,
/// XOR byte; an XOR byte of 0 means "truncate at offset"), at most 8.
pub fn decode_damage(data: &[u8], files: &[PathBuf]) -> Vec<Damage> {
    if files.is_empty() {
        return Vec::new();
    }
    data.chunks_exact(6)
        .take(8)
        .map(|c| {
            let file = files[c[0] as usize % files.len()].clone();
            let offset = u64::from(u32::from_le_bytes([c[1], c[2], c[3], c[4]]));
            match c[5] {
                0 => Damage::Truncate { file, len: offset },
                xor => Damage::Flip { file, offset, xor },
            }
        })
        .collect()
}

/// Copies the store in `src` (whose files are `files` and contents `expected`) to a
/// scratch directory, damages the copy as `data` says (see [`decode_damage`]), opens and
/// reads it, and removes it again.
pub fn check_damaged_copy(src: &Path, files: &[PathBuf], expected: &str, data: &[u8]) -> Outcome {
    let dir = scratch_dir("damage-case");
    let outcome = copy_dir(src, &dir)
        .and_then(|_| {
            for d in decode_damage(data, files) {
                d.apply(&dir)?;
            }
            Ok(())
        })
        .map(|_| open_and_check(&dir, expected));
    let _ = std::fs::remove_dir_all(&dir);
    match outcome {
        Ok(o) => o,
        Err(e) => Outcome::Detected(Error::Io {
            path: dir,
            source: e,
        }),
    }
}

/// Directory of this process's reference store used by [`fuzz_open_damaged`] (written
/// on first use). A caller that wants it gone removes it when done.
pub fn fuzz_reference_dir() -> &'static Path {
    &reference().0
}

/// The fuzz entry point: [`check_damaged_copy`] on this process's reference store
/// (written on the first call into the temporary directory, and left there), panicking
/// if the damaged copy read back different contents without an error. A panic inside the
/// store propagates too, which is what a fuzzer looks for.
pub fn fuzz_open_damaged(data: &[u8]) -> Outcome {
    let (src, files, expected) = reference();
    match check_damaged_copy(src, files, expected, data) {
        Outcome::Silent(got) => panic!(
            "damage {:?} went unnoticed: read back\n{got}",
            decode_damage(data, files)
        ),
        o => o,
    }
}
