//! Scheduler plugins, one file each, and the registry that assembles a profile's framework.
//!
//! The default profile is kube-scheduler's default plugin set, in its order and with its
//! weights, for the plugins headroom implements:
//!
//! | plugin | extension points | weight |
//! |---|---|---|
//! | SchedulingGates | PreEnqueue | |
//! | NodeUnschedulable | Filter | |
//! | NodeName | Filter | |
//! | TaintToleration | Filter, Score | 3 |
//! | NodeAffinity | PreFilter, Filter, Score | 2 |
//! | NodePorts | PreFilter, Filter | |
//! | NodeResourcesFit | PreFilter, Filter, Score | 1 |
//! | PodTopologySpread | PreFilter, Filter, Score | 2 |
//! | InterPodAffinity | PreFilter, Filter, Score | 2 |
//! | NodeResourcesBalancedAllocation | Score | 1 |
//! | ImageLocality | Score | 1 |
//!
//! Not implemented (no volumes or dynamic resources in headroom's model): VolumeRestrictions,
//! NodeVolumeLimits, VolumeBinding, VolumeZone, DynamicResources, DefaultPreemption.

pub mod balanced_allocation;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod scheduling_gates;
pub mod taint_toleration;

#[cfg(test)]
pub(crate) mod testutil;

use std::sync::Arc;

use crate::config::{ConfigError, ProfileConfig};
use crate::framework::{Framework, PluginWeight, Registered};
use crate::reservation::{InMemoryReservations, ReservationSource};

/// What plugins may hold besides their args: handles to state that lives outside the
/// cycle (never I/O inside it).
#[derive(Clone)]
pub struct PluginDeps {
    /// Where the Reservation plugin reads reservations and reports their consumption.
    /// Default: an empty in-memory source.
    pub reservations: Arc<dyn ReservationSource>,
    /// How a pod's builder identity is derived (the collectors' rule, so that profiles
    /// computed from collected runs are found again at scheduling time).
    pub identity: headroom_collectors::IdentityConfig,
}

impl Default for PluginDeps {
    fn default() -> Self {
        PluginDeps {
            reservations: Arc::new(InMemoryReservations::default()),
            identity: headroom_collectors::IdentityConfig::default(),
        }
    }
}

impl std::fmt::Debug for PluginDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginDeps")
            .field("reservations", &self.reservations.current().len())
            .field("identity", &self.identity)
            .finish()
    }
}

/// A plugin the registry knows: name, default weight (score plugins), enabled by default.
#[derive(Debug, Clone, Copy)]
pub struct KnownPlugin {
    /// Plugin name.
    pub name: &'static str,
    /// Default weight when it scores.
    pub weight: i64,
    /// Part of the default profile.
    pub default_enabled: bool,
    /// A kube-scheduler in-tree plugin (false: one of headroom's own). In extender mode
    /// kube-scheduler has already run the in-tree ones, so only headroom's own run.
    pub upstream: bool,
}

/// Every plugin, in the order the framework runs them.
pub const KNOWN_PLUGINS: &[KnownPlugin] = &[
    KnownPlugin {
        name: scheduling_gates::NAME,
        weight: 0,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: node_unschedulable::NAME,
        weight: 0,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: node_name::NAME,
        weight: 0,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: taint_toleration::NAME,
        weight: 3,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: node_affinity::NAME,
        weight: 2,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: node_ports::NAME,
        weight: 0,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: node_resources_fit::NAME,
        weight: 1,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: pod_topology_spread::NAME,
        weight: 2,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: inter_pod_affinity::NAME,
        weight: 2,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: balanced_allocation::NAME,
        weight: 1,
        default_enabled: true,
        upstream: true,
    },
    KnownPlugin {
        name: image_locality::NAME,
        weight: 1,
        default_enabled: true,
        upstream: true,
    },
];

