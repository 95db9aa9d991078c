//! `kubectl headroom`: the same binary installed as `kubectl-headroom` (kubectl finds plugins
//! by that name on `$PATH`). It reads the user's kubeconfig as kubectl does and reaches
//! headroom's inspection API through the API server's service proxy
//! (`/api/v1/namespaces/{ns}/services/{scheme}:{service}:{port}/proxy/{path}`), so the
//! user's own credentials and RBAC (`get services/proxy`) decide who may look.
//!
//! The API server authenticates the user and then drops the `Authorization` header before
//! proxying, so headroom cannot authenticate the caller itself: the proxy reaches
//! `serve.viewerListen`, a plain-HTTP, read-only listener (the inspection routes only, never
//! the extender), which `deploy/networkpolicy.yaml` opens to the control plane only. The
//! answers are interpreted by the same code as `headroom explain`/`advice`
//! (`cli::api_answer`): same text, same JSON, same exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

use crate::cli::{ExplainError, Output, api_answer, format_param, parse_pod_arg, print_fetched};
use headroom_scheduler::key::PodKey;

/// The file name that makes the binary behave as the kubectl plugin.
pub const PLUGIN_NAME: &str = "kubectl-headroom";

/// kubectl headroom: ask the headroom scheduler in the cluster, with your kubeconfig.
#[derive(Debug, Parser)]
#[command(name = "kubectl headroom", version, long_about = None)]
pub struct PluginCli {
    /// Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace of headroom's Service.
    #[arg(short = 'n', long, global = true, default_value = "headroom-system")]
    pub namespace: String,
    /// The name of headroom's Service.
    #[arg(long, global = true, default_value = "headroom")]
    pub service: String,
    /// The Service port of headroom's read-only viewer listener (`serve.viewerListen`).
    #[arg(long, global = true, default_value = "viewer")]
    pub port: String,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// What to show.
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// The plugin's subcommands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Why did this pod go where it went (as `headroom explain`). Exit 3 when headroom has
    /// no decision for it.
    Explain {
        /// The pod, as NAMESPACE/NAME.
        pod: String,
    },
    /// Descheduling advice: hot nodes and the moves that would help (as `headroom advice`).
    Advice,
    /// Every node's real headroom next to its requests, or one node's.
    Nodes {
        /// One node.
        name: Option<String>,
    },
    /// The pending pods: where they wait and why.
    Queue,
}

/// Errors of the plugin before or around headroom's own answer.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The kubeconfig cannot be read or has no usable context.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The API server cannot be reached.
    #[error(
        "cannot reach the API server {server}: {reason} - did you specify the right host or port? \
         (kubeconfig {kubeconfig}{context})"
    )]
    Unreachable {
        /// Its URL, as the kubeconfig names it.
        server: String,
        /// What went wrong (the connection refused, no answer, …).
        reason: String,
        /// The kubeconfig read (a path, or where kubectl looks).
        kubeconfig: String,
        /// `, context NAME` when one was named.
        context: String,
    },
    /// The Service does not exist.
    #[error(
        "headroom's Service {namespace}/{service} was not found: is headroom installed? (kubectl apply -k deploy/)"
    )]
    NotInstalled {
        /// Its namespace.
        namespace: String,
        /// Its name.
        service: String,
    },
    /// RBAC denies the user `get services/proxy`.
    #[error(
        "forbidden: you may not get services/proxy {service} in {namespace} (bind the ClusterRole headroom-kubectl-viewer in that namespace, deploy/viewer-rbac.yaml): {message}"
    )]
    Forbidden {
        /// The namespace.
        namespace: String,
        /// The Service.
        service: String,
        /// The API server's words.
        message: String,
    },
    /// The API server answered for itself with another error (e.g. 503: no endpoints).
    #[error("the API server answered {status}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The Status message.
        message: String,
    },
    /// headroom answered (an error, or its 404 for an unknown pod: exit 3).
    #[error(transparent)]
    Headroom(#[from] ExplainError),
}

