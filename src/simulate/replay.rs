//! The pods a scenario plans, for a replay on real nodes (`simulate --replay-plan`,
//! `scripts/kit-replay.py`): the same arrivals, builders, requests and usage the simulator
//! draws for a seed, so a replay and `simulate` run the same farm.
//!
//! What a pod will use is in the plan but never in the pod object the replay creates: the
//! driver hands each build its profile out of band (`headroom-workload`), and the scheduler
//! under test learns usage as in production.

use serde::Serialize;

use super::{
    BACKOFF_LIMIT, Error, MAX_RETRY_DELAY_MS, RETRY_DELAY_MS, Scenario, plan, run_time_ms,
};
use crate::simulate::scenario::Kind;

/// Everything a replay needs from a scenario and a seed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayPlan {
    /// The seed the arrivals were drawn with.
    pub seed: u64,
    /// The scenario's length, ms.
    pub duration_ms: i64,
    /// A failed build's Job makes a new pod after this delay, doubling per failure, ms.
    pub retry_delay_ms: i64,
    /// The retry delay's ceiling, ms.
    pub max_retry_delay_ms: i64,
    /// Failed pods after which a build's Job gives up.
    pub backoff_limit: u32,
    /// The nodes the simulator models: name, allocatable CPU (cores) and memory (bytes), and
    /// the memory its daemons use (`systemMemory`).
    pub nodes: Vec<ReplayNode>,
    /// The planned pods, by arrival.
    pub pods: Vec<ReplayPod>,
}

/// One node of the scenario.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayNode {
    /// Its name.
    pub name: String,
    /// CPU, cores.
    pub cpu: f64,
    /// Memory, bytes.
    pub memory: f64,
    /// Memory its daemons use, bytes.
    pub system_memory: f64,
}

/// One planned pod (a build: the scenario's builders only; services and databases are not
/// replayed).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayPod {
    /// Pod name, as `simulate` names it (`<workload>-<n>`).
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Arrival after the start, ms.
    pub at_ms: i64,
    /// The workload.
    pub workload: String,
    /// The builder (`<workload>-b<k>`), also the pod's builder label's value.
    pub builder: String,
    /// The pod's labels (the workload's, `app`, and the builder label).
    pub labels: std::collections::BTreeMap<String, String>,
    /// CPU request, cores.
    pub request_cpu: f64,
    /// Memory request, bytes.
    pub request_memory: f64,
    /// CPU it burns, cores.
    pub cpu_cores: f64,
    /// Memory it holds once ramped up, bytes.
    pub memory_bytes: f64,
    /// How long its memory takes to ramp up from a tenth of it, ms (the workload's
    /// `memoryRamp`).
    pub ramp_ms: i64,
    /// Run time cold, ms.
    pub cold_ms: i64,
    /// Run time on a node its builder used before, ms.
    pub warm_ms: i64,
}

/// The replay plan of `s` for `seed` (default: the scenario's).
pub fn replay_plan(s: &Scenario, seed: Option<u64>) -> Result<ReplayPlan, Error> {
    let seed = seed.unwrap_or(s.seed);
    let p = plan(s, seed)?;
    let nodes = p
        .nodes
        .iter()
        .map(|n| ReplayNode {
            name: n.name.clone(),
            cpu: n.cpu,
            memory: n.mem,
            system_memory: n.sys_mem,
        })
        .collect();
    let mut pods = Vec::new();
    for a in &p.arrivals {
        let w = &s.workloads[a.workload];
        let (Kind::Builder, Some(builder), Some(base)) = (w.kind, a.builder_name(s), a.base_ms)
        else {
            continue;
        };
        let n = &p.workloads[a.workload];
        pods.push(ReplayPod {
            name: a.pod_name(s),
            namespace: w.namespace.clone(),
            at_ms: a.at_ms,
            workload: w.name.clone(),
            builder,
            labels: a.labels(s),
            request_cpu: n.req_cpu,
            request_memory: n.req_mem,
            cpu_cores: n.req_cpu * a.cpu_factor,
            memory_bytes: n.req_mem * a.mem_factor,
            ramp_ms: w.memory_ramp.as_millis() as i64,
            cold_ms: base,
            warm_ms: run_time_ms(base, w.warm_speedup, true) as i64,
        });
    }
    Ok(ReplayPlan {
        seed,
        duration_ms: s.duration.as_millis() as i64,
        retry_delay_ms: RETRY_DELAY_MS,
        max_retry_delay_ms: MAX_RETRY_DELAY_MS,
        backoff_limit: BACKOFF_LIMIT,
        nodes,
        pods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::BUILDER_LABEL;

    #[test]
    fn the_plan_is_the_simulators_arrivals() {
        let s = Scenario::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/ci-farm-small.yaml"
        )))
        .unwrap();
        let a = replay_plan(&s, None).unwrap();
        let b = replay_plan(&s, None).unwrap();
        assert_eq!(a.seed, s.seed);
        assert_eq!(a.nodes.len(), 8);
        assert!(a.pods.len() > 100, "{}", a.pods.len());
        // The same seed draws the same pods; another draws others.
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let c = replay_plan(&s, Some(s.seed + 1)).unwrap();
        assert_ne!(a.pods[0].at_ms, c.pods[0].at_ms);
        for p in &a.pods {
            assert!(p.at_ms >= 0 && p.at_ms < a.duration_ms);
            assert!(p.warm_ms < p.cold_ms, "{p:?}");
            assert!(p.memory_bytes > 0.0 && p.labels[BUILDER_LABEL] == p.builder);
        }
        assert!(a.pods.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    }
}
