//! The `headroom` command line: subcommands and their exit codes.
//!
//! Exit codes: 0 success; 2 bad input (unreadable file, invalid config or object; the message
//! names the object and field); 3 the command ran but did not fully succeed (`place`: some
//! pod found no node; `collect`: some source had errors or nothing was stored; `explain`: no
//! decision recorded for the pod).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, Mode};
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
        /// requests (kube-scheduler's request-based default, the baseline), and the peers
        /// trimaran-tlp, trimaran-lvrb, koordinator, crane (README: *The peers*).
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
        /// Serve the inspection API (/explain, /nodes, /builders, /queue, /advice,
        /// /metrics) on this address over the first policy's run, and keep serving after
        /// it until Ctrl-C.
        #[arg(long, value_name = "ADDR")]
        serve: Option<std::net::SocketAddr>,
        /// Act on the descheduling advice (/advice) at every usage refresh: the suggested
        /// pods are evicted (a build runs again from scratch) and placed anew; the report
        /// counts the moves.
        #[arg(long)]
        act_on_advice: bool,
    },
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
        /// The headroom server's base URL (`headroom serve`'s inspection API is
        /// `https://HOST:10261`).
        #[arg(long, value_name = "URL", env = "HEADROOM_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
        /// Bearer token for a server that authenticates callers (`headroom serve`), e.g.
        /// from `kubectl create token`.
        #[arg(long, env = "HEADROOM_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Accept the server's certificate without checking it (a self-signed one).
        #[arg(long)]
        insecure_skip_tls_verify: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Descheduling advice from a running headroom (`headroom serve` or `headroom simulate
    /// --serve`): the nodes running hot by real memory and the pods whose move would help
    /// most, by their builder's profile, each with a node it could go to.
    ///
    /// Nothing is evicted. A node is hot above `advice.hotMemoryPercent` (90) of its memory
    /// in real use; moves aim at `advice.targetMemoryPercent` (80). Exit code 0 when the
    /// advice was fetched (hot nodes or not), 2 when the server cannot be reached.
    Advice {
        /// The headroom server's base URL (`headroom serve`'s inspection API is
        /// `https://HOST:10261`).
        #[arg(long, value_name = "URL", env = "HEADROOM_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
        /// Bearer token for a server that authenticates callers (`headroom serve`), e.g.
        /// from `kubectl create token`.
        #[arg(long, env = "HEADROOM_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Accept the server's certificate without checking it (a self-signed one).
        #[arg(long)]
        insecure_skip_tls_verify: bool,
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

/// Errors of `headroom explain` and `headroom advice` (all exit 2, except
/// [`ExplainError::NotFound`], 3).
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The pod argument is not NAMESPACE/NAME with Kubernetes names.
    #[error("{0}")]
    BadPod(String),
    /// The server URL is not a URL.
    #[error("invalid --server {url:?}: {reason}")]
    BadServer {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The server could not be reached or did not answer.
    #[error("cannot reach headroom at {url}: {reason}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// The transport error.
        reason: String,
    },
    /// The server has no decision for the pod.
    #[error("{0}")]
    NotFound(String),
    /// The server answered with an error.
    #[error("headroom at {url} answered {status}: {message}")]
    Server {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The `error` of its body, or the body.
        message: String,
    },
    /// The async runtime could not be started.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

impl ExplainError {
    /// The exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            ExplainError::NotFound(_) => 3,
            _ => 2,
        }
    }
}

/// A Kubernetes object name as a pod or namespace has it: a DNS subdomain (lowercase
/// letters, digits, `-` and `.`, at most 253 characters, alphanumeric at both ends). Being
/// strict here also means the name needs no escaping in the URL path.
fn is_k8s_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// Splits and checks `NAMESPACE/NAME`.
pub fn parse_pod_arg(pod: &str) -> Result<(&str, &str), ExplainError> {
    let (ns, name) = pod
        .split_once('/')
        .ok_or_else(|| ExplainError::BadPod(format!("pod must be NAMESPACE/NAME, got {pod:?}")))?;
    for (what, v) in [("namespace", ns), ("pod name", name)] {
        if !is_k8s_name(v) {
            return Err(ExplainError::BadPod(format!(
                "{v:?} is not a valid {what} (lowercase letters, digits, '-' and '.')"
            )));
        }
    }
    Ok((ns, name))
}

