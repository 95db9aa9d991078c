//! `headroom serve`: schedule a real cluster, as a scheduler and a kube-scheduler extender
//! in one process, until SIGTERM or Ctrl-C.

use std::process::ExitCode;

use super::args::ServeArgs;
use super::error::CliError;
use crate::config::Config;

/// `headroom serve`: exit 0 after a clean shutdown, 2 on a bad configuration or
/// kubeconfig, 3 when serving failed.
pub(crate) fn run(args: ServeArgs) -> Result<ExitCode, CliError> {
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
    // First, so that every line on stderr, an error about the configuration included, is
    // in the format asked for.
    crate::logging::init(&log)?;
    // Validated once the flags are applied: they win over the file (and `--listen
    // 127.0.0.1:…` is what makes `serve.security.mode: none` acceptable).
    let origin = config
        .as_ref()
        .map_or("the default configuration".to_string(), |p| {
            p.display().to_string()
        });
    let mut config = match config.as_ref() {
        Some(p) => Config::read(p)?,
        None => Config::default(),
    };
    if let Some(url) = prometheus {
        let mut p: headroom_collectors::config::PrometheusConfig =
            serde_json::from_value(serde_json::json!({ "url": url })).map_err(|e| {
                CliError::BadFlag {
                    flag: "--prometheus",
                    reason: e.to_string(),
                }
            })?;
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
    crate::config::validate_config_in(&config, &origin)?;
    for shared in headroom_collectors::shared::shared_signals(&config.collectors) {
        tracing::warn!("{origin}: {shared}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(CliError::ServeRuntime)?;
    runtime.block_on(async move {
        let (client, server) =
            crate::kube::client::client(kubeconfig.as_deref(), context.as_deref())
                .await
                .map_err(CliError::Connect)?;
        let mut opts = crate::kube::serve::ServeOptions::new(config, client);
        opts.server = server;
        opts.data_dir = data_dir;
        let report = crate::kube::serve::run(opts, shutdown_signal())
            .await
            .map_err(|e| match e {
                crate::kube::Error::Config(e) => CliError::Config(e),
                e => CliError::Serve(e),
            })?;
        crate::logging::last_words(
            tracing::Level::INFO,
            &format!(
                "headroom serve stopped: {} pods bound, {} unschedulable attempts, {} bind errors",
                report.scheduling.bound,
                report.scheduling.unschedulable,
                report.scheduling.bind_errors
            ),
        );
        Ok(ExitCode::SUCCESS)
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