/// Runs the plugin.
pub fn run(cli: PluginCli) -> ExitCode {
    match fetch(&cli) {
        Ok(body) => print_fetched(Ok(body)),
        Err(PluginError::Headroom(e)) => print_fetched(Err(e)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Fetches and renders what `cli` asks for.
pub fn fetch(cli: &PluginCli) -> Result<String, PluginError> {
    let path = match &cli.command {
        PluginCommand::Explain { pod } => {
            let (ns, name) = parse_pod_arg(pod)?;
            format!("explain/{ns}/{name}")
        }
        PluginCommand::Advice => "advice".to_string(),
        PluginCommand::Nodes { name: Some(n) } => format!("nodes/{n}"),
        PluginCommand::Nodes { name: None } => "nodes".to_string(),
        PluginCommand::Queue => "queue".to_string(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PluginError::Headroom(ExplainError::Runtime(e)))?;
    let body = runtime.block_on(proxy_get(cli, &path))?;
    // `/explain` and `/advice` render text themselves; `/nodes` and `/queue` answer JSON.
    match (&cli.command, cli.output) {
        (PluginCommand::Nodes { .. }, Output::Text) => Ok(nodes_text(&body)),
        (PluginCommand::Queue, Output::Text) => Ok(queue_text(&body)),
        (PluginCommand::Explain { .. }, Output::Text) => Ok(page_through_proxy(cli, &body)),
        _ => Ok(body),
    }
}

/// `/explain`'s last line names the pod's page as a path on headroom's API
/// (`page: /ui/pods/ci/build-42`); a kubectl user opens it through `kubectl proxy` and the
/// same service proxy, so the line becomes that URL.
fn page_through_proxy(cli: &PluginCli, text: &str) -> String {
    match text.rsplit_once("page: /") {
        Some((head, path)) if !path.trim_end().contains('\n') => format!(
            "{head}page: http://127.0.0.1:8001/api/v1/namespaces/{}/services/http:{}:{}/proxy/{} (with `kubectl proxy` running)\n",
            cli.namespace,
            cli.service,
            cli.port,
            path.trim_end()
        ),
        _ => text.to_string(),
    }
}

/// The API server a plugin call talks to, and how to name it in an error.
struct Server {
    client: kube::Client,
    url: String,
}

impl Server {
    fn unreachable(&self, cli: &PluginCli, reason: String) -> PluginError {
        PluginError::Unreachable {
            server: self.url.clone(),
            reason,
            kubeconfig: match &cli.kubeconfig {
                Some(p) => p.display().to_string(),
                None => std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into()),
            },
            context: cli
                .context
                .as_ref()
                .map(|c| format!(", context {c}"))
                .unwrap_or_default(),
        }
    }
}

async fn client(cli: &PluginCli) -> Result<Server, PluginError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..Default::default()
    };
    let bad = |e: &dyn std::fmt::Display| PluginError::Kubeconfig(e.to_string());
    let mut config = match &cli.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| bad(&format_args!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| bad(&format_args!("{}: {e}", path.display())))?
        }
        None => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| bad(&e))?,
    };
    // kube-rs would retry 503 (the proxy's "no endpoints available") for a long while; the
    // user wants the answer now (seen on a real API server).
    config.default_retry = false;
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(|e| bad(&e))?;
    Ok(Server {
        client,
        url: url.trim_end_matches('/').to_string(),
    })
}

/// GET `path` of headroom's viewer listener through the API server's service proxy.
async fn proxy_get(cli: &PluginCli, path: &str) -> Result<String, PluginError> {
    let server = client(cli).await?;
    let url = format!(
        "/api/v1/namespaces/{}/services/http:{}:{}/proxy/{path}?format={}",
        cli.namespace,
        cli.service,
        cli.port,
        format_param(cli.output)
    );
    let request = axum::http::Request::get(&url)
        .body(kube::client::Body::empty())
        .map_err(|e| server.unreachable(cli, e.to_string()))?;
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        server.client.send(request),
    )
    .await
    .map_err(|_| server.unreachable(cli, "no answer within 15s".into()))?
    .map_err(|e| server.unreachable(cli, crate::cli::connection_failure(&e)))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| server.unreachable(cli, crate::cli::connection_failure(&e)))?;
    let body = String::from_utf8_lossy(&bytes).into_owned();
    if let Some(e) = api_server_error(cli, status, &body) {
        return Err(e);
    }
    Ok(api_answer(&url, status, body)?)
}

/// The API server's own refusals (a `Status` object), told apart from headroom's answers
/// (`{"error": ...}`), which it passes through unchanged.
fn api_server_error(cli: &PluginCli, status: u16, body: &str) -> Option<PluginError> {
    let v: Value = serde_json::from_str(body).ok()?;
    if v["kind"] != "Status" || (200..300).contains(&status) {
        return None;
    }
    let message = v["message"].as_str().unwrap_or_default().to_string();
    let (namespace, service) = (cli.namespace.clone(), cli.service.clone());
    Some(match status {
        404 if v["details"]["kind"] == "services" => {
            PluginError::NotInstalled { namespace, service }
        }
        403 => PluginError::Forbidden {
            namespace,
            service,
            message,
        },
        _ => PluginError::Api { status, message },
    })
}

