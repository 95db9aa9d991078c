//! `headroom config-reference`: the configuration reference (Markdown), generated from the
//! configuration's types (`config::reference`); docs/configuration-reference.md is its output.

use std::process::ExitCode;

use super::error::CliError;
use super::out;

/// `headroom config-reference`: prints every field of the configuration with its type,
/// default and description.
pub(crate) fn run() -> Result<ExitCode, CliError> {
    out(crate::config::reference::markdown());
    Ok(ExitCode::SUCCESS)
}
