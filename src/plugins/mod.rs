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
//! | DefaultPreemption | PostFilter | |
//! | NodeResourcesBalancedAllocation | Score | 1 |
//! | ImageLocality | Score | 1 |
//!
//! and then headroom's own (see [`crate::usage`] for the data they read):
//!
//! | plugin | extension points | weight | default |
//! |---|---|---|---|
//! | Reservation | PreFilter, Filter, Reserve | | on |
//! | NodeStartRate | PreFilter, Filter | | off |
//! | RealMemoryFit | PreFilter, Filter | | on |
//! | RealDiskFit | PreFilter, Filter | | on (database classes) |
//! | RealCpuFit | PreFilter, Filter | | off |
//! | History | PreScore, Score | 10 | on |
//! | RealHeadroom | PreScore, Score | 7 | on |
//!
//! The default weights reproduce seed 000's balance: History scores at most 30 and
//! RealHeadroom at most 100, so with weights 10 and 7 their maxima are 300 and 700 —
//! history up to 30 %, real resources up to 70 % of headroom's own 1000 points, next to
//! the upstream plugins' 1200. With no usage data at all, RealHeadroom skips and History
//! scores nothing, so headroom decides exactly as kube-scheduler.
//!
//! DefaultPreemption decides only (node and victims, in the decision record); the caller
//! acts on it outside the cycle (`serve`: nominatedNodeName, DisruptionTarget, deletion;
//! `place`: the victims leave the what-if cluster). In extender mode preemption stays
//! kube-scheduler's.
//!
//! Not implemented (no volumes or dynamic resources in headroom's model): VolumeRestrictions,
//! NodeVolumeLimits, VolumeBinding, VolumeZone, DynamicResources.

pub mod balanced_allocation;
pub mod default_preemption;
pub mod history;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_start_rate;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod real_cpu_fit;
pub mod real_disk_fit;
mod real_fit;
pub mod real_headroom;
pub mod real_memory_fit;
pub mod reservation;
pub mod scheduling_gates;
pub mod taint_toleration;
mod topology;

#[cfg(test)]
pub(crate) mod testutil;

use std::sync::Arc;

use crate::config::{Config, ConfigError, ProfileConfig};
use crate::framework::{Framework, PluginWeight, Registered};
use crate::reservation::{InMemoryReservations, ReservationSource};
use crate::usage::UsagePolicy;

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
    /// The `usage` section: staleness, prediction percentile, class policies.
    pub policy: Arc<UsagePolicy>,
    /// Threads a cycle may use (`scheduler.parallelism`; 0: the machine's cores, at most
    /// 16). Default 1: serial.
    pub parallelism: usize,
}

impl PluginDeps {
    /// The dependencies a configuration implies (identity rule and usage policy), with no
    /// reservations.
    pub fn from_config(config: &Config) -> PluginDeps {
        PluginDeps {
            reservations: Arc::new(InMemoryReservations::default()),
            identity: config.collectors.identity.clone(),
            policy: Arc::new(config.usage.clone()),
            parallelism: config.scheduler.parallelism,
        }
    }

    /// Replaces the reservation source.
    pub fn with_reservations(mut self, source: Arc<dyn ReservationSource>) -> PluginDeps {
        self.reservations = source;
        self
    }
}

impl Default for PluginDeps {
    fn default() -> Self {
        PluginDeps {
            reservations: Arc::new(InMemoryReservations::default()),
            identity: headroom_collectors::IdentityConfig::default(),
            policy: Arc::new(UsagePolicy::default()),
            parallelism: 1,
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
        name: default_preemption::NAME,
        weight: 0,
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
    // headroom's own, after the upstream filters so that a node failing an upstream check
    // keeps upstream's reason.
    KnownPlugin {
        name: reservation::NAME,
        weight: 0,
        default_enabled: true,
        upstream: false,
    },
    KnownPlugin {
        name: node_start_rate::NAME,
        weight: 0,
        default_enabled: false,
        upstream: false,
    },
    KnownPlugin {
        name: real_memory_fit::NAME,
        weight: 0,
        default_enabled: true,
        upstream: false,
    },
    KnownPlugin {
        name: real_disk_fit::NAME,
        weight: 0,
        default_enabled: true,
        upstream: false,
    },
    KnownPlugin {
        name: real_cpu_fit::NAME,
        weight: 0,
        default_enabled: false,
        upstream: false,
    },
    KnownPlugin {
        name: history::NAME,
        weight: 10,
        default_enabled: true,
        upstream: false,
    },
    KnownPlugin {
        name: real_headroom::NAME,
        weight: 7,
        default_enabled: true,
        upstream: false,
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
        default_preemption::NAME => {
            default_preemption::DefaultPreemption::new(args.default_preemption.clone())
                .map_err(|e| invalid("defaultPreemption", e))?
                .register()
        }
        balanced_allocation::NAME => balanced_allocation::BalancedAllocation::new(
            args.node_resources_balanced_allocation.clone(),
        )
        .map_err(|e| invalid("nodeResourcesBalancedAllocation", e))?
        .register(),
        image_locality::NAME => image_locality::ImageLocality::new().register(),
        reservation::NAME => reservation::ReservationPlugin::new(deps).register(),
        node_start_rate::NAME => node_start_rate::NodeStartRate::new(args.node_start_rate.clone())
            .map_err(|e| invalid("nodeStartRate", e))?
            .register(),
        real_memory_fit::NAME => real_memory_fit::RealMemoryFit::new(deps).register(),
        real_disk_fit::NAME => real_disk_fit::RealDiskFit::new(deps).register(),
        real_cpu_fit::NAME => real_cpu_fit::RealCpuFit::new(deps).register(),
        history::NAME => history::History::new(args.history.clone(), deps)
            .map_err(|e| invalid("history", e))?
            .register(),
        real_headroom::NAME => real_headroom::RealHeadroom::new(args.real_headroom.clone(), deps)
            .map_err(|e| invalid("realHeadroom", e))?
            .register(),
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
    if profile.percentage_of_nodes_to_score > 100 {
        return Err(ConfigError::Invalid {
            field: format!(
                "profiles[{}].percentageOfNodesToScore",
                profile.scheduler_name
            ),
            message: format!("{} is not in 0..=100", profile.percentage_of_nodes_to_score),
        });
    }
    Ok(
        Framework::new(&profile.scheduler_name, registered, &weights)
            .with_percentage_of_nodes_to_score(profile.percentage_of_nodes_to_score)
            .with_parallelism(deps.parallelism),
    )
}
