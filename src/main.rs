//! The `headroom` binary: parses the command line and hands over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    headroom::cli::run(headroom::cli::Cli::parse())
}
