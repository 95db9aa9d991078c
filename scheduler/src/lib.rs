//! headroom's scheduling core: everything a pod goes through between the queue and the bind
//! call, with no I/O. It depends on no HTTP server, no Kubernetes client, no store and no
//! dataframe library: clusters arrive as objects, usage as an immutable [`view::UsageView`],
//! configuration as [`config::CoreConfig`]. The `headroom` crate's adapters (`serve`'s kube
//! client and API, `simulate`, `place`, the analytics and the store) depend on it, never the
//! reverse, so a wrong import fails to compile.
//!
//! - [`quantity`], [`resources`], [`selector`], [`labels`]: Kubernetes quantities, pod
//!   requests, labels and selectors, read exactly as upstream reads them; [`objects`]: nodes
//!   and pods from YAML, validated;
//! - [`snapshot`]: the immutable-per-cycle view of nodes and the pods on them;
//! - [`cache`]: the cluster as the feed writes it, the assumed pods, and the snapshot it
//!   lends each cycle; [`scheduler`]: the profiles and the cycle;
//! - [`key`]: a pod's identity, `namespace/name` ([`key::PodKey`]) and with its uid
//!   ([`key::PodId`]); [`identity`]: the builder a pod belongs to;
//! - [`framework`]: extension-point traits, statuses, the runtime and decision records;
//! - [`view`]: measured usage as the analytics publish it; [`usage_context`]: the usage-side
//!   inputs the snapshot holds (the view, the clock, the recent placements); [`usage`]: what
//!   a cycle reads from them (a node's real state and free room, a pod's predicted usage,
//!   the usage fallback);
//! - [`plugins`]: the plugins, one file each, and the registry that builds profiles;
//! - [`queue`]: active, backoff and unschedulable queues;
//! - [`reservation`]: capacity held for pods not yet created;
//! - [`config`]: the profiles and loop settings the core is built from;
//! - [`clock`]: wall or simulated time; [`field`]: validation errors with field paths
//!   (`spec.containers[0].resources`); [`synthetic`]: generated clusters for tests and
//!   benches.

pub mod cache;
pub mod clock;
pub mod config;
pub mod field;
pub mod framework;
pub mod identity;
pub mod key;
pub mod labels;
pub mod objects;
pub mod plugins;
pub mod quantity;
pub mod queue;
pub mod reservation;
pub mod resources;
pub mod scheduler;
pub mod selector;
pub mod snapshot;
pub mod synthetic;
pub mod usage;
pub mod usage_context;
pub mod view;
