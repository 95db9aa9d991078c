//! `headroom sweep`: placement quality across a family of generated farms, every farm ×
//! seed × policy; or, with `--write-farms`, the farms' scenarios written out.

use std::path::Path;
use std::process::ExitCode;

use super::args::{Output, SweepArgs};
use super::error::CliError;
use super::{load_config, out, outln, print_json};
use crate::config::Mode;
use crate::simulate::Policy;
use crate::simulate::families::Family;
use crate::simulate::sweep::SweepOptions;

/// `headroom sweep`: exit 0 when every run accounted for every pod (3 otherwise; with
/// `--check-targets` also when a target is missed), 2 on bad input.
pub(crate) fn run(a: SweepArgs) -> Result<ExitCode, CliError> {
    let config = load_config(a.config.as_ref())?;
    for u in config.unused_in(Mode::Simulate) {
        eprintln!("note: {u}");
    }
    let family = Family::load(&a.family)?;
    let mut policies: Vec<Policy> = Vec::new();
    for p in &a.policy {
        if !policies.contains(p) {
            policies.push(*p);
        }
    }
    let compared = [Policy::Headroom, Policy::Requests];
    if a.check_targets && !compared.iter().all(|p| policies.contains(p)) {
        return Err(CliError::Usage(
            "--check-targets needs --policy to include headroom and requests".into(),
        ));
    }
    let tuned = match &a.tuned {
        Some(p) => {
            crate::simulate::tune::TunedPeers::load(p).map_err(crate::simulate::Error::from)?
        }
        None => Default::default(),
    };
    if let Some(p) = policies
        .iter()
        .find(|p| p.is_tuned() && tuned.args(**p).is_none())
    {
        return Err(CliError::Usage(format!(
            "--policy {}: needs --tuned FILE naming {} (written by --tune-peers)",
            p.as_str(),
            p.untuned().as_str()
        )));
    }
    let mut options = SweepOptions {
        farms: a.farms,
        seeds: a.seeds,
        only: a.only.clone(),
        policies,
        act_on_advice: a.act_on_advice,
        progress: true,
        tuned,
        ..SweepOptions::default()
    };
    if let Some(j) = a.jobs {
        options.jobs = j.max(1);
    }
    let base = a.family.parent().unwrap_or(Path::new("."));
    if let Some(file) = &a.tune_peers {
        return tune_peers(&family, base, &config, &options, file, a.output);
    }
    if let Some(dir) = &a.write_farms {
        return write_farms(family, &options, base, dir);
    }
    let report = crate::simulate::sweep::run(&family, base, &config, &options)?;
    match a.output {
        Output::Text => out(report.to_text()),
        Output::Json => print_json(&report)?,
    }
    if let Some(p) = a.plot
        && let Err(e) = std::fs::write(&p, report.to_svg())
    {
        return Err(CliError::Write {
            path: p,
            reason: e.to_string(),
        });
    }
    if !report.no_pod_lost() {
        return Err(CliError::PodsLost);
    }
    if a.check_targets && report.targets.iter().any(|t| !t.met) {
        return Err(CliError::TargetsMissed);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--tune-peers FILE`: the grids of the peers in `--policy`, the table, the file.
fn tune_peers(
    family: &Family,
    base: &Path,
    config: &crate::config::Config,
    options: &SweepOptions,
    file: &Path,
    output: Output,
) -> Result<ExitCode, CliError> {
    let peers: Vec<Policy> = options
        .policies
        .iter()
        .copied()
        .filter(|p| p.is_peer() && !p.is_tuned())
        .collect();
    if peers.is_empty() {
        return Err(CliError::Usage(
            "--tune-peers needs --policy to name at least one peer (trimaran-tlp, trimaran-lvrb, koordinator, crane)"
                .into(),
        ));
    }
    let report = crate::simulate::sweep::tune_peers(family, base, config, options, &peers)?;
    let text = format!(
        "# Peers tuned by `headroom sweep --tune-peers` on {}: each peer's grid setting\n\
         # with the fewest net hot node-hours and no more pending after the drain than\n\
         # the request baseline. For `--tuned FILE` and the `…@tuned` policies.\n{}",
        report.chosen_on,
        serde_norway::to_string(&report.tuned()).map_err(|e| CliError::Write {
            path: file.to_path_buf(),
            reason: e.to_string(),
        })?
    );
    std::fs::write(file, text).map_err(|e| CliError::Write {
        path: file.to_path_buf(),
        reason: e.to_string(),
    })?;
    match output {
        Output::Text => out(report.to_text()),
        Output::Json => print_json(&report)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `--write-farms DIR`: writes the farms the sweep would run (`--farms`, `--only`) into
/// `dir` as `<farm>.yaml` and prints each path, without running them.
fn write_farms(
    family: Family,
    options: &SweepOptions,
    base: &Path,
    dir: &Path,
) -> Result<ExitCode, CliError> {
    for farm in crate::simulate::sweep::farms(&family, base, options)? {
        let path = dir.join(format!("{}.yaml", farm.name));
        let written = serde_norway::to_string(&farm.scenario)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::write(&path, text))
                    .map_err(|e| e.to_string())
            });
        if let Err(reason) = written {
            return Err(CliError::Write { path, reason });
        }
        outln(path.display());
    }
    Ok(ExitCode::SUCCESS)
}
