//! Compaction in place ([`Store::compact`], from [`Store::maintain`]) and builder
//! retention: nothing lost, the old files gone, the swap crash-safe, concurrent writers
//! unharmed.

use std::path::Path;
use std::time::Duration;

use headroom_storage::*;

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

fn labels(pod: &str) -> Labels {
    Labels::new([("namespace", "ns"), ("pod", pod)]).unwrap()
}

fn key(name: &str, ts_ms: i64) -> DecisionKey {
    DecisionKey {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        ts_ms,
    }
}

fn run(uid: &str, start_ms: i64, end_ms: i64) -> RunRecord {
    RunRecord {
        pod_uid: uid.into(),
        node: "n1".into(),
        start_ms,
        end_ms,
        cpu: UsageSummary::default(),
        memory: UsageSummary::default(),
    }
}

/// Names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// A store with a little of everything: samples (sealed, open and in the log), a
/// decision, a run, a placement history and a typed tree value.
fn fill(s: &Store) -> SeriesId {
    let id = s.append("mem", &labels("a"), T0, 0.0).unwrap();
    for i in 1..400 {
        s.append_id(id, T0 + i * 15_000, i as f64).unwrap();
    }
    s.put_decision(&key("a", T0), b"why a").unwrap();
    s.put_run("b", &run("u1", T0, T0 + MIN)).unwrap();
    s.record_placement("b", "n1", T0).unwrap();
    s.tree::<u64>("counters").unwrap().insert("x", &7).unwrap();
    id
}

fn same_content(s: &Store, id: SeriesId) {
    let q = s.query_range(id, 0, i64::MAX).unwrap();
    assert_eq!(q.len(), 400);
    assert_eq!(q[399].value, 399.0);
    assert_eq!(s.decision_by_pod("ns", "a").unwrap().unwrap(), b"why a");
    assert_eq!(s.runs("b").unwrap().len(), 1);
    assert_eq!(s.placement_history("b").unwrap(), ["n1"]);
    assert_eq!(
        s.tree::<u64>("counters").unwrap().get("x").unwrap(),
        Some(7)
    );
}

#[test]
fn compaction_in_place_keeps_everything_and_removes_the_old_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let id = fill(&s);
    let counters = s.tree::<u64>("counters").unwrap();
    s.flush().unwrap();
    assert!(entries(dir.path()).contains(&"db".to_string()));

    let c = s.compact().unwrap();
    assert_eq!(c.directory, "sled-1");
    assert!(c.old_removed);
    assert!(c.live_bytes > 0 && c.after_bytes > 0, "{c:?}");
    // sled's files left the top of the directory for the new generation's.
    assert_eq!(entries(dir.path()), ["HEADROOM", "sled-1"]);
    same_content(&s, id);
    // Writes after the swap go to the new database, also through a typed tree taken
    // before it.
    s.append_id(id, T0 + 400 * 15_000, 400.0).unwrap();
    s.put_decision(&key("z", T0 + MIN), b"why z").unwrap();
    counters.insert("y", &8).unwrap();
    s.record_placement("b", "n2", T0 + MIN).unwrap();
    assert_eq!(s.stats().compactions, 1);

    // A second compaction moves on to sled-2.
    assert_eq!(s.compact().unwrap().directory, "sled-2");
    assert_eq!(entries(dir.path()), ["HEADROOM", "sled-2"]);
    s.flush().unwrap();
    drop((s, counters));

    let s = Store::open_existing(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(s.query_range(id, 0, i64::MAX).unwrap().len(), 401);
    assert_eq!(s.decision_by_pod("ns", "z").unwrap().unwrap(), b"why z");
    assert_eq!(s.decision_by_pod("ns", "a").unwrap().unwrap(), b"why a");
    assert_eq!(
        s.tree::<u64>("counters").unwrap().get("y").unwrap(),
        Some(8)
    );
    assert_eq!(s.placement_history("b").unwrap(), ["n2", "n1"]);
    // A decision of the same millisecond as one before the compaction gets a key of its
    // own (the sequence goes on from the log, not from sled's id generator).
    s.put_decision(&key("w", T0 + MIN), b"why w").unwrap();
    assert_eq!(s.decision_by_pod("ns", "z").unwrap().unwrap(), b"why z");
    assert_eq!(s.decision_by_pod("ns", "w").unwrap().unwrap(), b"why w");
    assert_eq!(s.decision_count(), 3);
}

#[test]
fn a_temporary_store_is_not_compacted() {
    let s = Store::open_temporary(StoreConfig::default()).unwrap();
    assert!(matches!(s.compact(), Err(Error::InvalidArgument(_))));
    assert!(!s.compaction_due().unwrap());
}

#[test]
fn what_an_interrupted_compaction_left_is_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let id = fill(&s);
    s.compact().unwrap();
    s.flush().unwrap();
    drop(s);
    // A crash during the copy to sled-2 (never named by the marker), and old top-level
    // files a crash right after the marker left behind.
    std::fs::create_dir(dir.path().join("sled-2")).unwrap();
    std::fs::write(dir.path().join("sled-2/db"), b"partial").unwrap();
    std::fs::write(dir.path().join("db"), b"old").unwrap();
    std::fs::write(dir.path().join("conf"), b"old").unwrap();
    std::fs::create_dir(dir.path().join("blobs")).unwrap();
    std::fs::write(dir.path().join("snap.0000000000001234"), b"old").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"an operator's").unwrap();

    let s = Store::open_existing(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(entries(dir.path()), ["HEADROOM", "notes.txt", "sled-1"]);
    same_content(&s, id);
    // The next compaction writes sled-2 afresh.
    assert_eq!(s.compact().unwrap().directory, "sled-2");
    same_content(&s, id);
}