fn f64_at(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_f64()
        .unwrap_or_default()
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `/nodes` (a list) or `/nodes/{name}` (one) as a table: requests and real use side by side.
fn nodes_text(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    // `/nodes` is `{"nodes": [...], ...}`; `/nodes/{name}` one node.
    let nodes = match v.get("nodes") {
        Some(Value::Array(list)) => list.clone(),
        _ => vec![v],
    };
    let mut out = format!(
        "{:<28} {:>5} {:>15} {:>15} {:>19} {:>19} {}\n",
        "NODE", "PODS", "CPU REQ/ALLOC", "CPU USED", "MEM REQ/ALLOC GiB", "MEM USED GiB", "BASIS"
    );
    for n in &nodes {
        let cordon = if n["unschedulable"] == true {
            " (cordoned)"
        } else {
            ""
        };
        let stale = if n["stale"] == true { " stale" } else { "" };
        out.push_str(&format!(
            "{:<28} {:>5} {:>15} {:>15} {:>19} {:>19} {}{stale}{cordon}\n",
            n["name"].as_str().unwrap_or("?"),
            n["pods"].as_u64().unwrap_or_default(),
            format!(
                "{:.1}/{:.1}",
                f64_at(n, &["requested", "cpuCores"]),
                f64_at(n, &["allocatable", "cpuCores"])
            ),
            format!(
                "{:.1}/{:.1}",
                f64_at(n, &["headroom", "cpuUsed"]),
                f64_at(n, &["headroom", "cpuTotal"])
            ),
            format!(
                "{:.1}/{:.1}",
                f64_at(n, &["requested", "memoryBytes"]) / GIB,
                f64_at(n, &["allocatable", "memoryBytes"]) / GIB
            ),
            format!(
                "{:.1}/{:.1}",
                f64_at(n, &["headroom", "memoryUsed"]) / GIB,
                f64_at(n, &["headroom", "memoryTotal"]) / GIB
            ),
            n["headroom"]["basis"].as_str().unwrap_or("?"),
        ));
    }
    out
}

/// `/queue`'s `waiting` (humantime to the nanosecond, "1s 746ms 217us 521ns") rounded as a
/// column reads it: milliseconds under a second, seconds under two minutes, then minutes
/// and hours. Anything that does not parse is shown as sent.
fn round_waiting(s: &str) -> String {
    let Ok(d) = humantime_serde::re::humantime::parse_duration(s) else {
        return s.to_string();
    };
    match d.as_secs() {
        0 => format!("{}ms", d.as_millis()),
        s @ 1..120 => format!("{s}s"),
        s @ 120..7200 => format!("{}m", s / 60),
        s => format!("{}h{}m", s / 3600, s % 3600 / 60),
    }
}

/// `/queue` as its lengths and one line per pending pod.
fn queue_text(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    let l = &v["lengths"];
    let mut out = format!(
        "active {} backoff {} unschedulable {} gated {} in flight {}\n",
        l["active"], l["backoff"], l["unschedulable"], l["gated"], l["inFlight"]
    );
    let pods = v["pods"].as_array().cloned().unwrap_or_default();
    if pods.is_empty() {
        out.push_str("no pending pods\n");
        return out;
    }
    out.push_str(&format!(
        "{:<40} {:<14} {:>8} {:>10}  LAST FAILURE\n",
        "POD", "QUEUE", "ATTEMPTS", "WAITING"
    ));
    for p in &pods {
        out.push_str(&format!(
            "{:<40} {:<14} {:>8} {:>10}  {}\n",
            PodKey::new(
                p["namespace"].as_str().unwrap_or("?"),
                p["name"].as_str().unwrap_or("?")
            )
            .to_string(),
            p["queue"].as_str().unwrap_or("?"),
            p["attempts"].to_string(),
            p["waiting"]
                .as_str()
                .map_or_else(|| "?".into(), round_waiting),
            p["lastFailure"].as_str().unwrap_or("-"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_rounded_for_the_column() {
        assert_eq!(round_waiting("746ms 217us 521ns"), "746ms");
        assert_eq!(round_waiting("1s 746ms 217us"), "1s");
        assert_eq!(round_waiting("3m 5s"), "3m");
        assert_eq!(round_waiting("2h 30m 1s"), "2h30m");
        assert_eq!(round_waiting("soon"), "soon");
    }

    #[test]
    fn queue_rows_stay_in_their_columns() {
        let body = r#"{"lengths":{"active":0,"backoff":0,"unschedulable":1,"gated":0,"inFlight":0},
            "pods":[{"namespace":"default","name":"too-big","queue":"unschedulable","attempts":1,
            "waiting":"1s 746ms 217us 521ns","lastFailure":"0/3 nodes are available"}]}"#;
        let text = queue_text(body);
        let row = text.lines().nth(2).unwrap();
        assert!(row.contains("        1         1s  0/3 nodes"), "{row}");
    }
}
