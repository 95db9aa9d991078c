//! The plugin registry (upstream's `registry.go` plus its `pluginConfig` decoding): one
//! table, [`KNOWN_PLUGINS`], with a row per plugin — name, extension points, default weight,
//! enabled by default, upstream or headroom's own, its args type and its factory. Adding a
//! plugin is one row here (plus its `pub mod` and its line in the documented tables, which a
//! test checks against this table).
//!
//! The configuration keeps each plugin's args as a raw value (`pluginArgs: {interPodAffinity:
//! {...}}`, see [`crate::config::PluginArgs`]), so `config` knows nothing of the plugins. The
//! registry decodes them once, when it builds a profile (never per cycle), with
//! `deny_unknown_fields`, and runs the args type's [`PluginArgs::validate`], which every args
//! type must implement; errors name the field
//! (`profiles[headroom].pluginArgs.interPodAffinity.hardPodAffinityWeight`).
//!
//! The `headroom` crate's configuration check (`config::validate_config`, run by the
//! composition root and by `check-config`, `serve`'s start-up, `place` and `simulate`) builds
//! every profile here once; the YAML's structure is checked there.

use serde::de::DeserializeOwned;

use super::*;
use crate::config::{ConfigError, CoreConfig, ProfileConfig};
use crate::field::{self, ErrorList};
use crate::framework::{Framework, PluginWeight, Registered};

/// An extension point a plugin serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Gates a pod before it enters the active queue.
    PreEnqueue,
    /// Computes per-pod state once per cycle; may reject the pod.
    PreFilter,
    /// Judges one node.
    Filter,
    /// Runs when no node fits.
    PostFilter,
    /// Computes per-pod scoring state once per cycle.
    PreScore,
    /// Scores one node.
    Score,
    /// Claims what the chosen node gives the pod.
    Reserve,
    /// Allows, delays or denies the binding.
    Permit,
    /// Work before the binding, outside the cycle (VolumeBinding's PV writes).
    PreBind,
}

impl Point {
    /// The point's name, as upstream spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Point::PreEnqueue => "PreEnqueue",
            Point::PreFilter => "PreFilter",
            Point::Filter => "Filter",
            Point::PostFilter => "PostFilter",
            Point::PreScore => "PreScore",
            Point::Score => "Score",
            Point::Reserve => "Reserve",
            Point::Permit => "Permit",
            Point::PreBind => "PreBind",
        }
    }

    /// The points a registration serves, in framework order.
    pub fn of(r: &Registered) -> Vec<Point> {
        [
            (r.pre_enqueue.is_some(), Point::PreEnqueue),
            (r.pre_filter.is_some(), Point::PreFilter),
            (r.filter.is_some(), Point::Filter),
            (r.post_filter.is_some(), Point::PostFilter),
            (r.pre_score.is_some(), Point::PreScore),
            (r.score.is_some(), Point::Score),
            (r.reserve.is_some(), Point::Reserve),
            (r.permit.is_some(), Point::Permit),
            (r.pre_bind.is_some(), Point::PreBind),
        ]
        .into_iter()
        .filter_map(|(served, p)| served.then_some(p))
        .collect()
    }
}

/// A plugin's args type: decoded from the raw `pluginArgs.<key>` value (serde, with
/// defaults and `deny_unknown_fields`), then validated. `validate` has no default: every
/// args type states its rules (upstream's `ValidateXArgs`).
pub trait PluginArgs: DeserializeOwned + serde::Serialize + Default {
    /// Checks the decoded args; errors carry paths relative to the args (`path` is their
    /// root, e.g. `hardPodAffinityWeight` under it).
    fn validate(&self, path: &field::Path) -> ErrorList;
}

/// Decodes and validates raw args (`None`/`null`: the defaults).
pub fn decode_args<A: PluginArgs>(raw: Option<&serde_json::Value>) -> Result<A, ErrorList> {
    let args: A = match raw {
        None | Some(serde_json::Value::Null) => A::default(),
        Some(v) => serde_path_to_error::deserialize(v).map_err(|e| {
            ErrorList::from(field::Error::from_serde(e.path(), &e.inner().to_string()))
        })?,
    };
    let errors = args.validate(&field::Path::root());
    errors.into_result(args)
}

