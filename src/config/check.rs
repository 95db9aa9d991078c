//! The whole check of a configuration: its structure ([`Config::validate`]), then what the
//! plugin registry decides (every profile built once, and the extender's), errors naming the
//! file and the field.

use headroom_scheduler::plugins::registry::{build_framework, fill_effective_args};

use super::{Config, ConfigError};

/// Checks what the plugins decide in a configuration: every profile's plugins, weights and
/// args, and those of `serve.extender` (reported under `serve.extender.`), by building each
/// once. [`Config::validate`] (the structure) is separate; [`validate_config_in`] runs both.
pub fn validate_config(config: &Config) -> Result<(), ConfigError> {
    for p in &config.profiles {
        build_framework(p)?;
    }
    let extender = config.serve.extender.profile();
    build_framework(&extender).map_err(|e| match e {
        ConfigError::Invalid { field, message } => ConfigError::Invalid {
            field: field.replace(
                &format!("profiles[{}]", extender.scheduler_name),
                "serve.extender",
            ),
            message,
        },
        other => other,
    })?;
    Ok(())
}

/// `config` with every plugin's args as the registry reads them, defaults filled in (what
/// `headroom check-config` prints as the effective configuration).
pub fn effective(config: &Config) -> Config {
    let mut c = config.clone();
    for p in &mut c.profiles {
        fill_effective_args(&mut p.plugin_args);
    }
    fill_effective_args(&mut c.serve.extender.plugin_args);
    c
}

/// The whole check of a configuration read from `origin` (a file): its structure
/// ([`Config::validate_in`]), then [`validate_config`], errors naming `origin`.
pub fn validate_config_in(config: &Config, origin: &str) -> Result<(), ConfigError> {
    config.validate_in(origin)?;
    validate_config(config).map_err(|e| e.in_origin(origin))
}

/// Reads a configuration file and checks it whole ([`validate_config_in`]).
pub fn load_config(path: &std::path::Path) -> Result<Config, ConfigError> {
    let config = Config::read(path)?;
    validate_config_in(&config, &path.display().to_string())?;
    Ok(config)
}

