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
//! Below 5, kube's client does not log each failed request itself (headroom reports those
//! failures where it handles them, summarised; see [`Trouble`]).
//!
//! Without `-v`, `RUST_LOG` (a `tracing` filter such as `info,headroom::kube=debug`) is used
//! when set; `-v` wins over it. Colour escapes are written only when stderr is a terminal
//! and `NO_COLOR` is unset: a log file or a pod's log has none.
//!
//! A failure that repeats once per pod or once per retry (a full disk under the store, an
//! API server that is down or refuses events) would otherwise write one warning per pod or
//! per retry: a [`Trouble`] logs when it starts, then one line per [`REPEAT_INTERVAL`] with
//! the number held back in between, and when it ends.

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
        (None, _) => format!("info,{QUIET_DEPENDENCIES}"),
    };
    EnvFilter::builder()
        .parse(&directives)
        .map_err(|e| LoggingError::BadFilter {
            value: directives.clone(),
            reason: e.to_string(),
        })
}

/// Lines of dependencies that headroom reports itself, where it handles what they are
/// about: kube's client logs every failed request at ERROR ("failed with error client error
/// (Connect)"), once per retry of every watch while the API server is down, and a WARN per
/// watch stream an API server restart cuts ("eof in poll"); each of those failures reaches
/// a [`Trouble`] of headroom's or the watch's re-list. sled logs each failed write and flush
/// of a full disk at ERROR (a dozen lines for one failure), which the store's [`Trouble`]
/// reports once. Shown from `-v 5` on.
const QUIET_DEPENDENCIES: &str =
    "kube_client::client::builder=off,kube_client::client=error,sled=off";

/// The filter directives for `-v N` (the table in the module docs).
fn verbosity_directives(v: u8) -> String {
    let (own, deps) = match v {
        0 => ("info", "info"),
        1..=3 => ("debug", "info"),
        4 => ("trace", "info"),
        _ => ("trace", "debug"),
    };
    let mut s = deps.to_string();
    if v < 5 {
        s.push(',');
        s.push_str(QUIET_DEPENDENCIES);
    }
    for c in OWN_CRATES {
        s.push_str(&format!(",{c}={own}"));
    }
    s
}

/// The format [`init`] installed, once it has.
static INSTALLED: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

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
    let installed = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    if installed.is_ok() {
        let _ = INSTALLED.set(args.log_format);
        if args.log_format == LogFormat::Json {
            // A panic's message is plain text on stderr; in JSON mode it goes through the
            // log as one JSON line instead, so a log pipeline still parses every line.
            std::panic::set_hook(Box::new(|info| {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let what = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let thread = std::thread::current()
                    .name()
                    .unwrap_or("unnamed")
                    .to_string();
                tracing::error!(panic = %what, location = %at, thread = %thread, "panicked");
            }));
        }
    }
    Ok(())
}

/// Writes a command's last words on stderr: through the log once [`init`] installed one (so
/// that with `--log-format json` every line of stderr is JSON, the last one included), else
/// as `error: …`/the plain line.
pub fn last_words(level: tracing::Level, message: &str) {
    match (INSTALLED.get(), level) {
        (Some(_), tracing::Level::ERROR) => tracing::error!("{message}"),
        (Some(_), _) => tracing::info!("{message}"),
        (None, tracing::Level::ERROR) => eprintln!("error: {message}"),
        (None, _) => eprintln!("{message}"),
    }
}

/// A failure that may last (an API server that is down, a full disk, a refused write): the
/// first failure is logged when it starts (WARN), then at most one line per interval while
/// it lasts, carrying how many failures were held back and of which operations (WARN), and
/// one line when it ends, saying for how long it lasted and how many attempts failed (INFO):
///
/// ```text
/// WARN API server https://10.0.0.1:6443: watch of pods failed; retrying, one line every 30s while it lasts error=…
/// WARN API server https://10.0.0.1:6443: still failing after 30s: 118 failures since the last line (watch of nodes 40, watch of pods 40, lease 38) error=…
/// INFO API server https://10.0.0.1:6443: reachable again after 42s, 131 failed attempts
/// ```
///
/// kube-scheduler's reflectors log one line per informer per backoff step; here every
/// caller that meets the same trouble shares one [`Trouble`], so a dozen watches, the
/// lease and the binds failing together write one line per interval between them.
///
/// Each owner keeps one (its lock is its own, held for a few instructions).
#[derive(Debug)]
pub struct Trouble {
    subject: String,
    again: &'static str,
    interval: Duration,
    state: Mutex<TroubleState>,
}

