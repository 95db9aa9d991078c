//! Behaviour of the store through its public API.

use std::time::Duration;

use headroom_storage::*;

const T0: i64 = 1_700_000_000_000;
const H: i64 = 3_600_000;

fn labels(pod: &str) -> Labels {
    Labels::new([("namespace", "ns"), ("pod", pod), ("node", "n1")]).unwrap()
}

fn cfg() -> StoreConfig {
    StoreConfig::default()
}

#[test]
fn append_query_select_latest() {
    let s = Store::open_temporary(cfg()).unwrap();
    let a = s.append("mem", &labels("a"), T0, 1.0).unwrap();
    let b = s.append("mem", &labels("b"), T0, 2.0).unwrap();
    assert_ne!(a, b);
    for i in 1..1000 {
        s.append_id(a, T0 + i * 15_000, i as f64).unwrap();
    }
    assert_eq!(s.series_id("mem", &labels("a")).unwrap(), a);
    let q = s.query_range(a, T0, T0 + 999 * 15_000).unwrap();
    assert_eq!(q.len(), 1000);
    assert!(q.windows(2).all(|w| w[0].ts_ms < w[1].ts_ms));
    assert_eq!(q[999].value, 999.0);
    let q = s.query_range(a, T0 + 15_000, T0 + 30_000).unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(s.latest(a).unwrap().unwrap().value, 999.0);
    s.flush().unwrap();
    assert_eq!(s.query_range(a, 0, i64::MAX).unwrap().len(), 1000);
    let sel = s
        .select(&parse_selector(r#"mem{pod=~"a|b"}"#).unwrap())
        .unwrap();
    assert_eq!(sel.len(), 2);
    assert_eq!(sel[1].last.unwrap().value, 2.0);
    let res = s
        .query(&[Matcher::new("pod", MatchOp::Eq, "b")], 0, i64::MAX)
        .unwrap();
    assert_eq!(res.len(), 1);
    assert_eq!(
        res[0].1,
        vec![Sample {
            ts_ms: T0,
            value: 2.0
        }]
    );
    let mut seen = Vec::new();
    s.for_each_series(&[Matcher::metric("mem")], 0, i64::MAX, |i, xs| {
        seen.push((i.id, xs.len()));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, vec![(a, 1000), (b, 1)]);
    let st = s.stats();
    assert_eq!(st.series, 2);
    assert!(st.flushes >= 1);
}

#[test]
fn bad_input_has_defined_behaviour() {
    let s = Store::open_temporary(cfg()).unwrap();
    let l = labels("a");
    let id = s.append("m", &l, T0, 1.0).unwrap();
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(matches!(
            s.append_id(id, T0 + 1, v),
            Err(Error::InvalidValue { .. })
        ));
    }
    assert!(matches!(
        s.append_id(id, -1, 1.0),
        Err(Error::TimestampOutOfRange(-1))
    ));
    assert!(matches!(
        s.append_id(id, MAX_TIMESTAMP_MS + 1, 1.0),
        Err(Error::TimestampOutOfRange(_))
    ));
    assert!(matches!(
        s.append_id(id, T0 - 1, 1.0),
        Err(Error::OutOfOrder { .. })
    ));
    // Identical re-scrape: accepted, stored once.
    s.append_id(id, T0, 1.0).unwrap();
    assert!(matches!(
        s.append_id(id, T0, 2.0),
        Err(Error::DuplicateTimestamp { .. })
    ));
    assert_eq!(s.query_range(id, 0, i64::MAX).unwrap().len(), 1);
    assert!(matches!(
        s.append_id(SeriesId(99), T0, 1.0),
        Err(Error::UnknownSeries(99))
    ));
    assert!(s.query_range(SeriesId(99), 0, 1).is_err());
    assert!(s.latest(SeriesId(u64::MAX)).is_err());
    assert!(s.append("bad name", &l, T0, 1.0).is_err());
    assert!(
        s.append(&"m".repeat(MAX_NAME_LEN + 1), &l, T0, 1.0)
            .is_err()
    );
    assert!(s.append("", &l, T0, 1.0).is_err());
    // Extreme timestamps and values round-trip.
    let e = s.append("m", &labels("extreme"), 0, f64::MAX).unwrap();
    s.append_id(e, MAX_TIMESTAMP_MS, f64::MIN_POSITIVE).unwrap();
    s.append_id(e, MAX_TIMESTAMP_MS, f64::MIN_POSITIVE).unwrap();
    s.flush().unwrap();
    let q = s.query_range(e, 0, i64::MAX).unwrap();
    assert_eq!(
        q,
        vec![
            Sample {
                ts_ms: 0,
                value: f64::MAX
            },
            Sample {
                ts_ms: MAX_TIMESTAMP_MS,
                value: f64::MIN_POSITIVE
            }
        ]
    );
    assert!(s.query_range(id, 10, 5).unwrap().is_empty());
    let limited = Store::open_temporary(StoreConfig {
        max_series: 1,
        ..cfg()
    })
    .unwrap();
    limited.append("m", &labels("a"), T0, 1.0).unwrap();
    assert!(matches!(
        limited.append("m", &labels("b"), T0, 1.0),
        Err(Error::TooManySeries(1))
    ));
}

#[test]
fn survives_reopen_and_chunks_cut() {
    let dir = tempfile::tempdir().unwrap();
    let ids;
    {
        let s = Store::open(dir.path(), cfg()).unwrap();
        ids = (0..20)
            .map(|p| s.series_id("cpu", &labels(&format!("p{p}"))).unwrap())
            .collect::<Vec<_>>();
        for i in 0..1000 {
            for (p, id) in ids.iter().enumerate() {
                s.append_id(*id, T0 + i * 15_000, (i * p as i64) as f64)
                    .unwrap();
            }
            if i % 7 == 0 {
                s.flush().unwrap();
            }
        }
        s.flush().unwrap();
        // Unflushed samples are lost on reopen (the loss window).
        s.append_id(ids[0], T0 + 1_000_000_000, 5.0).unwrap();
    }
    let s = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(s.stats().series, 20);
    for (p, id) in ids.iter().enumerate() {
        let q = s.query_range(*id, 0, i64::MAX).unwrap();
        assert_eq!(q.len(), 1000, "series {p}");
        assert_eq!(q[999].value, (999 * p) as f64);
    }
    // Appending continues after reopen, in order.
    s.append_id(ids[1], T0 + 1000 * 15_000, 1.5).unwrap();
    assert!(s.append_id(ids[1], T0, 1.5).is_err());
    s.checkpoint().unwrap();
    drop(s);
    let s = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(s.query_range(ids[1], 0, i64::MAX).unwrap().len(), 1001);
    let got = s.select(&[Matcher::new("pod", MatchOp::Eq, "p3")]).unwrap();
    assert_eq!(got[0].labels, labels("p3"));
}

#[test]
fn format_version_mismatch_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), cfg()).unwrap());
    // A marker a later build would write (valid checksum, format 3).
    let body = "headroom store\nformat 3\nflushes 1\n";
    let marker = format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
    std::fs::write(dir.path().join(MARKER_FILE), marker).unwrap();
    for open in [Store::open, Store::open_existing] {
        let err = open(dir.path(), cfg()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::IncompatibleVersion {
                    found: 3,
                    expected: FORMAT_VERSION,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("format version 3"), "{err}");
    }
}

