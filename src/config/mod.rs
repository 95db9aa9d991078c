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
//!     percentageOfNodesToScore: 100    # default: every node (0: upstream's adaptive share)
//! scheduler:
//!   seed: 42                           # tie-breaking randomness (default: from entropy)
//!   parallelism: 0                     # threads per cycle (default: the cores, at most 16)
//! dataDir: /var/lib/headroom           # the store's directory (default: ./headroom-data)
//! storage:                             # the store's settings (headroom-storage's StoreConfig)
//!   rawRetention: 48h
//! collectors:                          # usage sources (headroom-collectors); default: none
//!   kubelet:
//!     nodes: [node-a, { name: node-b, address: 10.0.3.8 }]
//! advice:                              # descheduling advice (/advice); see crate::advice
//!   hotMemoryPercent: 90
//! ```

pub mod check;
pub mod reference;
pub mod serve;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use check::{config_from_yaml, effective, load_config, validate_config, validate_config_in};
pub use headroom_scheduler::config::{
    ConfigError, CoreConfig, DEFAULT_SCHEDULER_NAME, MAX_PARALLELISM, PluginArgs, PluginSetting,
    ProfileConfig, SchedulerConfig,
};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// see [`headroom_scheduler::usage::UsagePolicy`].
    pub usage: headroom_scheduler::usage::UsagePolicy,
    /// Descheduling advice (`/advice`, `headroom advice`, `headroom_advice_*`): when a
    /// node counts as hot and which moves are suggested; see [`crate::advice::AdviceConfig`].
    pub advice: crate::advice::AdviceConfig,
    /// `headroom serve`: listener, leader election, extender, events, annotations,
    /// reservations (`src/config/serve.rs`). Default: every field's default.
    pub serve: serve::ServeConfig,
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
            usage: headroom_scheduler::usage::UsagePolicy::default(),
            advice: crate::advice::AdviceConfig::default(),
            serve: serve::ServeConfig::default(),
        }
    }
}

impl Config {
    /// What the scheduling core is built from ([`CoreConfig`]): the profiles, the
    /// extender's plugin switches, the loop's settings, the usage policy, the builder
    /// identity rule and the assume TTL.
    pub fn core(&self) -> CoreConfig {
        CoreConfig {
            profiles: self.profiles.clone(),
            extender_plugins: self.serve.extender.plugins.clone(),
            scheduler: self.scheduler.clone(),
            usage: self.usage.clone(),
            identity: self.collectors.identity.clone(),
            assume_ttl: self.serve.assume_ttl,
        }
    }

    /// The store directory: `flag` if given, else `dataDir`, else [`DEFAULT_DATA_DIR`].
    pub fn data_dir(&self, flag: Option<&Path>) -> PathBuf {
        flag.map(Path::to_path_buf)
            .or_else(|| self.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
    }
}

impl Config {
    /// Parses and validates YAML text; `origin` names the source in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config = Config::parse_yaml(text, origin)?;
        config.validate_in(origin)?;
        Ok(config)
    }

    /// Parses YAML text without [`Config::validate`]: for callers that apply command-line
    /// flags first (they win over the file) and then call [`Config::validate_in`].
    pub fn parse_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let de = serde_norway::Deserializer::from_str(text);
        let config: Config = match serde_path_to_error::deserialize(de) {
            Ok(c) => c,
            Err(e) => {
                let fe =
                    headroom_scheduler::field::Error::from_serde(e.path(), &e.inner().to_string());
                let mut message = fe.kind.to_string();
                if fe.path.is_root() {
                    // serde says "expected struct Config": say what the document holds.
                    message = message.replace(
                        "struct Config",
                        "a mapping of profiles, scheduler, dataDir, storage, collectors, analytics, usage, serve",
                    );
                }
                if let Some(l) = fe.location {
                    message.push_str(&format!(" ({l})"));
                }
                return Err(ConfigError::Parse {
                    path: origin.to_string(),
                    field: fe.path.to_string(),
                    message,
                });
            }
        };
        Ok(config)
    }

    /// [`Config::validate`], with errors naming `origin` (the file) too.
    pub fn validate_in(&self, origin: &str) -> Result<(), ConfigError> {
        self.validate().map_err(|e| e.in_origin(origin))
    }

    /// Reads, parses and validates a YAML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let config = Config::read(path)?;
        config.validate_in(&path.display().to_string())?;
        Ok(config)
    }

    /// Reads and parses a YAML file without validating it (see [`Config::parse_yaml`]).
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse_yaml(&text, &path.display().to_string())
    }

    /// Checks the structure serde cannot: unique profile names, each profile's
    /// [`ProfileConfig::validate_structure`], the sections' own rules, the collectors' URLs
    /// and schedules (reported under `collectors.`). Plugins, weights and args are the
    /// plugin registry's to check ([`crate::config::validate_config`]): the commands and
    /// the engine run both.
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
            if let Err((field, message)) = p.validate_structure() {
                return Err(ConfigError::Invalid { field, message });
            }
        }
        self.scheduler.validate()?;
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
        if let Err((field, message)) = self.advice.validate() {
            return Err(ConfigError::Invalid { field, message });
        }
        if let Err(e) = self.storage.validate() {
            let (field, message) = match e {
                headroom_storage::Error::InvalidConfig { field, message } => {
                    (format!("storage.{field}"), message)
                }
                other => ("storage".to_string(), other.to_string()),
            };
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

/// The commands that read a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `headroom serve`.
    Serve,
    /// `headroom simulate`.
    Simulate,
    /// `headroom place`.
    Place,
}

