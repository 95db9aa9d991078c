//! `headroom check-config`: validate a configuration file and print the effective
//! configuration.

use std::path::Path;
use std::process::ExitCode;

use super::error::CliError;
use super::{out, outln};
use crate::config::Mode;
use crate::simulate::Policy;
use crate::simulate::tune::TunedPeers;

/// `headroom check-config`: the effective configuration (as `policy` runs it, if given),
/// with what each mode ignores; exit 2 when a file is unreadable or invalid.
pub(crate) fn run(
    file: &Path,
    policy: Option<Policy>,
    tuned: Option<&Path>,
) -> Result<ExitCode, CliError> {
    let mut c = crate::config::load_config(file)?;
    outln(format_args!(
        "# {}: valid; effective configuration:",
        file.display()
    ));
    if let Some(policy) = policy {
        let tuned = match tuned {
            Some(p) => TunedPeers::load(p).map_err(crate::simulate::Error::from)?,
            None => TunedPeers::default(),
        };
        if policy.is_tuned() && tuned.args(policy).is_none() {
            return Err(crate::simulate::Error::NotTuned {
                policy: policy.as_str(),
            }
            .into());
        }
        c = policy.config_tuned(&c, &tuned);
        outln(format_args!("# as policy {} runs it", policy.as_str()));
    }
    for shared in headroom_collectors::shared::shared_signals(&c.collectors) {
        outln(format_args!("# warning: {shared}"));
    }
    for mode in [Mode::Serve, Mode::Simulate, Mode::Place] {
        for u in c.unused_in(mode) {
            outln(format_args!("# note: {u}"));
        }
    }
    out(crate::config::effective(&c).to_yaml());
    Ok(ExitCode::SUCCESS)
}