#[derive(Debug, Default)]
struct TroubleState {
    /// When the current trouble began (`None`: no trouble).
    since: Option<Instant>,
    last_line: Option<Instant>,
    /// Failures since it began.
    total: u64,
    /// Failures since the last line, by operation.
    held_back: Vec<(String, u64)>,
}

/// The operations a [`Trouble`]'s summary line names one by one; the rest are summed.
const SHOWN_OPS: usize = 4;

/// What [`Trouble::failed`] or [`Trouble::ok`] wrote to the log (for tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TroubleLine {
    /// Nothing: the failure was counted towards the next line.
    Quiet,
    /// The trouble started.
    Started,
    /// Still failing: `held_back` failures since the previous line.
    Still {
        /// Failures counted since the previous line.
        held_back: u64,
    },
    /// The trouble ended after `failures` failed attempts over `lasted`.
    Ended {
        /// How long it lasted.
        lasted: Duration,
        /// Failed attempts from its start.
        failures: u64,
    },
}

impl Trouble {
    /// A trouble about `subject` (`API server https://…`, `the store at /var/lib/headroom`),
    /// whose end is logged as "`subject`: `again` after …" (`reachable again`,
    /// `writing again`), with one line per [`REPEAT_INTERVAL`] at most while it lasts.
    pub fn new(subject: impl Into<String>, again: &'static str) -> Trouble {
        Trouble::with_interval(subject, again, REPEAT_INTERVAL)
    }

    /// As [`Trouble::new`], with another interval between lines.
    pub fn with_interval(
        subject: impl Into<String>,
        again: &'static str,
        interval: Duration,
    ) -> Trouble {
        Trouble {
            subject: subject.into(),
            again,
            interval,
            state: Mutex::new(TroubleState::default()),
        }
    }