impl Mode {
    /// The command's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Serve => "serve",
            Mode::Simulate => "simulate",
            Mode::Place => "place",
        }
    }
}

/// A section the configuration sets (to a non-default value) that a command does not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unused {
    /// The field path (`collectors`, `scheduler.podInitialBackoffSeconds`).
    pub field: &'static str,
    /// The command that ignores it.
    pub mode: Mode,
    /// Why.
    pub why: &'static str,
}

impl std::fmt::Display for Unused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is set but `headroom {}` does not use it: {}",
            self.field,
            self.mode.as_str(),
            self.why
        )
    }
}

impl Config {
    /// The sections set to non-default values that `mode` does not use, with why: every
    /// other section takes effect in every mode (`headroom check-config` prints these, and
    /// `simulate` and `place` warn about them).
    pub fn unused_in(&self, mode: Mode) -> Vec<Unused> {
        let d = Config::default();
        // `collectors.identity` is how every mode names a pod's builder; only the sources
        // and run detection are the collectors' own.
        let c = &self.collectors;
        let sources_set = c.prometheus.is_some()
            || c.kubelet.is_some()
            || c.scrape.is_some()
            || c.runs != d.collectors.runs;
        let backoff_set = self.scheduler.pod_initial_backoff_seconds
            != d.scheduler.pod_initial_backoff_seconds
            || self.scheduler.pod_max_backoff_seconds != d.scheduler.pod_max_backoff_seconds;
        let rows: [(&'static str, bool, Mode, &'static str); 6] = [
            (
                "dataDir",
                self.data_dir.is_some(),
                Mode::Simulate,
                "a simulation keeps its store in --data-dir, else in a temporary store",
            ),
            (
                "dataDir",
                self.data_dir.is_some(),
                Mode::Place,
                "place reads a store only when given --data-dir",
            ),
            (
                "collectors (prometheus, kubelet, scrape, runs)",
                sources_set,
                Mode::Simulate,
                "the simulator generates its nodes' usage and runs itself",
            ),
            (
                "collectors (prometheus, kubelet, scrape, runs)",
                sources_set,
                Mode::Place,
                "place takes usage from --usage and --data-dir",
            ),
            (
                "serve",
                self.serve != d.serve,
                Mode::Simulate,
                "it configures the cluster connection (listener, leader election, extender, events, reservations)",
            ),
            (
                "scheduler.podInitialBackoffSeconds/podMaxBackoffSeconds",
                backoff_set,
                Mode::Place,
                "place makes one attempt per pod, with no queue",
            ),
        ];
        let mut out: Vec<Unused> = rows
            .into_iter()
            .filter(|(_, set, m, _)| *set && *m == mode)
            .map(|(field, _, mode, why)| Unused { field, mode, why })
            .collect();
        if mode == Mode::Place && self.serve != d.serve {
            out.push(Unused {
                field: "serve",
                mode,
                why: "it configures the cluster connection (listener, leader election, extender, events, reservations)",
            });
        }
        out
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
            // Regression (issue #15, 9): `at .` or the parser's message repeated the path.
            (
                "apiVersion: v2\n",
                "t: apiVersion: unknown field; expected one of profiles, scheduler, dataDir, storage, collectors, analytics, usage, advice, serve",
            ),
            (
                "- 1\n",
                "t: top level: invalid type: sequence, expected a mapping of profiles, scheduler",
            ),
            (
                "profiles: [{schedulerName: a, bogus: 1}]",
                "t: profiles[0].bogus: unknown field; expected one of schedulerName, plugins, pluginArgs, percentageOfNodesToScore (line 1, column 31)",
            ),
            (
                "profiles: [{plugins: {TaintToleration: {weight: two}}}]",
                "profiles[0].plugins.TaintToleration.weight",
            ),
            ("profiles: [{}, {}]", "profiles[1].schedulerName"),
            ("profiles: []", "profiles"),
            ("scheduler: {seed: -1}", "scheduler.seed"),
            (
                "usage: {memoryRiskPercent: 0}",
                "t: usage.memoryRiskPercent: 0 is not a percentage in (0, 50]",
            ),
            (
                "usage: {memoryRiskPercent: 60}",
                "t: usage.memoryRiskPercent: 60 is not a percentage in (0, 50]",
            ),
            (
                "usage: {memoryRiskPercent: five}",
                "usage.memoryRiskPercent",
            ),
            (
                "usage: {warmWait: {tailWindow: 0s}}",
                "t: usage.warmWait.tailWindow: must be positive",
            ),
            (
                "usage: {warmWait: {enabled: true, window: 1h}}",
                "usage.warmWait",
            ),
            (
                "profiles: [{percentageOfNodesToScore: 101}]",
                "t: profiles[headroom].percentageOfNodesToScore: 101 is not in 0..=100",
            ),
            (
                "profiles: [{percentageOfNodesToScore: -1}]",
                "t: profiles[0].percentageOfNodesToScore: ",
            ),
            (
                "scheduler: {parallelism: 257}",
                "t: scheduler.parallelism: 257 is above 256",
            ),
            ("scheduler: {parallelism: -1}", "t: scheduler.parallelism: "),
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
