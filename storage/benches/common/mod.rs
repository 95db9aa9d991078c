//! Shared bench helpers: a realistic kubelet/cAdvisor-like data generator.
//!
//! Mix per 20 series: 9 container memory working-set gauges (page-multiple bytes, 70 % of
//! scrapes unchanged, else ± up to 256 pages), 9 container CPU counters (seconds with
//! nanosecond resolution, as cAdvisor exports them, rate 1 m–2 cores ± 10 % per scrape),
//! 1 node available-memory gauge (changes every scrape by a few pages) and 1 node
//! filesystem-available gauge (changes every 10th scrape or so). Timestamps are 15 s apart
//! with ±2 ms jitter on 1 scrape in 4.
#![allow(dead_code, missing_docs)]

use headroom_storage::{Labels, SeriesId, Store};

pub const STEP: i64 = 15_000;
pub const T0: i64 = 1_700_000_000_000;

/// Tiny deterministic PRNG (xorshift*), so benches need no extra crates.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

enum Kind {
    Memory { bytes: u64 },
    Cpu { ns: u64, rate: f64 },
    NodeMem { bytes: u64 },
    NodeFs { bytes: u64 },
}

pub struct Gen {
    rng: Rng,
    kinds: Vec<Kind>,
    pub ids: Vec<SeriesId>,
}

impl Gen {
    /// Creates `n` series in `store` with realistic labels.
    pub fn new(store: &Store, n: usize, seed: u64) -> Gen {
        let mut rng = Rng::new(seed);
        let mut kinds = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let node = format!(
                "ip-10-0-{}-{}.eu-west-1.compute.internal",
                (i / 62) % 256,
                i % 250
            );
            let pod = format!("web-frontend-{:x}-{:05x}", i / 3 % 4096, i / 3);
            let slot = i % 20;
            let (metric, labels, kind) = match slot {
                0..=8 => (
                    "container_memory_working_set_bytes",
                    Labels::new([
                        ("namespace", format!("team-{}", i % 40)),
                        ("pod", pod),
                        ("container", format!("c{}", i % 3)),
                        ("node", node),
                    ]),
                    Kind::Memory {
                        bytes: (12_000 + rng.below(500_000)) * 4096,
                    },
                ),
                9..=17 => (
                    "container_cpu_usage_seconds_total",
                    Labels::new([
                        ("namespace", format!("team-{}", i % 40)),
                        ("pod", pod),
                        ("container", format!("c{}", i % 3)),
                        ("node", node),
                    ]),
                    Kind::Cpu {
                        ns: rng.below(1 << 40),
                        rate: 0.001 + rng.unit() * rng.unit() * 2.0,
                    },
                ),
                18 => (
                    "node_memory_available_bytes",
                    Labels::new([("node", format!("{node}-{i}"))]),
                    Kind::NodeMem {
                        bytes: (1 << 22) + rng.below(1 << 22) * 4096,
                    },
                ),
                _ => (
                    "node_fs_available_bytes",
                    Labels::new([("node", format!("{node}-{i}"))]),
                    Kind::NodeFs {
                        bytes: rng.below(1 << 26) * 4096,
                    },
                ),
            };
            ids.push(store.series_id(metric, &labels.unwrap()).unwrap());
            kinds.push(kind);
        }
        Gen { rng, kinds, ids }
    }

    /// Timestamp of scrape `round`.
    pub fn ts(&mut self, round: i64) -> i64 {
        let jitter = if self.rng.below(4) == 0 {
            self.rng.below(5) as i64 - 2
        } else {
            0
        };
        T0 + round * STEP + jitter
    }

    /// Next value of series `i`.
    pub fn value(&mut self, i: usize) -> f64 {
        let rng = &mut self.rng;
        match &mut self.kinds[i] {
            Kind::Memory { bytes } => {
                if rng.below(10) < 3 {
                    let pages = 1 + rng.below(256);
                    if rng.below(2) == 0 {
                        *bytes += pages * 4096;
                    } else {
                        *bytes = bytes.saturating_sub(pages * 4096).max(4096);
                    }
                }
                *bytes as f64
            }
            Kind::Cpu { ns, rate } => {
                let inc = *rate * 15e9 * (0.9 + 0.2 * rng.unit());
                *ns += inc as u64;
                *ns as f64 / 1e9
            }
            Kind::NodeMem { bytes } => {
                let pages = rng.below(64);
                if rng.below(2) == 0 {
                    *bytes += pages * 4096;
                } else {
                    *bytes = bytes.saturating_sub(pages * 4096);
                }
                *bytes as f64
            }
            Kind::NodeFs { bytes } => {
                if rng.below(10) == 0 {
                    *bytes = bytes.saturating_sub(rng.below(1024) * 4096);
                }
                *bytes as f64
            }
        }
    }

    /// Appends one scrape of every series.
    pub fn scrape(&mut self, store: &Store, round: i64) {
        let ts = self.ts(round);
        for i in 0..self.ids.len() {
            let v = self.value(i);
            store.append_id(self.ids[i], ts, v).unwrap();
        }
    }
}

/// Bytes of all files under `dir`.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                total += dir_bytes(&e.path());
            } else {
                total += md.len();
            }
        }
    }
    total
}

/// Resident set size of this process in bytes (Linux).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}
