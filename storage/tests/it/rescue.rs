//! Rescuing damaged stores (`Store::open_or_rescue`, what `headroom serve` opens its store
//! with): a store whose files were truncated or corrupted (power lost mid-write) opens,
//! with its damaged files moved aside and what still reads kept; never a panic, never a
//! silent empty store, never different data under the same key.

use std::path::Path;

use headroom_storage::damage::{
    Damage, contents, copy_dir, reference_config, store_files, write_reference_store,
};
use headroom_storage::{DAMAGED_PREFIX, Error, Labels, MARKER_FILE, ROLLUP_STEP_MS, Store};

/// What `write_reference_store` writes: series `i` at `T0 + k * STEP`.
const T0: i64 = 1_700_000_000_000;
const STEP: i64 = 15_000;
fn written(i: i64, k: i64) -> f64 {
    ((k * 7919 + i * 104_729) % 1_000_003) as f64 / 7.0
}

fn reference(dir: &Path) -> String {
    write_reference_store(dir).unwrap();
    contents(&Store::open_existing(dir, reference_config()).unwrap()).unwrap()
}

/// The `damaged-*` directories in `dir`.
fn damaged_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(DAMAGED_PREFIX))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// The rescued store takes new samples and keeps them across a reopen.
fn still_works(dir: &Path, store: Store) {
    let labels = Labels::new([("node", "after")]).unwrap();
    store
        .append("mem", &labels, 1_800_000_000_000, 1.0)
        .unwrap();
    store.flush().unwrap();
    drop(store);
    let again = Store::open_existing(dir, reference_config()).unwrap();
    let ids = again
        .select(&[headroom_storage::Matcher::new(
            "node",
            headroom_storage::MatchOp::Eq,
            "after",
        )])
        .unwrap();
    assert_eq!(ids.len(), 1);
}

#[test]
fn an_intact_store_is_opened_as_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let expected = reference(&dir);
    let (store, rescue) = Store::open_or_rescue(&dir, reference_config()).unwrap();
    assert!(rescue.is_none());
    assert_eq!(contents(&store).unwrap(), expected);
    assert!(damaged_dirs(&dir).is_empty());
}

/// A damaged marker (the one file the store itself writes) hides intact data: all of it is
/// kept, and reads back exactly as written.
#[test]
fn a_damaged_marker_keeps_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let expected = reference(&dir);
    Damage::Flip {
        file: MARKER_FILE.into(),
        offset: 3,
        xor: 0x20,
    }
    .apply(&dir)
    .unwrap();
    assert!(matches!(
        Store::open(&dir, reference_config()),
        Err(Error::Corrupt { .. })
    ));
    let (store, rescue) = Store::open_or_rescue(&dir, reference_config()).unwrap();
    let rescue = rescue.expect("a rescue");
    assert!(rescue.found.contains("HEADROOM marker"), "{rescue}");
    assert_eq!(rescue.dropped, 0, "{rescue}");
    assert!(rescue.unreadable.is_none(), "{rescue}");
    assert_eq!(rescue.kept.series, 4, "{rescue}");
    assert_eq!(rescue.kept.runs, 2, "{rescue}");
    assert_eq!(rescue.kept.placements, 2, "{rescue}");
    assert_eq!(rescue.kept.decisions, 3, "{rescue}");
    assert_eq!(contents(&store).unwrap(), expected);
    // The damaged files are kept, moved aside, the damaged marker among them.
    let aside = damaged_dirs(&dir);
    assert_eq!(aside, vec![rescue.moved_to.clone()]);
    assert!(aside[0].join(MARKER_FILE).is_file());
    assert!(aside[0].join("db").is_file());
    let text = rescue.to_string();
    assert!(text.contains("kept 4 series"), "{text}");
    assert!(text.contains(&aside[0].display().to_string()), "{text}");
    still_works(&dir, store);
}

/// A damaged `conf` (sled's settings): it is kept as `conf.damaged` in the moved copy,
/// replaced for the reading, and everything is kept.
#[test]
fn a_damaged_sled_settings_file_keeps_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let expected = reference(&dir);
    Damage::Flip {
        file: "conf".into(),
        offset: 2,
        xor: 0x01,
    }
    .apply(&dir)
    .unwrap();
    let (store, rescue) = Store::open_or_rescue(&dir, reference_config()).unwrap();
    let rescue = rescue.expect("a rescue");
    assert!(rescue.found.contains("conf"), "{rescue}");
    assert_eq!(contents(&store).unwrap(), expected);
    assert!(rescue.moved_to.join("conf.damaged").is_file());
}