/// Looks a plugin up by name.
pub fn known(name: &str) -> Option<&'static KnownPlugin> {
    KNOWN_PLUGINS.iter().find(|p| p.name == name)
}

fn instantiate(
    name: &'static str,
    profile: &ProfileConfig,
    deps: &PluginDeps,
) -> Result<Registered, ConfigError> {
    let _ = deps;
    let args = &profile.plugin_args;
    let invalid = |field: &str, message: String| ConfigError::Invalid {
        field: format!("profiles[{}].pluginArgs.{field}", profile.scheduler_name),
        message,
    };
    Ok(match name {
        scheduling_gates::NAME => scheduling_gates::SchedulingGates::new().register(),
        node_unschedulable::NAME => node_unschedulable::NodeUnschedulable::new().register(),
        node_name::NAME => node_name::NodeName::new().register(),
        taint_toleration::NAME => taint_toleration::TaintToleration::new().register(),
        node_affinity::NAME => node_affinity::NodeAffinity::new(args.node_affinity.clone())
            .map_err(|e| invalid("nodeAffinity", e))?
            .register(),
        node_ports::NAME => node_ports::NodePorts::new().register(),
        node_resources_fit::NAME => {
            node_resources_fit::NodeResourcesFit::new(args.node_resources_fit.clone())
                .map_err(|e| invalid("nodeResourcesFit", e))?
                .register()
        }
        pod_topology_spread::NAME => {
            pod_topology_spread::PodTopologySpread::new(args.pod_topology_spread.clone()).register()
        }
        inter_pod_affinity::NAME => {
            inter_pod_affinity::InterPodAffinity::new(args.inter_pod_affinity.clone()).register()
        }
        balanced_allocation::NAME => balanced_allocation::BalancedAllocation::new(
            args.node_resources_balanced_allocation.clone(),
        )
        .map_err(|e| invalid("nodeResourcesBalancedAllocation", e))?
        .register(),
        image_locality::NAME => image_locality::ImageLocality::new().register(),
        other => {
            return Err(ConfigError::Invalid {
                field: format!("profiles[{}].plugins.{other}", profile.scheduler_name),
                message: "unknown plugin".into(),
            });
        }
    })
}

/// Builds the framework of one profile with default [`PluginDeps`].
pub fn build_framework(profile: &ProfileConfig) -> Result<Framework, ConfigError> {
    build_framework_with(profile, &PluginDeps::default())
}

/// Builds the framework of one profile: the default plugins, minus those disabled, with the
/// configured weights and args.
pub fn build_framework_with(
    profile: &ProfileConfig,
    deps: &PluginDeps,
) -> Result<Framework, ConfigError> {
    for name in profile.plugins.keys() {
        if known(name).is_none() {
            let names: Vec<&str> = KNOWN_PLUGINS.iter().map(|p| p.name).collect();
            return Err(ConfigError::Invalid {
                field: format!("profiles[{}].plugins.{name}", profile.scheduler_name),
                message: format!("unknown plugin; known plugins: {}", names.join(", ")),
            });
        }
    }
    let mut registered = Vec::new();
    let mut weights = Vec::new();
    for p in KNOWN_PLUGINS {
        let setting = profile.plugins.get(p.name);
        let enabled = setting.and_then(|s| s.enabled).unwrap_or(p.default_enabled);
        if !enabled {
            continue;
        }
        let weight = setting.and_then(|s| s.weight).unwrap_or(p.weight.max(1));
        if !(1..=100).contains(&weight) {
            return Err(ConfigError::Invalid {
                field: format!(
                    "profiles[{}].plugins.{}.weight",
                    profile.scheduler_name, p.name
                ),
                message: format!("{weight} is not in 1..=100"),
            });
        }
        registered.push(instantiate(p.name, profile, deps)?);
        weights.push(PluginWeight {
            name: p.name,
            weight,
        });
    }
    Ok(Framework::new(
        &profile.scheduler_name,
        registered,
        &weights,
    ))
}
