//! `headroom simulate`: the real queue, scheduler, store and analytics on simulated time,
//! optionally serving the inspection API over the first policy's run.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use super::args::{Output, SimulateArgs};
use super::error::CliError;
use super::{load_config, out, print_json};
use crate::config::Mode;
use crate::simulate::{ApiHook, Options, Policy, Scenario};

/// `headroom simulate`: exit 0 when every policy accounted for every pod, 3 otherwise, 2 on
/// bad input.
pub(crate) fn run(args: SimulateArgs) -> Result<ExitCode, CliError> {
    let SimulateArgs {
        scenario,
        policy: mut policies,
        compare,
        tuned,
        seed,
        config,
        data_dir,
        output,
        plot,
        serve,
        act_on_advice,
        replay_plan,
    } = args;
    use std::io::IsTerminal;
    let config = load_config(config.as_ref())?;
    for u in config.unused_in(Mode::Simulate) {
        eprintln!("note: {u}");
    }
    let scenario = Scenario::load(&scenario)?;
    if replay_plan {
        print_json(&crate::simulate::replay::replay_plan(&scenario, seed)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if compare {
        policies = vec![Policy::Headroom, Policy::Requests];
    }
    policies.dedup();
    let tuned = match tuned {
        Some(p) => {
            crate::simulate::tune::TunedPeers::load(&p).map_err(crate::simulate::Error::from)?
        }
        None => Default::default(),
    };
    let options = Options {
        seed,
        policies,
        data_dir,
        progress: std::io::stderr().is_terminal(),
        act_on_advice,
        tuned,
    };
    // Simulated time is tokio's paused clock: timers (the queue's backoffs) fire when the
    // simulator advances it, never on the wall clock.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(CliError::Runtime)?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let (api, api_rt) = match serve {
        Some(addr) => {
            let (hook, api_rt) = serve_api(addr, &stop)?;
            (Some(hook), Some(api_rt))
        }
        None => (None, None),
    };
    let report = rt.block_on(crate::simulate::run_with_api(
        &scenario, &config, &options, api,
    ))?;
    match output {
        Output::Text => out(report.to_text()),
        Output::Json => print_json(&report)?,
    }
    if let Some(p) = plot
        && let Err(e) = std::fs::write(&p, report.to_svg())
    {
        return Err(CliError::Write {
            path: p,
            reason: e.to_string(),
        });
    }
    if let Some(api_rt) = api_rt {
        keep_serving(api_rt, &stop);
    }
    if report.policies.iter().all(|p| p.no_pod_lost()) {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::PodsLost)
    }
}

/// Listens on `addr` for the inspection API, on its own runtime on the wall clock (see
/// [`ApiHook`]); the API stops when `stop` is notified.
fn serve_api(
    addr: SocketAddr,
    stop: &Arc<tokio::sync::Notify>,
) -> Result<(ApiHook, tokio::runtime::Runtime), CliError> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|source| CliError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_or(addr.to_string(), |a| a.to_string());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(CliError::ApiRuntime)?;
    eprintln!("serving the inspection API on http://{local}");
    let hook = ApiHook {
        listener,
        handle: rt.handle().clone(),
        stop: stop.clone(),
    };
    Ok((hook, rt))
}

/// After the simulation: keeps serving the API until Ctrl-C or SIGTERM, then stops it.
fn keep_serving(api_rt: tokio::runtime::Runtime, stop: &tokio::sync::Notify) {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    eprintln!("simulation done; still serving the API (Ctrl-C or SIGTERM to stop)");
    api_rt.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    });
    stop.notify_waiters();
    api_rt.shutdown_timeout(std::time::Duration::from_secs(5));
}
