//! ImageLocality: prefers nodes that already have the pod's images, weighted by image size and
//! by how widely the image is spread (an image on every node says little about any one).

use std::sync::Arc;

use crate::framework::{
    CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, Registered, ScorePlugin, Status, WrittenIn,
};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot, image_hash, normalized_image_name};

/// Plugin name.
pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Below this sum, the score is 0.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, above this the score is 100.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The ImageLocality plugin (no args).
#[derive(Debug, Default)]
pub struct ImageLocality;

struct PreScoreState {
    /// The pod's images (normalised) with their hash and the fraction of nodes that have each.
    images: Vec<(String, u128, f64)>,
    containers: i64,
    /// Per node index, the spread-scaled sum of the sizes of the pod's images on it: computed
    /// from the snapshot's image index over only the nodes that have one of the images, so
    /// Score is an array read instead of an image lookup per node. Empty when no node has any
    /// of the pod's images (every score is 0).
    sums: Vec<i64>,
}

impl PreScoreState {
    /// The node's raw score.
    fn score(&self, idx: NodeIdx) -> i64 {
        match self.sums.get(idx as usize) {
            Some(&sum) if sum > 0 => calculate_priority(sum, self.containers),
            // No image of the pod on the node: upstream's sum is 0, which scores 0.
            _ => 0,
        }
    }
}

impl ImageLocality {
    /// Creates the plugin.
    pub fn new() -> Self {
        ImageLocality
    }

    /// Registers its extension points (PreScore, Score).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_score: Some(me.clone()),
            score: Some(me),
            ..Registered::new(NAME)
        }
    }

    fn sum(s: &PreScoreState, node: &NodeInfo) -> i64 {
        let mut sum = 0i64;
        for (_, hash, spread) in &s.images {
            if let Some(size) = node.image_size(*hash) {
                // Saturating: node objects may report sizes up to i64::MAX.
                sum = sum.saturating_add((size as f64 * spread) as i64);
            }
        }
        sum
    }
}

fn calculate_priority(sum: i64, containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * containers;
    let clamped = sum.clamp(MIN_THRESHOLD, max_threshold.max(MIN_THRESHOLD));
    if max_threshold <= MIN_THRESHOLD {
        return 0;
    }
    MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[NodeIdx],
    ) -> Status {
        let total = snapshot.len().max(1) as f64;
        let spec = pod.pod.spec.as_ref();
        let containers = spec
            .map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter())
            })
            .into_iter()
            .flatten();
        let mut images = Vec::new();
        let mut count = 0;
        let mut sums = Vec::new();
        for c in containers {
            count += 1;
            let name = normalized_image_name(c.image.as_deref().unwrap_or(""));
            let nodes = snapshot.image_nodes(&name);
            // Images no node has contribute nothing: leave them out.
            if !nodes.is_empty() {
                let spread = nodes.len() as f64 / total;
                if sums.is_empty() {
                    sums = vec![0i64; snapshot.len()];
                }
                // Same per-image truncation as upstream's per-node sum; integer addition makes
                // the order (image-major here, node-major upstream) irrelevant.
                for &(idx, size) in nodes {
                    // Saturating: node objects may report sizes up to i64::MAX.
                    sums[idx as usize] =
                        sums[idx as usize].saturating_add((size as f64 * spread) as i64);
                }
                let hash = image_hash(&name);
                images.push((name, hash, spread));
            }
        }
        state.write(PreScoreState {
            images,
            containers: count,
            sums,
        });
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn normalizes(&self) -> bool {
        // No NormalizeScore: the raw scores are the normalised ones.
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.written_by::<PreScoreState>(NAME, WrittenIn::PreScore)?;
        Ok(s.score(node.idx))
    }

    fn score_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        state.score_each::<PreScoreState>(NAME, nodes, scores, |s, idx| s.score(idx))
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<PreScoreState>()?;
        Some(format!(
            "{} MiB of the pod's images present (spread-scaled)",
            Self::sum(s, node) / MB
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.2"), "nginx:1.2");
        assert_eq!(
            normalized_image_name("reg:5000/nginx"),
            "reg:5000/nginx:latest"
        );
        assert_eq!(
            normalized_image_name("reg:5000/nginx:1"),
            "reg:5000/nginx:1"
        );
    }

    #[test]
    fn scores() {
        let img = |names: &[&str], size: i64| json!({"names": names, "sizeBytes": size});
        let snap = Snapshot::build(
            [
                node(
                    "a",
                    json!({"status": {"images": [img(&["big:1"], 500 * MB), img(&["small:1"], 10 * MB)]}}),
                ),
                node(
                    "b",
                    json!({"status": {"images": [img(&["big:1"], 500 * MB)]}}),
                ),
                node("c", json!({})),
                node("d", json!({})),
            ],
            [],
        );
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "image": "big:1"}]}}),
        ));
        // spread 2/4 → 250 MiB; (250-23)/(1000-23) × 100 = 23.
        let got = score_all(ImageLocality::new().register(), &snap, &p).unwrap();
        assert_eq!(
            got,
            vec![
                ("a".into(), 23),
                ("b".into(), 23),
                ("c".into(), 0),
                ("d".into(), 0)
            ]
        );
        assert_eq!(calculate_priority(5000 * MB, 2), 100);
        assert_eq!(calculate_priority(0, 1), 0);
    }

    #[test]
    fn huge_image_sizes_saturate() {
        // Two images near i64::MAX on one node overflowed the per-node sum.
        let img = |names: &[&str], size: i64| json!({"names": names, "sizeBytes": size});
        let snap = Snapshot::build(
            [
                node(
                    "a",
                    json!({"status": {"images": [img(&["x:1"], i64::MAX), img(&["y:1"], i64::MAX - 1)]}}),
                ),
                node(
                    "b",
                    json!({"status": {"images": [img(&["x:1"], i64::MAX)]}}),
                ),
            ],
            [],
        );
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "image": "x:1"}, {"name": "d", "image": "y:1"}]}}),
        ));
        let got = score_all(ImageLocality::new().register(), &snap, &p).unwrap();
        assert_eq!(got, vec![("a".into(), 100), ("b".into(), 100)]);
    }
}
