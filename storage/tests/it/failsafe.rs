//! A store that fails safe: configuration bounds, directories that are not stores,
//! damaged files, lost flushes, damaged values and a held lock each give their own clear
//! error, never a panic, and a directory that is not a store is never written to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use headroom_storage::*;

const T0: i64 = 1_700_000_000_000;

fn labels(i: usize) -> Labels {
    Labels::new([("pod", format!("p{i}"))]).unwrap()
}

/// Every file under `dir` with its bytes.
fn tree_of(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if p.is_dir() {
                out.insert(rel.join(""), Vec::new());
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A store with `series` series of `samples` samples each, flushed and closed; if
/// `reopen`, opened once more (so sled writes its snapshot) and closed.
fn make_store(dir: &Path, series: usize, samples: i64, reopen: bool) {
    {
        let s = Store::open(dir, StoreConfig::default()).unwrap();
        for i in 0..series {
            let id = s.series_id("mem", &labels(i)).unwrap();
            for k in 0..samples {
                // Noisy values, so chunks are not tiny.
                let v = ((k * 7919 + i as i64 * 104_729) % 1_000_003) as f64 / 7.0;
                s.append_id(id, T0 + k * 15_000, v).unwrap();
            }
        }
        s.put_run(
            "ci/Job/a",
            &RunRecord {
                pod_uid: "u1".into(),
                node: "n1".into(),
                start_ms: T0,
                end_ms: T0 + 60_000,
                cpu: UsageSummary::default(),
                memory: UsageSummary::default(),
            },
        )
        .unwrap();
        s.put_decision(
            &DecisionKey {
                namespace: "ci".into(),
                name: "a".into(),
                uid: "u1".into(),
                ts_ms: T0,
            },
            b"{\"node\":\"n1\"}",
        )
        .unwrap();
        s.tree::<String>("t")
            .unwrap()
            .insert("k", &"v".into())
            .unwrap();
        s.flush().unwrap();
    }
    if reopen {
        drop(Store::open_existing(dir, StoreConfig::default()).unwrap());
    }
}

/// A case of [`every_config_bound_names_its_field`]: the default configuration with `set`
/// applied, and the field and message its error must name.
fn case<'a>(
    field: &'a str,
    message: &'a str,
    set: impl FnOnce(&mut StoreConfig),
) -> (StoreConfig, &'a str, &'a str) {
    let mut c = StoreConfig::default();
    set(&mut c);
    (c, field, message)
}

#[test]
fn every_config_bound_names_its_field() {
    let d = StoreConfig::default;
    let s = Duration::from_secs;
    let century = headroom_storage::MAX_DURATION + s(1);
    let cases = [
        case("flushInterval", "greater than 0", |c| {
            c.flush_interval = s(0)
        }),
        case("flushInterval", "at most 100 years", |c| {
            c.flush_interval = century
        }),
        case("rawRetention", "greater than 0", |c| c.raw_retention = s(0)),
        case("rawRetention", "at most 100 years", |c| {
            c.raw_retention = century;
            c.rollup_retention = century
        }),
        case("rollupRetention", "at least rawRetention (2days)", |c| {
            c.rollup_retention = s(3600)
        }),
        case("rollupRetention", "at most 100 years", |c| {
            c.rollup_retention = century
        }),
        case("maintenanceInterval", "greater than 0", |c| {
            c.maintenance_interval = s(0)
        }),
        case("maintenanceInterval", "at most 100 years", |c| {
            c.maintenance_interval = century
        }),
        case("maintenanceBackoffMin", "greater than 0", |c| {
            c.maintenance_backoff_min = s(0)
        }),
        case("maintenanceBackoffMax", "greater than 0", |c| {
            c.maintenance_backoff_max = s(0)
        }),
        case("maintenanceBackoffMax", "at most 100 years", |c| {
            c.maintenance_backoff_max = century
        }),
        case(
            "maintenanceBackoffMin",
            "must not exceed maintenanceBackoffMax (5m)",
            |c| c.maintenance_backoff_min = s(600),
        ),
        case("decisionLogMaxAge", "greater than 0", |c| {
            c.decision_log_max_age = s(0)
        }),
        case("decisionLogMaxAge", "at most 100 years", |c| {
            c.decision_log_max_age = century
        }),
        case("maxRunsPerBuilder", "at least 1", |c| {
            c.max_runs_per_builder = 0
        }),
        case("maxHistoryNodes", "at least 1", |c| c.max_history_nodes = 0),
        case("decisionLogMaxRecords", "at least 1", |c| {
            c.decision_log_max_records = 0
        }),
        case("walCheckpointFlushes", "at least 1", |c| {
            c.wal_checkpoint_flushes = 0
        }),
        case("maxSeries", "at least 1", |c| c.max_series = 0),
        case("maxSeries", "at most 4294967295", |c| {
            c.max_series = u32::MAX as usize + 1
        }),
        case("cacheCapacityBytes", "must be at least 256 (bytes)", |c| {
            c.cache_capacity_bytes = 0
        }),
        case("cacheCapacityBytes", "must be at least 256 (bytes)", |c| {
            c.cache_capacity_bytes = 255
        }),
        case("builderMaxAge", "greater than 0", |c| {
            c.builder_max_age = s(0)
        }),
        case("builderMaxAge", "at most 100 years", |c| {
            c.builder_max_age = century
        }),
        case("compactionRatio", "0 (off) or between 1.5 and 1000", |c| {
            c.compaction_ratio = 1.2
        }),
        case("compactionRatio", "0 (off) or between 1.5 and 1000", |c| {
            c.compaction_ratio = f64::NAN
        }),
        case("compactionRatio", "0 (off) or between 1.5 and 1000", |c| {
            c.compaction_ratio = -2.0
        }),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (i, (config, field, message)) in cases.into_iter().enumerate() {
        let e = config.validate().unwrap_err();
        match &e {
            Error::InvalidConfig {
                field: f,
                message: m,
            } => {
                assert_eq!(*f, field, "case {i}");
                assert!(m.contains(message), "case {i}: {m}");
            }
            other => panic!("case {i}: {other:?}"),
        }
        assert!(e.to_string().contains(&format!("{field}: ")), "{e}");
        // Opening with it fails the same way, before anything touches the disk.
        let dir = tmp.path().join(format!("s{i}"));
        let open = Store::open(&dir, config.clone()).unwrap_err();
        assert!(
            matches!(open, Error::InvalidConfig { field: f, .. } if f == field),
            "{open:?}"
        );
        assert!(!dir.exists(), "case {i} created {}", dir.display());
        assert!(matches!(
            Store::open_temporary(config),
            Err(Error::InvalidConfig { .. })
        ));
    }
    // The bounds themselves are accepted.
    for ok in [
        StoreConfig::default(),
        StoreConfig {
            cache_capacity_bytes: 256,
            max_series: 1,
            ..d()
        },
        StoreConfig {
            maintenance_backoff_min: s(300),
            max_runs_per_builder: 1,
            ..d()
        },
        StoreConfig {
            rollup_retention: s(48 * 3600),
            wal_checkpoint_flushes: 1,
            ..d()
        },
    ] {
        ok.validate().unwrap();
    }
    let dir = tmp.path().join("tiny-cache");
    let c = StoreConfig {
        cache_capacity_bytes: 256,
        max_series: 1,
        ..d()
    };
    let store = Store::open(&dir, c).unwrap();
    store.append("m", &labels(0), T0, 1.0).unwrap();
    assert!(matches!(
        store.append("m", &labels(1), T0, 1.0),
        Err(Error::TooManySeries(1))
    ));
}

#[test]
fn a_directory_that_is_not_a_store_is_refused_and_left_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::fs::write(home.join("notes.txt"), b"do not touch\n").unwrap();
    std::fs::write(home.join(".config/app.toml"), [0u8, 1, 2, 255]).unwrap();
    let before = tree_of(&home);
    for mode in [OpenMode::CreateIfMissing, OpenMode::MustExist] {
        let e = Store::open_with(&home, StoreConfig::default(), mode).unwrap_err();
        assert!(matches!(e, Error::NotAStore { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "{} is not a headroom store (no HEADROOM marker); refusing to use it",
                home.display()
            )
        );
        assert_eq!(tree_of(&home), before, "{mode:?} changed the directory");
    }
    // A bare sled database (such as a format-1 store, which had no marker) is refused too,
    // with a hint.
    let old = tmp.path().join("old");
    drop(sled::open(&old).unwrap());
    let before = tree_of(&old);
    let e = Store::open(&old, StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::NotAStore { .. }), "{e:?}");
    assert!(
        e.to_string().contains("sled database") && e.to_string().contains("format version 2"),
        "{e}"
    );
    assert_eq!(tree_of(&old), before);
    // A file is not a store either.
    let file = home.join("notes.txt");
    let e = Store::open(&file, StoreConfig::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("is not a headroom store (it is not a directory)"),
        "{e}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"do not touch\n");
}

#[test]
fn empty_and_missing_directories() {
    let tmp = tempfile::tempdir().unwrap();
    // MustExist never creates.
    let missing = tmp.path().join("missing");
    let e = Store::open_existing(&missing, StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::NoStore { .. }), "{e:?}");
    assert!(
        e.to_string().contains("the directory does not exist"),
        "{e}"
    );
    assert!(!missing.exists());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = Store::open_existing(&empty, StoreConfig::default()).unwrap_err();
    assert!(e.to_string().contains("the directory is empty"), "{e}");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // CreateIfMissing makes a store of an empty directory (and of a volume root holding
    // only lost+found), marker first.
    for (dir, extra) in [
        (empty.clone(), None),
        (tmp.path().join("volume"), Some("lost+found")),
    ] {
        if let Some(sub) = extra {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let s = Store::open(&dir, StoreConfig::default()).unwrap();
        s.append("m", &labels(0), T0, 1.0).unwrap();
        s.flush().unwrap();
        drop(s);
        let marker = std::fs::read_to_string(dir.join(MARKER_FILE)).unwrap();
        assert!(
            marker.starts_with("headroom store\nformat 2\nflushes "),
            "{marker}"
        );
        let s = Store::open_existing(&dir, StoreConfig::default()).unwrap();
        assert_eq!(s.select(&[]).unwrap().len(), 1);
        if let Some(sub) = extra {
            assert!(dir.join(sub).is_dir());
        }
    }
    // Missing directories are created, parents included.
    let deep = tmp.path().join("a/b/c");
    drop(Store::open(&deep, StoreConfig::default()).unwrap());
    assert!(deep.join(MARKER_FILE).is_file());
}

/// A store that has been written and trimmed for a while (20 rounds of appends, flushes
/// and retention passes), so sled has freed and reused segments: its live pages are
/// spread over the whole file, not just its start.
fn make_churned_store(dir: &Path) {
    let config = StoreConfig {
        raw_retention: Duration::from_secs(3600),
        rollup_retention: Duration::from_secs(7200),
        wal_checkpoint_flushes: 2,
        ..StoreConfig::default()
    };
    let s = Store::open(dir, config).unwrap();
    for round in 0..20 {
        for i in 0..200 {
            let id = s.series_id("mem", &labels(i)).unwrap();
            for k in round * 60..round * 60 + 60 {
                let v = ((k * 7919 + i as i64 * 104_729) % 1_000_003) as f64 / 7.0;
                s.append_id(id, T0 + k * 15_000, v).unwrap();
            }
        }
        s.flush().unwrap();
        s.maintain(T0 + (round * 60 + 60) * 15_000).unwrap();
    }
}

#[test]
fn truncated_db_is_corrupt_and_no_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    make_churned_store(&src);
    // Reopened once, so sled has a snapshot (as after any restart).
    drop(Store::open_existing(&src, StoreConfig::default()).unwrap());
    let bare = tmp.path().join("bare");
    damage::copy_dir(&src, &bare).unwrap();
    for f in damage::store_files(&bare).unwrap() {
        if f.to_string_lossy().starts_with("snap.") {
            std::fs::remove_file(bare.join(f)).unwrap();
        }
    }
    let intact = {
        let copy = tmp.path().join("intact");
        damage::copy_dir(&src, &copy).unwrap();
        let s = Store::open_existing(&copy, StoreConfig::default()).unwrap();
        s.query(&[], 0, i64::MAX).unwrap()
    };
    let mut caught_sled_panics = 0;
    for (variant, src) in [("with snapshot", &src), ("without snapshot", &bare)] {
        let len = std::fs::metadata(src.join("db")).unwrap().len();
        assert!(len > 2 << 20, "db is only {len} bytes");
        // Ninths of the file, and exactly half.
        for (k, cut) in (0..9).map(|k| len * k / 9).chain([len / 2]).enumerate() {
            let dir = tmp.path().join(format!("cut-{k}"));
            let _ = std::fs::remove_dir_all(&dir);
            damage::copy_dir(src, &dir).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("db"))
                .unwrap()
                .set_len(cut)
                .unwrap();
            let r = std::panic::catch_unwind(|| {
                Store::open_existing(&dir, StoreConfig::default())
                    .and_then(|s| s.query(&[], 0, i64::MAX))
            });
            let e = match r {
                Err(_) => panic!("{variant}: panicked on db cut to {cut} of {len}"),
                // A cut that removed only segments sled had freed loses nothing.
                Ok(Ok(got)) => {
                    assert!(
                        cut > 0 && got == intact,
                        "{variant}: cut {cut}/{len} read back different data"
                    );
                    continue;
                }
                Ok(Err(e)) => e,
            };
            // At open (Corrupt), or when a query reads a page that is gone (CorruptValue).
            assert!(e.is_corruption(), "{variant}: cut {cut}/{len}: {e:?}");
            let text = e.to_string();
            assert!(
                text.contains("damaged") && !text.contains("another headroom process"),
                "{text}"
            );
            if cut == 0 {
                assert!(text.contains("db is empty (0 bytes)"), "{text}");
            }
            if text.contains("sled could not recover its database (it panicked: ") {
                caught_sled_panics += 1;
            }
        }
    }
    // sled 0.34 panics (index out of bounds in its segment table) when the file is shorter
    // than its snapshot says: those panics were caught and reported as damage.
    assert!(caught_sled_panics > 0, "no cut reached sled's panic");
}