    /// What this trouble is about.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Whether a trouble is going on (a failure not yet followed by a success).
    pub fn ongoing(&self) -> bool {
        self.lock().since.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TroubleState> {
        // A panic elsewhere while holding this lock left counters only: keep counting.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a failure of `op` (`watch of pods`, `bind`) at `now`, and logs it when it
    /// starts a trouble or an interval has passed since the previous line.
    pub fn failed(&self, now: Instant, op: &str, error: &dyn std::fmt::Display) -> TroubleLine {
        let mut s = self.lock();
        s.total += 1;
        match s.held_back.iter_mut().find(|(o, _)| o == op) {
            Some((_, n)) => *n += 1,
            None => s.held_back.push((op.to_string(), 1)),
        }
        let Some(since) = s.since else {
            s.since = Some(now);
            s.last_line = Some(now);
            s.held_back.clear();
            drop(s);
            tracing::warn!(
                subject = %self.subject,
                op,
                error = %error,
                "{}: {op} failed; retrying, one line every {}s while it lasts",
                self.subject,
                self.interval.as_secs()
            );
            return TroubleLine::Started;
        };
        let due = s
            .last_line
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        if !due {
            return TroubleLine::Quiet;
        }
        s.last_line = Some(now);
        let mut ops = std::mem::take(&mut s.held_back);
        let held_back: u64 = ops.iter().map(|(_, n)| n).sum();
        // The busiest first; a long tail (a dozen watches) as one count.
        ops.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut by_op = ops
            .iter()
            .take(SHOWN_OPS)
            .map(|(o, n)| format!("{o} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        if ops.len() > SHOWN_OPS {
            let rest: u64 = ops[SHOWN_OPS..].iter().map(|(_, n)| n).sum();
            by_op.push_str(&format!(
                " and {rest} of {} other operations",
                ops.len() - SHOWN_OPS
            ));
        }
        let lasted = now.saturating_duration_since(since);
        drop(s);
        tracing::warn!(
            subject = %self.subject,
            op,
            error = %error,
            held_back,
            for_s = lasted.as_secs(),
            "{}: still failing after {}s: {held_back} failures since the last line ({by_op})",
            self.subject,
            lasted.as_secs()
        );
        TroubleLine::Still { held_back }
    }

    /// Counts a success at `now`: if a trouble was going on, logs its end.
    pub fn ok(&self, now: Instant) -> TroubleLine {
        let mut s = self.lock();
        let Some(since) = s.since.take() else {
            return TroubleLine::Quiet;
        };
        let failures = std::mem::take(&mut s.total);
        s.held_back.clear();
        s.last_line = None;
        let lasted = now.saturating_duration_since(since);
        drop(s);
        tracing::info!(
            subject = %self.subject,
            failures,
            for_s = lasted.as_secs(),
            "{}: {} after {}s, {failures} failed attempts",
            self.subject,
            self.again,
            lasted.as_secs()
        );
        TroubleLine::Ended { lasted, failures }
    }
}

/// An error with the errors behind it (`source()`), each once: "ServiceError: client error
/// (Connect): tcp connect error: Connection refused (os error 111)". kube's and hyper's
/// errors say what failed at the top and why only further down.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `tokio`'s clock as an [`Instant`], so a paused test clock drives [`Trouble`] too.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trouble_is_logged_when_it_starts_once_per_interval_and_when_it_ends() {
        let t = Trouble::with_interval("API server x", "reachable again", Duration::from_secs(30));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!t.ongoing());
        assert_eq!(t.ok(t0), TroubleLine::Quiet);
        assert_eq!(
            t.failed(t0, "watch of pods", &"refused"),
            TroubleLine::Started
        );
        assert!(t.ongoing());
        for i in 1..=99 {
            let op = if i % 2 == 0 { "watch of pods" } else { "lease" };
            assert_eq!(t.failed(at(i * 100), op, &"refused"), TroubleLine::Quiet);
        }
        // 29.9 s later still quiet, at 30 s the line carries the 100 since the first.
        assert_eq!(
            t.failed(at(29_900), "lease", &"refused"),
            TroubleLine::Quiet
        );
        assert_eq!(
            t.failed(at(30_000), "lease", &"refused"),
            TroubleLine::Still { held_back: 101 }
        );
        assert_eq!(
            t.failed(at(31_000), "lease", &"refused"),
            TroubleLine::Quiet
        );
        // The end carries every failure since the start.
        assert_eq!(
            t.ok(at(42_000)),
            TroubleLine::Ended {
                lasted: Duration::from_secs(42),
                failures: 103
            }
        );
        assert!(!t.ok(at(43_000)).eq(&TroubleLine::Started));
        assert_eq!(t.ok(at(43_000)), TroubleLine::Quiet);
        // A new trouble starts afresh.
        assert_eq!(
            t.failed(at(44_000), "lease", &"refused"),
            TroubleLine::Started
        );
        assert_eq!(
            t.ok(at(45_000)),
            TroubleLine::Ended {
                lasted: Duration::from_secs(1),
                failures: 1
            }
        );
    }

    #[test]
    fn an_error_chain_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Outer(#[source] std::io::Error);
        assert_eq!(error_chain(&Outer(io)), "client error (Connect): refused");
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped: {0}")]
        struct Same(#[source] std::io::Error);
        let io = std::io::Error::other("disk full");
        assert_eq!(error_chain(&Same(io)), "wrapped: disk full");
    }

    #[test]
    fn verbosity_maps_onto_levels_and_wins_over_rust_log() {
        assert_eq!(
            verbosity_directives(0),
            "info,kube_client::client::builder=off,kube_client::client=error,sled=off,headroom=info,headroom_collectors=info,headroom_storage=info"
        );
        assert!(verbosity_directives(2).contains(",headroom=debug"));
        assert!(verbosity_directives(4).contains(",headroom=trace"));
        assert!(verbosity_directives(7).starts_with("debug,headroom=trace"));
        assert!(!verbosity_directives(7).contains("=off"));
        let f = filter(Some(2), Some("warn")).unwrap().to_string();
        assert!(f.contains("headroom=debug"), "{f}");
        let f = filter(None, Some("warn,headroom::kube=trace"))
            .unwrap()
            .to_string();
        assert!(f.contains("headroom::kube=trace"), "{f}");
        let default = filter(None, None).unwrap().to_string();
        assert!(
            default.contains("kube_client::client::builder=off"),
            "{default}"
        );
        assert!(default.contains("info"), "{default}");
        assert_eq!(filter(None, Some("  ")).unwrap().to_string(), default);
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
