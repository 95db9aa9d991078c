//! The crate's error type.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
///
/// Input errors (bad labels, bad values, out-of-order samples) are reported per call and
/// leave the store unchanged; I/O and corruption errors come from sled or from a damaged
/// value and are reported with the key that failed where that helps.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The directory holds a store written in another on-disk format version.
    #[error(
        "storage format version mismatch: the store on disk is version {found}, this build reads version {expected}; \
         move the directory away or run a matching headroom version"
    )]
    FormatVersion {
        /// Version found on disk.
        found: u32,
        /// Version this build reads and writes.
        expected: u32,
    },
    /// An error from sled (I/O, or sled's own corruption detection).
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    /// Opening the store directory failed.
    #[error("opening store at {path}: {source}")]
    Open {
        /// Directory that was opened.
        path: PathBuf,
        /// Underlying error.
        source: sled::Error,
    },
    /// A stored value could not be decoded.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// What was being decoded (e.g. "chunk", "series definition").
        what: &'static str,
        /// Details.
        detail: String,
    },
    /// A record could not be (de)serialised.
    #[error("serialising {what}: {source}")]
    Serde {
        /// What was being (de)serialised.
        what: &'static str,
        /// Underlying error.
        source: serde_json::Error,
    },
    /// A label set, metric name or label name/value was rejected.
    #[error("invalid labels: {0}")]
    InvalidLabels(String),
    /// A series selector or matcher could not be parsed or compiled.
    #[error("invalid selector: {0}")]
    InvalidSelector(String),
    /// The sample value is NaN or infinite; such values are rejected, never stored.
    #[error("invalid sample value {value} at {ts_ms}: NaN and infinities are not stored")]
    InvalidValue {
        /// Timestamp of the rejected sample.
        ts_ms: i64,
        /// The rejected value.
        value: f64,
    },
    /// The timestamp lies outside `0..=MAX_TIMESTAMP_MS`.
    #[error("timestamp {0} ms is out of range (0..={max})", max = crate::MAX_TIMESTAMP_MS)]
    TimestampOutOfRange(i64),
    /// A sample older than the series' newest sample.
    #[error("out-of-order sample for series {series}: {ts_ms} < newest {newest_ms}")]
    OutOfOrder {
        /// Series id.
        series: u64,
        /// Rejected timestamp.
        ts_ms: i64,
        /// Newest timestamp already stored.
        newest_ms: i64,
    },
    /// A sample with the same timestamp as the newest one but a different value.
    #[error("duplicate timestamp {ts_ms} for series {series} with a different value")]
    DuplicateTimestamp {
        /// Series id.
        series: u64,
        /// The timestamp.
        ts_ms: i64,
    },
    /// The sample is older than the raw-retention cutoff of the last maintenance pass.
    #[error("sample at {ts_ms} is older than the raw retention cutoff {cutoff_ms}")]
    TooOld {
        /// Rejected timestamp.
        ts_ms: i64,
        /// Current cutoff.
        cutoff_ms: i64,
    },
    /// The series id is not known to this store.
    #[error("unknown series id {0}")]
    UnknownSeries(u64),
    /// The store refuses to create more series than configured.
    #[error("series limit reached ({0} series)")]
    TooManySeries(usize),
    /// An argument was invalid (e.g. an empty builder name or tree name).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A blocking task panicked or was cancelled (maintenance task only).
    #[error("background task failed: {0}")]
    Task(String),
}

impl Error {
    pub(crate) fn corrupt(what: &'static str, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what,
            detail: detail.into(),
        }
    }
}
