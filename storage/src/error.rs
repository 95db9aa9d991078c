//! The crate's error type.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
///
/// Input errors (bad labels, bad values, out-of-order samples) are reported per call and
/// leave the store unchanged. Opening reports a directory that is not a store
/// ([`Error::NotAStore`], [`Error::NoStore`]), another format ([`Error::IncompatibleVersion`]),
/// damage ([`Error::Corrupt`]) and a held lock ([`Error::Locked`]) separately; a damaged
/// value found later is [`Error::CorruptValue`], naming its key or series.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A [`StoreConfig`](crate::StoreConfig) field is out of range. `field` is the
    /// camelCase name used in YAML (the root configuration nests it under `storage.`).
    #[error("invalid storage configuration: {field}: {message}")]
    InvalidConfig {
        /// The field, camelCase (e.g. `cacheCapacityBytes`).
        field: &'static str,
        /// What is wrong with it (e.g. `must be at least 256 (bytes)`).
        message: String,
    },
    /// The directory exists and holds something, but not a headroom store: it has no
    /// `HEADROOM` marker. The store never initialises such a directory.
    #[error("{path} is not a headroom store ({reason}); refusing to use it")]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// Why it is not recognised (e.g. `no HEADROOM marker`).
        reason: String,
    },
    /// [`OpenMode::MustExist`](crate::OpenMode::MustExist) and there is no store there.
    #[error("no headroom store at {path}: {reason}")]
    NoStore {
        /// The directory.
        path: PathBuf,
        /// Why (`the directory does not exist`, `the directory is empty`, ...).
        reason: String,
    },
    /// The store was written in another on-disk format version (its `HEADROOM` marker
    /// or its `meta` tree says so).
    #[error(
        "{path} holds a headroom store of format version {found}; this build reads format version {expected} only: \
         move the directory away or run a matching headroom version"
    )]
    IncompatibleVersion {
        /// The store directory.
        path: PathBuf,
        /// Version found on disk.
        found: u32,
        /// Version this build reads and writes.
        expected: u32,
    },
    /// The store's files are damaged (truncated, bytes changed, a file missing) or the
    /// database lost data it had acknowledged; detected when opening. The store is not
    /// used (nothing is written to it by headroom).
    #[error(
        "store at {path} is damaged: {detail}; refusing to use it \
         (move the directory away and restore it from a backup, or start a new store)"
    )]
    Corrupt {
        /// The store directory (or the damaged file in it).
        path: PathBuf,
        /// What is damaged.
        detail: String,
    },
    /// A stored value failed its checksum or could not be decoded (found while reading
    /// an open store, e.g. by a query).
    #[error("corrupt {what}, the store is damaged: {detail}")]
    CorruptValue {
        /// What was being read, naming its key or series (e.g. `chunk of series 3
        /// mem{pod="a"} starting at 1700000000000 ms`).
        what: String,
        /// What is wrong (e.g. a checksum mismatch).
        detail: String,
    },
    /// Another process (or another open [`Store`](crate::Store) in this one) holds the
    /// store's lock.
    #[error("store at {path} is locked: is another headroom process using it?")]
    Locked {
        /// The store directory.
        path: PathBuf,
    },
    /// An error from sled (I/O, or sled's own corruption detection).
    #[error("sled: {0}")]
    Sled(sled::Error),
    /// Opening the store directory failed (an I/O error from sled).
    #[error("opening store at {path}: {source}")]
    Open {
        /// Directory that was opened.
        path: PathBuf,
        /// Underlying error.
        source: sled::Error,
    },
    /// Reading or writing one of the store's own files (`HEADROOM`) or its directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
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
    pub(crate) fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::CorruptValue {
            what: what.into(),
            detail: detail.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// True for the kinds that mean "the data on disk is damaged" ([`Error::Corrupt`],
    /// [`Error::CorruptValue`], sled's own corruption error).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corrupt { .. }
                | Error::CorruptValue { .. }
                | Error::Sled(sled::Error::Corruption { .. } | sled::Error::ReportableBug(_))
        )
    }
}

impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
        match e {
            // sled's own message ("Read corrupted data at file offset Some(Inline(840))
            // backtrace ()") says little; name it as damage.
            sled::Error::Corruption { at, .. } => Error::CorruptValue {
                what: "database page".into(),
                detail: match at {
                    Some(at) => format!("sled found damaged data at {at:?} (checksum mismatch)"),
                    None => "sled found damaged data (checksum mismatch)".into(),
                },
            },
            // sled reads a page or blob at a length its structures promise; a file that
            // ends early was truncated.
            sled::Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Error::CorruptValue {
                    what: "database page".into(),
                    detail: format!(
                        "a sled file ends before data sled expects there (truncated?): {e}"
                    ),
                }
            }
            other => Error::Sled(other),
        }
    }
}