#[test]
fn damaged_sled_settings_are_corrupt_not_an_old_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    make_store(&dir, 2, 10, false);
    let conf = dir.join("conf");
    let text = std::fs::read(&conf).unwrap();
    let at = text.windows(4).position(|w| w == b"0.34").unwrap();
    let mut bad = text.clone();
    bad[at + 2] = b'2'; // "0.24": sled alone would claim the store is from an old sled
    std::fs::write(&conf, &bad).unwrap();
    let e = Store::open_existing(&dir, StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(e.to_string().contains("conf fails its checksum"), "{e}");
    assert_eq!(std::fs::read(&conf).unwrap(), bad, "conf was rewritten");
    std::fs::remove_file(&conf).unwrap();
    let e = Store::open(&dir, StoreConfig::default()).unwrap_err();
    assert!(e.to_string().contains("conf is missing"), "{e}");
}

#[test]
fn lost_flushes_are_detected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    make_store(&dir, 3, 50, false);
    let old = tmp.path().join("old");
    damage::copy_dir(&dir, &old).unwrap();
    {
        let s = Store::open_existing(&dir, StoreConfig::default()).unwrap();
        let id = s.series_id("mem", &labels(0)).unwrap();
        s.append_id(id, T0 + 50 * 15_000, 9.0).unwrap();
        s.flush().unwrap();
    }
    // sled's files go back to the older state (as when sled drops the end of its log);
    // the marker still records the newer flush.
    for f in damage::store_files(&old).unwrap() {
        if f != Path::new(MARKER_FILE) {
            std::fs::copy(old.join(&f), dir.join(&f)).unwrap();
        }
    }
    for f in damage::store_files(&dir).unwrap() {
        if !old.join(&f).exists() {
            std::fs::remove_file(dir.join(&f)).unwrap();
        }
    }
    let e = Store::open_existing(&dir, StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(
        e.to_string().contains("sled recovered it only up to flush"),
        "{e}"
    );
}

