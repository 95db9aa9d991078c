//! The pod shapes the cluster runs, for the Fragmentation score
//! ([`crate::plugins::fragmentation`]): the CPU and memory the builds now running
//! request, counted per shape.
//!
//! Derived with every new usage view in the same walk over the running pods as the
//! calibration ([`crate::usage::derive`]), not per cycle: the mix moves slowly, and a cycle must
//! not read every pod. Pods that run until removed (services, databases) are left out:
//! once placed they do not come back for room. Requests, not predicted usage: the score
//! keeps room whole in what the scheduler's request filter reads, where packing costs no
//! real memory (measured against shapes with predicted memory in docs/placement.md, *Keeping room
//! whole*).

use std::collections::HashMap;

/// At most this many shapes are kept, the most common: a cycle reads each per feasible
/// node, and the rare ones add little to the expectation.
pub const MAX_SHAPES: usize = 64;

/// One pod shape: its requests, with how many running builds have it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// CPU requested, millicores.
    pub milli_cpu: i64,
    /// Memory requested, bytes.
    pub memory: i64,
    /// Running builds of this shape.
    pub weight: f64,
}

/// The running builds' shapes, most common first (at most [`MAX_SHAPES`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShapeMix {
    /// The shapes.
    pub shapes: Vec<Shape>,
    /// Their weights' sum.
    pub total: f64,
}

impl ShapeMix {
    /// Whether no build runs (the score has nothing to keep room for).
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }
}

/// Counts shapes while the running pods are walked.
#[derive(Debug, Default)]
pub(crate) struct ShapeCounter {
    counts: HashMap<(i64, i64), f64>,
}

impl ShapeCounter {
    /// A running build.
    pub(crate) fn add(&mut self, milli_cpu: i64, memory: i64) {
        *self.counts.entry((milli_cpu, memory)).or_default() += 1.0;
    }

    /// The mix.
    pub(crate) fn finish(self) -> ShapeMix {
        let mut shapes: Vec<Shape> = self
            .counts
            .into_iter()
            .map(|((milli_cpu, memory), weight)| Shape {
                milli_cpu,
                memory,
                weight,
            })
            .collect();
        // Most common first; ties by shape, so the mix does not depend on hash order.
        shapes.sort_by(|a, b| {
            b.weight
                .total_cmp(&a.weight)
                .then(a.milli_cpu.cmp(&b.milli_cpu))
                .then(a.memory.cmp(&b.memory))
        });
        shapes.truncate(MAX_SHAPES);
        let total = shapes.iter().map(|s| s.weight).sum();
        ShapeMix { shapes, total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    #[test]
    fn shapes_are_counted_most_common_first() {
        let mut c = ShapeCounter::default();
        c.add(1000, GIB);
        c.add(2000, 2 * GIB);
        c.add(2000, 2 * GIB);
        let mix = c.finish();
        assert_eq!(mix.shapes.len(), 2);
        assert_eq!((mix.shapes[0].milli_cpu, mix.shapes[0].weight), (2000, 2.0));
        assert_eq!(mix.shapes[1].memory, GIB);
        assert_eq!(mix.total, 3.0);
    }

    #[test]
    fn only_the_most_common_shapes_are_kept() {
        let mut c = ShapeCounter::default();
        for i in 0..(MAX_SHAPES as i64 + 10) {
            c.add(100 + i, GIB);
        }
        c.add(5000, GIB);
        c.add(5000, GIB);
        let mix = c.finish();
        assert_eq!(mix.shapes.len(), MAX_SHAPES);
        assert_eq!(mix.shapes[0].milli_cpu, 5000);
        assert_eq!(mix.total, MAX_SHAPES as f64 + 1.0);
        assert!(ShapeMix::default().is_empty());
    }
}
