//! `headroom place`: where would these pods go in this cluster?

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::Output;
use super::error::CliError;
use super::{load_config, out, print_json};
use crate::config::Mode;
use crate::place::{PlaceOptions, place_files};

/// `headroom place`: exit 0 when every pod was placed, 3 when one was not (the report says
/// which and why; that is a result, not an error), 2 on bad input.
pub(crate) fn run(
    config: Option<&PathBuf>,
    seed: Option<u64>,
    cluster: &Path,
    pod: &Path,
    options: PlaceOptions,
    output: Output,
) -> Result<ExitCode, CliError> {
    let mut config = load_config(config)?;
    if seed.is_some() {
        config.scheduler.seed = seed;
    }
    for u in config.unused_in(Mode::Place) {
        eprintln!("note: {u}");
    }
    let report = place_files(&config, cluster, pod, &options)?;
    for i in &report.ignored {
        eprintln!("note: ignored {i}");
    }
    match output {
        Output::Text => out(report.to_text()),
        Output::Json => print_json(&report.results)?,
    }
    Ok(if report.all_placed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
