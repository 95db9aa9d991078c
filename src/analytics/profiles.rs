//! Builder profiles: how much CPU and memory a builder's runs really used.
//!
//! Each stored [`RunRecord`] already summarises one run (mean, p95, max); a profile is
//! the distribution of one of those per-run numbers over the builder's recent runs. The
//! run records of every builder go into one DataFrame and a single lazy
//! `group_by(builder).agg(quantile ...)` computes every profile, so the cost is one pass
//! over the runs whatever the number of builders.

use std::collections::HashMap;

use headroom_storage::{RunRecord, Store, UsageSummary};
use polars::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Error, QUANTILE_METHOD};

pub use headroom_scheduler::view::{BuilderProfile, Percentiles};

/// Which number of a run's [`UsageSummary`] stands for the whole run in a profile.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum PerRun {
    /// The run's 95th percentile: ignores short spikes but not sustained load (default).
    #[default]
    P95,
    /// The run's maximum: the most conservative choice.
    Max,
    /// The run's mean: suits throughput-bound builders whose load is flat.
    Mean,
}

impl PerRun {
    /// The chosen number of `s`.
    pub fn pick(self, s: &UsageSummary) -> f64 {
        match self {
            PerRun::P95 => s.p95,
            PerRun::Max => s.max,
            PerRun::Mean => s.mean,
        }
    }
}

/// What to compute profiles over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProfileParams {
    /// At most this many runs per builder, the newest (0 means none).
    pub last_runs: usize,
    /// If set, only runs ending at or after this time (ms since the epoch) count.
    pub ended_after_ms: Option<i64>,
    /// Which number of each run is used.
    pub per_run: PerRun,
}

/// Column-wise run data of many builders, ready to become a DataFrame. Kept separate
/// from the store so that benches and tests can feed synthetic runs directly.
#[derive(Clone, Debug, Default)]
pub struct RunColumns {
    builder: Vec<String>,
    end_ms: Vec<i64>,
    cpu: Vec<f64>,
    memory: Vec<f64>,
    length_s: Vec<f64>,
    warm: Vec<bool>,
}

impl RunColumns {
    /// Empty columns.
    pub fn new() -> RunColumns {
        RunColumns::default()
    }

    /// Adds the newest `params.last_runs` of `runs` (given oldest first, as the store
    /// returns them). Trimming here rather than in polars keeps the frame small.
    pub fn push_runs(&mut self, builder: &str, runs: &[RunRecord], params: &ProfileParams) {
        let skip = runs.len().saturating_sub(params.last_runs);
        // Whether a run found its cache warm: an earlier run (counted or not) of the
        // builder ran on its node.
        let mut seen: std::collections::HashSet<&str> =
            runs[..skip].iter().map(|r| r.node.as_str()).collect();
        for r in &runs[skip..] {
            self.warm.push(!seen.insert(r.node.as_str()));
            self.length_s
                .push(r.end_ms.saturating_sub(r.start_ms).max(0) as f64 / 1000.0);
            self.builder.push(builder.to_string());
            self.end_ms.push(r.end_ms);
            self.cpu.push(params.per_run.pick(&r.cpu));
            self.memory.push(params.per_run.pick(&r.memory));
        }
    }

    /// Number of runs held.
    pub fn len(&self) -> usize {
        self.builder.len()
    }

    /// True if no run is held.
    pub fn is_empty(&self) -> bool {
        self.builder.is_empty()
    }

    fn into_frame(self) -> Result<DataFrame, Error> {
        let height = self.builder.len();
        Ok(DataFrame::new(
            height,
            vec![
                Column::new("builder".into(), self.builder),
                Column::new("end_ms".into(), self.end_ms),
                Column::new("cpu".into(), self.cpu),
                Column::new("memory".into(), self.memory),
                Column::new("length_s".into(), self.length_s),
                Column::new("warm".into(), self.warm),
            ],
        )?)
    }
}

/// Reads every builder's runs from the store and computes their profiles.
pub fn builder_profiles(
    store: &Store,
    params: &ProfileParams,
) -> Result<HashMap<String, BuilderProfile>, Error> {
    let mut cols = RunColumns::new();
    for builder in store.builders()? {
        cols.push_runs(&builder, &store.runs(&builder)?, params);
    }
    profiles_from_columns(cols, params)
}

