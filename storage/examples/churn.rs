//! The store under a scheduler's churn, in simulated time: how its size on disk moves
//! while what it holds stays flat (issue #75; `scripts/kit-soak.py` on the kit is the real
//! thing, this reproduces its store without a cluster).
//!
//! ```sh
//! cargo run --release -p headroom-storage --example churn -- [MINUTES] [SPEED] [DIR]
//! ```
//!
//! The kit soak's load and retention: 1,000 nodes with three series each, pods arriving at
//! 6 a second and running 1–10 minutes with two series each (so series come and go), a
//! sample per series every 5 s, a decision record (2.6 kB) per pod, a run record and a
//! placement per ended pod, a flush every 10 s and a retention pass every 5 minutes, with
//! 5 minutes of raw samples, 10 of rollups, 10 of decisions and 10 of builders, and the
//! default compaction (at twice the live data, from 64 MiB). MINUTES of that (default
//! 60) run SPEED times faster than real time (default 10: sled's own thread, which cleans
//! its segments, keeps its real pace). Every 10 simulated minutes it prints the
//! directory's size, the process's resident memory, the series and the live pods.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use headroom_storage::{DecisionKey, Labels, RunRecord, Store, StoreConfig, UsageSummary};

/// The process's resident memory in MB (Linux; 0 elsewhere).
fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// xorshift: the same run every time, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A pod of the simulation: its number, start and end (ms).
#[derive(Clone, Copy)]
struct Pod(u64, i64, i64);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let minutes: i64 = args.next().map_or(Ok(60), |a| a.parse())?;
    let speed: u64 = args.next().map_or(Ok(10), |a| a.parse())?;
    let dir = args.next().unwrap_or_else(|| "/tmp/headroom-churn".into());
    let dir = Path::new(&dir);
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    let config = StoreConfig {
        raw_retention: Duration::from_secs(300),
        rollup_retention: Duration::from_secs(600),
        decision_log_max_age: Duration::from_secs(600),
        builder_max_age: Duration::from_secs(600),
        ..StoreConfig::default()
    };
    let store = Store::open(dir, config)?;
    let mut rng = Rng(7);
    let t0: i64 = 1_800_000_000_000;
    let (mut pods, mut next_pod) = (Vec::<Pod>::new(), 0u64);
    let mut ids = HashMap::new();
    let (wall, mut last_pass) = (Instant::now(), t0);
    for step in 0..minutes * 12 {
        let now = t0 + step * 5000;
        for _ in 0..30 {
            let run_ms = 60_000 + (rng.next() % 540_000) as i64;
            pods.push(Pod(next_pod, now, now + run_ms));
            let body: Vec<u8> = (0..2600).map(|_| b'a' + (rng.next() % 16) as u8).collect();
            let key = DecisionKey {
                namespace: "default".into(),
                name: format!("p{next_pod}"),
                uid: format!("u{next_pod}"),
                ts_ms: now,
            };
            store.put_decision(&key, &body)?;
            next_pod += 1;
        }
        let mut samples = Vec::new();
        for node in 0..1000 {
            for metric in ["node_memory", "node_cpu", "node_available"] {
                let id = match ids.get(&(metric, node)) {
                    Some(id) => *id,
                    None => {
                        let labels = Labels::new([("node", format!("n{node}"))])?;
                        *ids.entry((metric, node))
                            .or_insert(store.series_id(metric, &labels)?)
                    }
                };
                samples.push((id, now, (rng.next() % 1000) as f64));
            }
        }
        let (ended, live): (Vec<Pod>, Vec<Pod>) = pods.iter().partition(|p| p.2 <= now);
        pods = live;
        for p in &ended {
            let builder = format!("default/Pod/p{}", p.0);
            let run = RunRecord {
                pod_uid: format!("u{}", p.0),
                node: format!("n{}", p.0 % 1000),
                start_ms: p.1,
                end_ms: p.2,
                cpu: UsageSummary::default(),
                memory: UsageSummary::default(),
            };
            store.put_run(&builder, &run)?;
            store.record_placement(&builder, &run.node, p.2)?;
            ids.remove(&("container_cpu", p.0 + 1000));
            ids.remove(&("container_memory", p.0 + 1000));
        }
        for p in &pods {
            for metric in ["container_cpu", "container_memory"] {
                let id = match ids.get(&(metric, p.0 + 1000)) {
                    Some(id) => *id,
                    None => {
                        let labels = Labels::new([
                            ("pod", format!("p{}", p.0)),
                            ("node", format!("n{}", p.0 % 1000)),
                        ])?;
                        *ids.entry((metric, p.0 + 1000))
                            .or_insert(store.series_id(metric, &labels)?)
                    }
                };
                samples.push((id, now, (rng.next() % 100_000) as f64));
            }
        }
        store.append_many(&samples)?;
        if step % 2 == 1 {
            store.flush()?;
        }
        if now - last_pass >= 300_000 {
            let stats = store.maintain(now)?;
            if let Some(c) = stats.compaction {
                println!(
                    "  compacted: {:.1} -> {:.1} MB ({:.1} MB live) in {:?}",
                    c.before_bytes as f64 / 1e6,
                    c.after_bytes as f64 / 1e6,
                    c.live_bytes as f64 / 1e6,
                    c.duration
                );
            }
            last_pass = now;
        }
        if step % 120 == 0 {
            println!(
                "minute {:>4}: {:>7.1} MB on disk, {:>6.1} MB resident, {} series, {} pods running",
                step / 12,
                dir_size(dir) as f64 / 1e6,
                rss_mb(),
                store.stats().series,
                pods.len()
            );
        }
        let due = Duration::from_millis((step as u64 + 1) * 5000 / speed.max(1));
        if let Some(wait) = due.checked_sub(wall.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    Ok(())
}
