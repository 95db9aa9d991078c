//! The `headroom` binary: parses the command line and hands over to the library. Installed
//! (linked or copied) as `kubectl-headroom`, it is the kubectl plugin (`src/kubectl.rs`).

use clap::Parser;

fn main() -> std::process::ExitCode {
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_os_string()));
    if invoked_as.is_some_and(|f| f == headroom::kubectl::PLUGIN_NAME) {
        return headroom::kubectl::run(headroom::kubectl::PluginCli::parse());
    }
    headroom::cli::run(headroom::cli::Cli::parse())
}
