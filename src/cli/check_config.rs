//! `headroom check-config`: validate a configuration file and print the effective
//! configuration.

use std::path::Path;
use std::process::ExitCode;

use super::error::CliError;
use super::{out, outln};
use crate::config::Mode;

/// `headroom check-config`: the effective configuration, with what each mode ignores; exit
/// 2 when the file is unreadable or invalid.
pub(crate) fn run(file: &Path) -> Result<ExitCode, CliError> {
    let c = crate::config::load_config(file)?;
    outln(format_args!(
        "# {}: valid; effective configuration:",
        file.display()
    ));
    for mode in [Mode::Serve, Mode::Simulate, Mode::Place] {
        for u in c.unused_in(mode) {
            outln(format_args!("# note: {u}"));
        }
    }
    out(crate::config::effective(&c).to_yaml());
    Ok(ExitCode::SUCCESS)
}
