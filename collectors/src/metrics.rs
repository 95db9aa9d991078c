//! The collectors' own metrics, on a `prometheus-client` registry.
//!
//! - `headroom_collector_errors_total{source,reason}`: every failure, by cause.
//! - `headroom_collector_samples_total{source}`: samples written to the sink.
//! - `headroom_collector_cycles_total{source}`: collection cycles completed.
//! - `headroom_collector_runs_total`: run records written.
//! - `headroom_collector_scrape_duration_seconds{source}`: duration of each request
//!   (one node's summary, one query, one target), retries included.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::config::SourceKind;
use crate::error::CollectError;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    source: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~41 s: from a loopback answer to a kubelet at the edge of its timeout.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Handles to the collectors' metrics. Cloning shares the same counters.
#[derive(Clone)]
pub struct Metrics {
    errors: Family<ErrorLabels, Counter>,
    samples: Family<SourceLabels, Counter>,
    cycles: Family<SourceLabels, Counter>,
    runs: Counter,
    durations: Family<SourceLabels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Fresh, unregistered metrics.
    pub fn new() -> Self {
        Self {
            errors: Family::default(),
            samples: Family::default(),
            cycles: Family::default(),
            runs: Counter::default(),
            durations: Family::new_with_constructor(duration_histogram),
        }
    }

    /// Registers all metrics on `registry` (names as in the module docs).
    pub fn register(&self, registry: &mut Registry) {
        // prometheus-client appends `_total` to counters when encoding.
        registry.register(
            "headroom_collector_errors",
            "Collection failures by source and reason",
            self.errors.clone(),
        );
        registry.register(
            "headroom_collector_samples",
            "Samples written to the store by source",
            self.samples.clone(),
        );
        registry.register(
            "headroom_collector_cycles",
            "Collection cycles completed by source",
            self.cycles.clone(),
        );
        registry.register(
            "headroom_collector_runs",
            "Builder run records written",
            self.runs.clone(),
        );
        registry.register(
            "headroom_collector_scrape_duration_seconds",
            "Duration of one request of a source (retries included)",
            self.durations.clone(),
        );
    }

    /// Counts `err` for `source`.
    pub fn count_error(&self, source: SourceKind, err: &CollectError) {
        self.errors
            .get_or_create(&ErrorLabels {
                source: source.as_str(),
                reason: err.reason(),
            })
            .inc();
    }

    /// Current value of `headroom_collector_errors_total{source,reason}`.
    pub fn errors(&self, source: SourceKind, reason: &'static str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                source: source.as_str(),
                reason,
            })
            .get()
    }

    /// Sum of `headroom_collector_errors_total{source}` over all reasons.
    pub fn errors_of(&self, source: SourceKind) -> u64 {
        const REASONS: [&str; 11] = [
            "config",
            "connect",
            "timeout",
            "http_status",
            "decode",
            "query",
            "no_data",
            "partial",
            "non_finite",
            "unmapped",
            "sink",
        ];
        REASONS.iter().map(|r| self.errors(source, r)).sum()
    }

    pub(crate) fn add_samples(&self, source: SourceKind, n: u64) {
        self.samples
            .get_or_create(&SourceLabels {
                source: source.as_str(),
            })
            .inc_by(n);
    }

    /// Current value of `headroom_collector_samples_total{source}`.
    pub fn samples(&self, source: SourceKind) -> u64 {
        self.samples
            .get_or_create(&SourceLabels {
                source: source.as_str(),
            })
            .get()
    }

    pub(crate) fn inc_cycles(&self, source: SourceKind) {
        self.cycles
            .get_or_create(&SourceLabels {
                source: source.as_str(),
            })
            .inc();
    }

    /// Current value of `headroom_collector_cycles_total{source}`.
    pub fn cycles(&self, source: SourceKind) -> u64 {
        self.cycles
            .get_or_create(&SourceLabels {
                source: source.as_str(),
            })
            .get()
    }

    pub(crate) fn inc_runs(&self) {
        self.runs.inc();
    }

    /// Current value of `headroom_collector_runs_total`.
    pub fn runs(&self) -> u64 {
        self.runs.get()
    }

    pub(crate) fn observe_duration(&self, source: SourceKind, d: Duration) {
        self.durations
            .get_or_create(&SourceLabels {
                source: source.as_str(),
            })
            .observe(d.as_secs_f64());
    }
}
