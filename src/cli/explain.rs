//! `headroom explain` and `headroom advice`: ask a running headroom's inspection API (the
//! pod's latest decision; the descheduling advice) and print its answer.

use std::process::ExitCode;

use super::args::Output;
use super::client::{Access, ExplainError, fetch_advice, fetch_explanation_with};
use super::error::CliError;
use super::{exit, out, outln};

/// `headroom explain`: exit 0 when the server has a decision for the pod, 3 when it has
/// none, 2 on a bad argument or when the server cannot be reached.
pub(crate) fn run_explain(
    pod: &str,
    server: &str,
    output: Output,
    access: &Access,
) -> Result<ExitCode, CliError> {
    print_body(&fetch_explanation_with(server, pod, output, access)?);
    Ok(ExitCode::SUCCESS)
}

/// `headroom advice`: exit 0 when the advice was fetched (hot nodes or not), 2 when the
/// server cannot be reached.
pub(crate) fn run_advice(
    server: &str,
    output: Output,
    access: &Access,
) -> Result<ExitCode, CliError> {
    print_body(&fetch_advice(server, output, access)?);
    Ok(ExitCode::SUCCESS)
}

/// Prints what `explain`/`advice` fetched (ending in a newline), or the error with its
/// exit code (for `kubectl headroom`, which fetches through the API server).
pub(crate) fn print_fetched(fetched: Result<String, ExplainError>) -> ExitCode {
    exit(fetched.map_err(CliError::from).map(|body| {
        print_body(&body);
        ExitCode::SUCCESS
    }))
}

/// Prints `body`, ending in a newline.
fn print_body(body: &str) {
    out(body);
    if !body.ends_with('\n') {
        outln("");
    }
}
