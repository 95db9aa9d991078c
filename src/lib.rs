//! headroom: a Kubernetes scheduler that places pods by what nodes and workloads really use.
//!
//! The crate is the scheduler library behind the `headroom` binary:
//! - [`quantity`], [`resources`], [`selector`]: Kubernetes quantities, pod requests and
//!   selectors, read exactly as upstream reads them;
//! - [`snapshot`]: the immutable-per-cycle view of nodes and the pods on them;
//! - [`cache`]: the cluster as the feed writes it, the assumed pods, and the snapshot it
//!   lends each cycle; [`scheduler`]: the profiles and the cycle;
//! - [`key`]: a pod's identity, `namespace/name` ([`key::PodKey`]) and with its uid
//!   ([`key::PodId`]);
//! - [`framework`]: extension-point traits, statuses, the runtime and decision records;
//! - [`usage_context`]: the usage-side inputs the snapshot holds (the view, the clock, the
//!   recent placements); [`usage`]: what a cycle reads from them (a node's real state and
//!   free room, a pod's predicted usage, the usage fallback);
//! - [`plugins`]: the plugins, one file each, and the registry that builds profiles;
//! - [`queue`]: active, backoff and unschedulable queues;
//! - [`config`]: the YAML configuration;
//! - [`engine`]: the one composition root `serve`, `simulate` and `place` run on, with
//!   [`cluster`] (the state every cluster feed writes to) and [`clock`] (wall or simulated);
//! - [`field`]: validation errors with field paths (`spec.containers[0].resources`);
//! - [`place`]: the `headroom place` what-if command;
//! - [`collect`]: `headroom collect --once` and `headroom series`, collectors into the store;
//! - [`metrics`]: headroom's Prometheus metrics;
//! - [`api`]: the inspection API (`/explain`, `/nodes`, `/builders`, `/queue`, `/advice`,
//!   `/metrics`);
//! - [`advice`]: descheduling advice (hot nodes by real usage, the moves that help most);
//! - [`kube`]: `headroom serve` against a cluster, and the kube-scheduler extender.

pub mod advice;
pub mod analytics;
pub mod api;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod collect;
pub mod config;
pub mod decisions;
pub mod engine;
pub mod field;
pub mod framework;
pub mod fuzzing;
pub mod key;
pub mod kube;
pub mod kubectl;
pub mod labels;
pub mod logging;
pub mod metrics;
pub mod objects;
pub mod place;
pub mod plugins;
pub mod preemption;
pub mod quantity;
pub mod queue;
pub mod reservation;
pub mod resources;
pub mod scheduler;
pub mod scheduling_loop;
pub mod selector;
pub mod simulate;
pub mod snapshot;
pub mod synthetic;
pub mod usage;
pub mod usage_context;
