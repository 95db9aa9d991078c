//! Property test: after random appends, flushes, checkpoints, restarts and retention
//! passes, the store agrees with a naive in-memory model.
//!
//! What "agrees" means, given retention:
//! - raw samples at or after the raw cutoff are exactly the model's (older raw data may
//!   already be folded into rollups, at chunk granularity);
//! - 5-minute rollups over the whole range (stored ones merged with those computed from
//!   raw) equal rollups of all the model's samples, for buckets inside rollup retention;
//! - every append is accepted or rejected exactly as the model predicts;
//! - a restart keeps exactly what the last flush made durable.

use std::time::Duration;

use headroom_storage::*;
use proptest::prelude::*;

const SERIES: usize = 3;
const STEP: i64 = ROLLUP_STEP_MS;
const DAY: i64 = 24 * 3_600_000;
const RAW_RET: i64 = 3 * 3_600_000;
const ROLLUP_RET: i64 = 2 * DAY;

#[derive(Clone, Debug)]
enum Op {
    Append { series: usize, dt: i64, value: f64 },
    Flush,
    Checkpoint,
    Reopen,
    Maintain { ahead: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    let value = prop_oneof![
        (0i64..5).prop_map(|v| v as f64),
        -1e6f64..1e6,
        (0u64..1 << 20).prop_map(|v| (v * 4096) as f64),
    ];
    prop_oneof![
        30 => (0..SERIES, prop_oneof![Just(0i64), 1i64..60_000, Just(15_000), 60_000i64..1_800_000, -60_000i64..0], value)
            .prop_map(|(series, dt, value)| Op::Append { series, dt, value }),
        3 => Just(Op::Flush),
        1 => Just(Op::Checkpoint),
        2 => Just(Op::Reopen),
        2 => (0i64..6 * 3_600_000).prop_map(|ahead| Op::Maintain { ahead }),
    ]
}

#[derive(Clone, Default)]
struct Model {
    samples: Vec<Vec<Sample>>,
    clock: Vec<i64>,
    raw_cutoff: i64,
    rollup_cutoff: i64,
}

impl Model {
    fn expect(
        &self,
        series: usize,
        ts: i64,
        value: f64,
    ) -> std::result::Result<bool, &'static str> {
        if ts < self.raw_cutoff {
            return Err("too old");
        }
        match self.samples[series].last() {
            Some(l) if ts < l.ts_ms => Err("out of order"),
            Some(l) if ts == l.ts_ms && l.value.to_bits() == value.to_bits() => Ok(false),
            Some(l) if ts == l.ts_ms => Err("duplicate"),
            _ => Ok(true),
        }
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        raw_retention: Duration::from_millis(RAW_RET as u64),
        rollup_retention: Duration::from_millis(ROLLUP_RET as u64),
        wal_checkpoint_flushes: 2,
        ..StoreConfig::default()
    }
}

fn labels(i: usize) -> Labels {
    Labels::new([("pod", format!("p{i}"))]).unwrap()
}

fn check(store: &Store, model: &Model) -> std::result::Result<(), TestCaseError> {
    for i in 0..SERIES {
        let id = store.series_id("m", &labels(i)).unwrap();
        let want: Vec<Sample> = model.samples[i]
            .iter()
            .copied()
            .filter(|s| s.ts_ms >= model.raw_cutoff)
            .collect();
        let got: Vec<Sample> = store
            .query_range(id, 0, i64::MAX)
            .unwrap()
            .into_iter()
            .filter(|s| s.ts_ms >= model.raw_cutoff)
            .collect();
        prop_assert_eq!(&got, &want, "raw samples of series {}", i);
        let all = store.query_range(id, 0, i64::MAX).unwrap();
        prop_assert!(
            all.windows(2).all(|w| w[0].ts_ms < w[1].ts_ms),
            "time order"
        );
        let horizon = if model.rollup_cutoff > 0 {
            model.rollup_cutoff - model.rollup_cutoff.rem_euclid(DAY) + DAY
        } else {
            0
        };
        let want = rollup_samples(&model.samples[i]);
        let got = store.rollups(id, 0, i64::MAX).unwrap();
        let want: Vec<_> = want.into_iter().filter(|r| r.start_ms >= horizon).collect();
        let got: Vec<_> = got.into_iter().filter(|r| r.start_ms >= horizon).collect();
        prop_assert_eq!(got.len(), want.len(), "rollup buckets of series {}", i);
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(
                (g.start_ms, g.count, g.min, g.max, g.last),
                (w.start_ms, w.count, w.min, w.max, w.last)
            );
            prop_assert!((g.sum - w.sum).abs() <= 1e-9 * w.sum.abs().max(1.0));
        }
        let latest = store.latest(id).unwrap();
        if let Some(l) = model.samples[i]
            .last()
            .filter(|l| l.ts_ms >= model.raw_cutoff)
        {
            prop_assert_eq!(latest, Some(*l));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn store_matches_model(ops in prop::collection::vec(op(), 1..400)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), config()).unwrap();
        let t0 = 1_700_000_000_000i64 - 1_700_000_000_000i64.rem_euclid(DAY);
        let mut model = Model { samples: vec![Vec::new(); SERIES], clock: vec![t0; SERIES], ..Model::default() };
        for i in 0..SERIES {
            store.series_id("m", &labels(i)).unwrap();
        }
        store.flush().unwrap();
        let mut durable = model.clone();
        for op in ops {
            match op {
                Op::Append { series, dt, value } => {
                    let ts = (model.clock[series] + dt).max(0);
                    model.clock[series] = model.clock[series].max(ts);
                    let want = model.expect(series, ts, value);
                    let got = store.append("m", &labels(series), ts, value);
                    match (want, &got) {
                        (Ok(true), Ok(_)) => model.samples[series].push(Sample { ts_ms: ts, value }),
                        (Ok(false), Ok(_)) => {}
                        (Err("too old"), Err(Error::TooOld { .. }))
                        | (Err("out of order"), Err(Error::OutOfOrder { .. }))
                        | (Err("duplicate"), Err(Error::DuplicateTimestamp { .. })) => {}
                        (w, g) => prop_assert!(false, "append {ts}: model {w:?}, store {g:?}"),
                    }
                }
                Op::Flush => {
                    store.flush().unwrap();
                    durable = model.clone();
                }
                Op::Checkpoint => {
                    store.checkpoint().unwrap();
                    durable = model.clone();
                }
                Op::Reopen => {
                    drop(store);
                    store = Store::open(dir.path(), config()).unwrap();
                    // Unflushed samples are gone; the retention watermarks persist.
                    let (raw, rollup, clock) = (model.raw_cutoff, model.rollup_cutoff, model.clock.clone());
                    model = durable.clone();
                    model.raw_cutoff = raw;
                    model.rollup_cutoff = rollup;
                    model.clock = clock;
                    check(&store, &model)?;
                }
                Op::Maintain { ahead } => {
                    let now = model.clock.iter().copied().max().unwrap_or(t0) + ahead;
                    store.maintain(now).unwrap();
                    model.raw_cutoff = model.raw_cutoff.max(now - RAW_RET);
                    model.rollup_cutoff = model.rollup_cutoff.max(now - ROLLUP_RET);
                    // A pass flushes first.
                    durable = model.clone();
                }
            }
        }
        check(&store, &model)?;
        store.flush().unwrap();
        drop(store);
        let store = Store::open(dir.path(), config()).unwrap();
        check(&store, &model)?;
    }
}

#[test]
fn step_is_rollup_width() {
    assert_eq!(STEP, 300_000);
}
