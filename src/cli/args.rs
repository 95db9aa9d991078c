//! The clap definitions of the `headroom` command line: [`Cli`], its [`Command`]s and their
//! flags. The doc comments are the help text.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

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
        /// (YAML; see docs/configuration.md, *Usage file*).
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
    Simulate(SimulateArgs),
    /// Placement quality across a family of generated farms: every farm × seed × policy.
    ///
    /// FAMILY describes how farms are generated (node size mixes, builder families with
    /// their usage factors and warm-cache gains, arrival rates with bursts and a daily
    /// cycle, services and databases beside the builds) and which scenario files join
    /// them (see examples/families/). Prints each metric's mean, worst farm and spread per
    /// policy, and whether headroom meets issue #17's targets against the request
    /// baseline. Exit code 0 when every run accounted for every pod (3 otherwise; with
    /// --check-targets also when a target is missed), 2 on bad input.
    Sweep(SweepArgs),
    /// Validate a configuration file and print the effective configuration.
    CheckConfig {
        /// The YAML configuration file.
        file: PathBuf,
        /// Print the configuration as this policy of `simulate` runs it (a peer's plugin on
        /// with the args its users install it with, headroom's own off), for `serve`: the
        /// peers on a real cluster or the kit (`scripts/kit-replay.py`).
        #[arg(long, value_enum)]
        policy: Option<crate::simulate::Policy>,
        /// The tuned peers' args for a `…@tuned` policy (written by `sweep --tune-peers`).
        #[arg(long, value_name = "FILE", requires = "policy")]
        tuned: Option<PathBuf>,
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
        /// Log format and verbosity (the sources' failures are logged on stderr).
        #[command(flatten)]
        log: crate::logging::LogArgs,
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
    /// Why did this pod go where it went? Asks a running headroom (the inspection API of
    /// `headroom simulate --serve` or `headroom serve`) for the pod's latest decision.
    ///
    /// Prints every node's verdict (the filter that rejected it and why, or each score
    /// plugin's raw, normalised and weighted score with the numbers behind it) and the chosen
    /// node. Exit code 0 when a decision was found, 3 when the server has none for the pod,
    /// 2 on a bad argument or when the server cannot be reached.
    Explain {
        /// The pod, as NAMESPACE/NAME.
        pod: String,
        /// Where to ask, and how.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Descheduling advice from a running headroom (`headroom serve` or `headroom simulate
    /// --serve`): the nodes running hot by real memory and the pods whose move would help
    /// most, by their builder's profile, each with a node it could go to.
    ///
    /// Nothing is evicted. A node is hot above `advice.hotMemoryPercent` (90) of its memory
    /// in real use; moves aim at `advice.targetMemoryPercent` (80). Exit code 0 when the
    /// advice was fetched (hot nodes or not), 2 when the server cannot be reached.
    Advice(ServerArgs),
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
    /// Print the configuration reference (Markdown), generated from the configuration's types.
    ///
    /// Every field of the configuration file by its YAML path (`serve.leaderElection.leaseDuration`,
    /// `profiles[].pluginArgs`), with its type as written in YAML, its default (that of an
    /// empty file) and its doc comment. docs/configuration-reference.md is its output:
    /// after changing a configuration type, regenerate it with
    /// `headroom config-reference > docs/configuration-reference.md`.
    ConfigReference,
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
    /// The extender's listener (overrides serve.listen; default 0.0.0.0:10260).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// The inspection API's listener (overrides serve.apiListen; default 0.0.0.0:10261).
    #[arg(long, value_name = "ADDR")]
    pub api_listen: Option<std::net::SocketAddr>,
    /// Store directory (default: `dataDir` of the configuration, else ./headroom-data).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Do not elect a leader (a single replica; overrides serve.leaderElection.enabled).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Extender only: do not schedule pods ourselves (sets serve.schedule to false).
    #[arg(long)]
    pub extender_only: bool,
    /// Log format and verbosity.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
}

/// Where `headroom explain` looks for the API when no `--server` is given.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The flags of the commands that ask a running headroom (`explain`, `advice`).
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The headroom server's base URL (`headroom serve`'s inspection API is
    /// `https://HOST:10261`).
    #[arg(long, value_name = "URL", env = "HEADROOM_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Bearer token for a server that authenticates callers (`headroom serve`), e.g.
    /// from `kubectl create token`.
    #[arg(long, env = "HEADROOM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Accept the server's certificate without checking it (a self-signed one).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// The flags of `headroom simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The scenario (YAML).
    pub scenario: PathBuf,
    /// Policies to run, comma-separated: headroom (the configuration as given),
    /// requests (kube-scheduler's request-based default, the baseline), and the peers
    /// trimaran-tlp, trimaran-lvrb, koordinator, crane (docs/configuration.md: *The peers*),
    /// each also as `…@tuned` (with `--tuned FILE`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "headroom")]
    pub policy: Vec<crate::simulate::Policy>,
    /// Run headroom and the requests baseline on the same arrivals.
    #[arg(long)]
    pub compare: bool,
    /// The tuned peers' args for the `…@tuned` policies (written by `sweep --tune-peers`).
    #[arg(long, value_name = "FILE")]
    pub tuned: Option<PathBuf>,
    /// Seed (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Configuration file (default: built-in defaults).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Keep the first policy's store here (default: a temporary store).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Also write an SVG plot of memory utilisation and pending pods over time.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Serve the inspection API (/explain, /nodes, /builders, /queue, /advice,
    /// /metrics) on this address over the first policy's run, and keep serving after
    /// it until Ctrl-C.
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<std::net::SocketAddr>,
    /// Act on the descheduling advice (/advice) at every usage refresh: the suggested
    /// pods are evicted (a build runs again from scratch) and placed anew; the report
    /// counts the moves.
    #[arg(long)]
    pub act_on_advice: bool,
    /// Print the builds the scenario plans for the seed (arrival, requests, the usage each
    /// will have, run times cold and warm) as JSON, for a replay on real nodes
    /// (`scripts/kit-replay.py`), and exit without running.
    #[arg(long, conflicts_with_all = ["compare", "serve", "plot", "data_dir"])]
    pub replay_plan: bool,
}

