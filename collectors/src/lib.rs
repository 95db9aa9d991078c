//! `headroom-collectors`: pulls real usage into `headroom-storage`.
//!
//! Sources: the Prometheus HTTP API (configurable PromQL), the kubelet summary API
//! (`/stats/summary`, read-only port or API-server node proxy) and Prometheus text
//! exposition scrapes. Each source runs its own loop and writes timestamped samples, under
//! the same stored names whatever the source (see the crate README), into a [`Sink`].
//!
//! Entry points: [`collect_once`] (one cycle of every source, for `headroom collect --once`)
//! and [`run`] (the loops, until shutdown). [`Collectors`] gives the same with a pod lister
//! for builder identity and a shared [`Metrics`] handle.

pub mod config;
mod errlog;
pub mod error;
mod http;
pub mod identity;
pub mod kubelet;
pub mod metrics;
pub mod prometheus;
pub mod runs;
pub mod samples;
mod schedule;
pub mod scrape;
pub mod shared;
pub mod sink;
pub mod summary;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{Mutex, watch};

pub use config::{CollectorsConfig, IdentityConfig, SourceKind};
pub use error::CollectError;
pub use identity::{BuilderId, IdentitySource, PodLister, StaticPods, builder_identity};
pub use metrics::Metrics;
pub use sink::{MemorySink, RunRecord, Sink, SinkError, UsageSummary};

use identity::PodIndex;
use kubelet::KubeletSource;
use prometheus::PrometheusSource;
use runs::RunTracker;
use samples::{Batch, now_ms};
use scrape::ScrapeSource;

/// One failure reported by a cycle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportedError {
    /// What it concerns: a node, a signal, a URL.
    pub subject: String,
    /// The `reason` label it was counted under.
    pub reason: &'static str,
    /// The full message.
    pub message: String,
}

/// What one cycle of one source did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceReport {
    /// Which source.
    pub source: SourceKind,
    /// Requests made (nodes polled, queries run, targets scraped).
    pub requests: usize,
    /// Distinct series written to.
    pub series: usize,
    /// Samples written.
    pub samples: usize,
    /// Samples not written because the series already had one at that time or later.
    pub duplicates: usize,
    /// Newest observation time written (ms since the epoch): the freshness of this cycle.
    pub newest_sample_ms: Option<i64>,
    /// Runs closed and written.
    pub runs: usize,
    /// Failures.
    pub errors: Vec<ReportedError>,
    /// Wall time of the cycle.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
}

/// What one [`collect_once`] did, per source.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CollectReport {
    /// One entry per configured source.
    pub sources: Vec<SourceReport>,
}

impl CollectReport {
    /// Samples written by all sources.
    pub fn samples(&self) -> usize {
        self.sources.iter().map(|s| s.samples).sum()
    }

    /// Failures of all sources.
    pub fn errors(&self) -> usize {
        self.sources.iter().map(|s| s.errors.len()).sum()
    }

    /// The report of `source`, if it is configured.
    pub fn source(&self, source: SourceKind) -> Option<&SourceReport> {
        self.sources.iter().find(|s| s.source == source)
    }
}

enum SourceImpl {
    // Boxed: it is much bigger than the others (its resolved config and queries).
    Prometheus(Box<PrometheusSource>),
    Kubelet(KubeletSource),
    Scrape(ScrapeSource),
}

/// A stored series: metric name and sorted labels.
type WrittenKey = (&'static str, Vec<(String, String)>);

/// Remembers the newest time written per series, so a value the source repeats (the
/// kubelet refreshes stats every 10-15 s; an exposition without timestamps) is not stored
/// twice at the same time.
#[derive(Default)]
struct SeriesWriter {
    /// Series → (newest sample time written, wall time of that write).
    last: HashMap<WrittenKey, (i64, i64)>,
}

impl SeriesWriter {
    /// Forgets series not written since `written_before_ms` (wall time, not sample time:
    /// a source may report old observation times).
    fn prune(&mut self, written_before_ms: i64) {
        self.last
            .retain(|_, (_, written)| *written >= written_before_ms);
    }
}

struct SourceRunner {
    kind: SourceKind,
    source: SourceImpl,
    interval: Duration,
    writer: SeriesWriter,
    log: errlog::ErrorLog,
    runs: Option<RunTracker>,
    backfill: Option<Duration>,
}

struct Shared<'a, S: ?Sized> {
    sink: &'a S,
    metrics: &'a Metrics,
    pods: Option<&'a dyn PodLister>,
    identity: &'a config::IdentityConfig,
}

