//! What the scheduling cycle knows of real usage, read from the snapshot's
//! [`UsageContext`](crate::usage_context::UsageContext) (the published view, the time, the
//! placements since the view): a node's real state and free room ([`node`]), a pod's
//! predicted usage ([`predict`]), the usage fallback ([`wait`]), the usage policy
//! ([`policy`]), whether a pod runs until removed ([`lifetime`]) and the `place --usage`
//! file ([`file`](mod@file)). The real-usage plugins read it in PreFilter / PreScore and never touch
//! polars, sled or the network.

pub mod file;
pub mod lifetime;
pub mod node;
pub mod policy;
pub mod predict;
pub mod wait;
pub mod warm;

pub use node::{
    Basis, Disk, DiskSource, FreeAfter, FreeColumn, FreeFractions, Freshness, Headroom, NodeReal,
    free_after_column, free_column,
};
pub use policy::{
    Class, ClassMatch, ClassRule, ClassSettings, ColdStart, Percentile, StalePolicy, UsagePolicy,
};
pub use predict::{
    CycleUsage, Derived, PodUsage, Prediction, Source, cycle_usage, cycle_usage_ref,
    cycle_usage_written, derive, pod_usage, release_cycle_usage,
};
pub use wait::{Wait, fallback_active};
pub use warm::{QueueTail, WarmWait};
