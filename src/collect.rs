//! `headroom collect --once` and `headroom series`: operators checking their collector setup.
//!
//! [`collect_once`] opens the store, runs one cycle of every configured collector source into
//! it, flushes and returns a [`CollectRun`] (per-source counts, errors, freshness).
//! [`list_series`] reads back what is stored ([`SeriesListing`]). Both are synchronous: the
//! store does blocking disk I/O, and the one collection cycle runs on a private
//! current-thread Tokio runtime.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use headroom_collectors::{CollectError, CollectReport, SourceReport};
use headroom_storage::{Store, parse_selector};
use serde::Serialize;

use crate::config::Config;

/// Why `collect` or `series` could not do its job (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The configuration has no `collectors.prometheus`, `collectors.kubelet` or
    /// `collectors.scrape` section.
    #[error(
        "no collector source configured: add collectors.prometheus, collectors.kubelet or collectors.scrape"
    )]
    NoSource,
    /// The collectors refused their configuration (CA file unreadable, bad URL, ...).
    #[error("{0}")]
    Collectors(#[from] CollectError),
    /// The data directory could not be created.
    #[error("creating the data directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The data directory could not be read.
    #[error("reading the data directory {path}: {source}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store failed (open, flush, select). The store's error says why: not a store,
    /// damaged, locked by another process, ...
    #[error("store in {path}: {source}")]
    Store {
        /// The store directory.
        path: PathBuf,
        /// The store's error.
        source: headroom_storage::Error,
    },
    /// The `--match` selector does not parse.
    #[error("bad --match selector {selector:?}: {source}")]
    Selector {
        /// The selector as given.
        selector: String,
        /// What is wrong with it.
        source: headroom_storage::Error,
    },
    /// The async runtime could not be started.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `now - ts` as a short human age (`42s`, `3m 5s`, `2d 4h`, `5y 3mo`); future times are
/// `in the future`.
pub fn format_age(age_ms: i64) -> String {
    if age_ms < 0 {
        return "in the future".into();
    }
    let secs = age_ms / 1000;
    if secs == 0 {
        return format!("{age_ms}ms");
    }
    const UNITS: [(&str, i64); 6] = [
        ("y", 365 * 86_400),
        ("mo", 30 * 86_400),
        ("d", 86_400),
        ("h", 3_600),
        ("m", 60),
        ("s", 1),
    ];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (name, size) in UNITS {
        if rest >= size {
            parts.push(format!("{}{name}", rest / size));
            rest %= size;
        }
        if parts.len() == 2 || (!parts.is_empty() && rest == 0) {
            break;
        }
    }
    parts.join(" ")
}

/// One source's report as `collect` prints it: the collectors' report plus the age of its
/// newest sample.
#[derive(Debug, Clone, Serialize)]
pub struct SourceSummary {
    /// What the cycle did.
    #[serde(flatten)]
    pub report: SourceReport,
    /// Age of the newest sample written, in milliseconds, at the end of the run.
    pub newest_sample_age_ms: Option<i64>,
}

/// What `headroom collect --once` did.
#[derive(Debug, Clone, Serialize)]
pub struct CollectRun {
    /// Store directory written to.
    pub data_dir: PathBuf,
    /// Samples written by all sources.
    pub samples: usize,
    /// Failures of all sources.
    pub errors: usize,
    /// One entry per configured source.
    pub sources: Vec<SourceSummary>,
}

impl CollectRun {
    fn new(data_dir: PathBuf, report: CollectReport, now_ms: i64) -> Self {
        CollectRun {
            data_dir,
            samples: report.samples(),
            errors: report.errors(),
            sources: report
                .sources
                .into_iter()
                .map(|report| SourceSummary {
                    newest_sample_age_ms: report.newest_sample_ms.map(|ts| now_ms - ts),
                    report,
                })
                .collect(),
        }
    }

    /// True when samples were stored and no source reported an error.
    pub fn ok(&self) -> bool {
        self.samples > 0 && self.errors == 0
    }

    /// Exit code: 0 when [`CollectRun::ok`], else 3 (errors, or nothing stored).
    pub fn exit_code(&self) -> u8 {
        if self.ok() { 0 } else { 3 }
    }

    /// Human-readable report, one block per source.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for s in &self.sources {
            let r = &s.report;
            let newest = match s.newest_sample_age_ms {
                Some(age) => format!("newest sample {} old", format_age(age)),
                None => "no sample".to_string(),
            };
            out.push_str(&format!(
                "{}: {} request(s), {} series, {} sample(s), {} error(s), {newest}, took {:?}\n",
                r.source,
                r.requests,
                r.series,
                r.samples,
                r.errors.len(),
                r.duration,
            ));
            for e in &r.errors {
                out.push_str(&format!(
                    "  error: {} [{}]: {}\n",
                    e.subject, e.reason, e.message
                ));
            }
        }
        out.push_str(&format!(
            "stored {} sample(s) in {}; {} error(s)\n",
            self.samples,
            self.data_dir.display(),
            self.errors
        ));
        if self.samples == 0 && self.errors == 0 {
            out.push_str("no samples stored: check that the sources list nodes or targets\n");
        }
        out
    }
}