/// How to reach the inspection API.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Bearer token, if the server wants one.
    pub token: Option<String>,
    /// Skip the server certificate check.
    pub insecure: bool,
}

/// Fetches the pod's decision from the API at `server` as text or JSON.
pub fn fetch_explanation(server: &str, pod: &str, output: Output) -> Result<String, ExplainError> {
    fetch_explanation_with(server, pod, output, &Access::default())
}

/// [`fetch_explanation`] with credentials.
pub fn fetch_explanation_with(
    server: &str,
    pod: &str,
    output: Output,
    access: &Access,
) -> Result<String, ExplainError> {
    let (ns, name) = parse_pod_arg(pod)?;
    fetch_api(server, &format!("/explain/{ns}/{name}"), output, access)
}

/// Fetches the descheduling advice from the API at `server` as text or JSON.
pub fn fetch_advice(server: &str, output: Output, access: &Access) -> Result<String, ExplainError> {
    fetch_api(server, "/advice", output, access)
}

/// GET `path?format=text|json` from the inspection API at `server`.
fn fetch_api(
    server: &str,
    path: &str,
    output: Output,
    access: &Access,
) -> Result<String, ExplainError> {
    let base = server.trim_end_matches('/');
    let url = format!("{base}{path}?format={}", format_param(output));
    let parsed = reqwest::Url::parse(&url).map_err(|e| ExplainError::BadServer {
        url: server.to_string(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ExplainError::BadServer {
            url: server.to_string(),
            reason: "the scheme must be http or https".into(),
        });
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ExplainError::Runtime)?;
    runtime.block_on(async {
        let unreachable = |e: reqwest::Error| ExplainError::Unreachable {
            url: url.clone(),
            reason: e.to_string(),
        };
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .danger_accept_invalid_certs(access.insecure)
            .build()
            .map_err(unreachable)?;
        let mut request = client.get(parsed);
        if let Some(t) = &access.token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(unreachable)?;
        api_answer(&url, status, body)
    })
}

/// The `format` query parameter of the inspection API for `output`.
pub(crate) fn format_param(output: Output) -> &'static str {
    match output {
        Output::Text => "text",
        Output::Json => "json",
    }
}

/// What the inspection API's answer means for `explain`/`advice` (and `kubectl headroom`,
/// which reaches the same API through the API server): the body on success, else the
/// error, with 404 as [`ExplainError::NotFound`] (exit 3).
pub(crate) fn api_answer(url: &str, status: u16, body: String) -> Result<String, ExplainError> {
    if (200..300).contains(&status) {
        return Ok(body);
    }
    // The API's errors are `{"error": "..."}`; anything else is shown as it came.
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string());
    if status == 404 {
        return Err(ExplainError::NotFound(message));
    }
    Err(ExplainError::Server {
        url: url.to_string(),
        status,
        message,
    })
}

fn run_advice(server: &str, output: Output, access: &Access) -> ExitCode {
    print_fetched(fetch_advice(server, output, access))
}

fn run_explain(pod: &str, server: &str, output: Output, access: &Access) -> ExitCode {
    print_fetched(fetch_explanation_with(server, pod, output, access))
}