/// Power lost as the database file was written: an empty `db` keeps nothing, and says so;
/// the new store is empty, works, and the damaged files wait aside.
#[test]
fn an_empty_database_file_starts_a_new_store_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    reference(&dir);
    Damage::Truncate {
        file: "db".into(),
        len: 0,
    }
    .apply(&dir)
    .unwrap();
    let (store, rescue) = Store::open_or_rescue(&dir, reference_config()).unwrap();
    let rescue = rescue.expect("a rescue");
    assert_eq!(rescue.kept.total(), 0);
    assert!(
        rescue
            .unreadable
            .as_deref()
            .unwrap()
            .contains("db is empty"),
        "{rescue}"
    );
    let text = rescue.to_string();
    assert!(text.contains("nothing in them could be kept"), "{text}");
    assert!(store.select(&[]).unwrap().is_empty());
    assert!(rescue.moved_to.join("db").is_file());
    still_works(&dir, store);
    // A second rescue later leaves the first damaged copy alone.
    let dir2 = dir.clone();
    Damage::Flip {
        file: MARKER_FILE.into(),
        offset: 0,
        xor: 1,
    }
    .apply(&dir2)
    .unwrap();
    let (_, second) = Store::open_or_rescue(&dir2, reference_config()).unwrap();
    let second = second.expect("a second rescue");
    assert_ne!(second.moved_to, rescue.moved_to);
    assert_eq!(damaged_dirs(&dir2).len(), 2);
    assert!(rescue.moved_to.join("db").is_file());
}

/// Every file truncated at a few points and flipped at a few offsets: the rescue never
/// panics and always leaves an open store; every sample it kept is one that was written
/// (value and time; a rescue may keep an older state of a series, with samples retention
/// later removed, never a different value); its report adds up with what the store holds;
/// and most rescues keep something.
#[test]
fn every_kind_of_damage_leaves_a_working_store() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ref");
    reference(&src);
    let files = store_files(&src).unwrap();
    let mut rescued = 0;
    let mut kept_some = 0;
    let mut kept_nothing = Vec::new();
    let mut cases = 0;
    for file in &files {
        let len = std::fs::metadata(src.join(file)).unwrap().len();
        let mut damages = vec![
            Damage::Truncate {
                file: file.clone(),
                len: 0,
            },
            Damage::Truncate {
                file: file.clone(),
                len: len / 2,
            },
            Damage::Truncate {
                file: file.clone(),
                len: len.saturating_sub(1),
            },
        ];
        for k in 0..6u64 {
            damages.push(Damage::Flip {
                file: file.clone(),
                offset: len * k / 6 + 7,
                xor: 1 << (k % 8),
            });
        }
        for d in damages {
            cases += 1;
            let dir = tmp.path().join(format!("case-{cases}"));
            copy_dir(&src, &dir).unwrap();
            d.apply(&dir).unwrap();
            let opened =
                std::panic::catch_unwind(|| Store::open_or_rescue(&dir, reference_config()));
            let (store, rescue) = match opened {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => panic!("{d:?}: no store: {e}"),
                Err(_) => panic!("{d:?}: panicked"),
            };
            let Some(rescue) = rescue else {
                std::fs::remove_dir_all(&dir).unwrap();
                continue;
            };
            rescued += 1;
            if rescue.kept.total() > 0 {
                kept_some += 1;
            } else {
                kept_nothing.push(format!("{d:?}"));
            }
            let series = store.select(&[]).unwrap();
            assert_eq!(series.len() as u64, rescue.kept.series, "{d:?}: {rescue}");
            for info in &series {
                assert_eq!(info.metric, "mem", "{d:?}: a series never written");
                let i: i64 = info
                    .labels
                    .get("node")
                    .and_then(|n| n.strip_prefix('n'))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{d:?}: a series never written: {}", info.labels));
                let samples = store
                    .query_range(info.id, 0, headroom_storage::MAX_TIMESTAMP_MS)
                    .unwrap_or_default();
                for smp in samples {
                    if (smp.ts_ms - T0) % STEP != 0 {
                        // Older than the raw retention: a rollup bucket's, at its start.
                        assert_eq!(smp.ts_ms % ROLLUP_STEP_MS, 0, "{d:?}: a time never written");
                        continue;
                    }
                    let k = (smp.ts_ms - T0) / STEP;
                    assert_eq!(smp.value, written(i, k), "{d:?}: n{i} at {}", smp.ts_ms);
                }
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    eprintln!("{cases} cases: {rescued} rescued, {kept_some} of them keeping something");
    assert!(rescued > 0, "no damage needed a rescue in {cases} cases");
    // Damage to one file rarely leaves nothing readable: most rescues keep something.
    assert!(
        kept_some * 4 >= rescued * 3,
        "{kept_some} of {rescued} rescues kept anything; nothing kept after: {kept_nothing:#?}\nfiles: {files:?}"
    );
}