/// Opens (creating) the store in `data_dir`, runs one cycle of `config.collectors` into
/// it and flushes. Errors if no source is configured or the store cannot be used; source
/// failures are in the returned report.
pub fn collect_once(config: &Config, data_dir: &Path) -> Result<CollectRun, CommandError> {
    let c = &config.collectors;
    if c.prometheus.is_none() && c.kubelet.is_none() && c.scrape.is_none() {
        return Err(CommandError::NoSource);
    }
    // Build the sources first, so a bad CA file or token is reported before touching disk.
    let mut collectors = headroom_collectors::Collectors::new(c.clone())?;
    std::fs::create_dir_all(data_dir).map_err(|source| CommandError::CreateDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    let store_error = |source| CommandError::Store {
        path: data_dir.to_path_buf(),
        source,
    };
    let store = Store::open(data_dir, config.storage.clone()).map_err(store_error)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CommandError::Runtime)?;
    let report = runtime.block_on(collectors.collect_once(&store));
    store.flush().map_err(store_error)?;
    Ok(CollectRun::new(data_dir.to_path_buf(), report, now_ms()))
}

/// One stored series as `headroom series` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesRow {
    /// Metric name.
    pub metric: String,
    /// Labels, sorted by name.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Time of the newest sample (ms since the epoch), if the series has a raw sample.
    pub last_ts_ms: Option<i64>,
    /// Value of the newest sample.
    pub last_value: Option<f64>,
    /// Age of the newest sample in milliseconds, when listed.
    pub age_ms: Option<i64>,
}

impl SeriesRow {
    /// `metric{a="x",b="y"}`.
    pub fn name(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{}{{{}}}", self.metric, labels.join(","))
    }
}

/// What `headroom series` found.
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesListing {
    /// The data directory does not exist (and was not created).
    NoDirectory(PathBuf),
    /// The store holds no series at all.
    Empty(PathBuf),
    /// The series matching the selector (possibly none), sorted by name.
    Series {
        /// Store directory.
        data_dir: PathBuf,
        /// The selector, if one was given.
        selector: Option<String>,
        /// Matching series.
        rows: Vec<SeriesRow>,
    },
}

impl SeriesListing {
    /// The listed series (none for a missing or empty store).
    pub fn rows(&self) -> &[SeriesRow] {
        match self {
            SeriesListing::Series { rows, .. } => rows,
            _ => &[],
        }
    }

    /// A one-line note for an empty result (to stdout in text mode, stderr in JSON mode).
    pub fn note(&self) -> Option<String> {
        match self {
            SeriesListing::NoDirectory(dir) => Some(format!(
                "no series stored in {}: the directory does not exist",
                dir.display()
            )),
            SeriesListing::Empty(dir) => Some(format!("no series stored in {}", dir.display())),
            SeriesListing::Series {
                data_dir,
                selector: Some(sel),
                rows,
            } if rows.is_empty() => Some(format!(
                "no series matching {sel} in {}",
                data_dir.display()
            )),
            SeriesListing::Series { .. } => None,
        }
    }