/// The five aggregations of one value column, named `{name}_p50` … `{name}_max`.
pub(super) fn percentile_aggs(name: &str) -> Vec<Expr> {
    let q = |p: f64, suffix: &str| {
        col(name)
            .quantile(lit(p), QUANTILE_METHOD)
            .alias(format!("{name}_{suffix}"))
    };
    vec![
        q(0.50, "p50"),
        q(0.90, "p90"),
        q(0.95, "p95"),
        q(0.99, "p99"),
        col(name).max().alias(format!("{name}_max")),
    ]
}

pub(super) fn read_percentiles(df: &DataFrame, name: &str) -> Result<Vec<Percentiles>, Error> {
    let get = |suffix: &str| -> Result<Vec<f64>, Error> {
        let c = df.column(&format!("{name}_{suffix}"))?;
        // A group always has at least one value, so nulls cannot occur; 0 keeps the
        // conversion total instead of panicking if polars ever says otherwise.
        Ok(c.f64()?.iter().map(|v| v.unwrap_or(0.0)).collect())
    };
    let (p50, p90, p95, p99, max) = (
        get("p50")?,
        get("p90")?,
        get("p95")?,
        get("p99")?,
        get("max")?,
    );
    Ok((0..df.height())
        .map(|i| Percentiles {
            p50: p50[i],
            p90: p90[i],
            p95: p95[i],
            p99: p99[i],
            max: max[i],
        })
        .collect())
}

