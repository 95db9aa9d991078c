//! headroom's configuration: one YAML file, one serde struct tree with documented defaults.
//! Unknown fields are errors, and every error names the field (`profiles[0].plugins.Foo`).
//!
//! ```yaml
//! profiles:
//!   - schedulerName: headroom          # pods with this spec.schedulerName use this profile
//!     plugins:                         # per-plugin switches and weights over the defaults
//!       ImageLocality: { enabled: false }
//!       TaintToleration: { weight: 3 }
//!     pluginArgs:
//!       nodeResourcesFit:
//!         scoringStrategy: { type: MostAllocated }
//! scheduler:
//!   seed: 42                           # tie-breaking randomness (default: from entropy)
//! dataDir: /var/lib/headroom           # the store's directory (default: ./headroom-data)
//! storage:                             # the store's settings (headroom-storage's StoreConfig)
//!   rawRetention: 48h
//! collectors:                          # usage sources (headroom-collectors); default: none
//!   kubelet:
//!     nodes: [node-a, { name: node-b, address: 10.0.3.8 }]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plugins::balanced_allocation::BalancedAllocationArgs;
use crate::plugins::inter_pod_affinity::InterPodAffinityArgs;
use crate::plugins::node_affinity::NodeAffinityArgs;
use crate::plugins::node_resources_fit::NodeResourcesFitArgs;
use crate::plugins::pod_topology_spread::PodTopologySpreadArgs;

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
    /// The YAML does not fit the schema.
    #[error("{path}: at {field}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The field path (`.` when it is the document itself).
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

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Config {
    /// Scheduler profiles. Default: one profile named `headroom` with the default plugins.
    pub profiles: Vec<ProfileConfig>,
    /// Scheduling-loop settings.
    pub scheduler: SchedulerConfig,
    /// Directory of the embedded store (samples, runs, placements). Default: none, which
    /// means [`DEFAULT_DATA_DIR`] (`./headroom-data`, relative to the working directory)
    /// when a command needs a store. A `--data-dir` flag overrides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Settings of the embedded store (flush interval, retention, limits), as
    /// `headroom-storage` documents them. Default: that crate's defaults (flush every
    /// `10s`, raw samples `48h`, 5-minute rollups `30d`).
    pub storage: headroom_storage::StoreConfig,
    /// Usage sources (`prometheus`, `kubelet`, `scrape`), as `headroom-collectors`
    /// documents them; a source is enabled by having its section. Default: no source.
    pub collectors: headroom_collectors::CollectorsConfig,
    /// How samples become builder profiles and node usage (refresh interval, runs per
    /// profile, node window and quantile); see [`crate::analytics::AnalyticsConfig`].
    pub analytics: crate::analytics::AnalyticsConfig,
    /// How real usage enters decisions: staleness, prediction percentile, class policies;
    /// see [`crate::usage::UsagePolicy`].
    pub usage: crate::usage::UsagePolicy,
    /// `headroom serve`: listener, leader election, extender, events, annotations,
    /// reservations (`src/kube/config.rs`). Default: every field's default.
    pub serve: crate::kube::ServeConfig,
}

/// The store directory used when neither `--data-dir` nor `dataDir` is given.
pub const DEFAULT_DATA_DIR: &str = "./headroom-data";

impl Default for Config {
    fn default() -> Self {
        Config {
            profiles: vec![ProfileConfig::default()],
            scheduler: SchedulerConfig::default(),
            data_dir: None,
            storage: headroom_storage::StoreConfig::default(),
            collectors: headroom_collectors::CollectorsConfig::default(),
            analytics: crate::analytics::AnalyticsConfig::default(),
            usage: crate::usage::UsagePolicy::default(),
            serve: crate::kube::ServeConfig::default(),
        }
    }
}

impl Config {
    /// The store directory: `flag` if given, else `dataDir`, else [`DEFAULT_DATA_DIR`].
    pub fn data_dir(&self, flag: Option<&Path>) -> PathBuf {
        flag.map(Path::to_path_buf)
            .or_else(|| self.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
    }
}

/// Scheduling-loop settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct SchedulerConfig {
    /// Seed of the random tie-breaker among equally scored nodes. Default: none (entropy);
    /// set it to make decisions reproducible.
    pub seed: Option<u64>,
    /// Threads one scheduling cycle spreads Filter and Score over (upstream's
    /// `parallelism`). Decisions do not depend on it. Default `0`: the machine's cores, at
    /// most 16; `1` runs cycles serially.
    pub parallelism: usize,
}

