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
    /// Schedule a real cluster: a scheduler for pods with our schedulerName, and a
    /// kube-scheduler extender, in one process.
    ///
    /// Connects with --kubeconfig (and --context), else in-cluster (the pod's service
    /// account), else $KUBECONFIG or ~/.kube/config. Watches Nodes, Pods, Namespaces and
    /// Reservations (headroom.io/v1alpha1; install it with `headroom crd | kubectl apply -f -`).
    ///
    /// As a scheduler: pods whose spec.schedulerName is a profile's name (default
    /// `headroom`) are scheduled and bound via pods/binding, with Scheduled and
    /// FailedScheduling events and the PodScheduled condition, as kube-scheduler writes
    /// them, and a `headroom.io/decision` annotation. With leader election (the default)
    /// only the replica holding the Lease schedules; the others keep their caches warm.
    ///
    /// As an extender: POST /extender/filter, /extender/prioritize and /extender/bind on
    /// the listener (point kube-scheduler's extender urlPrefix at http://HOST:PORT/extender;
    /// deploy/extender/kube-scheduler-config.yaml has the stanza). Only headroom's own
    /// plugins run there. GET /healthz and /readyz serve probes.
    ///
    /// Usage data: `--prometheus URL` (or a `collectors` section in --config) is enough to
    /// start collecting into the store in --data-dir. SIGTERM stops taking pods, finishes
    /// the binds in flight, releases the Lease and flushes the store. Exit code 0 after a
    /// clean shutdown, 2 on a bad configuration or kubeconfig, 3 when serving failed.
    Serve(ServeArgs),
    /// Print the Reservation CustomResourceDefinition (YAML), generated from the Rust type.
    Crd,
}

/// The flags of `headroom serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Configuration file (default: built-in defaults).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// Prometheus base URL to collect usage from (sets collectors.prometheus.url).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Listener address (overrides serve.listen; default 0.0.0.0:10260).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Store directory (default: `dataDir` of the configuration, else ./headroom-data).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Do not elect a leader (a single replica; overrides serve.leaderElection.enabled).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Extender only: do not schedule pods ourselves (sets serve.schedule to false).
    #[arg(long)]
    pub extender_only: bool,
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
             the continuous collection loop runs under `headroom serve`"
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

fn load_config(path: Option<&PathBuf>) -> Result<Config, crate::config::ConfigError> {
    match path {
        Some(p) => Config::load(p),
        None => Ok(Config::default()),
    }
}

fn run_serve(args: ServeArgs) -> ExitCode {
    let ServeArgs {
        config,
        kubeconfig,
        context,
        prometheus,
        listen,
        data_dir,
        no_leader_election,
        extender_only,
    } = args;
    let mut config = match load_config(config.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(url) = prometheus {
        let mut p: headroom_collectors::config::PrometheusConfig =
            match serde_json::from_value(serde_json::json!({ "url": url })) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: --prometheus: {e}");
                    return ExitCode::from(2);
                }
            };
        if let Some(old) = config.collectors.prometheus.take() {
            // Keep the file's settings; the flag only sets the URL.
            p = headroom_collectors::config::PrometheusConfig { url: p.url, ..old };
        }
        config.collectors.prometheus = Some(p);
    }
    if no_leader_election {
        config.serve.leader_election.enabled = false;
    }
    if extender_only {
        config.serve.schedule = false;
    }
    if let Err(e) = config.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(3);
        }
    };
    runtime.block_on(async move {
        let client = match crate::kube::client::client(kubeconfig.as_deref(), context.as_deref()).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let mut opts = crate::kube::serve::ServeOptions::new(config, client);
        opts.listen = listen;
        opts.data_dir = data_dir;
        match crate::kube::serve::run(opts, shutdown_signal()).await {
            Ok(report) => {
                eprintln!(
                    "headroom serve stopped: {} pods bound, {} unschedulable attempts, {} bind errors",
                    report.scheduling.bound,
                    report.scheduling.unschedulable,
                    report.scheduling.bind_errors
                );
                ExitCode::SUCCESS
            }
            Err(e @ crate::kube::Error::Config(_)) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(3)
            }
        }
    })
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
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
        Command::Serve(args) => run_serve(args),
        Command::Crd => {
            print!("{}", crate::kube::crd::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}
