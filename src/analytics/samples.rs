//! Builder profiles straight from raw usage samples: per run, the run's statistic
//! ([`PerRun`]: p95, max or mean) of CPU and memory; per builder, the percentiles of those
//! over its runs. The two-level aggregation is what the collectors do incrementally for
//! live runs (a [`RunRecord`](headroom_storage::RunRecord) per finished run); this form
//! recomputes everything from samples at once — for a backfill from a store that holds
//! samples but no run records, and as the benchmark of the polars path at 10⁷–10⁸ samples.

use std::collections::HashMap;

use polars::prelude::*;

use super::Error;
use super::profiles::{PerRun, Percentiles, percentile_aggs, read_percentiles};

/// Raw samples as columns: each row is one sample of one run of one builder. Builders are
/// dictionary-coded (`builder` indexes `names`) so that 10⁸ rows stay 24 bytes each.
#[derive(Debug, Clone, Default)]
pub struct SampleColumns {
    /// Builder names.
    pub names: Vec<String>,
    /// Builder index per sample.
    pub builder: Vec<u32>,
    /// Run number per sample (unique within its builder).
    pub run: Vec<u32>,
    /// CPU, cores.
    pub cpu: Vec<f64>,
    /// Memory, bytes.
    pub memory: Vec<f64>,
}

impl SampleColumns {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.builder.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.builder.is_empty()
    }
}

/// A builder's profile from samples.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleProfile {
    /// Runs seen.
    pub runs: usize,
    /// Per-run CPU percentiles, cores.
    pub cpu: Percentiles,
    /// Per-run memory percentiles, bytes.
    pub memory: Percentiles,
}

/// The linear-interpolated quantile `q` of `v` (reordered in place), as polars'
/// [`QUANTILE_METHOD`](super::QUANTILE_METHOD) computes it, in O(n) with two selections instead of a sort.
fn select_quantile(v: &mut [f64], q: f64) -> f64 {
    let pos = (v.len() - 1) as f64 * q;
    let lo = pos.floor() as usize;
    let (_, lo_v, upper) = v.select_nth_unstable_by(lo, f64::total_cmp);
    let lo_v = *lo_v;
    let frac = pos - lo as f64;
    if frac == 0.0 || upper.is_empty() {
        return lo_v;
    }
    let hi_v = upper.iter().copied().fold(f64::INFINITY, f64::min);
    lo_v + (hi_v - lo_v) * frac
}

fn run_stat(v: &mut [f64], how: PerRun) -> f64 {
    match how {
        PerRun::P95 => select_quantile(v, 0.95),
        PerRun::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        PerRun::Mean => v.iter().sum::<f64>() / v.len() as f64,
    }
}

/// First level: one row per (builder, run) with the run's statistic. Samples of a run are
/// normally contiguous (a run's series are read one after the other); a single pass over
/// the groups with O(n) selection then costs about one read of the data. When they are not,
/// the rows are put in (builder, run) order first.
fn per_run(cols: &SampleColumns, how: PerRun) -> (Vec<u32>, Vec<f64>, Vec<f64>) {
    let n = cols.len();
    let key = |i: usize| (cols.builder[i], cols.run[i]);
    let mut seen = std::collections::HashSet::new();
    let mut contiguous = true;
    let mut i = 0;
    while i < n {
        if !seen.insert(key(i)) {
            contiguous = false;
            break;
        }
        let k = key(i);
        while i < n && key(i) == k {
            i += 1;
        }
    }
    let order: Option<Vec<usize>> = (!contiguous).then(|| {
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by_key(|&i| key(i));
        idx
    });
    let at = |j: usize| order.as_ref().map_or(j, |o| o[j]);
    let (mut builders, mut cpu, mut mem) = (Vec::new(), Vec::new(), Vec::new());
    let (mut sc, mut sm) = (Vec::new(), Vec::new());
    let mut j = 0;
    while j < n {
        let k = key(at(j));
        sc.clear();
        sm.clear();
        while j < n && key(at(j)) == k {
            sc.push(cols.cpu[at(j)]);
            sm.push(cols.memory[at(j)]);
            j += 1;
        }
        builders.push(k.0);
        cpu.push(run_stat(&mut sc, how));
        mem.push(run_stat(&mut sm, how));
    }
    (builders, cpu, mem)
}