#[test]
fn a_damaged_compacted_store_is_rescued_from_its_subdirectory() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreConfig::default()).unwrap();
    fill(&s);
    s.compact().unwrap();
    s.flush().unwrap();
    drop(s);
    // sled's settings file damaged: the open names the subdirectory.
    let conf = dir.path().join("sled-1/conf");
    let mut bytes = std::fs::read(&conf).unwrap();
    bytes[0] ^= 0x20;
    std::fs::write(&conf, bytes).unwrap();
    let err = Store::open_existing(dir.path(), StoreConfig::default()).unwrap_err();
    assert!(err.to_string().contains("in sled-1/"), "{err}");

    let (s, rescue) = Store::open_or_rescue(dir.path(), StoreConfig::default()).unwrap();
    let rescue = rescue.expect("a rescue");
    assert!(rescue.moved_to.join("sled-1").is_dir());
    assert!(
        rescue.kept.series >= 1 && rescue.kept.decisions >= 1,
        "{rescue:?}"
    );
    assert_eq!(s.decision_by_pod("ns", "a").unwrap().unwrap(), b"why a");
    assert_eq!(s.placement_history("b").unwrap(), ["n1"]);
}

#[test]
fn maintenance_compacts_when_the_store_has_grown_past_its_live_data() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        compaction_min_bytes: 1,
        compaction_ratio: 1.5,
        ..StoreConfig::default()
    };
    let s = Store::open(dir.path(), config.clone()).unwrap();
    let id = fill(&s);
    // Churn: the same values rewritten over and over leave garbage behind in sled.
    for i in 0..3000 {
        s.record_placement("b", &format!("n{}", i % 20), T0 + i)
            .unwrap();
        s.put_decision(&key(&format!("p{}", i % 50), T0 + i), &[b'x'; 600])
            .unwrap();
    }
    s.flush().unwrap();
    assert!(s.compaction_due().unwrap());
    let stats = s.maintain(T0 + MIN).unwrap();
    let c = stats.compaction.expect("a compaction");
    assert!(c.after_bytes < c.before_bytes, "{c:?}");
    assert!(!s.compaction_due().unwrap(), "due again right after");
    assert_eq!(s.query_range(id, 0, i64::MAX).unwrap().len(), 400);
    assert_eq!(s.decision_count(), 3001);

    // Off: never due.
    drop(s);
    let off = StoreConfig {
        compaction_ratio: 0.0,
        ..config
    };
    let s = Store::open(dir.path(), off).unwrap();
    assert!(!s.compaction_due().unwrap());
    assert!(s.maintain(T0 + 2 * MIN).unwrap().compaction.is_none());
}

#[test]
fn writers_running_through_a_compaction_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let id = s.append("mem", &labels("a"), T0, 0.0).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0i64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 200 {
                    match w {
                        0 => s.append_id(id, T0 + (n + 1) * 1000, n as f64).map(drop),
                        1 => s.put_decision(&key(&format!("d{n}"), T0 + n), b"r"),
                        _ => s.record_placement(&format!("b{n}"), "n1", T0 + n).map(drop),
                    }
                    .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(30));
        s.compact().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let counts: Vec<i64> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    s.flush().unwrap();
    drop(s);
    let s = Store::open_existing(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(
        s.query_range(id, 0, i64::MAX).unwrap().len() as i64,
        counts[0] + 1
    );
    assert_eq!(s.decision_count() as i64, counts[1]);
    for n in 0..counts[2] {
        assert_eq!(s.placement_history(&format!("b{n}")).unwrap(), ["n1"]);
    }
}

#[test]
fn builders_nothing_was_recorded_for_expire() {
    let config = StoreConfig {
        builder_max_age: Duration::from_secs(600),
        ..StoreConfig::default()
    };
    let s = Store::open_temporary(config).unwrap();
    s.put_run("old", &run("u1", T0, T0 + MIN)).unwrap();
    s.record_placement("old", "n1", T0 + MIN).unwrap();
    // Still running: its start counts.
    s.put_run("running", &run("u2", T0 + 5 * MIN, 0)).unwrap();
    s.put_run("new", &run("u3", T0, T0 + 9 * MIN)).unwrap();
    s.record_placement("new", "n2", T0 + 9 * MIN).unwrap();
    // Placed, no run yet.
    s.record_placement("placed", "n3", T0 + 8 * MIN).unwrap();

    let stats = s.maintain(T0 + 14 * MIN).unwrap();
    assert_eq!(
        stats.builders_expired,
        BuildersExpired {
            runs: 1,
            placements: 1
        }
    );
    assert_eq!(s.builders().unwrap(), ["new", "running"]);
    assert!(s.placement_history("old").unwrap().is_empty());
    assert_eq!(s.placement_history("placed").unwrap(), ["n3"]);
    let stats = s.maintain(T0 + 20 * MIN).unwrap();
    assert_eq!(stats.builders_expired.runs, 2);
    assert_eq!(stats.builders_expired.placements, 2);
    assert!(s.builders().unwrap().is_empty());
    assert!(s.placement_histories().unwrap().is_empty());
}

#[test]
fn an_open_while_the_store_is_in_use_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreConfig::default()).unwrap();
    fill(&s);
    s.flush().unwrap();
    // As if `s` were copying itself into sled-1 right now.
    std::fs::create_dir(dir.path().join("sled-1")).unwrap();
    std::fs::write(dir.path().join("sled-1/db"), b"being written").unwrap();
    // Another opener (`headroom series` on serve's store, say) waits for the lock, and
    // leaves the copy alone.
    let e = Store::open_existing(dir.path(), StoreConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    assert!(dir.path().join("sled-1/db").is_file());
}