/// One profile: a scheduler name and its plugin set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ProfileConfig {
    /// The `spec.schedulerName` this profile serves. Default `headroom`.
    pub scheduler_name: String,
    /// Per-plugin switches and weights, by plugin name, over the defaults. Default: empty
    /// (kube-scheduler's default plugin set and weights).
    pub plugins: BTreeMap<String, PluginSetting>,
    /// Plugin arguments.
    pub plugin_args: PluginArgs,
    /// Upstream's `percentageOfNodesToScore`, 0..=100. Default `100`: every node is
    /// filtered and scored, what headroom offers over kube-scheduler's sampling. Below 100,
    /// a cycle stops filtering once it found this share of the nodes feasible (at least
    /// 100 nodes), scanning round robin from where the previous cycle stopped; `0` is
    /// upstream's default, the adaptive share `50 − nodes/125` % (at least 5 %).
    pub percentage_of_nodes_to_score: u32,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            plugins: BTreeMap::new(),
            plugin_args: PluginArgs::default(),
            percentage_of_nodes_to_score: 100,
        }
    }
}

/// Switch and weight of one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginSetting {
    /// Enable or disable; default: as in the default profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Score weight (1..=100); default: the plugin's default weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// Arguments of the plugins that take any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct PluginArgs {
    /// NodeResourcesFit.
    pub node_resources_fit: NodeResourcesFitArgs,
    /// NodeResourcesBalancedAllocation.
    pub node_resources_balanced_allocation: BalancedAllocationArgs,
    /// NodeAffinity.
    pub node_affinity: NodeAffinityArgs,
    /// InterPodAffinity.
    pub inter_pod_affinity: InterPodAffinityArgs,
    /// PodTopologySpread.
    pub pod_topology_spread: PodTopologySpreadArgs,
    /// History (scores by history index, default `[30, 20, 10]`).
    pub history: crate::plugins::history::HistoryArgs,
    /// RealHeadroom (strategy `spread` / `binpack` / `target`).
    pub real_headroom: crate::plugins::real_headroom::RealHeadroomArgs,
    /// NodeStartRate (at most `maxStarts` per node per `window`).
    pub node_start_rate: crate::plugins::node_start_rate::NodeStartRateArgs,
}