/// Prints what `explain`/`advice` fetched (ending in a newline), or the error with its
/// exit code.
pub(crate) fn print_fetched(fetched: Result<String, ExplainError>) -> ExitCode {
    match fetched {
        Ok(body) => {
            out(&body);
            if !body.ends_with('\n') {
                outln("");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Prints `value` as pretty JSON; false (after reporting) if it cannot be rendered.
fn print_json<T: serde::Serialize>(value: &T) -> bool {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            outln(&s);
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
    let config = match crate::plugins::registry::load_config(config) {
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
                Output::Text => out(run.to_text()),
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
                Output::Text => out(listing.to_text()),
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
    serve: Option<std::net::SocketAddr>,
    act_on_advice: bool,
) -> ExitCode {
    use crate::simulate::{ApiHook, Options, Policy, Scenario};
    use std::io::IsTerminal;
    let config = match load_config(config.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for u in config.unused_in(Mode::Simulate) {
        eprintln!("note: {u}");
    }
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
        act_on_advice,
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
    // The API gets its own runtime on the wall clock (see `ApiHook`).
    let mut api = None;
    let mut api_rt = None;
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    if let Some(addr) = serve {
        let listener = match std::net::TcpListener::bind(addr) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: --serve {addr}: {e}");
                return ExitCode::from(2);
            }
        };
        let local = listener
            .local_addr()
            .map_or(addr.to_string(), |a| a.to_string());
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("error: starting the API runtime: {e}");
                return ExitCode::from(2);
            }
        };
        eprintln!("serving the inspection API on http://{local}");
        api = Some(ApiHook {
            listener,
            handle: rt.handle().clone(),
            stop: stop.clone(),
        });
        api_rt = Some(rt);
    }
    let report = match rt.block_on(crate::simulate::run_with_api(
        &scenario, &config, &options, api,
    )) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match output {
        Output::Text => out(report.to_text()),
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
    if let Some(api_rt) = api_rt {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        eprintln!("simulation done; still serving the API (Ctrl-C or SIGTERM to stop)");
        api_rt.block_on(async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
        });
        stop.notify_waiters();
        api_rt.shutdown_timeout(std::time::Duration::from_secs(5));
    }
    if report.policies.iter().all(|p| p.no_pod_lost()) {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: some pods are unaccounted for");
        ExitCode::from(3)
    }
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
    /// Policies to run on the same arrivals, comma-separated: headroom, requests, and the
    /// peers trimaran-tlp, trimaran-lvrb, koordinator, crane (README: *The peers*). The
    /// targets compare headroom with requests (and with the peers that run).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "headroom,requests"
    )]
    pub policy: Vec<crate::simulate::Policy>,
}