/// Computes every builder's profile from its samples. Blocking; run it off the async
/// threads. Rows with a builder index outside `names` are an error, not a panic.
///
/// The first level (a statistic per run over its samples) is a single pass in plain Rust:
/// polars' per-group quantile over 200k small groups cost seconds (measured: 2.6 s for 10M
/// samples, see `benches/README.md`). The second level (percentiles over a builder's runs)
/// is a polars group-by, as for run records.
pub fn profiles_from_samples(
    cols: SampleColumns,
    how: PerRun,
) -> Result<HashMap<String, SampleProfile>, Error> {
    if let Some(bad) = cols
        .builder
        .iter()
        .find(|b| **b as usize >= cols.names.len())
    {
        return Err(Error::Config(format!(
            "sample builder index {bad} outside the {} builder names",
            cols.names.len()
        )));
    }
    if cols.is_empty() {
        return Ok(HashMap::new());
    }
    let (b, cpu, mem) = per_run(&cols, how);
    let runs = b.len();
    let df = DataFrame::new(
        runs,
        vec![
            Column::new("builder".into(), b),
            Column::new("cpu".into(), cpu),
            Column::new("memory".into(), mem),
        ],
    )?;
    let mut aggs = vec![len().alias("runs")];
    aggs.extend(percentile_aggs("cpu"));
    aggs.extend(percentile_aggs("memory"));
    let out = df
        .lazy()
        .group_by([col("builder")])
        .agg(aggs)
        .with_column(col("runs").cast(DataType::UInt64))
        .collect()?;
    let builders = out.column("builder")?.u32()?;
    let runs = out.column("runs")?.u64()?;
    let (cpu, memory) = (
        read_percentiles(&out, "cpu")?,
        read_percentiles(&out, "memory")?,
    );
    let mut result = HashMap::with_capacity(out.height());
    for i in 0..out.height() {
        let Some(b) = builders.get(i) else { continue };
        result.insert(
            cols.names[b as usize].clone(),
            SampleProfile {
                runs: runs.get(i).unwrap_or(0) as usize,
                cpu: cpu[i],
                memory: memory[i],
            },
        );
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_level_percentiles() {
        // Builder a: runs 0..4; run r has samples r, 2r, ..., 10r (cpu) → max 10r.
        // Builder b: one run of constant 7.
        let mut c = SampleColumns {
            names: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        for r in 0..5u32 {
            for k in 1..=10 {
                c.builder.push(0);
                c.run.push(r);
                c.cpu.push((r * k) as f64);
                c.memory.push(1.0);
            }
        }
        c.builder.extend([1, 1]);
        c.run.extend([0, 0]);
        c.cpu.extend([7.0, 7.0]);
        c.memory.extend([7.0, 7.0]);
        let p = profiles_from_samples(c.clone(), PerRun::Max).unwrap();
        let a = &p["a"];
        assert_eq!(a.runs, 5);
        // Per-run maxima 0, 10, 20, 30, 40: median 20, max 40, p90 = 36 (linear).
        assert_eq!((a.cpu.p50, a.cpu.p90, a.cpu.max), (20.0, 36.0, 40.0));
        assert_eq!(p["b"].cpu.p99, 7.0);
        let mean = profiles_from_samples(c.clone(), PerRun::Mean).unwrap();
        assert_eq!(mean["a"].cpu.max, 22.0); // run 4: mean of 4..40 = 22
        // Interleaved runs give the same answer as contiguous ones.
        let mut shuffled = c.clone();
        let n = shuffled.len();
        let perm: Vec<usize> = (0..n).map(|i| (i * 7) % n).collect();
        assert_eq!(
            perm.iter().collect::<std::collections::HashSet<_>>().len(),
            n
        );
        shuffled.builder = perm.iter().map(|&i| c.builder[i]).collect();
        shuffled.run = perm.iter().map(|&i| c.run[i]).collect();
        shuffled.cpu = perm.iter().map(|&i| c.cpu[i]).collect();
        shuffled.memory = perm.iter().map(|&i| c.memory[i]).collect();
        assert_eq!(profiles_from_samples(shuffled, PerRun::Max).unwrap(), p);
        // The run's p95 by selection equals the linear-interpolated quantile: run 4 holds
        // 4, 8, ..., 40; position 8.55 → 36 + 0.55 × 4 = 38.2.
        let p95 = profiles_from_samples(c.clone(), PerRun::P95).unwrap();
        assert!((p95["a"].cpu.max - 38.2).abs() < 1e-9, "{:?}", p95["a"].cpu);
        c.builder[0] = 9;
        assert!(profiles_from_samples(c, PerRun::Max).is_err());
        assert!(
            profiles_from_samples(SampleColumns::default(), PerRun::P95)
                .unwrap()
                .is_empty()
        );
    }
}