#[test]
fn retention_rolls_up_and_expires() {
    let c = StoreConfig {
        raw_retention: Duration::from_secs(6 * 3600),
        rollup_retention: Duration::from_secs(3 * 24 * 3600),
        ..cfg()
    };
    let s = Store::open_temporary(c).unwrap();
    let id = s.series_id("m", &labels("a")).unwrap();
    let n = 24 * 240; // 24 h at 15 s
    for i in 0..n {
        s.append_id(id, T0 + i * 15_000, (i % 100) as f64).unwrap();
    }
    s.flush().unwrap();
    let before = s.rollups(id, 0, i64::MAX).unwrap();
    assert_eq!(before.iter().map(|r| r.count).sum::<u64>(), n as u64);
    let now = T0 + 24 * H;
    let st = s.maintain(now).unwrap();
    assert!(st.chunks_expired > 0);
    assert_eq!(s.rollups(id, 0, i64::MAX).unwrap(), before);
    let q = s.query_range(id, 0, i64::MAX).unwrap();
    assert!(q.windows(2).all(|w| w[0].ts_ms < w[1].ts_ms));
    let raw_from = now - 6 * H;
    assert!(q.iter().filter(|x| x.ts_ms >= raw_from).count() as i64 >= 6 * 240);
    assert!(q.len() < n as usize);
    // Old samples are now refused.
    assert!(matches!(
        s.append("m", &labels("late"), T0, 1.0),
        Err(Error::TooOld { .. })
    ));
    // Much later everything has expired, and the series with nothing left is removed: its
    // id names nothing any more.
    let st = s.maintain(now + 10 * 24 * H).unwrap();
    // "m{a}" and the empty "m{late}" the refused sample created.
    assert_eq!(st.series_deleted, 2);
    assert!(matches!(
        s.rollups(id, 0, i64::MAX),
        Err(Error::UnknownSeries(_))
    ));
    assert!(s.select(&[]).unwrap().is_empty());
    assert_eq!(s.stats().series, 0);
    assert!(s.stats().disk_bytes > 0);
}

