//! kube-scheduler's own metrics, under upstream's names, labels and buckets
//! (`pkg/scheduler/metrics/metrics.go` of Kubernetes v1.36), beside headroom's: the
//! dashboards and alerts written for kube-scheduler (kubernetes-mixin's scheduler rules,
//! Koordinator's and most operators' Grafana boards) read these names.
//!
//! | metric | type, labels | fed by |
//! |---|---|---|
//! | `scheduler_schedule_attempts_total` | counter `{result, profile}` | every cycle: `scheduled` (a node chosen), `unschedulable`, `error` |
//! | `scheduler_scheduling_attempt_duration_seconds` | histogram `{result, profile}`, 1 ms × 2^0..14 | the cycle's wall time (upstream adds the bind; headroom binds outside the cycle, see `headroom_binds_seconds`) |
//! | `scheduler_pending_pods` | gauge `{queue}`: `active`, `backoff`, `unschedulable`, `gated` | the queue's lengths at each scrape |
//! | `scheduler_unschedulable_pods` | gauge `{plugin, profile}` | the unschedulable pods at each scrape, once per plugin that rejected each |
//! | `scheduler_pod_scheduling_sli_duration_seconds` | histogram `{attempts}`, 10 ms × 2^0..19 | a bound pod: time since it first entered the queue, with its attempts |
//! | `scheduler_framework_extension_point_duration_seconds` | histogram `{extension_point, status, profile}`, 0.1 ms × 2^0..11 | PreFilter, PostFilter, PreScore and Score of every cycle (upstream times no Filter point either) |
//! | `scheduler_plugin_execution_duration_seconds` | histogram `{plugin, extension_point, status}`, 10 µs × 1.5^0..19 | one cycle in ten, as upstream's `pluginMetricsSamplePercent`: each plugin at PreFilter, Filter, PostFilter, PreScore and Score; Filter and Score as the plugin's time per node over the cycle (headroom runs a plugin over blocks of nodes, upstream node by node) |
//! | `scheduler_preemption_attempts_total` | counter | a cycle in which preemption (PostFilter) ran |
//! | `scheduler_preemption_victims` | histogram, 1 × 2^0..6 | the victims of a nomination |
//!
//! Not exported: the Reserve, Permit and bind points' durations (`headroom_binds_seconds`
//! times the bind), and NormalizeScore's per plugin (headroom normalises and weights in one
//! step, outside the plugins).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::decision_result;
use headroom_scheduler::framework::Decision;
use headroom_scheduler::queue::QueueLengths;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultProfile {
    result: &'static str,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Queue {
    queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginProfile {
    plugin: String,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExtensionPoint {
    extension_point: &'static str,
    status: &'static str,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginExecution {
    plugin: &'static str,
    extension_point: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Attempts {
    attempts: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn attempt_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn extension_point_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 12))
}

fn plugin_execution_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.00001, 1.5, 20))
}

fn sli_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

/// Upstream's `attempts` label: the count, capped at `15+` (`getAttemptsLabel`).
fn attempts_label(attempts: u32) -> String {
    if attempts >= 15 {
        "15+".to_string()
    } else {
        attempts.to_string()
    }
}

/// kube-scheduler's metrics (see the module docs).
pub struct Upstream {
    schedule_attempts: Family<ResultProfile, Counter>,
    attempt_duration: HistogramFamily<ResultProfile>,
    pending_pods: Family<Queue, Gauge>,
    unschedulable_pods: Family<PluginProfile, Gauge>,
    sli: HistogramFamily<Attempts>,
    extension_points: HistogramFamily<ExtensionPoint>,
    plugin_execution: HistogramFamily<PluginExecution>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
    /// The (profile, plugin) series set so far.
    unschedulable_seen: Mutex<BTreeSet<(String, &'static str)>>,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            schedule_attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(attempt_buckets),
            pending_pods: Family::default(),
            unschedulable_pods: Family::default(),
            sli: Family::new_with_constructor(sli_buckets),
            extension_points: Family::new_with_constructor(extension_point_buckets),
            plugin_execution: Family::new_with_constructor(plugin_execution_buckets),
            preemption_attempts: Counter::default(),
            preemption_victims: Histogram::new(exponential_buckets(1.0, 2.0, 7)),
            unschedulable_seen: Mutex::new(BTreeSet::new()),
        }
    }
}