impl SourceRunner {
    async fn cycle<S: Sink + ?Sized>(&mut self, shared: &Shared<'_, S>) -> SourceReport {
        let started = Instant::now();
        let mut batch = Batch::default();
        if let (Some(window), SourceImpl::Prometheus(p)) = (self.backfill.take(), &self.source) {
            batch = p.backfill(shared.metrics, window).await;
        }
        let current = match &mut self.source {
            SourceImpl::Prometheus(p) => p.collect(shared.metrics).await,
            SourceImpl::Kubelet(k) => k.collect(shared.metrics).await,
            SourceImpl::Scrape(s) => s.collect(shared.metrics).await,
        };
        batch.samples.extend(current.samples);
        batch.errors.extend(current.errors);
        batch.requests += current.requests;
        batch.pods = current.pods;
        self.finish(batch, started, shared)
    }

    fn finish<S: Sink + ?Sized>(
        &mut self,
        mut batch: Batch,
        started: Instant,
        shared: &Shared<'_, S>,
    ) -> SourceReport {
        let mut series = HashSet::new();
        let mut written = 0usize;
        let mut duplicates = 0usize;
        let mut newest = None;
        let mut sink_error: Option<SinkError> = None;
        let mut sink_failures = 0usize;
        let wall_ms = now_ms();
        for s in &batch.samples {
            let key = (s.signal.metric(), s.labels.clone());
            if self
                .writer
                .last
                .get(&key)
                .is_some_and(|&(last, _)| s.ts_ms <= last)
            {
                duplicates += 1;
                continue;
            }
            match shared
                .sink
                .append(s.signal.metric(), &s.labels, s.ts_ms, s.value)
            {
                Ok(()) => {
                    written += 1;
                    newest = newest.max(Some(s.ts_ms));
                    series.insert(key.clone());
                    self.writer.last.insert(key, (s.ts_ms, wall_ms));
                }
                Err(e) => {
                    sink_failures += 1;
                    sink_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = sink_error {
            batch
                .errors
                .push((format!("{sink_failures} sample(s)"), CollectError::Sink(e)));
        }
        // Forget series silent for long (gone pods) so the map stays bounded.
        let keep = self
            .interval
            .saturating_mul(20)
            .max(Duration::from_secs(600));
        self.writer
            .prune(wall_ms - i64::try_from(keep.as_millis()).unwrap_or(i64::MAX / 2));

        let mut runs_written = 0;
        if let (Some(tracker), Some(view)) = (&mut self.runs, &batch.pods) {
            let index = shared
                .pods
                .map(|l| PodIndex::build(l.pods().iter().map(|p| &**p), shared.identity))
                .unwrap_or_default();
            for (builder, run) in tracker.observe(view, &index) {
                let result = shared.sink.put_run(&builder, &run).and_then(|()| {
                    shared
                        .sink
                        .record_placement(&builder, &run.node, run.start_ms)
                });
                match result {
                    Ok(()) => {
                        runs_written += 1;
                        shared.metrics.inc_runs();
                        tracing::debug!(%builder, pod = %run.pod_uid, node = %run.node, "run recorded");
                    }
                    Err(e) => batch
                        .errors
                        .push((format!("run of {builder}"), CollectError::Sink(e))),
                }
            }
        }

        for (_, e) in &batch.errors {
            shared.metrics.count_error(self.kind, e);
        }
        self.log.cycle(self.kind, &batch.errors, Instant::now());
        shared.metrics.add_samples(self.kind, written as u64);
        shared.metrics.inc_cycles(self.kind);
        SourceReport {
            source: self.kind,
            requests: batch.requests,
            series: series.len(),
            samples: written,
            duplicates,
            newest_sample_ms: newest,
            runs: runs_written,
            errors: batch
                .errors
                .iter()
                .map(|(subject, e)| ReportedError {
                    subject: subject.clone(),
                    reason: e.reason(),
                    message: e.to_string(),
                })
                .collect(),
            duration: started.elapsed(),
        }
    }
}

/// The configured sources with their state (counter history, open runs, log state).
pub struct Collectors {
    config: CollectorsConfig,
    metrics: Metrics,
    pods: Option<Arc<dyn PodLister>>,
    runners: Vec<SourceRunner>,
}

impl std::fmt::Debug for Collectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectors")
            .field(
                "sources",
                &self.runners.iter().map(|r| r.kind).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Collectors {
    /// Validates `config` and builds its sources (HTTP clients, CA files, token files).
    pub fn new(config: CollectorsConfig) -> Result<Self, CollectError> {
        config.validate()?;
        let run_source = config.runs.effective_source(&config);
        let tracker = |kind| (run_source == Some(kind)).then(|| RunTracker::new(&config.runs));
        let mut runners = Vec::new();
        let mut add = |kind, source, interval, backfill| {
            runners.push(SourceRunner {
                kind,
                source,
                interval,
                writer: SeriesWriter::default(),
                log: errlog::ErrorLog::default(),
                runs: tracker(kind),
                backfill,
            })
        };
        if let Some(p) = &config.prometheus {
            add(
                SourceKind::Prometheus,
                SourceImpl::Prometheus(Box::new(PrometheusSource::new(p)?)),
                p.schedule.interval,
                None,
            );
        }
        if let Some(k) = &config.kubelet {
            add(
                SourceKind::Kubelet,
                SourceImpl::Kubelet(KubeletSource::new(k)?),
                k.schedule.interval,
                None,
            );
        }
        if let Some(s) = &config.scrape {
            add(
                SourceKind::Scrape,
                SourceImpl::Scrape(ScrapeSource::new(s)?),
                s.schedule.interval,
                None,
            );
        }
        Ok(Self {
            config,
            metrics: Metrics::new(),
            pods: None,
            runners,
        })
    }

    /// Uses `metrics` (e.g. already registered on the process registry) instead of fresh ones.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Uses `lister` for pod metadata: builder identity and ended phases.
    pub fn with_pod_lister(mut self, lister: Arc<dyn PodLister>) -> Self {
        self.pods = Some(lister);
        self
    }

    /// The metrics handle.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// One cycle of every source, concurrently.
    pub async fn collect_once<S: Sink + ?Sized>(&mut self, sink: &S) -> CollectReport {
        let shared = Shared {
            sink,
            metrics: &self.metrics,
            pods: self.pods.as_deref(),
            identity: &self.config.identity,
        };
        let mut reports = Vec::new();
        let cycles = self.runners.iter_mut().map(|r| r.cycle(&shared));
        for report in join_all(cycles).await {
            reports.push(report);
        }
        CollectReport { sources: reports }
    }

    /// Runs every source's loop until `shutdown` completes; cycles in flight are cancelled.
    /// With `prometheus.backfill` set, the first Prometheus cycle also reads that history.
    pub async fn run<S: Sink + ?Sized, F: Future<Output = ()>>(
        mut self,
        sink: &S,
        shutdown: F,
    ) -> Result<(), CollectError> {
        if self.runners.is_empty() {
            return Err(CollectError::Config(
                "no source configured (add a prometheus, kubelet or scrape section)".into(),
            ));
        }
        if let Some(p) = &self.config.prometheus {
            for r in &mut self.runners {
                if r.kind == SourceKind::Prometheus {
                    r.backfill = p.backfill;
                }
            }
        }
        let shared = Shared {
            sink,
            metrics: &self.metrics,
            pods: self.pods.as_deref(),
            identity: &self.config.identity,
        };
        let (tx, rx) = watch::channel(false);
        let schedules: Vec<config::ScheduleConfig> = self
            .runners
            .iter()
            .map(|r| match r.kind {
                SourceKind::Prometheus => {
                    self.config.prometheus.as_ref().map(|c| c.schedule.clone())
                }
                SourceKind::Kubelet => self.config.kubelet.as_ref().map(|c| c.schedule.clone()),
                SourceKind::Scrape => self.config.scrape.as_ref().map(|c| c.schedule.clone()),
            })
            .map(Option::unwrap_or_default)
            .collect();
        let runners: Vec<Mutex<SourceRunner>> = self.runners.into_iter().map(Mutex::new).collect();
        let loops = runners.iter().zip(&schedules).map(|(runner, schedule)| {
            let shared = &shared;
            schedule::drive(schedule, rx.clone(), move || async move {
                let report = runner.lock().await.cycle(shared).await;
                tracing::debug!(
                    source = %report.source,
                    samples = report.samples,
                    errors = report.errors.len(),
                    duration = ?report.duration,
                    "cycle done"
                );
            })
        });
        let stopper = async move {
            shutdown.await;
            // Receivers live as long as the loops; a send error means they are all gone.
            let _ = tx.send(true);
        };
        tokio::join!(stopper, join_all(loops));
        Ok(())
    }
}

/// Polls all futures concurrently on the current task (no spawn, so they may borrow).
async fn join_all<I>(futures: I) -> Vec<<I::Item as Future>::Output>
where
    I: IntoIterator,
    I::Item: Future,
{
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<_>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *out = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// One cycle of every configured source into `sink` (for `headroom collect --once`).
///
/// Counter-based CPU from the scrape source needs two cycles, so it yields no CPU here.
pub async fn collect_once<S: Sink + ?Sized>(
    config: &CollectorsConfig,
    sink: &S,
) -> Result<CollectReport, CollectError> {
    let mut collectors = Collectors::new(config.clone())?;
    Ok(collectors.collect_once(sink).await)
}

/// Runs every configured source's loop into `sink` until `shutdown` completes.
pub async fn run<S: Sink + ?Sized, F: Future<Output = ()>>(
    config: &CollectorsConfig,
    sink: &S,
    shutdown: F,
) -> Result<(), CollectError> {
    Collectors::new(config.clone())?.run(sink, shutdown).await
}