/// Churn, as pods come and go: series whose samples all passed retention are removed, so
/// the index stays as large as the live series; their slots go to new series, an id kept
/// from a removed series never reaches the series in its slot, and a reopened store agrees.
#[test]
fn series_of_pods_that_are_gone_are_removed_after_retention() {
    let dir = tempfile::tempdir().unwrap();
    let c = StoreConfig {
        raw_retention: Duration::from_secs(3600),
        rollup_retention: Duration::from_secs(2 * 3600),
        ..cfg()
    };
    let s = Store::open(dir.path(), c.clone()).unwrap();
    let node = labels("node");
    let mut old_ids = Vec::new();
    let mut now = T0;
    for round in 0..12 {
        // 50 pods live for an hour, then are gone; the node's series goes on.
        for p in 0..50 {
            let id = s
                .append("pod_mem", &labels(&format!("p{round}-{p}")), now, 1.0)
                .unwrap();
            old_ids.push(id);
        }
        for m in 0..60 {
            s.append("node_mem", &node, now + m * 60_000, round as f64)
                .unwrap();
        }
        now += H;
        s.flush().unwrap();
        s.maintain(now).unwrap();
    }
    let live = s.select(&[]).unwrap().len();
    // The node's series and at most the pods of the last rollup window.
    assert!(live <= 1 + 3 * 50, "{live} series after 12 hours of churn");
    assert!(s.stats().series as usize == live);
    // An id of the first hour's pods names nothing, even where its slot was reused.
    assert!(matches!(
        s.append_id(old_ids[0], now, 2.0),
        Err(Error::UnknownSeries(_))
    ));
    let node_id = s.series_id("node_mem", &node).unwrap();
    let before = s.query_range(node_id, 0, i64::MAX).unwrap();
    drop(s);
    let s = Store::open(dir.path(), c).unwrap();
    assert_eq!(s.select(&[]).unwrap().len(), live);
    let node_id = s.series_id("node_mem", &node).unwrap();
    assert_eq!(s.query_range(node_id, 0, i64::MAX).unwrap(), before);
    // New series fill the freed slots.
    let id = s.append("pod_mem", &labels("new"), now, 3.0).unwrap();
    assert!((id.0 & u64::from(u32::MAX)) < 700, "{id:?}");
    assert_eq!(s.latest(id).unwrap().unwrap().value, 3.0);
}

#[test]
fn runs_and_placements() {
    let s = Store::open_temporary(StoreConfig {
        max_runs_per_builder: 3,
        max_history_nodes: 2,
        ..cfg()
    })
    .unwrap();
    let run = |uid: &str, start| RunRecord {
        pod_uid: uid.into(),
        node: "n1".into(),
        start_ms: start,
        end_ms: start + 10,
        cpu: UsageSummary {
            mean: 0.5,
            p95: 0.9,
            max: 1.0,
        },
        memory: UsageSummary {
            mean: 1e9,
            p95: 1.5e9,
            max: 2e9,
        },
    };
    for i in 0..5 {
        s.put_run("ns/Deployment/web", &run(&format!("u{i}"), i))
            .unwrap();
    }
    let mut r = run("u4", 4);
    r.end_ms = 99;
    s.put_run("ns/Deployment/web", &r).unwrap();
    let runs = s.runs("ns/Deployment/web").unwrap();
    assert_eq!(
        runs.iter().map(|r| r.pod_uid.as_str()).collect::<Vec<_>>(),
        ["u2", "u3", "u4"]
    );
    assert_eq!(runs[2].end_ms, 99);
    assert!(s.runs("nope").unwrap().is_empty());
    s.put_run("a", &run("x", 1)).unwrap();
    assert_eq!(s.builders().unwrap(), ["a", "ns/Deployment/web"]);
    assert!(s.put_run("", &run("x", 1)).is_err());
    for n in ["n1", "n2", "n1", "n3"] {
        s.record_placement("b", n, 1).unwrap();
    }
    assert_eq!(s.placement_history("b").unwrap(), ["n3", "n1"]);
    assert!(s.placement_history("c").unwrap().is_empty());
    s.record_placement("a", "n9", 1).unwrap();
    assert_eq!(
        s.placement_histories().unwrap(),
        vec![
            ("a".to_string(), vec!["n9".to_string()]),
            ("b".to_string(), vec!["n3".to_string(), "n1".to_string()]),
        ]
    );
}

