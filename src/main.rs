//! The `headroom` binary: parses the command line and hands over to the library. Installed
//! (linked or copied) as `kubectl-headroom`, it is the kubectl plugin (`src/kubectl.rs`).

use clap::Parser;

/// mimalloc instead of glibc's malloc: `serve` allocates on many threads (the runtime's
/// workers, the blocking pool, sled's), and glibc keeps what each thread's arena once held:
/// each compaction of the store (a second sled database for a moment) raised the resident
/// memory for good, by 30-60 MB, in the kit's soak. mimalloc reuses freed pages across
/// threads and returns them to the OS. polars also recommends a non-default allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