fn run_sweep(a: SweepArgs) -> ExitCode {
    use crate::simulate::families::Family;
    use crate::simulate::sweep::{SweepOptions, run};
    let config = match load_config(a.config.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for u in config.unused_in(Mode::Simulate) {
        eprintln!("note: {u}");
    }
    let family = match Family::load(&a.family) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut policies: Vec<crate::simulate::Policy> = Vec::new();
    for p in &a.policy {
        if !policies.contains(p) {
            policies.push(*p);
        }
    }
    let compared = [
        crate::simulate::Policy::Headroom,
        crate::simulate::Policy::Requests,
    ];
    if a.check_targets && !compared.iter().all(|p| policies.contains(p)) {
        eprintln!("error: --check-targets needs --policy to include headroom and requests");
        return ExitCode::from(2);
    }
    let mut options = SweepOptions {
        farms: a.farms,
        seeds: a.seeds,
        policies,
        act_on_advice: a.act_on_advice,
        progress: true,
        ..SweepOptions::default()
    };
    if let Some(j) = a.jobs {
        options.jobs = j.max(1);
    }
    let base = a.family.parent().unwrap_or(Path::new("."));
    if let Some(dir) = &a.write_farms {
        let mut family = family.clone();
        if let Some(n) = a.farms {
            family.farms = n;
        }
        let farms = match family.farms(base) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        for farm in farms {
            let path = dir.join(format!("{}.yaml", farm.name));
            let written = serde_norway::to_string(&farm.scenario)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    std::fs::create_dir_all(dir)
                        .and_then(|()| std::fs::write(&path, text))
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = written {
                eprintln!("error: writing {}: {e}", path.display());
                return ExitCode::from(2);
            }
            outln(path.display());
        }
        return ExitCode::SUCCESS;
    }
    let report = match run(&family, base, &config, &options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match a.output {
        Output::Text => out(report.to_text()),
        Output::Json => {
            if !print_json(&report) {
                return ExitCode::from(2);
            }
        }
    }
    if let Some(p) = a.plot
        && let Err(e) = std::fs::write(&p, report.to_svg())
    {
        eprintln!("error: writing {}: {e}", p.display());
        return ExitCode::from(2);
    }
    if !report.no_pod_lost() {
        eprintln!("error: some pods are unaccounted for");
        return ExitCode::from(3);
    }
    if a.check_targets && report.targets.iter().any(|t| !t.met) {
        eprintln!("error: some targets are missed");
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

fn load_config(path: Option<&PathBuf>) -> Result<Config, crate::config::ConfigError> {
    match path {
        Some(p) => crate::plugins::registry::load_config(p),
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
        api_listen,
        data_dir,
        no_leader_election,
        extender_only,
        log,
    } = args;
    // Validated once the flags are applied: they win over the file (and `--listen
    // 127.0.0.1:…` is what makes `serve.security.mode: none` acceptable).
    let origin = config
        .as_ref()
        .map_or("the default configuration".to_string(), |p| {
            p.display().to_string()
        });
    let read = match config.as_ref() {
        Some(p) => Config::read(p),
        None => Ok(Config::default()),
    };
    let mut config = match read {
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
    // The flags win over the file before validation (mode `none` needs loopback ones).
    if let Some(a) = listen {
        config.serve.listen = a.to_string();
    }
    if let Some(a) = api_listen {
        config.serve.api_listen = a.to_string();
    }
    if let Err(e) = crate::plugins::validate_config_in(&config, &origin) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = crate::logging::init(&log) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
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
            usage,
            data_dir,
        } => run_place(
            config.as_ref(),
            seed,
            &cluster,
            &pod,
            PlaceOptions {
                profile,
                usage,
                data_dir,
            },
            output,
        ),
        Command::Simulate {
            scenario,
            policy,
            compare,
            seed,
            config,
            data_dir,
            output,
            plot,
            serve,
            act_on_advice,
        } => run_simulate(
            scenario,
            policy,
            compare,
            seed,
            config,
            data_dir,
            output,
            plot,
            serve,
            act_on_advice,
        ),
        Command::Sweep(args) => run_sweep(args),
        Command::CheckConfig { file } => run_check_config(&file),
        Command::Collect {
            once,
            config,
            data_dir,
            output,
            log,
        } => {
            if let Err(e) = crate::logging::init(&log) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            run_collect(once, &config, data_dir.as_deref(), output)
        }
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
        Command::Explain {
            pod,
            server,
            token,
            insecure_skip_tls_verify,
            output,
        } => run_explain(
            &pod,
            &server,
            output,
            &Access {
                token,
                insecure: insecure_skip_tls_verify,
            },
        ),
        Command::Advice {
            server,
            token,
            insecure_skip_tls_verify,
            output,
        } => run_advice(
            &server,
            output,
            &Access {
                token,
                insecure: insecure_skip_tls_verify,
            },
        ),
        Command::Serve(args) => run_serve(args),
        Command::Crd => {
            out(crate::kube::crd::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}

/// `headroom place`: exit 0 when every pod was placed, 3 when one was not, 2 on bad input.
fn run_place(
    config: Option<&PathBuf>,
    seed: Option<u64>,
    cluster: &Path,
    pod: &Path,
    options: PlaceOptions,
    output: Output,
) -> ExitCode {
    let mut config = match load_config(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if seed.is_some() {
        config.scheduler.seed = seed;
    }
    for u in config.unused_in(Mode::Place) {
        eprintln!("note: {u}");
    }
    let report = match place_files(&config, cluster, pod, &options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for i in &report.ignored {
        eprintln!("note: ignored {i}");
    }
    match output {
        Output::Text => out(report.to_text()),
        Output::Json => match serde_json::to_string_pretty(&report.results) {
            Ok(s) => outln(s),
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

/// `headroom check-config`: the effective configuration, with what each mode ignores.
fn run_check_config(file: &Path) -> ExitCode {
    match crate::plugins::registry::load_config(file) {
        Ok(c) => {
            outln(format_args!(
                "# {}: valid; effective configuration:",
                file.display()
            ));
            for mode in [Mode::Serve, Mode::Simulate, Mode::Place] {
                for u in c.unused_in(mode) {
                    outln(format_args!("# note: {u}"));
                }
            }
            out(crate::plugins::registry::effective(&c).to_yaml());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Writes `text` to standard output. A reader that closed the pipe early (`headroom … |
/// head`) has what it wanted: that is not an error, and nothing panics; any other write
/// error is reported on standard error.
fn out(text: impl std::fmt::Display) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = write!(stdout, "{text}").and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("headroom: writing the output: {e}");
    }
}

/// [`out`] with a newline.
fn outln(text: impl std::fmt::Display) {
    out(format_args!("{text}\n"));
}
