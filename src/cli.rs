//! The `headroom` command line: subcommands and their exit codes.
//!
//! Exit codes: 0 success; 2 bad input (unreadable file, invalid config or object; the message
//! names the object and field); 3 `place` ran but some pod found no node.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Config;
use crate::place::{PlaceOptions, place_files};

/// headroom: a Kubernetes scheduler that places pods by what nodes and workloads really use.
#[derive(Debug, Parser)]
#[command(name = "headroom", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// Human-readable text.
    Text,
    /// JSON (a list with one decision per pod).
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// What-if: where would these pods go in this cluster?
    ///
    /// CLUSTER is what `kubectl get nodes,pods -A -o yaml` prints (a List, or a multi-document
    /// YAML stream of Node, Pod and Namespace objects); pods with spec.nodeName count as
    /// running there. POD is one Pod, or a List/stream of pods placed one after another, each
    /// seeing the previous placements. Exit code 0 when every pod was placed, 3 when some
    /// were not, 2 on bad input.
    Place {
        /// Cluster objects (YAML or JSON).
        #[arg(long, value_name = "FILE")]
        cluster: PathBuf,
        /// Pod(s) to place (YAML or JSON).
        #[arg(long, value_name = "FILE")]
        pod: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Configuration file (default: built-in defaults).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Profile (scheduler name) to use; default: the first profile of the configuration.
        #[arg(long)]
        profile: Option<String>,
        /// Seed for the tie-breaker among equally scored nodes (overrides the config).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Validate a configuration file and print the effective configuration.
    CheckConfig {
        /// The YAML configuration file.
        file: PathBuf,
    },
}

fn load_config(path: Option<&PathBuf>) -> Result<Config, crate::config::ConfigError> {
    match path {
        Some(p) => Config::load(p),
        None => Ok(Config::default()),
    }
}

/// Runs the CLI; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Place {
            cluster,
            pod,
            output,
            config,
            profile,
            seed,
        } => {
            let mut config = match load_config(config.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            if seed.is_some() {
                config.scheduler.seed = seed;
            }
            match place_files(&config, &cluster, &pod, &PlaceOptions { profile }) {
                Ok(report) => {
                    for i in &report.ignored {
                        eprintln!("note: ignored {i}");
                    }
                    match output {
                        Output::Text => print!("{}", report.to_text()),
                        Output::Json => match serde_json::to_string_pretty(&report.results) {
                            Ok(s) => println!("{s}"),
                            Err(e) => {
                                eprintln!("error: rendering JSON: {e}");
                                return ExitCode::from(2);
                            }
                        },
                    }
                    if report.all_placed() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(3)
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(c) => {
                println!("# {}: valid; effective configuration:", file.display());
                print!("{}", c.to_yaml());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
    }
}
