//! What the scheduling core reads of headroom's configuration: the profiles (plugins,
//! weights, args), the scheduling-loop settings, and [`CoreConfig`], the part of the whole
//! configuration (the `headroom` crate's `config::Config`) a [`Scheduler`](crate::scheduler::Scheduler)
//! is built from. The YAML tree, its files and the sections of the adapters stay there.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML does not fit the schema, or (from the `headroom` crate's `Config::from_yaml`)
    /// a value in it is invalid.
    #[error("{path}: {field}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The field path ([`crate::field::Path`]; `top level` for the document itself).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid configuration at {field}: {message}")]
    Invalid {
        /// The field path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// The default scheduler name (`spec.schedulerName` of the pods headroom schedules).
pub const DEFAULT_SCHEDULER_NAME: &str = "headroom";

/// Scheduling-loop settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct SchedulerConfig {
    /// Seed of the random tie-breaker among equally scored nodes. Default: none (entropy);
    /// set it to make decisions reproducible.
    pub seed: Option<u64>,
    /// Backoff after a pod's first failed attempt, seconds; each further failure doubles
    /// it up to `podMaxBackoffSeconds`. Default `1`, as kube-scheduler's
    /// `podInitialBackoffSeconds`.
    pub pod_initial_backoff_seconds: u64,
    /// Cap on a pod's backoff, seconds. Default `10`, as kube-scheduler's
    /// `podMaxBackoffSeconds`.
    pub pod_max_backoff_seconds: u64,
    /// How long an unschedulable pod waits for an event that may help it before it is
    /// retried anyway, seconds. Default `300`, as kube-scheduler's
    /// `DefaultPodMaxInUnschedulablePodsDuration` (v1.22 to v1.25 had the flag
    /// `--pod-max-in-unschedulable-pods-duration`; up to v1.21 it was a fixed 60 s).
    pub pod_max_in_unschedulable_pods_seconds: u64,
    /// Threads one scheduling cycle spreads Filter and Score over (upstream's
    /// `parallelism`). Decisions do not depend on it. Default `0`: the machine's cores, at
    /// most 16; `1` runs cycles serially. A cycle splits only when each thread gets at
    /// least 7,500 nodes (below, the hand-off costs more than it saves), so clusters under
    /// 15,000 nodes are scheduled serially whatever this says.
    pub parallelism: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        let q = crate::queue::QueueConfig::default();
        SchedulerConfig {
            seed: None,
            pod_initial_backoff_seconds: q.initial_backoff.as_secs(),
            pod_max_backoff_seconds: q.max_backoff.as_secs(),
            pod_max_in_unschedulable_pods_seconds: q.unschedulable_timeout.as_secs(),
            parallelism: 0,
        }
    }
}

impl SchedulerConfig {
    /// The queue's configuration: these backoffs, upstream's defaults for the rest.
    pub fn queue(&self) -> crate::queue::QueueConfig {
        crate::queue::QueueConfig {
            initial_backoff: std::time::Duration::from_secs(self.pod_initial_backoff_seconds),
            max_backoff: std::time::Duration::from_secs(self.pod_max_backoff_seconds),
            unschedulable_timeout: std::time::Duration::from_secs(
                self.pod_max_in_unschedulable_pods_seconds,
            ),
            ..crate::queue::QueueConfig::default()
        }
    }

    /// Upstream's validation: a positive initial backoff, a cap not below it; and at most
    /// [`MAX_PARALLELISM`] threads per cycle.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.pod_initial_backoff_seconds == 0 {
            return Err(ConfigError::Invalid {
                field: "scheduler.podInitialBackoffSeconds".into(),
                message: "must be at least 1".into(),
            });
        }
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds {
            return Err(ConfigError::Invalid {
                field: "scheduler.podMaxBackoffSeconds".into(),
                message: format!(
                    "{} is below podInitialBackoffSeconds ({})",
                    self.pod_max_backoff_seconds, self.pod_initial_backoff_seconds
                ),
            });
        }
        // Far beyond any sensible backoff; keeps Duration arithmetic trivially safe.
        const MAX: u64 = 24 * 3600;
        if self.pod_max_backoff_seconds > MAX {
            return Err(ConfigError::Invalid {
                field: "scheduler.podMaxBackoffSeconds".into(),
                message: format!("{} is above {MAX} (a day)", self.pod_max_backoff_seconds),
            });
        }
        if !(1..=MAX).contains(&self.pod_max_in_unschedulable_pods_seconds) {
            return Err(ConfigError::Invalid {
                field: "scheduler.podMaxInUnschedulablePodsSeconds".into(),
                message: format!(
                    "{} is not in 1..={MAX} (a second to a day)",
                    self.pod_max_in_unschedulable_pods_seconds
                ),
            });
        }
        if self.parallelism > MAX_PARALLELISM {
            return Err(ConfigError::Invalid {
                field: "scheduler.parallelism".into(),
                message: format!(
                    "{} is above {MAX_PARALLELISM} (0 means the machine's cores, at most 16)",
                    self.parallelism
                ),
            });
        }
        Ok(())
    }
}