#[test]
fn decision_log() {
    let s = Store::open_temporary(StoreConfig {
        decision_log_max_records: 3,
        decision_log_max_age: Duration::from_secs(3600),
        ..cfg()
    })
    .unwrap();
    let k = |name: &str, uid: &str, ts| DecisionKey {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        ts_ms: ts,
    };
    s.put_decision(&k("a", "u1", 10), b"first").unwrap();
    s.put_decision(&k("a", "u2", 20), b"second").unwrap();
    s.put_decision(&k("a", "u0", 5), b"older").unwrap();
    assert_eq!(s.decision_by_pod("ns", "a").unwrap().unwrap(), b"second");
    assert_eq!(s.decision_by_uid("u1").unwrap().unwrap(), b"first");
    assert_eq!(s.decision_by_uid("u0").unwrap().unwrap(), b"older");
    s.put_decision(&k("b", "u3", 30), b"b").unwrap();
    // Count bound: the oldest (u0 at ts 5) went.
    assert_eq!(s.decision_count(), 3);
    assert_eq!(s.decision_by_uid("u0").unwrap(), None);
    assert_eq!(s.decision_by_pod("nope", "x").unwrap(), None);
    // Age bound.
    let st = s.maintain(3600 * 1000 + 25).unwrap();
    assert_eq!(st.decisions_expired, 2);
    assert_eq!(s.decision_by_pod("ns", "a").unwrap(), None);
    assert_eq!(s.decision_by_pod("ns", "b").unwrap().unwrap(), b"b");
    assert!(s.put_decision(&k("a", "u", -1), b"").is_err());
}

#[test]
fn typed_trees() {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Res {
        node: String,
        cpu: f64,
    }
    let s = Store::open_temporary(cfg()).unwrap();
    let t = s.tree::<Res>("reservations").unwrap();
    assert!(t.is_empty());
    t.insert(
        "p1",
        &Res {
            node: "n1".into(),
            cpu: 1.0,
        },
    )
    .unwrap();
    let old = t
        .insert(
            "p1",
            &Res {
                node: "n2".into(),
                cpu: 2.0,
            },
        )
        .unwrap();
    assert_eq!(old.unwrap().node, "n1");
    t.insert(
        "p0",
        &Res {
            node: "n0".into(),
            cpu: 0.5,
        },
    )
    .unwrap();
    assert_eq!(t.get("p1").unwrap().unwrap().cpu, 2.0);
    let all: Vec<_> = t.iter().collect::<Result<_>>().unwrap();
    assert_eq!(
        all.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
        ["p0", "p1"]
    );
    assert!(t.remove("p0").unwrap().is_some());
    assert_eq!(t.len(), 1);
    assert!(s.tree::<Res>("bad/name").is_err());
    // Another type under another name is independent.
    let u = s.tree::<u64>("counters").unwrap();
    assert!(u.get("p1").unwrap().is_none());
}

#[test]
fn compact_to_copies_everything() {
    let s = Store::open_temporary(cfg()).unwrap();
    let id = s.append("m", &labels("a"), T0, 1.0).unwrap();
    for i in 1..500 {
        s.append_id(id, T0 + i * 15_000, i as f64).unwrap();
    }
    s.record_placement("b", "n1", 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("copy");
    s.compact_to(&dst).unwrap();
    assert!(dst.join(MARKER_FILE).is_file());
    let c = Store::open_existing(&dst, cfg()).unwrap();
    assert_eq!(
        c.query_range(id, 0, i64::MAX).unwrap(),
        s.query_range(id, 0, i64::MAX).unwrap()
    );
    assert_eq!(c.placement_history("b").unwrap(), ["n1"]);
    assert!(
        s.compact_to(&dst).is_err(),
        "refuses a non-empty destination"
    );
}
