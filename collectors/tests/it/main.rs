//! headroom-collectors' integration tests, in one binary (one link step).

mod common;
mod config;
mod kubelet;
mod loops;
mod prometheus_faults;
mod prometheus_real;
mod properties;
mod scrape;
