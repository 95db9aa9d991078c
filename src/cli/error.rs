//! [`CliError`]: every way a `headroom` command can fail, and the exit code of each.
//!
//! The commands return `Result<ExitCode, CliError>`; [`super::run`] prints an error as
//! `error: {message}` on standard error and exits with [`CliError::exit_code`], in one place.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::client::ExplainError;

/// Why a command failed. Exit code 2: bad input, or the command could not start (an
/// argument, the configuration, an input file, a listener, the server to ask); 3: the
/// command ran but did not fully succeed (pods unaccounted for, targets missed, no decision
/// for the pod, serving failed).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Flags that are missing or do not go together (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A flag's value is invalid (exit 2).
    #[error("{flag}: {reason}")]
    BadFlag {
        /// The flag, as typed (`--prometheus`).
        flag: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The configuration could not be read or is invalid (exit 2).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Logging could not be set up (exit 2).
    #[error(transparent)]
    Logging(#[from] crate::logging::LoggingError),
    /// A scenario or family file could not be used (exit 2).
    #[error(transparent)]
    Scenario(#[from] crate::simulate::scenario::Error),
    /// A simulation or sweep failed (exit 2).
    #[error(transparent)]
    Simulate(#[from] crate::simulate::Error),
    /// `place`'s cluster or pod file could not be used (exit 2).
    #[error(transparent)]
    Place(#[from] crate::place::PlaceError),
    /// `collect` or `series` could not do its job (exit 2).
    #[error(transparent)]
    Collect(#[from] crate::collect::CommandError),
    /// The async runtime could not be started (exit 2).
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
    /// The inspection API's runtime could not be started (exit 2).
    #[error("starting the API runtime: {0}")]
    ApiRuntime(std::io::Error),
    /// `simulate --serve ADDR` could not listen there (exit 2).
    #[error("--serve {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An output file could not be written (exit 2).
    #[error("writing {}: {reason}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A result could not be rendered as JSON (exit 2).
    #[error("rendering JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// `explain`/`advice`: the server could not be asked, or answered with an error (exit 2;
    /// 3 when it has no decision for the pod, [`ExplainError::NotFound`]).
    #[error(transparent)]
    Api(#[from] ExplainError),
    /// `serve`: no usable kubeconfig or in-cluster configuration (exit 2).
    #[error(transparent)]
    Connect(crate::kube::Error),
    /// `serve`: the runtime could not be started (exit 3: serving failed).
    #[error("starting the runtime: {0}")]
    ServeRuntime(std::io::Error),
    /// `serve` failed while serving (exit 3). An invalid configuration found on the way is
    /// [`CliError::Config`] instead.
    #[error(transparent)]
    Serve(crate::kube::Error),
    /// Some simulated pods were neither placed nor left pending (exit 3).
    #[error("some pods are unaccounted for")]
    PodsLost,
    /// `sweep --check-targets`: headroom missed some of its targets (exit 3).
    #[error("some targets are missed")]
    TargetsMissed,
}

impl CliError {
    /// The process exit code for this error: 2 or 3 (see [`CliError`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Api(e) => e.exit_code(),
            CliError::ServeRuntime(_)
            | CliError::Serve(_)
            | CliError::PodsLost
            | CliError::TargetsMissed => 3,
            CliError::Usage(_)
            | CliError::BadFlag { .. }
            | CliError::Config(_)
            | CliError::Logging(_)
            | CliError::Scenario(_)
            | CliError::Simulate(_)
            | CliError::Place(_)
            | CliError::Collect(_)
            | CliError::Runtime(_)
            | CliError::ApiRuntime(_)
            | CliError::Bind { .. }
            | CliError::Write { .. }
            | CliError::Json(_)
            | CliError::Connect(_) => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_2_for_bad_input_and_3_for_a_partial_run() {
        let io = || std::io::Error::other("x");
        for e in [
            CliError::Usage("u".into()),
            CliError::Runtime(io()),
            CliError::ApiRuntime(io()),
            CliError::Api(ExplainError::BadPod("p".into())),
            CliError::Connect(crate::kube::Error::ClientConfig("c".into())),
        ] {
            assert_eq!(e.exit_code(), 2, "{e}");
        }
        for e in [
            CliError::PodsLost,
            CliError::TargetsMissed,
            CliError::ServeRuntime(io()),
            CliError::Serve(crate::kube::Error::Task("t".into())),
            CliError::Api(ExplainError::NotFound("n".into())),
        ] {
            assert_eq!(e.exit_code(), 3, "{e}");
        }
    }

    #[test]
    fn messages_are_the_ones_the_commands_printed() {
        let io = || std::io::Error::other("boom");
        let cases = [
            (CliError::Usage("needs --once".into()), "needs --once"),
            (
                CliError::BadFlag {
                    flag: "--prometheus",
                    reason: "bad".into(),
                },
                "--prometheus: bad",
            ),
            (CliError::Runtime(io()), "starting the runtime: boom"),
            (CliError::ApiRuntime(io()), "starting the API runtime: boom"),
            (CliError::ServeRuntime(io()), "starting the runtime: boom"),
            (
                CliError::Bind {
                    addr: "127.0.0.1:1".parse().unwrap(),
                    source: io(),
                },
                "--serve 127.0.0.1:1: boom",
            ),
            (
                CliError::Write {
                    path: "/x/plot.svg".into(),
                    reason: "boom".into(),
                },
                "writing /x/plot.svg: boom",
            ),
            (CliError::PodsLost, "some pods are unaccounted for"),
            (CliError::TargetsMissed, "some targets are missed"),
            (
                CliError::Api(ExplainError::NotFound("no decision".into())),
                "no decision",
            ),
            (
                CliError::Serve(crate::kube::Error::Task("t".into())),
                "task: t",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