/// The flags of `headroom sweep`.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The family (YAML).
    pub family: PathBuf,
    /// Configuration file (default: built-in defaults).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Generated farms (default: the family's `farms`); included scenarios always run.
    #[arg(long)]
    pub farms: Option<usize>,
    /// Seeds per farm, 1..=N (default: the family's `seeds`).
    #[arg(long)]
    pub seeds: Option<usize>,
    /// Only these farms, by name, comma-separated (`alibaba-trace-19`; an included
    /// scenario by its file's stem): to judge a farm on more seeds than the family's
    /// (`--only NAME --seeds 20`; the targets' family means are then over these farms).
    /// Default: every farm.
    #[arg(long, value_delimiter = ',', value_name = "FARM")]
    pub only: Vec<String>,
    /// Simulations at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Act on the descheduling advice in every run (see `simulate --act-on-advice`).
    #[arg(long)]
    pub act_on_advice: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Also write an SVG plot of the key metrics per farm and policy.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Exit 3 when a target is missed.
    #[arg(long)]
    pub check_targets: bool,
    /// Write every farm's scenario here (`<farm>.yaml`, for `headroom simulate`) and
    /// exit without running them.
    #[arg(long, value_name = "DIR")]
    pub write_farms: Option<PathBuf>,
    /// The tuned peers' args for the `…@tuned` policies (written by `--tune-peers`).
    #[arg(long, value_name = "FILE")]
    pub tuned: Option<PathBuf>,
    /// Tune the peers of `--policy` on this family instead of comparing policies: the
    /// request baseline, then every setting of each peer's grid on the same farms and
    /// seeds; the peers' own goal (fewest net hot node-hours, no more pending after the
    /// drain than the baseline) picks one each. Prints every setting's figures and writes
    /// the chosen args to FILE (for `--tuned FILE` and the `…@tuned` policies).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["write_farms", "check_targets", "tuned"])]
    pub tune_peers: Option<PathBuf>,
    /// Policies to run on the same arrivals, comma-separated: headroom, requests, and the
    /// peers trimaran-tlp, trimaran-lvrb, koordinator, crane (docs/configuration.md: *The peers*),
    /// each also as `…@tuned` (with `--tuned FILE`). The targets compare headroom with
    /// requests (and with the peers that run).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "headroom,requests"
    )]
    pub policy: Vec<crate::simulate::Policy>,
}
