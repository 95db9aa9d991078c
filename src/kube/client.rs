//! The Kubernetes client: from a kubeconfig file (`--kubeconfig`, `--context`), else
//! inferred as kubectl does (in-cluster service account when `KUBERNETES_SERVICE_HOST` is
//! set, else `$KUBECONFIG` or `~/.kube/config`).

use std::path::Path;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::{Error, Result};

/// Builds a client from `kubeconfig` (and `context`), or infers one; returns it with the
/// API server's URL (for messages that must name the server).
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| Error::ClientConfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| Error::ClientConfig(format!("{}: {e}", path.display())))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Error::ClientConfig(e.to_string()))?,
        None => kube::Config::infer().await.map_err(|e| {
            Error::ClientConfig(format!(
                "no in-cluster configuration and no kubeconfig: {e}"
            ))
        })?,
    };
    // kube-rs retries 429/503/504 by itself with its own backoff; headroom's flow control
    // (`serve.binding`) must see those answers to shrink its window and honour
    // Retry-After, and a hidden retry loop only multiplies the load on a saturated server.
    config.default_retry = false;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| Error::ClientConfig(e.to_string()))?;
    Ok((client, server.trim_end_matches('/').to_string()))
}

/// A client for an API server at `url` without credentials (a local fake or a proxy such
/// as `kubectl proxy`).
pub fn client_for_url(url: &str) -> Result<Client> {
    let uri = url
        .parse()
        .map_err(|e| Error::ClientConfig(format!("{url:?}: {e}")))?;
    let mut config = kube::Config::new(uri);
    config.default_namespace = "default".into();
    config.default_retry = false;
    Client::try_from(config).map_err(|e| Error::ClientConfig(e.to_string()))
}
