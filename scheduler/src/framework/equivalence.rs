//! The runtime (batches, chunks, threads) against the reference cycle (node by node through
//! the per-node calls), over many random clusters and pods from [`crate::synthetic`].

use std::sync::Arc;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::{Decision, Framework};
use crate::config::CoreConfig;
use crate::plugins::{PluginDeps, build_framework_with};
use crate::snapshot::{PodInfo, Snapshot};
use crate::synthetic;

/// Everything a decision says, details aside (the batch path leaves them out).
fn summary(d: &Decision) -> String {
    // Rejected nodes in index order (the runtime lists them block by block).
    let mut rejected: Vec<&(u32, crate::framework::Status)> = d.rejected.iter().collect();
    rejected.sort_by_key(|(i, _)| *i);
    let rejected: Vec<String> = rejected
        .iter()
        .map(|(i, s)| format!("{i}:{}:{:?}:{:?}", s.plugin, s.code, s.reasons))
        .collect();
    let scores: Vec<String> = d
        .scores
        .iter()
        .map(|c| {
            format!(
                "{}×{} {:?} → {:?}",
                c.plugin,
                c.weight,
                (0..c.normalized.len())
                    .map(|i| c.raw_score(i))
                    .collect::<Vec<_>>(),
                c.normalized
            )
        })
        .collect();
    let pre: Vec<String> = d
        .pre_filter
        .iter()
        .map(|s| format!("{}:{:?}:{:?}", s.plugin, s.code, s.reasons))
        .collect();
    let absent = d
        .absent
        .as_ref()
        .map(|s| format!("{:?} {:?}", s.code, s.reasons));
    format!(
        "outcome {:?}\nfeasible {:?}\nrejected {rejected:?}\nabsent {absent:?}\nprefilter {pre:?}\nskipped {:?}\nscores {scores:#?}\ntotals {:?}",
        d.outcome, d.feasible, d.skipped_scores, d.totals
    )
}

fn frameworks(config: &CoreConfig) -> Vec<(String, Framework)> {
    let deps = PluginDeps::from_config(config);
    let profile = &config.profiles[0];
    let base = build_framework_with(profile, &deps)
        .unwrap()
        .with_filter_block(16);
    vec![
        ("serial".into(), base.clone().with_parallelism(1)),
        (
            "2 threads".into(),
            base.clone().with_parallelism(2).with_min_chunk(4),
        ),
        (
            "3 threads".into(),
            base.clone().with_parallelism(3).with_min_chunk(1),
        ),
    ]
}

fn snapshot(nodes: usize, seed: u64, usage: bool) -> Snapshot {
    let (n, p) = synthetic::random_cluster(nodes, seed);
    let mut snap = Snapshot::build(n, p);
    if usage {
        let now_ms = 1_790_000_000_000;
        let u = snap.usage_mut();
        u.view = Arc::new(synthetic::usage_view(nodes, now_ms, seed));
        u.now_ms = now_ms;
    }
    snap
}

#[test]
fn parallel_and_serial_cycles_match_the_reference() {
    let mut config = CoreConfig::default();
    // Every plugin, the optional ones too.
    for name in ["NodeStartRate", "RealCpuFit"] {
        config.profiles[0].plugins.insert(
            name.to_string(),
            crate::config::PluginSetting {
                enabled: Some(true),
                weight: None,
            },
        );
    }
    let fws = frameworks(&config);
    let mut placed = 0;
    let mut cases = 0;
    let mut orders: Vec<(String, Vec<u32>)> = Vec::new();
    for seed in 0..40u64 {
        let nodes = [1, 3, 17, 60, 150, 333][seed as usize % 6];
        let snap = snapshot(nodes, seed, seed % 3 != 0);
        for p in 0..12u64 {
            let pod = PodInfo::new(Arc::new(synthetic::random_pod(nodes, seed * 100 + p)));
            let want = {
                let mut rng = SmallRng::seed_from_u64(seed + p);
                summary(&fws[0].1.schedule_reference(&pod, &snap, &mut rng))
            };
            for (name, fw) in &fws {
                for explain in [false, true] {
                    let mut rng = SmallRng::seed_from_u64(seed + p);
                    let (d, _) = fw.schedule(&pod, &snap, &mut rng, explain);
                    let got = summary(&d);
                    if !explain {
                        // Serial and parallel runs list rejections in the same order.
                        let order: Vec<u32> = d.rejected.iter().map(|(i, _)| *i).collect();
                        orders.push((name.clone(), order));
                    }
                    assert!(
                        got == want,
                        "{name}, explain {explain}, cluster {nodes}/{seed}, pod {}:\n--- reference\n{want}\n--- runtime\n{got}",
                        pod.name
                    );
                    if explain {
                        // The explanation gets the numbers behind every rejection.
                        assert!(
                            d.rejected
                                .iter()
                                .all(|(_, s)| s.plugin != "TaintToleration" || s.detail.is_some())
                        );
                    }
                }
            }
            assert!(
                orders.windows(2).all(|w| w[0].1 == w[1].1),
                "rejection order differs between {} and {}",
                orders[0].0,
                orders[orders.len() - 1].0
            );
            orders.clear();
            cases += 1;
            placed += usize::from(want.starts_with("outcome Placed"));
        }
    }
    // The random pods must exercise both outcomes.
    assert!(
        placed > cases / 3 && placed < cases,
        "{placed} of {cases} placed"
    );
}

#[test]
fn sampling_matches_between_serial_and_parallel_and_goes_round_robin() {
    for percentage in [0u32, 10, 30] {
        let mut config = CoreConfig::default();
        config.profiles[0].percentage_of_nodes_to_score = percentage;
        let fws = frameworks(&config);
        let nodes = 1_000;
        let snap = snapshot(nodes, 5, true);
        let want = fws[0].1.num_feasible_nodes_to_find(nodes);
        assert_eq!(
            want,
            match percentage {
                0 => 420, // 50 − 1000/125 = 42 %
                10 => 100,
                _ => 300,
            }
        );
        let mut start = 0usize;
        for p in 0..6u64 {
            let pod = PodInfo::new(Arc::new(synthetic::plain_pod(&format!("p{p}"))));
            let mut seen = None;
            for (name, fw) in &fws {
                let mut rng = SmallRng::seed_from_u64(p);
                let (d, _) = fw.schedule(&pod, &snap, &mut rng, false);
                assert_eq!(d.feasible.len(), want, "{name}");
                // Serial and parallel runs agree on the order too.
                let got = format!("{}\n{:?}", summary(&d), d.rejected);
                if let Some(s) = &seen {
                    assert_eq!(&got, s, "{name}, {percentage} %");
                }
                seen = Some(got);
                if name == "serial" {
                    // Each cycle starts where the previous one stopped.
                    let first = [d.feasible.first(), d.rejected.first().map(|(i, _)| i)];
                    assert!(first.contains(&Some(&(start as u32))), "{start} {first:?}");
                    start = (start + d.feasible.len() + d.rejected.len()) % nodes;
                }
            }
        }
    }
}
