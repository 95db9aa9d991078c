//! Scheduler plugins, one file each, and the registry that assembles profiles.

pub mod inter_pod_affinity;
pub mod pod_topology_spread;