impl Upstream {
    /// Registers every metric on `r`.
    pub fn register(&self, r: &mut Registry) {
        let u = self;
        // prometheus-client appends `_total` to counters.
        r.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            u.schedule_attempts.clone(),
        );
        r.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            u.attempt_duration.clone(),
        );
        r.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            u.pending_pods.clone(),
        );
        r.register(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            u.unschedulable_pods.clone(),
        );
        r.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            u.sli.clone(),
        );
        r.register(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            u.extension_points.clone(),
        );
        r.register(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            u.plugin_execution.clone(),
        );
        r.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            u.preemption_attempts.clone(),
        );
        r.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            u.preemption_victims.clone(),
        );
    }

    /// One cycle: its result and time, and preemption if it ran.
    pub fn observe_decision(&self, d: &Decision, latency: Duration) {
        let label = ResultProfile {
            result: decision_result(d),
            profile: d.profile.clone(),
        };
        self.schedule_attempts.get_or_create(&label).inc();
        self.attempt_duration
            .get_or_create(&label)
            .observe(latency.as_secs_f64());
        for e in &d.extension_points {
            self.extension_points
                .get_or_create(&ExtensionPoint {
                    extension_point: e.point,
                    status: e.status,
                    profile: d.profile.clone(),
                })
                .observe(e.duration.as_secs_f64());
        }
        for t in &d.plugin_times {
            self.plugin_execution
                .get_or_create(&PluginExecution {
                    plugin: t.plugin,
                    extension_point: t.point,
                    status: t.status,
                })
                .observe(t.duration.as_secs_f64());
        }
        if d.post_filter_ran {
            self.preemption_attempts.inc();
        }
        if let Some(n) = &d.nomination {
            self.preemption_victims.observe(n.victims.len() as f64);
        }
    }

    /// A pod bound after `attempts` attempts, `since_first` after it first entered the
    /// queue.
    pub fn observe_scheduled(&self, attempts: u32, since_first: Duration) {
        self.sli
            .get_or_create(&Attempts {
                attempts: attempts_label(attempts),
            })
            .observe(since_first.as_secs_f64());
    }

    /// The queue's lengths (upstream has no in-flight series).
    pub fn set_pending(&self, l: &QueueLengths) {
        for (queue, n) in [
            ("active", l.active),
            ("backoff", l.backoff),
            ("unschedulable", l.unschedulable),
            ("gated", l.gated),
        ] {
            self.pending_pods
                .get_or_create(&Queue { queue })
                .set(super::to_i64(n));
        }
    }

    /// The unschedulable pods per (profile, rejecting plugin); a series no pod has any
    /// more stays at zero, as upstream's gauge does (it is decremented, never deleted).
    pub fn set_unschedulable(&self, counts: &BTreeMap<(String, &'static str), usize>) {
        let mut seen = self
            .unschedulable_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for key in seen.iter() {
            if !counts.contains_key(key) {
                self.unschedulable_pods
                    .get_or_create(&PluginProfile {
                        plugin: key.1.to_string(),
                        profile: key.0.clone(),
                    })
                    .set(0);
            }
        }
        seen.extend(counts.keys().cloned());
        for ((profile, plugin), n) in counts {
            self.unschedulable_pods
                .get_or_create(&PluginProfile {
                    plugin: plugin.to_string(),
                    profile: profile.clone(),
                })
                .set(super::to_i64(*n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::framework::{Nomination, Outcome};
    use std::sync::Arc;

    #[test]
    fn names_labels_and_buckets_are_upstreams() {
        let mut r = Registry::default();
        let u = Upstream::default();
        u.register(&mut r);
        let mut d = Decision::new("ns", "p", "u".into(), "headroom", 1, Arc::new(Vec::new()));
        d.outcome = Outcome::Unschedulable {
            message: "0/0 nodes are available".into(),
        };
        d.post_filter_ran = true;
        d.time_extension_point(
            "PreFilter",
            headroom_scheduler::framework::Code::Success,
            std::time::Instant::now(),
        );
        d.time_plugin(
            "NodeResourcesFit",
            "Filter",
            headroom_scheduler::framework::Code::Success,
            Duration::from_micros(30),
        );
        d.nomination = Some(Nomination {
            node: Arc::from("n1"),
            victims: Vec::new(),
            pdb_violations: 0,
            cleared: Vec::new(),
        });
        u.observe_decision(&d, Duration::from_millis(3));
        u.observe_scheduled(1, Duration::from_millis(250));
        u.observe_scheduled(20, Duration::from_secs(3));
        u.set_pending(&QueueLengths {
            active: 2,
            backoff: 1,
            unschedulable: 3,
            gated: 0,
            in_flight: 5,
        });
        let mut counts = BTreeMap::new();
        counts.insert(("headroom".to_string(), "NodeResourcesFit"), 3);
        u.set_unschedulable(&counts);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for want in [
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"headroom\"} 1",
            "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.004\",result=\"unschedulable\",profile=\"headroom\"} 1",
            "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"16.384\",result=\"unschedulable\",profile=\"headroom\"} 1",
            "scheduler_pending_pods{queue=\"unschedulable\"} 3",
            "scheduler_pending_pods{queue=\"gated\"} 0",
            "scheduler_unschedulable_pods{plugin=\"NodeResourcesFit\",profile=\"headroom\"} 3",
            "scheduler_pod_scheduling_sli_duration_seconds_bucket{le=\"0.32\",attempts=\"1\"} 1",
            "scheduler_pod_scheduling_sli_duration_seconds_count{attempts=\"15+\"} 1",
            "scheduler_preemption_attempts_total 1",
            "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"PreFilter\",status=\"Success\",profile=\"headroom\"} 1",
            "scheduler_framework_extension_point_duration_seconds_bucket{le=\"0.2048\",extension_point=\"PreFilter\",status=\"Success\",profile=\"headroom\"} 1",
            "scheduler_plugin_execution_duration_seconds_count{plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 1",
            "scheduler_plugin_execution_duration_seconds_bucket{le=\"0.00003375\",plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 1",
            "scheduler_plugin_execution_duration_seconds_bucket{le=\"0.0000225\",plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 0",
            "scheduler_preemption_victims_bucket{le=\"1.0\"} 1",
            "scheduler_preemption_victims_bucket{le=\"64.0\"} 1",
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
        assert!(!text.contains("in_flight"), "{text}");
        // A plugin no pod blames any more stays at zero.
        u.set_unschedulable(&BTreeMap::new());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains(
                "scheduler_unschedulable_pods{plugin=\"NodeResourcesFit\",profile=\"headroom\"} 0"
            ),
            "{text}"
        );
    }
}
