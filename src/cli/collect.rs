//! `headroom collect --once` (one collection cycle into the store) and `headroom series`
//! (what the store holds): the two commands on the collectors' store.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::Output;
use super::error::CliError;
use super::{load_config, out, print_json};

/// `headroom collect`: exit 0 when samples were stored and no source had an error, 3 when
/// some source had errors or nothing was stored (the report says which; a result, not an
/// error), 2 without `--once`, on a bad configuration or when no source is configured.
pub(crate) fn run_collect(
    once: bool,
    config: &Path,
    data_dir: Option<&Path>,
    output: Output,
    log: &crate::logging::LogArgs,
) -> Result<ExitCode, CliError> {
    crate::logging::init(log)?;
    if !once {
        return Err(CliError::Usage(
            "`headroom collect` needs --once: it runs one collection cycle and exits; \
             the continuous collection loop runs under `headroom serve`"
                .into(),
        ));
    }
    let config = crate::config::load_config(config)?;
    let dir = config.data_dir(data_dir);
    let run = crate::collect::collect_once(&config, &dir)?;
    match output {
        Output::Text => out(run.to_text()),
        Output::Json => print_json(&run)?,
    }
    Ok(ExitCode::from(run.exit_code()))
}

/// `headroom series`: exit 0 (also when nothing is stored), 2 on a bad selector or
/// configuration.
pub(crate) fn run_series(
    selector: Option<&str>,
    data_dir: Option<&Path>,
    config: Option<&PathBuf>,
    output: Output,
) -> Result<ExitCode, CliError> {
    let config = load_config(config)?;
    let dir = config.data_dir(data_dir);
    let listing = crate::collect::list_series(&config, &dir, selector)?;
    match output {
        Output::Text => out(listing.to_text()),
        Output::Json => {
            if let Some(note) = listing.note() {
                eprintln!("{note}");
            }
            print_json(&listing.rows())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