/// Computes profiles from already-collected runs (see [`RunColumns::push_runs`]).
pub fn profiles_from_columns(
    cols: RunColumns,
    params: &ProfileParams,
) -> Result<HashMap<String, BuilderProfile>, Error> {
    if cols.is_empty() {
        return Ok(HashMap::new());
    }
    let mut lf = cols.into_frame()?.lazy();
    if let Some(after) = params.ended_after_ms {
        lf = lf.filter(col("end_ms").gt_eq(lit(after)));
    }
    let mut aggs = vec![len().alias("runs"), col("end_ms").max().alias("newest_ms")];
    aggs.extend(percentile_aggs("cpu"));
    aggs.extend(percentile_aggs("memory"));
    aggs.push(
        col("length_s")
            .filter(col("warm").not())
            .median()
            .alias("cold_run_s"),
    );
    aggs.push(
        col("length_s")
            .filter(col("warm"))
            .median()
            .alias("warm_run_s"),
    );
    let df = lf
        .group_by([col("builder")])
        .agg(aggs)
        .with_column(col("runs").cast(DataType::UInt64))
        .collect()?;

    let builders = df.column("builder")?.str()?;
    let runs = df.column("runs")?.u64()?;
    let newest = df.column("newest_ms")?.i64()?;
    let cpu = read_percentiles(&df, "cpu")?;
    let memory = read_percentiles(&df, "memory")?;
    let cold_run = df.column("cold_run_s")?.f64()?;
    let warm_run = df.column("warm_run_s")?.f64()?;
    let mut out = HashMap::with_capacity(df.height());
    for i in 0..df.height() {
        let Some(builder) = builders.get(i) else {
            continue;
        };
        out.insert(
            builder.to_string(),
            BuilderProfile {
                builder: builder.to_string(),
                runs: runs.get(i).unwrap_or(0) as usize,
                cpu: cpu[i],
                memory: memory[i],
                newest_ms: newest.get(i).unwrap_or(0),
                cold_run_s: cold_run.get(i),
                warm_run_s: warm_run.get(i),
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_storage::StoreConfig;

    fn summary(mean: f64, p95: f64, max: f64) -> UsageSummary {
        UsageSummary { mean, p95, max }
    }

    fn run(i: i64, cpu: UsageSummary, memory: UsageSummary) -> RunRecord {
        RunRecord {
            pod_uid: format!("uid-{i}"),
            node: "n1".into(),
            start_ms: i * 1000,
            end_ms: i * 1000 + 500,
            cpu,
            memory,
        }
    }

    /// Store with builder `a`: runs 1..=10, run i has cpu p95 = i, max = 10 i, mean = i/10
    /// and memory p95 = 100 i; builder `b`: one run.
    fn filled() -> Store {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        for i in 1..=10 {
            let f = i as f64;
            store
                .put_run(
                    "a",
                    &run(
                        i,
                        summary(f / 10.0, f, 10.0 * f),
                        summary(0.0, 100.0 * f, 0.0),
                    ),
                )
                .unwrap();
        }
        store
            .put_run("b", &run(3, summary(1.0, 2.0, 3.0), summary(4.0, 5.0, 6.0)))
            .unwrap();
        store
    }

    fn params(last_runs: usize) -> ProfileParams {
        ProfileParams {
            last_runs,
            ended_after_ms: None,
            per_run: PerRun::P95,
        }
    }

    #[test]
    fn profiles_exact_linear_percentiles() {
        let p = builder_profiles(&filled(), &params(20)).unwrap();
        assert_eq!(p.len(), 2);
        let a = &p["a"];
        assert_eq!(a.runs, 10);
        assert_eq!(a.newest_ms, 10_500);
        // Linear: position (n-1) q over 1..=10, so value = 1 + 9 q.
        let expect = Percentiles {
            p50: 5.5,
            p90: 9.1,
            p95: 9.55,
            p99: 9.91,
            max: 10.0,
        };
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        for (got, want) in [
            (a.cpu.p50, expect.p50),
            (a.cpu.p90, expect.p90),
            (a.cpu.p95, expect.p95),
            (a.cpu.p99, expect.p99),
            (a.cpu.max, expect.max),
        ] {
            assert!(close(got, want), "{got} != {want}");
        }
        assert!(close(a.memory.p90, 910.0));
        let b = &p["b"];
        assert_eq!(b.runs, 1);
        assert_eq!(
            b.cpu,
            Percentiles {
                p50: 2.0,
                p90: 2.0,
                p95: 2.0,
                p99: 2.0,
                max: 2.0
            }
        );
        assert_eq!(b.newest_ms, 3500);
    }

    #[test]
    fn profiles_last_n_window_and_per_run() {
        let store = filled();
        // Last 4 runs of `a` are 7..=10: p50 = 8.5, max = 10.
        let p = builder_profiles(&store, &params(4)).unwrap();
        assert_eq!(p["a"].runs, 4);
        assert_eq!(p["a"].cpu.p50, 8.5);
        assert_eq!(p["a"].cpu.max, 10.0);

        // Window: runs ending at or after 8_500 are 8, 9, 10; `b` drops out.
        let mut w = params(20);
        w.ended_after_ms = Some(8_500);
        let p = builder_profiles(&store, &w).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p["a"].runs, 3);
        assert_eq!(p["a"].cpu.p50, 9.0);

        // per_run = max: values 10, 20, ..., 100.
        let mut m = params(20);
        m.per_run = PerRun::Max;
        let p = builder_profiles(&store, &m).unwrap();
        assert!((p["a"].cpu.p90 - 91.0).abs() < 1e-9);
        m.per_run = PerRun::Mean;
        let p = builder_profiles(&store, &m).unwrap();
        assert!((p["a"].cpu.p50 - 0.55).abs() < 1e-9);
    }

    #[test]
    fn profiles_empty_store() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        assert!(builder_profiles(&store, &params(20)).unwrap().is_empty());
        assert!(builder_profiles(&filled(), &params(0)).unwrap().is_empty());
    }

    /// Runs on a node the builder ran on before count as warm, the rest as cold, and
    /// each kind has its median length; runs before the counted ones still warm a node.
    #[test]
    fn cold_and_warm_run_lengths() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        // (node, length s): n1 and n2 cold (100 s, 140 s), then warm runs of 60, 50, 70 s.
        let runs = [("n1", 100), ("n2", 140), ("n1", 60), ("n2", 50), ("n1", 70)];
        for (i, (node, len)) in runs.iter().enumerate() {
            let start = i as i64 * 1_000_000;
            let mut r = run(i as i64, summary(1.0, 1.0, 1.0), summary(1.0, 1.0, 1.0));
            r.node = node.to_string();
            r.start_ms = start;
            r.end_ms = start + len * 1000;
            store.put_run("a", &r).unwrap();
        }
        store
            .put_run("b", &run(3, summary(1.0, 2.0, 3.0), summary(4.0, 5.0, 6.0)))
            .unwrap();
        let p = builder_profiles(&store, &params(20)).unwrap();
        assert_eq!(p["a"].cold_run_s, Some(120.0));
        assert_eq!(p["a"].warm_run_s, Some(60.0));
        assert_eq!(p["b"].cold_run_s, Some(0.5));
        assert_eq!(p["b"].warm_run_s, None);
        // Only the last two runs counted: both warm, since earlier runs used their nodes.
        let p = builder_profiles(&store, &params(2)).unwrap();
        assert_eq!(p["a"].cold_run_s, None);
        assert_eq!(p["a"].warm_run_s, Some(60.0));
    }
}