fn check_args<A: PluginArgs>(raw: Option<&serde_json::Value>) -> ErrorList {
    decode_args::<A>(raw).err().unwrap_or_default()
}

fn effective_args<A: PluginArgs>(raw: Option<&serde_json::Value>) -> Option<serde_json::Value> {
    serde_json::to_value(decode_args::<A>(raw).ok()?).ok()
}

/// A plugin's args: the key under `pluginArgs` and the type they decode to.
#[derive(Debug, Clone, Copy)]
pub struct ArgsSpec {
    /// The key under `pluginArgs` (the plugin's name in lower camel case).
    pub key: &'static str,
    /// Decodes and validates raw args of this type (the errors; empty when valid).
    check: fn(Option<&serde_json::Value>) -> ErrorList,
    /// The decoded args, defaults filled in, as a value (`None` when invalid).
    effective: fn(Option<&serde_json::Value>) -> Option<serde_json::Value>,
}

impl ArgsSpec {
    /// The args type `A`, configured under `pluginArgs.<key>`.
    pub const fn of<A: PluginArgs>(key: &'static str) -> ArgsSpec {
        ArgsSpec {
            key,
            check: check_args::<A>,
            effective: effective_args::<A>,
        }
    }

    /// Decodes and validates `raw`; the errors (empty: valid).
    pub fn check(&self, raw: Option<&serde_json::Value>) -> ErrorList {
        (self.check)(raw)
    }
}

/// What a factory is given: the plugin's raw args and the plugin dependencies.
#[derive(Debug, Clone, Copy)]
pub struct Args<'a> {
    raw: Option<&'a serde_json::Value>,
}

impl Args<'_> {
    /// The plugin's args, decoded and validated (the registry has validated them already;
    /// an error here is reported as one on the args, with its path under them).
    pub fn decode<A: PluginArgs>(&self) -> Result<A, ErrorList> {
        decode_args::<A>(self.raw)
    }
}

