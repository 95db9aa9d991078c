//! `headroom crd`: the Reservation CustomResourceDefinition.

use std::process::ExitCode;

use super::error::CliError;
use super::out;

/// `headroom crd`: prints the Reservation CRD (YAML), generated from the Rust type.
pub(crate) fn run() -> Result<ExitCode, CliError> {
    out(crate::kube::crd::crd_yaml());
    Ok(ExitCode::SUCCESS)
}
