//! Runs N scheduling cycles of one benchmark case, for instruction counts under callgrind
//! (`benches/README.md`):
//!
//! ```sh
//! cargo build --release --example cycle
//! valgrind --tool=callgrind --toggle-collect='*cycle::run*' \
//!     target/release/examples/cycle plain 5000 200
//! ```
//!
//! Arguments: case (`plain`, `anti-affinity`, `spread`, `usage`, `usage-none`, `preemption`), nodes, decisions,
//! threads (default 1). It prints the wall time per decision; divide callgrind's total Ir
//! by the decisions.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use headroom::config::Config;
use headroom_scheduler::framework::Framework;
use headroom_scheduler::plugins::build_framework;
use headroom_scheduler::snapshot::{PodInfo, Snapshot};
use headroom_scheduler::synthetic::Case;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// The allocator `headroom serve` runs with (`src/main.rs`): a decision allocates its
/// columns and lists afresh, and glibc's malloc, which consolidates and returns large
/// freed chunks, made up a fifth of a usage decision's time here, none of it in `serve`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[inline(never)]
fn run(fw: &Framework, pod: &PodInfo, snap: &Snapshot, n: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(1);
    let mut placed = 0;
    for _ in 0..n {
        let (d, _) = fw.schedule(black_box(pod), snap, &mut rng, false);
        placed += usize::from(d.node().is_some() || d.nomination.is_some());
    }
    placed
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args
        .get(1)
        .and_then(|c| Case::from_name(c))
        .expect("case: plain | anti-affinity | spread | usage | usage-none | preemption");
    let nodes: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5000);
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100);
    let config = Config::default();
    let threads: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1);
    let fw = build_framework(&config.profiles[0])
        .expect("default profile")
        .with_parallelism(threads);
    let snap = case.snapshot(nodes);
    let pod = PodInfo::new(Arc::new(case.pod()));
    // Warm up outside the measured function.
    let mut rng = SmallRng::seed_from_u64(0);
    let (d, _) = fw.schedule(&pod, &snap, &mut rng, false);
    assert!(
        d.node().is_some() || d.nomination.is_some(),
        "{}",
        d.fit_error_message()
    );
    let start = Instant::now();
    let placed = run(&fw, &pod, &snap, n);
    let per = start.elapsed() / n as u32;
    // Each decision timed on its own: on a shared machine the minimum and the median say
    // more than the mean.
    let mut rng = SmallRng::seed_from_u64(2);
    let mut t: Vec<f64> = (0..n)
        .map(|_| {
            let s = Instant::now();
            black_box(fw.schedule(&pod, &snap, &mut rng, false));
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    println!(
        "{} {nodes} nodes, {threads} thread(s): {n} decisions ({placed} placed, {} feasible), mean {per:?}; min {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        case.name(),
        d.feasible.len(),
        t[0],
        t[n / 2],
        t[(n * 99 / 100).min(n - 1)]
    );
}