impl Config {
    /// Parses YAML text; `origin` names the source in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let de = serde_norway::Deserializer::from_str(text);
        let config: Config = match serde_path_to_error::deserialize(de) {
            Ok(c) => c,
            Err(e) => {
                let field = e.path().to_string();
                return Err(ConfigError::Parse {
                    path: origin.to_string(),
                    field,
                    message: e.into_inner().to_string(),
                });
            }
        };
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a YAML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text, &path.display().to_string())
    }

    /// Checks what serde cannot: unique profile names, known plugins, weights, args, and
    /// the collectors' URLs and schedules (reported under `collectors.`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.profiles.is_empty() {
            return Err(ConfigError::Invalid {
                field: "profiles".into(),
                message: "at least one profile is required".into(),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, p) in self.profiles.iter().enumerate() {
            if p.scheduler_name.is_empty() {
                return Err(ConfigError::Invalid {
                    field: format!("profiles[{i}].schedulerName"),
                    message: "must not be empty".into(),
                });
            }
            if !seen.insert(p.scheduler_name.as_str()) {
                return Err(ConfigError::Invalid {
                    field: format!("profiles[{i}].schedulerName"),
                    message: format!("duplicate profile {:?}", p.scheduler_name),
                });
            }
            crate::plugins::build_framework(p)?;
        }
        if let Err(e) = self.collectors.validate() {
            return Err(collectors_error(e));
        }
        if let Err(e) = self.analytics.validate() {
            return Err(ConfigError::Invalid {
                field: "analytics".into(),
                message: e.to_string(),
            });
        }
        if let Err((field, message)) = self.usage.validate() {
            return Err(ConfigError::Invalid { field, message });
        }
        self.serve.validate()?;
        Ok(())
    }

    /// The effective configuration as YAML (defaults filled in).
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// Turns a collectors validation error (`kubelet.schedule.interval must be > 0`) into one
/// whose field path starts at the root (`collectors.kubelet.schedule.interval`).
fn collectors_error(e: headroom_collectors::CollectError) -> ConfigError {
    let text = match e {
        headroom_collectors::CollectError::Config(text) => text,
        other => other.to_string(),
    };
    // The collectors crate starts its messages with the field path, up to a space.
    let (field, message) = match text.split_once(' ') {
        Some((field, rest)) if field.contains('.') || field.ends_with(']') => {
            (format!("collectors.{field}"), rest.to_string())
        }
        _ => ("collectors".to_string(), text),
    };
    ConfigError::Invalid { field, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_round_trip() {
        let c = Config::from_yaml("{}", "t").unwrap();
        assert_eq!(c, Config::default());
        let again = Config::from_yaml(&c.to_yaml(), "t").unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("profiles: [{schedulerName: a, bogus: 1}]", "profiles[0]"),
            (
                "profiles: [{plugins: {NoSuch: {weight: 2}}}]",
                "plugins.NoSuch",
            ),
            (
                "profiles: [{plugins: {TaintToleration: {weight: 0}}}]",
                "TaintToleration.weight",
            ),
            (
                "profiles: [{plugins: {TaintToleration: {weight: two}}}]",
                "profiles[0].plugins.TaintToleration.weight",
            ),
            ("profiles: [{}, {}]", "profiles[1].schedulerName"),
            ("profiles: []", "profiles"),
            ("scheduler: {seed: -1}", "scheduler.seed"),
            (
                "profiles: [{percentageOfNodesToScore: 101}]",
                "profiles[headroom].percentageOfNodesToScore",
            ),
            (
                "profiles: [{pluginArgs: {nodeResourcesFit: {scoringStrategy: {type: Fastest}}}}]",
                "pluginArgs.nodeResourcesFit.scoringStrategy.type",
            ),
        ];
        for (yaml, field) in cases {
            let err = Config::from_yaml(yaml, "t").unwrap_err().to_string();
            assert!(err.contains(field), "{yaml}: {err}");
        }
    }

    #[test]
    fn storage_collectors_and_data_dir_sections() {
        let c = Config::from_yaml(
            "dataDir: /var/lib/headroom\n\
             storage: {rawRetention: 24h, maxSeries: 1000}\n\
             collectors:\n  kubelet:\n    nodes: [n1, {name: n2, address: 10.0.0.2}]\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.data_dir(None), PathBuf::from("/var/lib/headroom"));
        assert_eq!(
            c.data_dir(Some(Path::new("/tmp/x"))),
            PathBuf::from("/tmp/x")
        );
        assert_eq!(c.storage.raw_retention.as_secs(), 24 * 3600);
        assert_eq!(c.storage.max_series, 1000);
        assert_eq!(c.collectors.kubelet.as_ref().unwrap().nodes.len(), 2);
        assert_eq!(Config::from_yaml(&c.to_yaml(), "t").unwrap(), c);

        let d = Config::default();
        assert_eq!(d.data_dir(None), PathBuf::from(DEFAULT_DATA_DIR));
        assert!(d.collectors.kubelet.is_none() && d.collectors.prometheus.is_none());
        assert_eq!(d.storage, headroom_storage::StoreConfig::default());

        let cases = [
            (
                "collectors: {kubelet: {nodes: [n1], bogus: 1}}",
                "collectors.kubelet",
            ),
            ("storage: {flushEvery: 1s}", "storage"),
            (
                "collectors: {kubelet: {schedule: {interval: 0s}}}",
                "collectors.kubelet.schedule.interval",
            ),
            (
                "collectors: {prometheus: {url: 'ftp://x'}}",
                "collectors.prometheus.url",
            ),
        ];
        for (yaml, field) in cases {
            let err = Config::from_yaml(yaml, "t").unwrap_err().to_string();
            assert!(err.contains(field), "{yaml}: {err}");
        }
        let err = Config::from_yaml("collectors: {kubelet: {nodes: [n1], bogus: 1}}", "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
    }
}