#[test]
fn damaged_values_are_errors_naming_their_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    // 600 samples: two sealed chunks and an open one per series.
    make_store(&dir, 2, 600, false);
    // Damage values behind the store's back, through sled, as a bad disk or a sled bug
    // would: sled's own checksums are then valid, only the store's catch it.
    let flip = |tree: &str, pick: &dyn Fn(&[u8]) -> bool| {
        let db = sled::Config::new().path(&dir).open().unwrap();
        let t = db.open_tree(tree).unwrap();
        let (k, v) = t
            .iter()
            .map(|kv| kv.unwrap())
            .find(|(k, _)| pick(k))
            .unwrap();
        let mut v = v.to_vec();
        v[0] ^= 0x40;
        t.insert(k, v).unwrap();
        db.flush().unwrap();
    };
    // The first chunk of series 1: open works (it reads only the newest chunks), the query
    // names the chunk and the series.
    flip("tsdb", &|k| k[0] == b'C' && k[1..9] == 1u64.to_be_bytes());
    let s = Store::open_existing(&dir, StoreConfig::default()).unwrap();
    let id = s.series_id("mem", &labels(1)).unwrap();
    let e = s.query_range(id, 0, i64::MAX).unwrap_err();
    assert!(matches!(e, Error::CorruptValue { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("chunk of series 1 starting at 1700000000000 ms (mem{pod=\"p1\"})")
            && text.contains("checksum mismatch"),
        "{text}"
    );
    // Series 0 is unaffected.
    let id0 = s.series_id("mem", &labels(0)).unwrap();
    assert_eq!(s.query_range(id0, 0, i64::MAX).unwrap().len(), 600);
    drop(s);

    flip("runs", &|_| true);
    flip("decisions", &|k| k[0] == b'L');
    flip("kv/t", &|_| true);
    let s = Store::open_existing(&dir, StoreConfig::default()).unwrap();
    let e = s.runs("ci/Job/a").unwrap_err().to_string();
    assert!(e.contains("run records of builder \"ci/Job/a\""), "{e}");
    assert!(s.builders().is_err());
    let e = s.decision_by_pod("ci", "a").unwrap_err().to_string();
    assert!(e.contains("decision record at 1700000000000 ms"), "{e}");
    let e = s
        .tree::<String>("t")
        .unwrap()
        .get("k")
        .unwrap_err()
        .to_string();
    assert!(e.contains("value \"k\" of tree \"t\""), "{e}");
    drop(s);

    // A damaged series definition is found at open: the store is reported damaged.
    flip("tsdb", &|k| k[0] == b'S');
    let e = Store::open_existing(&dir, StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("definition of series 0: checksum mismatch"),
        "{e}"
    );
}

#[test]
fn a_held_lock_is_the_only_in_use_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let first = Store::open(&dir, StoreConfig::default()).unwrap();
    let e = Store::open_existing(&dir, StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "store at {} is locked: is another headroom process using it?",
            dir.display()
        )
    );
    drop(first);
    drop(Store::open_existing(&dir, StoreConfig::default()).unwrap());
}
