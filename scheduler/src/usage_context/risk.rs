//! The memory fit built on risk (`usage.memoryRiskPercent`): what the pods on a node will
//! use is random, so the fit bounds the probability that a node's real memory passes what it
//! can give, instead of adding up constants.
//!
//! Each pod's memory is a [`MemoryDist`]: a mean and a variance from its builder's profile
//! (the profile's median and its p95, read as a normal distribution through both, widened
//! for a profile of few runs), from the `builder-real-resources` records the same way, from
//! the cluster's calibration for a builder not seen yet (the spread of what profiled pods
//! use against their requests), or its requests taken as exact. A node's demand after
//! placing a pod is its measured usage (known) plus the recent placements its samples do not
//! show yet (their means and variances, in the share still counted) plus the pod. Pods are
//! taken as independent: their means and variances add, so many pods at their p95 do not
//! add up to a demand far beyond what they will use together, while a single pod is judged
//! at its own tail. The node passes when `P(demand > limit) ≤ target`, that is
//! `mean + z·sd ≤ limit` with `z` the standard normal quantile of `1 − target`; the limit
//! is what the node can give: its memory less the class's reserve (10 % by default).
//!
//! With the target at 5 % and one pod on an otherwise measured node this is the p95 rule
//! (`usage.predictPercentile: p95`); it differs where several pods are still uncounted
//! (their spreads add in quadrature, not linearly) and where a prediction is uncertain (a
//! profile of two runs, a builder never seen).
//!
//! This module holds the distribution and its arithmetic, below the snapshot (a
//! [`RecentPlacement`](super::RecentPlacement) carries one); the test itself is
//! RealMemoryFit's (`plugins::real_memory_fit`), and RealHeadroom scores by the same
//! probability.

use serde::Serialize;

/// A memory demand as a normal distribution: mean and variance, bytes and bytes².
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MemoryDist {
    /// Expected bytes.
    pub mean: f64,
    /// Variance, bytes².
    pub var: f64,
}

/// The standard normal quantile of 0.95: how many standard deviations p95 lies above the
/// median.
pub const Z95: f64 = 1.644_853_626_951_472_2;

impl MemoryDist {
    /// A demand known exactly.
    pub fn exact(bytes: f64) -> MemoryDist {
        MemoryDist {
            mean: bytes,
            var: 0.0,
        }
    }

    /// The normal distribution through a median `p50` and a 95th percentile `p95` estimated
    /// from `runs` observations: `sd = (p95 − p50) / z95`, widened by `√(1 + 1/runs)` (the
    /// spread of a next run around a mean estimated from `runs` runs).
    pub fn from_percentiles(p50: f64, p95: f64, runs: usize) -> MemoryDist {
        let sd = (p95 - p50).max(0.0) / Z95;
        let widen = 1.0 + 1.0 / runs.max(1) as f64;
        MemoryDist {
            mean: p50.max(0.0),
            var: sd * sd * widen,
        }
    }

    /// The standard deviation, bytes.
    pub fn sd(&self) -> f64 {
        self.var.max(0.0).sqrt()
    }

    /// The sum of two independent demands.
    pub fn plus(self, other: MemoryDist) -> MemoryDist {
        MemoryDist {
            mean: self.mean + other.mean,
            var: self.var + other.var,
        }
    }

    /// The value exceeded with probability `1 − Φ(z)`: `mean + z·sd`.
    pub fn upper(&self, z: f64) -> f64 {
        self.mean + z * self.sd()
    }

    /// `P(demand > limit)`.
    pub fn exceed_probability(&self, limit: f64) -> f64 {
        let sd = self.sd();
        if sd <= 0.0 {
            return if self.mean > limit { 1.0 } else { 0.0 };
        }
        1.0 - normal_cdf((limit - self.mean) / sd)
    }
}

/// The standard normal distribution function Φ (Abramowitz & Stegun 7.1.26 on erf, absolute
/// error below 1.5·10⁻⁷).
pub fn normal_cdf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let t = x.abs() / std::f64::consts::SQRT_2;
    let k = 1.0 / (1.0 + 0.327_591_1 * t);
    let poly = k
        * (0.254_829_592
            + k * (-0.284_496_736
                + k * (1.421_413_741 + k * (-1.453_152_027 + k * 1.061_405_429))));
    let erf = 1.0 - poly * (-t * t).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// The standard normal quantile Φ⁻¹(p) for `p` in (0, 1) (Acklam's rational approximation,
/// relative error below 1.2·10⁻⁹); ±∞ at 0 and 1.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    const LOW: f64 = 0.024_25;
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_functions_agree_with_tables() {
        for (x, phi) in [
            (0.0, 0.5),
            (1.0, 0.841_344_746),
            (-1.0, 0.158_655_254),
            (Z95, 0.95),
            (2.326_347_874, 0.99),
            (-3.0, 0.001_349_898),
        ] {
            assert!((normal_cdf(x) - phi).abs() < 2e-7, "Φ({x})");
            assert!((normal_quantile(phi) - x).abs() < 1e-6, "Φ⁻¹({phi})");
        }
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(normal_quantile(1.0), f64::INFINITY);
        // Round trips across the range, tails included.
        for i in 1..1000 {
            let p = i as f64 / 1000.0;
            assert!((normal_cdf(normal_quantile(p)) - p).abs() < 3e-7, "{p}");
        }
    }

    #[test]
    fn distributions_from_percentiles_add_in_quadrature() {
        let gi = (1u64 << 30) as f64;
        // p50 4 GiB, p95 6 GiB from many runs: sd ≈ 2/1.645 GiB; p95 is mean + z95·sd.
        let d = MemoryDist::from_percentiles(4.0 * gi, 6.0 * gi, 1_000_000);
        assert!((d.upper(Z95) - 6.0 * gi).abs() < 1e-3 * gi);
        assert!((d.exceed_probability(6.0 * gi) - 0.05).abs() < 1e-4);
        // Few runs widen it: two runs by √1.5.
        let two = MemoryDist::from_percentiles(4.0 * gi, 6.0 * gi, 2);
        assert!((two.sd() / d.sd() - 1.5f64.sqrt()).abs() < 1e-4);
        // Four such pods: the mean adds up (16 GiB), the spread only doubles, so their p95
        // together is 16 + 4 GiB, not 4 × 6 = 24 GiB.
        let four = [d; 4]
            .into_iter()
            .fold(MemoryDist::default(), MemoryDist::plus);
        assert!((four.upper(Z95) - 20.0 * gi).abs() < 1e-2 * gi);
        // Exact demands are a step.
        assert_eq!(MemoryDist::exact(5.0).exceed_probability(5.0), 0.0);
        assert_eq!(MemoryDist::exact(5.0).exceed_probability(4.9), 1.0);
        // p95 below p50 (bad data) is no spread, not a negative one.
        assert_eq!(MemoryDist::from_percentiles(5.0, 4.0, 3).var, 0.0);
    }
}
