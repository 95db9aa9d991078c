//! Errors of the collectors, each with a short `reason` used as a metric label.

use std::time::Duration;

use crate::sink::SinkError;

/// Something that went wrong while collecting.
///
/// Every variant carries enough context (URL, query, node) to be actionable in one log line;
/// [`CollectError::reason`] gives the low-cardinality label used in
/// `headroom_collector_errors_total{source,reason}`.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The configuration cannot be used (bad URL, unreadable CA file, ...).
    #[error("invalid collectors configuration: {0}")]
    Config(String),
    /// The server could not be reached (connection refused, DNS, TLS handshake, ...).
    #[error("cannot reach {url}: {message}")]
    Connect {
        /// URL requested.
        url: String,
        /// Transport error text.
        message: String,
    },
    /// No complete answer within the per-request timeout.
    #[error("no answer from {url} within {timeout:?}")]
    Timeout {
        /// URL requested.
        url: String,
        /// The per-request timeout that expired.
        timeout: Duration,
    },
    /// The server answered with an HTTP error status.
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        /// URL requested.
        url: String,
        /// HTTP status code.
        status: u16,
        /// First bytes of the body, for context.
        body: String,
    },
    /// The body could not be decoded (malformed JSON or exposition text, unexpected shape).
    #[error("cannot decode the answer of {url}: {message}")]
    Decode {
        /// URL requested.
        url: String,
        /// Decoder error text.
        message: String,
    },
    /// Prometheus answered `status: error` for a query.
    #[error("Prometheus rejected the query for {signal} ({error_type}: {message}); query: {query}")]
    Query {
        /// Stored signal the query feeds (e.g. `container_cpu_usage_cores`).
        signal: String,
        /// The PromQL sent.
        query: String,
        /// Prometheus `errorType` (e.g. `bad_data`).
        error_type: String,
        /// Prometheus `error` text.
        message: String,
    },
    /// A query succeeded but returned no series: the metric or recording rule is missing.
    #[error(
        "the query for {signal} returned no series; query: {query}. {hint} \
         (override it with `prometheus.queries.{signal}` in the collectors config)"
    )]
    NoData {
        /// Stored signal the query feeds.
        signal: String,
        /// The PromQL sent.
        query: String,
        /// What to check (which exporter provides the metric).
        hint: String,
    },
    /// Prometheus answered with warnings: the result may be partial.
    #[error("partial answer for {signal}: {warnings}")]
    Partial {
        /// Stored signal concerned.
        signal: String,
        /// The warnings, joined.
        warnings: String,
    },
    /// A value was NaN or infinite and was not stored.
    #[error("{count} non-finite value(s) (NaN/Inf) skipped for {signal}")]
    NonFinite {
        /// Stored signal concerned.
        signal: String,
        /// How many values were skipped.
        count: usize,
    },
    /// A series could not be mapped to a node (instance → node mapping missing).
    #[error(
        "{count} series of {signal} have no node label and no instance mapping (e.g. instance {example:?})"
    )]
    Unmapped {
        /// Stored signal concerned.
        signal: String,
        /// How many series were dropped.
        count: usize,
        /// One instance value, to put in `prometheus.instance_map.static`.
        example: String,
    },
    /// The sink refused a write.
    #[error("sink refused a write: {0}")]
    Sink(#[from] SinkError),
}

impl CollectError {
    /// Low-cardinality reason label for `headroom_collector_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            CollectError::Config(_) => "config",
            CollectError::Connect { .. } => "connect",
            CollectError::Timeout { .. } => "timeout",
            CollectError::Status { .. } => "http_status",
            CollectError::Decode { .. } => "decode",
            CollectError::Query { .. } => "query",
            CollectError::NoData { .. } => "no_data",
            CollectError::Partial { .. } => "partial",
            CollectError::NonFinite { .. } => "non_finite",
            CollectError::Unmapped { .. } => "unmapped",
            CollectError::Sink(_) => "sink",
        }
    }

    /// Whether trying the same request again may help (transport trouble, 5xx, 429).
    pub fn is_retryable(&self) -> bool {
        match self {
            CollectError::Connect { .. } | CollectError::Timeout { .. } => true,
            CollectError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// Turns a transport error of `url` into a [`CollectError`].
    pub(crate) fn from_reqwest(url: &str, timeout: Duration, err: reqwest::Error) -> Self {
        if err.is_timeout() {
            CollectError::Timeout {
                url: url.to_owned(),
                timeout,
            }
        } else if err.is_decode() || err.is_body() {
            CollectError::Decode {
                url: url.to_owned(),
                message: error_chain(&err),
            }
        } else {
            CollectError::Connect {
                url: url.to_owned(),
                message: error_chain(&err),
            }
        }
    }
}

/// The error and its sources in one line: reqwest's top-level text alone
/// ("error sending request") hides the cause the operator needs.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
