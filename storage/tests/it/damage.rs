//! Damaged stores: a systematic byte-flip and truncation sweep over every file of a small
//! store, and a property test of random damage (through the public fuzz entry point).
//!
//! The rule in both: opening and reading a damaged store either gives back exactly what
//! was written or returns an error. It never panics and never returns different data.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use headroom_storage::damage::{
    Damage, Outcome, check_damaged_copy, contents, copy_dir, decode_damage, fuzz_open_damaged,
    fuzz_reference_dir, open_and_check, reference_config, store_files, write_reference_store,
};
use headroom_storage::{Error, MARKER_FILE, Store};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

/// Flips per file in the sweep (evenly spaced, cycling through the 8 bit positions).
const FLIPS_PER_FILE: u64 = 40;

#[derive(Default, Debug)]
struct Tally {
    tried: u32,
    intact: u32,
    detected: u32,
    silent: Vec<String>,
    panicked: Vec<String>,
    /// How the detected cases were reported (error text without paths), with counts.
    reported: BTreeMap<String, u32>,
}

/// An error's message with the temporary path and numbers removed, for grouping.
fn kind(e: &headroom_storage::Error, dir: &Path) -> String {
    let text = e.to_string().replace(&dir.display().to_string(), "<dir>");
    let text: String = text
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    // Up to the details in parentheses (checksums, sizes) and the advice at the end.
    let text = text.split(" (").next().unwrap_or_default();
    text.split("; refusing")
        .next()
        .unwrap_or_default()
        .chars()
        .take(120)
        .collect()
}

fn reference(dir: &Path) -> String {
    write_reference_store(dir).unwrap();
    contents(&Store::open_existing(dir, reference_config()).unwrap()).unwrap()
}

/// Copies the store, damages the copy, opens and reads it.
fn try_damage(src: &Path, expected: &str, damage: &Damage, tally: &mut Tally) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    copy_dir(src, &dir).unwrap();
    damage.apply(&dir).unwrap();
    tally.tried += 1;
    match catch_unwind(AssertUnwindSafe(|| open_and_check(&dir, expected))) {
        Ok(Outcome::Intact) => tally.intact += 1,
        Ok(Outcome::Detected(e)) => {
            tally.detected += 1;
            *tally.reported.entry(kind(&e, &dir)).or_default() += 1;
        }
        Ok(Outcome::Silent(_)) => tally.silent.push(format!("{damage:?}")),
        Err(_) => tally.panicked.push(format!("{damage:?}")),
    }
}

fn damages(file: &Path, len: u64) -> Vec<Damage> {
    let mut out: Vec<Damage> = (0..FLIPS_PER_FILE.min(len))
        .map(|k| Damage::Flip {
            file: file.to_path_buf(),
            offset: k * len / FLIPS_PER_FILE.min(len),
            xor: 1 << (k % 8),
        })
        .collect();
    for cut in [0, len / 2, len.saturating_sub(1)] {
        out.push(Damage::Truncate {
            file: file.to_path_buf(),
            len: cut,
        });
    }
    out
}

/// Sweeps the store in `src` (whose contents are `expected`); returns the tallies per file.
fn sweep(src: &Path, expected: &str) -> BTreeMap<PathBuf, Tally> {
    let mut per_file: BTreeMap<PathBuf, Tally> = BTreeMap::new();
    for file in store_files(src).unwrap() {
        let len = std::fs::metadata(src.join(&file)).unwrap().len();
        let tally = per_file.entry(file.clone()).or_default();
        for d in damages(&file, len) {
            try_damage(src, expected, &d, tally);
        }
    }
    per_file
}

fn report_and_check(variant: &str, per_file: &BTreeMap<PathBuf, Tally>) {
    println!(
        "{variant}: file: tried / detected / intact (harmless) / silently accepted / panicked"
    );
    for (file, t) in per_file {
        println!(
            "  {}: {} / {} / {} / {} / {}",
            file.display(),
            t.tried,
            t.detected,
            t.intact,
            t.silent.len(),
            t.panicked.len()
        );
    }
    for (file, t) in per_file {
        for (k, n) in &t.reported {
            println!("    {}: {n} × {k}", file.display());
        }
    }
    for (file, t) in per_file {
        assert!(
            t.panicked.is_empty(),
            "{variant}: {}: panics on {:?}",
            file.display(),
            t.panicked
        );
        assert!(
            t.silent.is_empty(),
            "{variant}: {}: damage read back as different data without an error: {:?}",
            file.display(),
            t.silent
        );
    }
    // The marker and sled's settings are small and fully checksummed: every change to
    // them is caught.
    for f in [Path::new(MARKER_FILE), Path::new("conf")] {
        let t = &per_file[f];
        assert_eq!(t.detected, t.tried, "{variant}: {}: {t:?}", f.display());
    }
}

/// Every file of a small store, damaged at evenly spaced offsets and truncated, in two
/// states: as left by its second session (sled has a snapshot of the first, so most of
/// the log is read lazily and checked on read), and without sled's snapshot (as after a
/// crash before sled wrote one: sled's recovery then scans the whole log, and stops at
/// the first damaged message).
#[test]
fn byte_flip_and_truncation_sweep_over_every_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ref");
    let expected = reference(&src);
    let names: Vec<String> = store_files(&src)
        .unwrap()
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    // The reference store has every kind of file.
    for want in [MARKER_FILE, "conf", "db"] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("snap.")), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("blobs")), "{names:?}");
    report_and_check("with sled's snapshot", &sweep(&src, &expected));

    let bare = tmp.path().join("bare");
    copy_dir(&src, &bare).unwrap();
    for n in names.iter().filter(|n| n.starts_with("snap.")) {
        std::fs::remove_file(bare.join(n)).unwrap();
    }
    report_and_check("without sled's snapshot", &sweep(&bare, &expected));
}

/// Random damage (1 to 4 flips or truncations anywhere in the store's files, decoded
/// from random bytes as the fuzz target decodes its input).
#[test]
fn random_damage_is_detected_or_harmless() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ref");
    let expected = reference(&src);
    let files = store_files(&src).unwrap();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 96,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &proptest::collection::vec(any::<u8>(), 6..=24),
            |data| match check_damaged_copy(&src, &files, &expected, &data) {
                Outcome::Intact | Outcome::Detected(_) => Ok(()),
                Outcome::Silent(got) => Err(TestCaseError::fail(format!(
                    "{:?} went unnoticed: {got}",
                    decode_damage(&data, &files)
                ))),
            },
        )
        .unwrap();
}

/// The fuzz entry point itself (its reference store is built once per process).
#[test]
fn fuzz_entry_point_runs() {
    assert!(matches!(fuzz_open_damaged(&[]), Outcome::Intact));
    // Damage to the marker's first byte is always detected.
    assert!(matches!(
        fuzz_open_damaged(&[0, 0, 0, 0, 0, 0x20]),
        Outcome::Detected(Error::Corrupt { .. })
    ));
    std::fs::remove_dir_all(fuzz_reference_dir()).unwrap();
}
