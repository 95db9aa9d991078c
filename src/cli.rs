//! The `headroom` command line: subcommands and their exit codes.
//!
//! Exit codes: 0 success; 2 bad input (unreadable file, invalid config or object; the message
//! names the object and field); 3 the command ran but did not fully succeed (`place`: some
//! pod found no node; `collect`: some source had errors or nothing was stored).

use std::path::{Path, PathBuf};
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
    /// JSON (`place`: a list with one decision per pod; `collect`: the report; `series`: a
    /// list of series).
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
        /// Real usage: node usage, builder profiles, reservations and placement history
        /// (YAML; see the README's "Usage file" section).
        #[arg(long, value_name = "FILE")]
        usage: Option<PathBuf>,
        /// Compute real usage from the store in this directory, as the scheduler does
        /// (a usage file, if also given, overrides its entries).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Simulate a cluster: the real queue, scheduler, store and analytics on simulated time.
    ///
    /// SCENARIO describes nodes, workloads (CI builders with arrivals and real-usage
    /// factors, databases, services), reservations and events (see examples/ci-farm.yaml).
    /// Each policy runs on the same arrivals; the report compares placements, time to
    /// schedule, real utilisation, memory hot spots and warm-cache placements. Exit code 0
    /// when every policy accounted for every pod, 3 otherwise, 2 on bad input.
    Simulate {
        /// The scenario (YAML).
        scenario: PathBuf,
        /// Policies to run, comma-separated: headroom (the configuration as given),
        /// requests (kube-scheduler's request-based default, the baseline).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "headroom")]
        policy: Vec<crate::simulate::Policy>,
        /// Run headroom and the requests baseline on the same arrivals.
        #[arg(long)]
        compare: bool,
        /// Seed (default: the scenario's).
        #[arg(long)]
        seed: Option<u64>,
        /// Configuration file (default: built-in defaults).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Keep the first policy's store here (default: a temporary store).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Also write an SVG plot of memory utilisation and pending pods over time.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// Validate a configuration file and print the effective configuration.
    CheckConfig {
        /// The YAML configuration file.
        file: PathBuf,
    },
    /// Check the collector setup: run one collection cycle into the store and report it.
    ///
    /// Polls every source configured under `collectors` (prometheus, kubelet, scrape) once,
    /// writes the samples into the store in the data directory (created if missing) and
    /// prints per source: requests made, series and samples written, each error (subject,
    /// reason, message) and the age of the newest sample. Exit code 0 when samples were
    /// stored and no source had an error, 3 when some source had errors (or nothing was
    /// stored), 2 on a bad configuration or when no source is configured.
    Collect {
        /// Run one cycle and exit (required for now: the continuous loop will run under
        /// `headroom serve`).
        #[arg(long)]
        once: bool,
        /// Configuration file with a `collectors` section.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Store directory (default: `dataDir` of the configuration, else ./headroom-data).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// List the series in the store: `metric{labels}`, last value and its age.
    ///
    /// Reads the store in the data directory (never creates it). SELECTOR is a PromQL series
    /// selector such as `node_memory_working_set_bytes` or
    /// `container_cpu_usage_cores{namespace="ci",pod=~"builder-.*"}`. Exit code 0 (also when
    /// nothing is stored), 2 on a bad selector or configuration.
    Series {
        /// Only series matching this PromQL selector (default: all).
        #[arg(long = "match", value_name = "SELECTOR")]
        selector: Option<String>,
        /// Store directory (default: `dataDir` of the configuration, else ./headroom-data).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Configuration file, for `dataDir` and `storage` (default: built-in defaults).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// Prints `value` as pretty JSON; false (after reporting) if it cannot be rendered.
fn print_json<T: serde::Serialize>(value: &T) -> bool {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            println!("{s}");
            true
        }
        Err(e) => {
            eprintln!("error: rendering JSON: {e}");
            false
        }
    }
}

fn run_collect(once: bool, config: &Path, data_dir: Option<&Path>, output: Output) -> ExitCode {
    if !once {
        eprintln!(
            "error: `headroom collect` needs --once: it runs one collection cycle and exits; \
             the continuous collection loop runs under `headroom serve`, which is not available yet"
        );
        return ExitCode::from(2);
    }
    let config = match Config::load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = config.data_dir(data_dir);
    match crate::collect::collect_once(&config, &dir) {
        Ok(run) => {
            match output {
                Output::Text => print!("{}", run.to_text()),
                Output::Json => {
                    if !print_json(&run) {
                        return ExitCode::from(2);
                    }
                }
            }
            ExitCode::from(run.exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_series(
    selector: Option<&str>,
    data_dir: Option<&Path>,
    config: Option<&PathBuf>,
    output: Output,
) -> ExitCode {
    let config = match load_config(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = config.data_dir(data_dir);
    match crate::collect::list_series(&config, &dir, selector) {
        Ok(listing) => {
            match output {
                Output::Text => print!("{}", listing.to_text()),
                Output::Json => {
                    if let Some(note) = listing.note() {
                        eprintln!("{note}");
                    }
                    if !print_json(&listing.rows()) {
                        return ExitCode::from(2);
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[allow(clippy::too_many_arguments)] // one per CLI flag
fn run_simulate(
    scenario: PathBuf,
    mut policies: Vec<crate::simulate::Policy>,
    compare: bool,
    seed: Option<u64>,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    output: Output,
    plot: Option<PathBuf>,
) -> ExitCode {
    use crate::simulate::{Options, Policy, Scenario};
    use std::io::IsTerminal;
    let config = match load_config(config.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let scenario = match Scenario::load(&scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if compare {
        policies = vec![Policy::Headroom, Policy::Requests];
    }
    policies.dedup();
    let options = Options {
        seed,
        policies,
        data_dir,
        progress: std::io::stderr().is_terminal(),
    };
    // Simulated time is tokio's paused clock: timers (the queue's backoffs) fire when the
    // simulator advances it, never on the wall clock.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match rt.block_on(crate::simulate::run(&scenario, &config, &options)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => {
            if !print_json(&report) {
                return ExitCode::from(2);
            }
        }
    }
    if let Some(p) = plot
        && let Err(e) = std::fs::write(&p, report.to_svg())
    {
        eprintln!("error: writing {}: {e}", p.display());
        return ExitCode::from(2);
    }
    if report.policies.iter().all(|p| p.no_pod_lost()) {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: some pods are unaccounted for");
        ExitCode::from(3)
    }
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
            usage,
            data_dir,
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
            let options = PlaceOptions {
                profile,
                usage,
                data_dir,
            };
            match place_files(&config, &cluster, &pod, &options) {
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
        Command::Simulate {
            scenario,
            policy,
            compare,
            seed,
            config,
            data_dir,
            output,
            plot,
        } => run_simulate(scenario, policy, compare, seed, config, data_dir, output, plot),
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
        Command::Collect {
            once,
            config,
            data_dir,
            output,
        } => run_collect(once, &config, data_dir.as_deref(), output),
        Command::Series {
            selector,
            data_dir,
            config,
            output,
        } => run_series(
            selector.as_deref(),
            data_dir.as_deref(),
            config.as_ref(),
            output,
        ),
    }
}
