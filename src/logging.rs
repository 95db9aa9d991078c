//! Logs of the long-running commands (`serve`, `collect`): the format, the verbosity and
//! the summarising of failures that repeat.
//!
//! Kubernetes components log through klog: `--logging-format=text|json` and `-v N`. headroom
//! takes the same two knobs (`--log-format`, `-v`/`--v`) and maps them onto `tracing`:
//!
//! | `-v` | headroom's own crates | dependencies (kube, hyper, sled …) |
//! |---|---|---|
//! | 0 (default) | info | info |
//! | 1–3 | debug | info |
//! | 4 | trace | info |
//! | 5 and more | trace | debug |
//!
//! Without `-v`, `RUST_LOG` (a `tracing` filter such as `info,headroom::kube=debug`) is used
//! when set; `-v` wins over it. Colour escapes are written only when stderr is a terminal
//! and `NO_COLOR` is unset: a log file or a pod's log has none.
//!
//! A failure that repeats once per pod (a full disk under the store, an API server that
//! refuses events) would otherwise write one warning per pod: [`Repeated`] lets the first
//! through and then one per [`REPEAT_INTERVAL`] with the number held back in between.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing_subscriber::EnvFilter;

/// How long a repeating failure is summarised before it is logged again.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(30);

/// The crates whose logs `-v` raises first (headroom's own).
const OWN_CRATES: [&str; 3] = ["headroom", "headroom_collectors", "headroom_storage"];

/// Errors setting up logging.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` is not a valid `tracing` filter.
    #[error("RUST_LOG: invalid filter {value:?}: {reason}")]
    BadFilter {
        /// The variable's value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The log line format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event: time, level, target, message, then `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp` (RFC 3339, UTC), `level`, `message`, `target`
    /// and every field of the event at the top level, as Kubernetes' structured logs.
    Json,
}

/// The logging flags of the long-running commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// Log format: text (one line per event) or json (one object per line, for log
    /// pipelines).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Verbosity, as kube-scheduler's `-v`: 0 info, 1–3 debug, 4 trace of headroom's own
    /// logs, 5 and more also debug of its libraries (default: RUST_LOG, else 0).
    #[arg(short = 'v', long = "v", value_name = "N")]
    pub verbosity: Option<u8>,
}

/// The `tracing` filter for a verbosity, else `RUST_LOG`'s value, else `info`.
pub fn filter(verbosity: Option<u8>, rust_log: Option<&str>) -> Result<EnvFilter, LoggingError> {
    let directives = match (verbosity, rust_log) {
        (Some(v), _) => verbosity_directives(v),
        (None, Some(s)) if !s.trim().is_empty() => s.to_string(),
        (None, _) => "info".to_string(),
    };
    EnvFilter::builder()
        .parse(&directives)
        .map_err(|e| LoggingError::BadFilter {
            value: directives.clone(),
            reason: e.to_string(),
        })
}

/// The filter directives for `-v N` (the table in the module docs).
fn verbosity_directives(v: u8) -> String {
    let (own, deps) = match v {
        0 => ("info", "info"),
        1..=3 => ("debug", "info"),
        4 => ("trace", "info"),
        _ => ("trace", "debug"),
    };
    let mut s = deps.to_string();
    for c in OWN_CRATES {
        s.push_str(&format!(",{c}={own}"));
    }
    s
}

/// Installs the process's log subscriber on stderr. A second call (tests in one process)
/// keeps the first subscriber.
pub fn init(args: &LogArgs) -> Result<(), LoggingError> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(args.verbosity, rust_log.as_deref())?;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    Ok(())
}

/// A failure that may repeat once per event: the first is logged, then at most one per
/// interval, carrying how many were held back since the previous line.
///
/// Each call site owns one (the lock is its own, held for a few instructions).
#[derive(Debug)]
pub struct Repeated {
    interval: Duration,
    state: Mutex<RepeatState>,
}

#[derive(Debug, Default)]
struct RepeatState {
    last_logged: Option<Instant>,
    held_back: u64,
}

impl Default for Repeated {
    fn default() -> Self {
        Repeated::new(REPEAT_INTERVAL)
    }
}

impl Repeated {
    /// One line per `interval` at most.
    pub fn new(interval: Duration) -> Repeated {
        Repeated {
            interval,
            state: Mutex::new(RepeatState::default()),
        }
    }

    /// Counts a failure at `now`. `Some(n)` when this one is to be logged, `n` being the
    /// failures held back since the previous line (0 for the first); `None` to stay quiet.
    pub fn failure(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = s
            .last_logged
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        if due {
            s.last_logged = Some(now);
            Some(std::mem::take(&mut s.held_back))
        } else {
            s.held_back += 1;
            None
        }
    }

    /// Counts a success. `Some(n)` when `n` failures were held back since the last line: the
    /// caller logs that the trouble is over, so no failure goes uncounted in the log.
    pub fn success(&self) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::take(&mut s.held_back) {
            0 => None,
            n => Some(n),
        }
    }
}

/// `tokio`'s clock as an [`Instant`], so a paused test clock drives [`Repeated`] too.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_logged_then_one_per_interval_with_the_count() {
        let r = Repeated::new(Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(r.failure(t0), Some(0));
        for i in 1..=99 {
            assert_eq!(r.failure(t0 + Duration::from_millis(i * 100)), None);
        }
        // 29.9 s later still quiet, at 30 s the line carries the 100 held back.
        assert_eq!(r.failure(t0 + Duration::from_millis(29_900)), None);
        assert_eq!(r.failure(t0 + Duration::from_secs(30)), Some(100));
        assert_eq!(r.failure(t0 + Duration::from_secs(31)), None);
        // A success reports what was held back once, then nothing.
        assert_eq!(r.success(), Some(1));
        assert_eq!(r.success(), None);
        // The interval still runs from the last line.
        assert_eq!(r.failure(t0 + Duration::from_secs(40)), None);
        assert_eq!(r.failure(t0 + Duration::from_secs(60)), Some(1));
    }

    #[test]
    fn verbosity_maps_onto_levels_and_wins_over_rust_log() {
        assert_eq!(
            verbosity_directives(0),
            "info,headroom=info,headroom_collectors=info,headroom_storage=info"
        );
        assert!(verbosity_directives(2).starts_with("info,headroom=debug"));
        assert!(verbosity_directives(4).starts_with("info,headroom=trace"));
        assert!(verbosity_directives(7).starts_with("debug,headroom=trace"));
        let f = filter(Some(2), Some("warn")).unwrap().to_string();
        assert!(f.contains("headroom=debug"), "{f}");
        let f = filter(None, Some("warn,headroom::kube=trace"))
            .unwrap()
            .to_string();
        assert!(f.contains("headroom::kube=trace"), "{f}");
        assert_eq!(filter(None, None).unwrap().to_string(), "info");
        assert_eq!(filter(None, Some("  ")).unwrap().to_string(), "info");
    }

    #[test]
    fn a_bad_rust_log_is_an_error_naming_the_variable() {
        let e = filter(None, Some("headroom=loud")).unwrap_err().to_string();
        assert!(
            e.starts_with("RUST_LOG: invalid filter \"headroom=loud\""),
            "{e}"
        );
    }
}