/// Builds a plugin's registration from its args and the plugin dependencies. A plugin
/// without args ignores `Args`. Errors are field errors with paths relative to the
/// plugin's args (a constructor returns one [`field::Error`]; `?` makes it a list).
pub type Factory = fn(&Args<'_>, &PluginDeps) -> Result<Registered, ErrorList>;

/// A plugin the registry knows.
#[derive(Debug, Clone, Copy)]
pub struct KnownPlugin {
    /// Plugin name.
    pub name: &'static str,
    /// The extension points it serves (checked against its registration by a test).
    pub points: &'static [Point],
    /// Default weight when it scores (0 for a plugin that does not score).
    pub weight: i64,
    /// Part of the default profile.
    pub default_enabled: bool,
    /// A kube-scheduler in-tree plugin (false: one of headroom's own). In extender mode
    /// kube-scheduler has already run the in-tree ones, so only headroom's own run.
    pub upstream: bool,
    /// Reads the peer schedulers' load windows ([`super::peers`]): when a profile enables
    /// it, the analytics compute them ([`needs_peer_windows`]).
    pub peer_windows: bool,
    /// Its args, if it takes any.
    pub args: Option<ArgsSpec>,
    /// Builds it.
    pub factory: Factory,
}

use Point::*;

/// Every plugin, in the order the framework runs them.
pub const KNOWN_PLUGINS: &[KnownPlugin] = &[
    KnownPlugin {
        name: scheduling_gates::NAME,
        points: &[PreEnqueue],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(scheduling_gates::SchedulingGates::new().register()),
    },
    KnownPlugin {
        name: node_unschedulable::NAME,
        points: &[Filter],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(node_unschedulable::NodeUnschedulable::new().register()),
    },
    KnownPlugin {
        name: node_name::NAME,
        points: &[Filter],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(node_name::NodeName::new().register()),
    },
    KnownPlugin {
        name: taint_toleration::NAME,
        points: &[Filter, PreScore, Score],
        weight: 3,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(taint_toleration::TaintToleration::new().register()),
    },
    KnownPlugin {
        name: node_affinity::NAME,
        points: &[PreFilter, Filter, PreScore, Score],
        weight: 2,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: Some(ArgsSpec::of::<node_affinity::NodeAffinityArgs>(
            "nodeAffinity",
        )),
        factory: |a, _| Ok(node_affinity::NodeAffinity::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: node_ports::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(node_ports::NodePorts::new().register()),
    },
    KnownPlugin {
        name: node_resources_fit::NAME,
        points: &[PreFilter, Filter, Score],
        weight: 1,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: Some(ArgsSpec::of::<node_resources_fit::NodeResourcesFitArgs>(
            "nodeResourcesFit",
        )),
        factory: |a, _| Ok(node_resources_fit::NodeResourcesFit::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: volume_restrictions::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(volume_restrictions::VolumeRestrictions::new().register()),
    },
    KnownPlugin {
        name: node_volume_limits::NAME,
        points: &[PreFilter, Filter, Reserve],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(node_volume_limits::NodeVolumeLimits::new().register()),
    },
    KnownPlugin {
        name: volume_binding::NAME,
        points: &[PreFilter, Filter, Reserve, PreBind],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, deps| {
            Ok(volume_binding::VolumeBinding::new(deps.volume_binder.clone()).register())
        },
    },
    KnownPlugin {
        name: volume_zone::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(volume_zone::VolumeZone::new().register()),
    },
    KnownPlugin {
        name: pod_topology_spread::NAME,
        points: &[PreFilter, Filter, PreScore, Score],
        weight: 2,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: Some(ArgsSpec::of::<pod_topology_spread::PodTopologySpreadArgs>(
            "podTopologySpread",
        )),
        factory: |a, _| Ok(pod_topology_spread::PodTopologySpread::new(a.decode()?).register()),
    },
    KnownPlugin {
        name: inter_pod_affinity::NAME,
        points: &[PreFilter, Filter, PreScore, Score],
        weight: 2,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: Some(ArgsSpec::of::<inter_pod_affinity::InterPodAffinityArgs>(
            "interPodAffinity",
        )),
        factory: |a, _| Ok(inter_pod_affinity::InterPodAffinity::new(a.decode()?).register()),
    },
    KnownPlugin {
        name: default_preemption::NAME,
        points: &[PostFilter],
        weight: 0,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: Some(ArgsSpec::of::<default_preemption::DefaultPreemptionArgs>(
            "defaultPreemption",
        )),
        factory: |a, _| Ok(default_preemption::DefaultPreemption::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: balanced_allocation::NAME,
        points: &[PreScore, Score],
        weight: 1,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: Some(ArgsSpec::of::<balanced_allocation::BalancedAllocationArgs>(
            "nodeResourcesBalancedAllocation",
        )),
        factory: |a, _| Ok(balanced_allocation::BalancedAllocation::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: image_locality::NAME,
        points: &[PreScore, Score],
        weight: 1,
        default_enabled: true,
        upstream: true,
        peer_windows: false,
        args: None,
        factory: |_, _| Ok(image_locality::ImageLocality::new().register()),
    },
    // headroom's own, after the upstream filters so that a node failing an upstream check
    // keeps upstream's reason.
    KnownPlugin {
        name: reservation::NAME,
        points: &[PreFilter, Filter, Reserve],
        weight: 0,
        default_enabled: true,
        upstream: false,
        peer_windows: false,
        args: None,
        factory: |_, deps| Ok(reservation::ReservationPlugin::new(deps).register()),
    },
    KnownPlugin {
        name: node_start_rate::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: false,
        upstream: false,
        peer_windows: false,
        args: Some(ArgsSpec::of::<node_start_rate::NodeStartRateArgs>(
            "nodeStartRate",
        )),
        factory: |a, _| Ok(node_start_rate::NodeStartRate::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: real_memory_fit::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: true,
        upstream: false,
        peer_windows: false,
        args: None,
        factory: |_, deps| Ok(real_memory_fit::RealMemoryFit::new(deps).register()),
    },
    KnownPlugin {
        name: real_disk_fit::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: true,
        upstream: false,
        peer_windows: false,
        args: None,
        factory: |_, deps| Ok(real_disk_fit::RealDiskFit::new(deps).register()),
    },
    KnownPlugin {
        name: real_cpu_fit::NAME,
        points: &[PreFilter, Filter],
        weight: 0,
        default_enabled: false,
        upstream: false,
        peer_windows: false,
        args: None,
        factory: |_, deps| Ok(real_cpu_fit::RealCpuFit::new(deps).register()),
    },
    KnownPlugin {
        name: history::NAME,
        // Permit with `usage.warmWait.enabled` (the default): the warm wait.
        points: &[PreScore, Score, Permit],
        weight: 10,
        default_enabled: true,
        upstream: false,
        peer_windows: false,
        args: Some(ArgsSpec::of::<history::HistoryArgs>("history")),
        factory: |a, deps| Ok(history::History::new(a.decode()?, deps)?.register()),
    },
    KnownPlugin {
        name: real_headroom::NAME,
        points: &[PreScore, Score],
        weight: 7,
        default_enabled: true,
        upstream: false,
        peer_windows: false,
        args: Some(ArgsSpec::of::<real_headroom::RealHeadroomArgs>(
            "realHeadroom",
        )),
        factory: |a, deps| Ok(real_headroom::RealHeadroom::new(a.decode()?, deps)?.register()),
    },
    KnownPlugin {
        name: fragmentation::NAME,
        points: &[PreScore, Score],
        weight: 7,
        default_enabled: false,
        upstream: false,
        peer_windows: false,
        args: None,
        factory: |_, deps| Ok(fragmentation::Fragmentation::new(deps).register()),
    },
    // The peers' plugins (off by default), last: every other filter's reason comes first.
    KnownPlugin {
        name: trimaran_tlp::NAME,
        points: &[PreScore, Score],
        weight: 1,
        default_enabled: false,
        upstream: false,
        peer_windows: true,
        args: Some(ArgsSpec::of::<trimaran_tlp::TargetLoadPackingArgs>(
            "targetLoadPacking",
        )),
        factory: |a, _| Ok(trimaran_tlp::TargetLoadPacking::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: trimaran_lvrb::NAME,
        points: &[PreScore, Score],
        weight: 1,
        default_enabled: false,
        upstream: false,
        peer_windows: true,
        args: Some(
            ArgsSpec::of::<trimaran_lvrb::LoadVariationRiskBalancingArgs>(
                "loadVariationRiskBalancing",
            ),
        ),
        factory: |a, _| Ok(trimaran_lvrb::LoadVariationRiskBalancing::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: load_aware::NAME,
        points: &[PreFilter, Filter, PreScore, Score],
        weight: 1,
        default_enabled: false,
        upstream: false,
        peer_windows: true,
        args: Some(ArgsSpec::of::<load_aware::LoadAwareSchedulingArgs>(
            "loadAwareScheduling",
        )),
        factory: |a, _| Ok(load_aware::LoadAwareScheduling::new(a.decode()?)?.register()),
    },
    KnownPlugin {
        name: crane_dynamic::NAME,
        points: &[PreFilter, Filter, PreScore, Score],
        weight: 3,
        default_enabled: false,
        upstream: false,
        peer_windows: true,
        args: Some(ArgsSpec::of::<crane_dynamic::DynamicArgs>("dynamic")),
        factory: |a, _| Ok(crane_dynamic::Dynamic::new(a.decode()?)?.register()),
    },
];

/// Whether some profile of `config` (or the extender's) enables a plugin for which `pick`
/// holds. The plugins asked about are off by default, so only an explicit `enabled: true`
/// counts.
fn enabled_anywhere(config: &CoreConfig, pick: impl Fn(&KnownPlugin) -> bool) -> bool {
    let on = |plugins: &std::collections::BTreeMap<String, crate::config::PluginSetting>| {
        KNOWN_PLUGINS
            .iter()
            .filter(|k| pick(k))
            .any(|k| plugins.get(k.name).and_then(|s| s.enabled) == Some(true))
    };
    config.profiles.iter().any(|p| on(&p.plugins)) || on(&config.extender_plugins)
}

/// Whether some profile of `config` (or the extender's) enables a plugin that reads the
/// peers' load windows: then the analytics compute them
/// (the analytics' `peerWindows`).
pub fn needs_peer_windows(config: &CoreConfig) -> bool {
    enabled_anywhere(config, |k| k.peer_windows)
}

/// Whether some profile of `config` (or the extender's) enables Fragmentation: then each
/// new usage view counts the running builds' shapes ([`crate::usage::derive`]).
pub fn needs_shapes(config: &CoreConfig) -> bool {
    enabled_anywhere(config, |k| k.name == fragmentation::NAME)
}

/// Looks a plugin up by name.
pub fn known(name: &str) -> Option<&'static KnownPlugin> {
    KNOWN_PLUGINS.iter().find(|p| p.name == name)
}

/// An error at `rest` (relative, `top level` for none) under the profile's `prefix`.
fn at(prefix: &str, e: &field::Error) -> ConfigError {
    let field = if e.path.is_root() {
        prefix.to_string()
    } else {
        format!("{prefix}.{}", e.path)
    };
    ConfigError::Invalid {
        field,
        message: e.kind.to_string(),
    }
}

/// A constructor's check as [`PluginArgs::validate`]'s answer: no errors when it builds,
/// else its error under `path` (the args' place in the configuration).
pub fn constructed<T>(built: Result<T, field::Error>, path: &field::Path) -> ErrorList {
    match built {
        Ok(_) => ErrorList::new(),
        Err(e) => e.under(path).into(),
    }
}

/// `value is not in range` at `path` (the registry's range messages).
pub fn not_in(path: field::Path, value: impl std::fmt::Display, range: &str) -> field::Error {
    field::Error::invalid(path, "", format!("{value} is not in {range}"))
}

/// Builds the framework of one profile with default [`PluginDeps`].
pub fn build_framework(profile: &ProfileConfig) -> Result<Framework, ConfigError> {
    build_framework_with(profile, &PluginDeps::default())
}

/// Builds the framework of one profile: the default plugins, minus those disabled, with the
/// configured weights and args. Every args value given is decoded and validated, also that
/// of a disabled plugin (as upstream validates every `pluginConfig` entry).
pub fn build_framework_with(
    profile: &ProfileConfig,
    deps: &PluginDeps,
) -> Result<Framework, ConfigError> {
    let name = &profile.scheduler_name;
    for plugin in profile.plugins.keys() {
        if known(plugin).is_none() {
            let names: Vec<&str> = KNOWN_PLUGINS.iter().map(|p| p.name).collect();
            return Err(ConfigError::Invalid {
                field: format!("profiles[{name}].plugins.{plugin}"),
                message: format!("unknown plugin; known plugins: {}", names.join(", ")),
            });
        }
    }
    for key in profile.plugin_args.keys() {
        if !KNOWN_PLUGINS
            .iter()
            .any(|p| p.args.is_some_and(|a| a.key == key))
        {
            let keys: Vec<&str> = KNOWN_PLUGINS
                .iter()
                .filter_map(|p| p.args.map(|a| a.key))
                .collect();
            return Err(ConfigError::Invalid {
                field: format!("profiles[{name}].pluginArgs.{key}"),
                message: format!("unknown field; expected one of {}", keys.join(", ")),
            });
        }
    }
    let mut registered = Vec::new();
    let mut weights = Vec::new();
    for p in KNOWN_PLUGINS {
        let raw = p.args.and_then(|a| profile.plugin_args.get(a.key));
        if let Some(spec) = p.args
            && let Some(e) = spec.check(raw).iter().next()
        {
            return Err(at(&format!("profiles[{name}].pluginArgs.{}", spec.key), e));
        }
        let setting = profile.plugins.get(p.name);
        let default_on = p.default_enabled && !(p.upstream && profile.upstream_plugins_off);
        let enabled = setting.and_then(|s| s.enabled).unwrap_or(default_on);
        if !enabled {
            continue;
        }
        let weight = setting.and_then(|s| s.weight).unwrap_or(p.weight.max(1));
        if !(1..=100).contains(&weight) {
            return Err(ConfigError::Invalid {
                field: format!("profiles[{name}].plugins.{}.weight", p.name),
                message: format!("{weight} is not in 1..=100"),
            });
        }
        let reg = (p.factory)(&Args { raw }, deps).map_err(|errors| {
            let prefix = match p.args {
                Some(a) => format!("profiles[{name}].pluginArgs.{}", a.key),
                None => format!("profiles[{name}].plugins.{}", p.name),
            };
            match errors.iter().next() {
                Some(e) => at(&prefix, e),
                None => ConfigError::Invalid {
                    field: prefix,
                    message: "invalid".into(),
                },
            }
        })?;
        registered.push(reg);
        weights.push(PluginWeight {
            name: p.name,
            weight,
        });
    }
    if let Err((field, message)) = profile.validate_structure() {
        return Err(ConfigError::Invalid { field, message });
    }
    Ok(Framework::new(name, registered, &weights)
        .with_percentage_of_nodes_to_score(profile.percentage_of_nodes_to_score)
        .with_parallelism(deps.parallelism)
        .with_second_pass_after(deps.policy.max_wait))
}

/// Fills in every plugin's args in `args` as the registry reads them, defaults included (the
/// effective configuration `headroom check-config` prints).
pub fn fill_effective_args(args: &mut crate::config::PluginArgs) {
    for spec in KNOWN_PLUGINS.iter().filter_map(|p| p.args) {
        if let Some(v) = (spec.effective)(args.get(spec.key)) {
            args.insert(spec.key.to_string(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row's points are what its registration serves, and every args type refuses
    /// an unknown field (its factory decodes what the row declares).
    #[test]
    fn rows_match_their_plugins() {
        let deps = PluginDeps::default();
        let bogus = serde_json::json!({"bogus": 1});
        for p in KNOWN_PLUGINS {
            let reg = (p.factory)(&Args { raw: None }, &deps).unwrap();
            assert_eq!(reg.name, p.name);
            assert_eq!(Point::of(&reg), p.points, "{}", p.name);
            assert_eq!(p.weight > 0, p.points.contains(&Score), "{}", p.name);
            if let Some(a) = p.args {
                assert!(!a.check(Some(&bogus)).is_empty(), "{}", p.name);
                assert!((p.factory)(&Args { raw: Some(&bogus) }, &deps).is_err());
                let lower = p.name[..1].to_lowercase() + &p.name[1..];
                assert_eq!(a.key, lower, "args key of {}", p.name);
            }
        }
        let mut names: Vec<_> = KNOWN_PLUGINS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            KNOWN_PLUGINS.len(),
            "a plugin is registered twice"
        );
    }

    /// The rows of a markdown table whose header starts with `| plugin |`: cells by column.
    fn tables(text: &str) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        let mut inside = false;
        for line in text.lines() {
            let line = line.trim_start_matches("//!").trim();
            if line.starts_with("| plugin |") {
                inside = true;
                continue;
            }
            if !inside || line.starts_with("|---") {
                continue;
            }
            if !line.starts_with('|') {
                inside = false;
                continue;
            }
            rows.push(
                line.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect(),
            );
        }
        rows
    }

    /// The documented plugin tables (this module's docs, docs/configuration.md) say
    /// what the registry holds: every plugin once, its points, weight and default.
    #[test]
    fn documented_tables_match_the_registry() {
        let docs = [
            ("src/plugins/mod.rs", include_str!("mod.rs")),
            (
                "docs/configuration.md",
                include_str!("../../../docs/configuration.md"),
            ),
        ];
        for (file, text) in docs {
            let rows = tables(text);
            for p in KNOWN_PLUGINS {
                let found: Vec<_> = rows.iter().filter(|r| r[0] == p.name).collect();
                assert_eq!(
                    found.len(),
                    1,
                    "{file}: {} is documented {} times",
                    p.name,
                    found.len()
                );
                let row = found[0];
                let points: Vec<&str> = p.points.iter().map(|x| x.as_str()).collect();
                assert_eq!(row[1], points.join(", "), "{file}: points of {}", p.name);
                let weight = if p.weight > 0 {
                    p.weight.to_string()
                } else {
                    String::new()
                };
                assert_eq!(row[2], weight, "{file}: weight of {}", p.name);
                // The upstream tables list the default profile; the own ones say on/off.
                if !p.upstream {
                    assert!(
                        row[3].starts_with(if p.default_enabled { "on" } else { "off" }),
                        "{file}: default of {}",
                        p.name
                    );
                } else {
                    assert!(p.default_enabled, "{file}: {} is off by default", p.name);
                }
            }
            for r in &rows {
                assert!(known(&r[0]).is_some(), "{file}: {} is not registered", r[0]);
            }
        }
    }
}
