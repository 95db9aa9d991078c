//! headroom: a Kubernetes scheduler that places pods by what nodes and workloads really use.
//!
//! The crate is the `headroom` binary's library: the adapters around the scheduling core
//! ([`headroom_scheduler`]: framework, plugins, cache and snapshot, queue, the cycle), which
//! depends on none of them:
//! - [`config`]: the YAML configuration (the core reads its part, [`config::CoreConfig`]);
//! - [`engine`]: the one composition root `serve`, `simulate` and `place` run on, with
//!   [`cluster`] (the state every cluster feed writes to) and [`scheduling_loop`] (the loop
//!   that pops the queue, runs a cycle and hands binds out);
//! - [`analytics`]: polars over the store, publishing the core's usage view;
//! - [`decisions`]: the decision log, its channel and its sinks;
//! - [`preemption`]: acting on a preemption decision, outside the cycle;
//! - [`place`]: the `headroom place` what-if command;
//! - [`collect`]: `headroom collect --once` and `headroom series`, collectors into the store;
//! - [`metrics`]: headroom's Prometheus metrics;
//! - [`api`]: the inspection API (`/explain`, `/nodes`, `/builders`, `/queue`, `/advice`,
//!   `/metrics`);
//! - [`advice`]: descheduling advice (hot nodes by real usage, the moves that help most);
//! - [`kube`]: `headroom serve` against a cluster, and the kube-scheduler extender;
//! - [`simulate`]: simulated farms on simulated time; [`cli`], [`kubectl`]: the commands.

pub mod advice;
pub mod analytics;
pub mod api;
pub mod cli;
pub mod cluster;
pub mod collect;
pub mod config;
pub mod decisions;
pub mod engine;
pub mod fuzzing;
pub mod kube;
pub mod kubectl;
pub mod logging;
pub mod metrics;
pub mod place;
pub mod preemption;
pub mod scheduling_loop;
pub mod simulate;
