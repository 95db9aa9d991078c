//! The `headroom` command line: subcommands and their exit codes.
//!
//! Exit codes: 0 success; 2 bad input (unreadable file, invalid config or object; the message
//! names the object and field); 3 the command ran but did not fully succeed (`place`: some
//! pod found no node; `collect`: some source had errors or nothing was stored; `explain`: no
//! decision recorded for the pod).
//!
//! The clap definitions are in `args.rs`; each command is a module (`place.rs`,
//! `simulate.rs`, `sweep.rs`, `check_config.rs`, `collect.rs` with `series`, `explain.rs`
//! with `advice`, `serve.rs`, `crd.rs`, `config_reference.rs`) whose `run` returns `Result<ExitCode, CliError>`.
//! A success can still be a non-zero code where the command's contract says so (`place`: 3
//! when a pod found no node); a failure is a [`CliError`], which [`run`] alone turns into its
//! message on standard error and its exit code. `client.rs` is the HTTP client of `explain`
//! and `advice`; `kubectl headroom` interprets and prints the API's answers with it too.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use crate::place::PlaceOptions;

mod args;
mod check_config;
mod client;
mod collect;
mod config_reference;
mod crd;
mod error;
mod explain;
mod place;
mod serve;
mod simulate;
mod sweep;

pub use args::{
    Cli, Command, DEFAULT_SERVER, Output, ServeArgs, ServerArgs, SimulateArgs, SweepArgs,
};
pub use client::{
    Access, ExplainError, fetch_advice, fetch_explanation, fetch_explanation_with, parse_pod_arg,
};
pub(crate) use client::{api_answer, connection_failure, format_param};
pub use error::CliError;
pub(crate) use explain::print_fetched;

/// Runs the CLI; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    exit(dispatch(cli.command))
}

/// The one place a command's outcome becomes the process exit code: a failure is printed
/// as `error: {message}` on standard error (a log line, JSON with `--log-format json`, once
/// the command has set up its log) and exits with [`CliError::exit_code`].
fn exit(outcome: Result<ExitCode, CliError>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(e) => {
            crate::logging::last_words(tracing::Level::ERROR, &e.to_string());
            ExitCode::from(e.exit_code())
        }
    }
}

/// Hands `command` to its module.
fn dispatch(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Place {
            cluster,
            pod,
            output,
            config,
            profile,
            seed,
            usage,
            data_dir,
        } => place::run(
            config.as_ref(),
            seed,
            &cluster,
            &pod,
            PlaceOptions {
                profile,
                usage,
                data_dir,
            },
            output,
        ),
        Command::Simulate(args) => simulate::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::CheckConfig {
            file,
            policy,
            tuned,
        } => check_config::run(&file, policy, tuned.as_deref()),
        Command::Collect {
            once,
            config,
            data_dir,
            output,
            log,
        } => collect::run_collect(once, &config, data_dir.as_deref(), output, &log),
        Command::Series {
            selector,
            data_dir,
            config,
            output,
        } => collect::run_series(
            selector.as_deref(),
            data_dir.as_deref(),
            config.as_ref(),
            output,
        ),
        Command::Explain { pod, server } => {
            explain::run_explain(&pod, &server.server, server.output, &server.access())
        }
        Command::Advice(server) => {
            explain::run_advice(&server.server, server.output, &server.access())
        }
        Command::Serve(args) => serve::run(args),
        Command::Crd => crd::run(),
        Command::ConfigReference => config_reference::run(),
    }
}

impl ServerArgs {
    /// How to authenticate to the server.
    fn access(&self) -> Access {
        Access {
            token: self.token.clone(),
            insecure: self.insecure_skip_tls_verify,
        }
    }
}

/// The configuration in `path`, read and validated, or the built-in defaults.
fn load_config(path: Option<&PathBuf>) -> Result<Config, crate::config::ConfigError> {
    match path {
        Some(p) => crate::config::load_config(p),
        None => Ok(Config::default()),
    }
}

/// Prints `value` as pretty JSON (nothing if it cannot be rendered).
fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    outln(serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Writes `text` to standard output. A reader that closed the pipe early (`headroom … |
/// head`) has what it wanted: that is not an error, and nothing panics; any other write
/// error is reported on standard error.
fn out(text: impl std::fmt::Display) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = write!(stdout, "{text}").and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("headroom: writing the output: {e}");
    }
}

/// [`out`] with a newline.
fn outln(text: impl std::fmt::Display) {
    out(format_args!("{text}\n"));
}