    /// Human-readable listing: `metric{labels} value (age old)` per line.
    pub fn to_text(&self) -> String {
        if let Some(note) = self.note() {
            return format!("{note}\n");
        }
        let mut out = String::new();
        for r in self.rows() {
            match (r.last_value, r.age_ms) {
                (Some(v), Some(age)) => {
                    out.push_str(&format!("{} {v} ({} old)\n", r.name(), format_age(age)))
                }
                _ => out.push_str(&format!("{} (no raw sample)\n", r.name())),
            }
        }
        out
    }
}

/// Lists the series stored in `data_dir` matching `selector` (all if `None`). A missing or
/// empty directory is reported as such and not created; a bad selector is an error.
pub fn list_series(
    config: &Config,
    data_dir: &Path,
    selector: Option<&str>,
) -> Result<SeriesListing, CommandError> {
    let matchers = match selector {
        Some(sel) => parse_selector(sel).map_err(|source| CommandError::Selector {
            selector: sel.to_string(),
            source,
        })?,
        None => Vec::new(),
    };
    let mut entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(SeriesListing::NoDirectory(data_dir.to_path_buf()));
        }
        Err(source) => {
            return Err(CommandError::ReadDir {
                path: data_dir.to_path_buf(),
                source,
            });
        }
    };
    // An empty directory is not a store yet: do not turn it into one.
    if entries.next().is_none() {
        return Ok(SeriesListing::Empty(data_dir.to_path_buf()));
    }
    let store_error = |source| CommandError::Store {
        path: data_dir.to_path_buf(),
        source,
    };
    // Never creates a store: a directory that is not one is refused, untouched.
    let store = Store::open_existing(data_dir, config.storage.clone()).map_err(store_error)?;
    if store.select(&[]).map_err(store_error)?.is_empty() {
        return Ok(SeriesListing::Empty(data_dir.to_path_buf()));
    }
    let now = now_ms();
    let mut rows: Vec<SeriesRow> = store
        .select(&matchers)
        .map_err(store_error)?
        .into_iter()
        .map(|info| SeriesRow {
            metric: info.metric,
            labels: info
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            last_ts_ms: info.last.map(|s| s.ts_ms),
            last_value: info.last.map(|s| s.value),
            age_ms: info.last.map(|s| now - s.ts_ms),
        })
        .collect();
    rows.sort_by_key(SeriesRow::name);
    Ok(SeriesListing::Series {
        data_dir: data_dir.to_path_buf(),
        selector: selector.map(str::to_string),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_short_and_readable() {
        assert_eq!(format_age(-5), "in the future");
        assert_eq!(format_age(250), "250ms");
        assert_eq!(format_age(42_000), "42s");
        assert_eq!(format_age(185_000), "3m 5s");
        assert_eq!(format_age(3_600_000), "1h");
        assert_eq!(format_age((2 * 86_400 + 4 * 3_600 + 7) * 1000), "2d 4h");
    }

    #[test]
    fn no_source_is_an_error_before_touching_disk() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let err = collect_once(&Config::default(), &data).unwrap_err();
        assert!(matches!(err, CommandError::NoSource), "{err}");
        assert!(!data.exists());
    }

    #[test]
    fn series_of_missing_and_empty_directories() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let l = list_series(&Config::default(), &missing, None).unwrap();
        assert_eq!(l, SeriesListing::NoDirectory(missing.clone()));
        assert!(l.to_text().contains("does not exist"));
        assert!(!missing.exists());
        let l = list_series(&Config::default(), dir.path(), Some("m")).unwrap();
        assert_eq!(l, SeriesListing::Empty(dir.path().to_path_buf()));
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        let err = list_series(&Config::default(), dir.path(), Some("bad{")).unwrap_err();
        assert!(matches!(err, CommandError::Selector { .. }), "{err}");
    }
}
