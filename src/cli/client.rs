//! The HTTP client of `headroom explain` and `headroom advice`: it asks a running headroom's
//! inspection API and interprets the answer (`kubectl headroom` interprets the API's answers
//! through the API server with the same [`api_answer`]).

use super::args::Output;

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
    #[error(
        "cannot reach headroom at {url}: {reason} - is `headroom serve` (or `headroom simulate --serve`) \
         listening there? (--server, or $HEADROOM_SERVER)"
    )]
    Unreachable {
        /// The URL asked.
        url: String,
        /// What went wrong, and what to check (the connection refused, no answer, …).
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
            reason: connection_failure(&e),
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

/// What a failed connection came to, in words an operator acts on, as kubectl puts them
/// ("the connection was refused", "no answer", the host name not found, the certificate not
/// trusted), from the error and the errors behind it; else the whole chain.
pub(crate) fn connection_failure(e: &(dyn std::error::Error + 'static)) -> String {
    let chain = crate::logging::error_chain(e);
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    return "the connection was refused".to_string();
                }
                std::io::ErrorKind::TimedOut => return "no answer (timed out)".to_string(),
                _ => {}
            }
        }
        source = s.source();
    }
    let lower = chain.to_ascii_lowercase();
    if lower.contains("connection refused") {
        "the connection was refused".to_string()
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        format!("the host name does not resolve ({chain})")
    } else if lower.contains("certificate") || lower.contains("unknownissuer") {
        format!("its TLS certificate is not trusted ({chain}): check the CA")
    } else if lower.contains("timed out") || lower.contains("timeout") {
        "no answer (timed out)".to_string()
    } else {
        chain
    }
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
