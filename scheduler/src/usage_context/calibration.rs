//! What profiled pods really use against their requests (`usage.coldStart: calibrated` and
//! `image`): the ratios a pod without a profile is predicted by. Computed with each new
//! view by `usage::derive` and kept in the [`UsageContext`](super::UsageContext).

use std::collections::HashMap;

use super::risk::MemoryDist;

/// How much a set of running pods whose builder has a profile really use against their
/// requests: the p90 over those pods of `profile (at the prediction percentile) /
/// requests`, for memory and CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratios {
    /// Memory: real over requested.
    pub memory_ratio: f64,
    /// CPU: real over requested.
    pub cpu_ratio: f64,
    /// Pods it was computed from.
    pub pods: usize,
    /// Memory over requests as a distribution, for the risk-based fit: the median over
    /// those pods of `profile p50 / requests`, with the spread that puts its 95th
    /// percentile at the p95 over the pods of `profile p95 / requests` (how far an unseen
    /// builder may stray from its requests, given how far the known ones do).
    pub memory_ratio_dist: MemoryDist,
}

/// What the running profiled pods use against their requests: all of them, and under
/// `usage.coldStart: image` those of each set of container images.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Over every running pod whose builder has a profile.
    pub all: Ratios,
    /// Per set of container images (`usage::predict::image_key`), over the running profiled pods that
    /// run exactly those images; empty unless `usage.coldStart: image`.
    pub by_image: HashMap<String, Ratios>,
}