/// The most threads `scheduler.parallelism` may ask for: one cycle's Filter and Score gain
/// nothing from more, and each is a thread of its own.
pub const MAX_PARALLELISM: usize = 256;

/// One profile: a scheduler name and its plugin set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ProfileConfig {
    /// The `spec.schedulerName` this profile serves. Default `headroom`.
    pub scheduler_name: String,
    /// Per-plugin switches and weights, by plugin name, over the defaults. Default: empty
    /// (kube-scheduler's default plugin set and weights).
    pub plugins: BTreeMap<String, PluginSetting>,
    /// Plugin arguments by key (`nodeResourcesFit: {scoringStrategy: ...}`), raw until the
    /// registry decodes and validates them; see [`PluginArgs`]. Default: none.
    pub plugin_args: PluginArgs,
    /// Upstream's `percentageOfNodesToScore`, 0..=100. Default `100`: every node is
    /// filtered and scored, what headroom offers over kube-scheduler's sampling. Below 100,
    /// a cycle stops filtering once it found this share of the nodes feasible (at least
    /// 100 nodes), scanning round robin from where the previous cycle stopped; `0` is
    /// upstream's default, the adaptive share `50 − nodes/125` % (at least 5 %).
    pub percentage_of_nodes_to_score: u32,
    /// Not configurable (never read or written): kube-scheduler's in-tree plugins are off
    /// unless the profile enables them (`plugins: {X: {enabled: true}}`). Set by the
    /// extender's profile (`serve.extender`), where kube-scheduler has already run them.
    #[serde(skip)]
    pub upstream_plugins_off: bool,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            plugins: BTreeMap::new(),
            plugin_args: PluginArgs::default(),
            percentage_of_nodes_to_score: 100,
            upstream_plugins_off: false,
        }
    }
}

/// Switch and weight of one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginSetting {
    /// Enable or disable; default: as in the default profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Score weight (1..=100); default: the plugin's default weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// Plugin arguments by key (`nodeResourcesFit`, `interPodAffinity`, ...: the plugin's name
/// in lower camel case), kept raw: the plugin registry ([`crate::plugins::registry`])
/// decodes them, with defaults for what is not given and unknown fields refused, and
/// validates them when it builds the profile. Default: none (every plugin's defaults).
pub type PluginArgs = BTreeMap<String, serde_json::Value>;

impl ProfileConfig {
    /// What the profile's structure allows (`percentageOfNodesToScore` in 0..=100), as
    /// `(field, message)`; the plugins, weights and args are the registry's to check.
    pub fn validate_structure(&self) -> Result<(), (String, String)> {
        if self.percentage_of_nodes_to_score > 100 {
            return Err((
                format!("profiles[{}].percentageOfNodesToScore", self.scheduler_name),
                format!("{} is not in 0..=100", self.percentage_of_nodes_to_score),
            ));
        }
        Ok(())
    }
}

impl ConfigError {
    /// The same error naming `origin` (the file) too: an [`ConfigError::Invalid`] becomes
    /// a [`ConfigError::Parse`] of `origin`.
    pub fn in_origin(self, origin: &str) -> ConfigError {
        match self {
            ConfigError::Invalid { field, message } => ConfigError::Parse {
                path: origin.to_string(),
                field,
                message,
            },
            other => other,
        }
    }
}

/// The default of [`CoreConfig::assume_ttl`] (`serve.assumeTtl`): 30 s. kube-scheduler's
/// `durationToExpireAssumedPod` is 15 min; a lost watch event then hides capacity that long,
/// so headroom keeps it short.
pub const DEFAULT_ASSUME_TTL: Duration = Duration::from_secs(30);

/// The part of headroom's configuration a [`Scheduler`](crate::scheduler::Scheduler) is built
/// from: the adapters hold the whole tree and hand the core this (`Config::core` in the
/// `headroom` crate), so the core knows nothing of stores, collectors or listeners.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreConfig {
    /// The scheduler profiles (`profiles`).
    pub profiles: Vec<ProfileConfig>,
    /// The extender's plugin switches (`serve.extender.plugins`): a plugin it enables counts
    /// as enabled somewhere (the analytics and the view then compute what it reads).
    pub extender_plugins: BTreeMap<String, PluginSetting>,
    /// The scheduling-loop settings (`scheduler`).
    pub scheduler: SchedulerConfig,
    /// How real usage enters decisions (`usage`).
    pub usage: crate::usage::UsagePolicy,
    /// How a pod's builder is named (`collectors.identity`).
    pub identity: crate::identity::IdentityConfig,
    /// How long an assumed pod waits for the watch to show it bound (`serve.assumeTtl`).
    pub assume_ttl: Duration,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            profiles: vec![ProfileConfig::default()],
            extender_plugins: BTreeMap::new(),
            scheduler: SchedulerConfig::default(),
            usage: crate::usage::UsagePolicy::default(),
            identity: crate::identity::IdentityConfig::default(),
            assume_ttl: DEFAULT_ASSUME_TTL,
        }
    }
}