/// Parses YAML text and checks it whole ([`validate_config_in`]).
pub fn config_from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let config = Config::parse_yaml(text, origin)?;
    validate_config_in(&config, origin)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::config::ProfileConfig;
    use headroom_scheduler::plugins::registry::KNOWN_PLUGINS;

    #[test]
    fn extender_profile_runs_own_plugins_and_in_tree_ones_only_when_enabled() {
        let names = |yaml: &str| -> Vec<&'static str> {
            let c: super::super::serve::ExtenderConfig = serde_norway::from_str(yaml).unwrap();
            let fw = build_framework(&c.profile()).unwrap();
            fw.plugins().iter().map(|r| r.name).collect()
        };
        let own: Vec<&str> = KNOWN_PLUGINS
            .iter()
            .filter(|p| !p.upstream && p.default_enabled)
            .map(|p| p.name)
            .collect();
        // Mentioned without `enabled`: still off (in-tree).
        assert_eq!(names("plugins: {TaintToleration: {weight: 2}}"), own);
        let with_taints = names("plugins: {TaintToleration: {enabled: true}}");
        assert_eq!(with_taints[0], "TaintToleration");
        assert_eq!(with_taints[1..], own[..]);
        // The extender's profile is not a configuration field: a regular profile keeps
        // the in-tree plugins on.
        assert!(!ProfileConfig::default().upstream_plugins_off);
        let c = Config::from_yaml(
            "serve: {extender: {plugins: {TaintToleration: {enabled: true}}}}",
            "t",
        )
        .unwrap();
        assert!(c.to_yaml().find("upstreamPluginsOff").is_none());
    }

    #[test]
    fn config_errors_name_the_field() {
        let cases = [
            (
                "profiles: [{plugins: {TaintToleration: {weight: 0}}}]",
                "t: profiles[headroom].plugins.TaintToleration.weight: 0 is not in 1..=100",
            ),
            (
                "profiles: [{plugins: {NoSuch: {weight: 2}}}]",
                "t: profiles[headroom].plugins.NoSuch: unknown plugin; known plugins: SchedulingGates,",
            ),
            (
                "profiles: [{pluginArgs: {nodeResourcesFit: {scoringStrategy: {type: Fastest}}}}]",
                "t: profiles[headroom].pluginArgs.nodeResourcesFit.scoringStrategy.type: unsupported value \"Fastest\"",
            ),
            (
                "profiles: [{pluginArgs: {defaultPreemption: {minCandidateNodesPercentage: 101}}}]",
                "t: profiles[headroom].pluginArgs.defaultPreemption.minCandidateNodesPercentage: 101 is not in 0..=100",
            ),
            (
                "profiles: [{pluginArgs: {defaultPreemption: {minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}}}]",
                "t: profiles[headroom].pluginArgs.defaultPreemption.minCandidateNodesPercentage: cannot be zero at the same time as minCandidateNodesAbsolute, got 0",
            ),
            (
                "profiles: [{pluginArgs: {defaultPreemption: {minCandidates: 1}}}]",
                "t: profiles[headroom].pluginArgs.defaultPreemption.minCandidates: unknown field",
            ),
            (
                "profiles: [{pluginArgs: {interPodAffinity: {hardPodAffinityWeight: 500}}}]",
                "t: profiles[headroom].pluginArgs.interPodAffinity.hardPodAffinityWeight: 500 is not in 0..=100",
            ),
            (
                "profiles: [{pluginArgs: {interPodAffinity: {hardPodAffinityWeight: 5, bogus: 1}}}]",
                "t: profiles[headroom].pluginArgs.interPodAffinity.bogus: unknown field; expected one of hardPodAffinityWeight, ignorePreferredTermsOfExistingPods",
            ),
            (
                "profiles: [{pluginArgs: {noSuchPlugin: {}}}]",
                "t: profiles[headroom].pluginArgs.noSuchPlugin: unknown field; expected one of nodeAffinity, nodeResourcesFit,",
            ),
            (
                "profiles: [{pluginArgs: {podTopologySpread: {defaultingType: System, defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}}}]",
                "t: profiles[headroom].pluginArgs.podTopologySpread.defaultConstraints: ",
            ),
            (
                "profiles: [{pluginArgs: {podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}}}]",
                "t: profiles[headroom].pluginArgs.podTopologySpread.defaultConstraints[0].maxSkew: 0 is not in 1..",
            ),
            // A disabled plugin's args are still checked, as upstream checks every
            // pluginConfig entry.
            (
                "profiles: [{plugins: {NodeStartRate: {enabled: false}}, pluginArgs: {nodeStartRate: {maxStarts: 0}}}]",
                "t: profiles[headroom].pluginArgs.nodeStartRate.maxStarts: must be at least 1, got 0",
            ),
            // Constructors' errors carry their own paths under the args.
            (
                "profiles: [{pluginArgs: {nodeResourcesFit: {scoringStrategy: {type: LeastAllocated, resources: [{name: cpu, weight: 1}, {name: memory, weight: 0}]}}}}]",
                "t: profiles[headroom].pluginArgs.nodeResourcesFit.scoringStrategy.resources[1].weight: 0 is not in 1..=100",
            ),
            (
                "profiles: [{pluginArgs: {loadAwareScheduling: {aggregated: {usageThresholds: {cpu: 60}, usageAggregationType: p42}}}}]",
                "t: profiles[headroom].pluginArgs.loadAwareScheduling.aggregated.usageAggregationType: unsupported value \"p42\"; expected one of avg, p50, p90, p95, p99",
            ),
            (
                "profiles: [{pluginArgs: {dynamic: {hotValue: [{timeRange: 5m, count: 0}]}}}]",
                "t: profiles[headroom].pluginArgs.dynamic.hotValue[0].count: must be at least 1, got 0",
            ),
            (
                "profiles: [{pluginArgs: {history: {scores: [100, 80, 300]}}}]",
                "t: profiles[headroom].pluginArgs.history.scores[2]: 300 is not in 0..=100",
            ),
            (
                "serve: {extender: {plugins: {NoSuch: {enabled: true}}}}",
                "t: serve.extender.plugins.NoSuch: unknown plugin",
            ),
            (
                "serve: {extender: {pluginArgs: {history: {scores: [300]}}}}",
                "t: serve.extender.pluginArgs.history",
            ),
        ];
        for (yaml, want) in cases {
            // The structure is fine: only the registry refuses these.
            let c = Config::from_yaml(yaml, "t").unwrap();
            let err = validate_config_in(&c, "t").unwrap_err().to_string();
            assert!(err.starts_with(want), "{yaml}:\n got  {err}\n want {want}");
            let err = config_from_yaml(yaml, "t").unwrap_err().to_string();
            assert!(err.starts_with(want), "{yaml}: {err}");
        }
        let ok = "profiles: [{pluginArgs: {interPodAffinity: {hardPodAffinityWeight: 100}, nodeStartRate: ~}}]";
        let c = config_from_yaml(ok, "t").unwrap();
        // The effective configuration fills in every args type's defaults, and reads back
        // to the same frameworks.
        let e = effective(&c);
        let args = &e.profiles[0].plugin_args;
        assert_eq!(args["interPodAffinity"]["hardPodAffinityWeight"], 100);
        assert_eq!(args["podTopologySpread"]["defaultingType"], "List");
        assert_eq!(args["nodeStartRate"]["maxStarts"], 3);
        let again = config_from_yaml(&e.to_yaml(), "again").unwrap();
        assert_eq!(effective(&again), e);
    }
}
