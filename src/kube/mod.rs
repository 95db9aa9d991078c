//! Kubernetes: `headroom serve` as a real scheduler against a kube-apiserver, and as a
//! kube-scheduler extender.
//!
//! ```text
//!  kube-apiserver ──watch──► reflect (nodes, pods, namespaces, reservations)
//!        ▲                      │ snapshot upserts, queue adds, ClusterEvents
//!        │                      ▼
//!        │               Scheduler + SchedulingQueue ──► SchedulingLoop (leader only)
//!        │                                                  │ Decision      │ bind
//!        │   pods/binding ◄── bind::ApiBinder ◄─────────────┘               │
//!        │   events, pods/status, annotations ◄── report (background) ◄─────┘
//!        │   leases ◄── leader (Lease loop; a lost lease stops the loop at once)
//!        │   reservations/status, delete ◄── crd (status writer, GC loop)
//!  kube-scheduler ──POST /extender/{filter,prioritize,bind}──► extender (own plugins only)
//! ```
//!
//! Modules, one per concept, with their configuration in [`crate::config::serve`] (the
//! `serve` section): [`client`] (kubeconfig or in-cluster), [`reflect`] (watches into the
//! snapshot and queue), [`bind`] (the `pods/binding` binder), [`events`] (Events, the
//! `PodScheduled` condition, annotations), [`leader`] (Lease election), [`crd`] (the
//! `Reservation` custom resource), [`extender`] (the extender protocol) and [`serve`]
//! (wires everything together).
//!
//! Nothing here runs inside a scheduling cycle: every API call happens in a task of its own,
//! and what the cycle reads (snapshot, reservations) is published before it starts.

pub mod auth;
pub mod bind;
pub mod client;
pub mod crd;
pub mod events;
pub mod extender;
pub mod flow;
pub mod health;
pub mod leader;
pub mod lean;
pub mod preempt;
pub mod recorder;
pub mod reflect;
pub mod serve;
pub mod tls;
pub mod volumes;
pub mod watch;
pub mod workloads;

pub use crate::config::serve::ServeConfig;

/// Every API call `serve` makes, as RBAC names it: `(apiGroup, resource, verb)`.
/// `deploy/rbac.yaml` grants exactly these (a test checks both ways, and the fake API
/// server checks that the calls it sees are in this list). `nodes/proxy` `get` is needed
/// only by the kubelet collector's API-server-proxy endpoint, which the manifests leave
/// commented out.
pub const API_CALLS: &[(&str, &str, &str)] = &[
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "get"),
    ("", "pods", "patch"),
    ("", "pods/binding", "create"),
    ("", "pods/status", "patch"),
    ("", "pods", "delete"),
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("", "replicationcontrollers", "list"),
    ("", "replicationcontrollers", "watch"),
    ("apps", "replicasets", "list"),
    ("apps", "replicasets", "watch"),
    ("apps", "statefulsets", "list"),
    ("apps", "statefulsets", "watch"),
    ("", "persistentvolumes", "list"),
    ("", "persistentvolumes", "watch"),
    ("", "persistentvolumes", "update"),
    ("", "persistentvolumeclaims", "list"),
    ("", "persistentvolumeclaims", "watch"),
    ("", "persistentvolumeclaims", "update"),
    ("storage.k8s.io", "storageclasses", "list"),
    ("storage.k8s.io", "storageclasses", "watch"),
    ("storage.k8s.io", "csinodes", "list"),
    ("storage.k8s.io", "csinodes", "watch"),
    ("policy", "poddisruptionbudgets", "list"),
    ("policy", "poddisruptionbudgets", "watch"),
    ("scheduling.k8s.io", "priorityclasses", "list"),
    ("scheduling.k8s.io", "priorityclasses", "watch"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
    ("headroom.io", "reservations", "list"),
    ("headroom.io", "reservations", "watch"),
    ("headroom.io", "reservations", "delete"),
    ("headroom.io", "reservations/status", "patch"),
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
];

/// Why `serve` (or one of its parts) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// No usable kubeconfig or in-cluster configuration.
    #[error("kubernetes client configuration: {0}")]
    ClientConfig(String),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The embedded store failed.
    #[error("store: {0}")]
    Store(#[from] headroom_storage::Error),
    /// Binding the HTTP listener or serving failed.
    #[error("http listener {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A background task failed.
    #[error("task: {0}")]
    Task(String),
    /// Something `serve` cannot go on without failed for good (the store, after its disk
    /// was full); it stopped cleanly so that its pod restarts it.
    #[error("{0}")]
    Fatal(String),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wall-clock milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// RFC 3339 text of a ms timestamp (UTC, second precision), as Kubernetes writes times.
pub fn rfc3339(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}
