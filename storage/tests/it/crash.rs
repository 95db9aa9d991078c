//! Crash safety: a child process ingests and flushes in a loop, printing the last flushed
//! round; the parent SIGKILLs it at random moments, reopens the store and checks that
//! every round up to the printed watermark is there, intact, with nothing torn.
//!
//! The child is this test binary re-executed with `HEADROOM_CRASH_CHILD=<dir>`, running
//! only the `crash_child` test.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use headroom_storage::*;

const SERIES: usize = 300;
const STEP: i64 = 15_000;
const CHILD_ENV: &str = "HEADROOM_CRASH_CHILD";

fn config() -> StoreConfig {
    // Checkpoint often so partial-chunk writes and log truncation happen mid-ingest.
    StoreConfig {
        wal_checkpoint_flushes: 3,
        ..StoreConfig::default()
    }
}

fn labels(i: usize) -> Labels {
    Labels::new([
        ("namespace", format!("ns{}", i % 7)),
        ("pod", format!("pod-{i}")),
        ("node", format!("node-{}", i % 13)),
    ])
    .unwrap()
}

fn value(series: usize, round: i64) -> f64 {
    ((round * 7919 + series as i64 * 104_729) % 1_000_003) as f64 * 4096.0
}

/// Highest round fully present for series 0 (every series gets the same rounds).
fn rounds_present(store: &Store) -> i64 {
    let id = store.series_id("mem", &labels(0)).unwrap();
    store.latest(id).unwrap().map_or(-1, |s| s.ts_ms / STEP)
}

#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // Only does something when re-executed by `kill_9_mid_ingest`.
    };
    let store = Store::open(&dir, config()).unwrap();
    let ids: Vec<SeriesId> = (0..SERIES)
        .map(|i| store.series_id("mem", &labels(i)).unwrap())
        .collect();
    let mut round = rounds_present(&store) + 1;
    loop {
        for (i, id) in ids.iter().enumerate() {
            store.append_id(*id, round * STEP, value(i, round)).unwrap();
        }
        if round % 3 == 0 {
            store.flush().unwrap();
            println!("FLUSHED {round}");
        }
        if round % 50 == 0 {
            store
                .put_run(
                    "b",
                    &RunRecord {
                        pod_uid: format!("u{round}"),
                        node: "n".into(),
                        start_ms: round,
                        end_ms: round,
                        cpu: UsageSummary::default(),
                        memory: UsageSummary::default(),
                    },
                )
                .unwrap();
        }
        round += 1;
    }
}

fn check(dir: &std::path::Path, watermark: i64) -> i64 {
    let store = Store::open(dir, config()).expect("reopen after kill -9");
    let present = rounds_present(&store);
    assert!(
        present >= watermark,
        "lost flushed data: {present} < {watermark}"
    );
    for i in (0..SERIES).step_by(17) {
        let id = store.series_id("mem", &labels(i)).unwrap();
        let q = store.query_range(id, 0, i64::MAX).unwrap();
        assert_eq!(
            q.len() as i64,
            present + 1,
            "series {i} has a gap or extra samples"
        );
        for (r, s) in q.iter().enumerate() {
            assert_eq!(s.ts_ms, r as i64 * STEP);
            assert_eq!(s.value, value(i, r as i64), "series {i} round {r}");
        }
    }
    store.runs("b").unwrap();
    present
}

#[test]
fn kill_9_mid_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut watermark = -1i64;
    for attempt in 0..6 {
        let mut child = Command::new(&exe)
            .args([
                "crash::crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(r) = line.strip_prefix("FLUSHED ") {
                    let _ = tx.send(r.trim().parse::<i64>().unwrap());
                }
            }
        });
        // Wait for the child to make progress, then kill it after a random extra delay.
        let mut last = watermark;
        let deadline = Instant::now() + Duration::from_secs(60);
        while last < watermark + 3 && Instant::now() < deadline {
            if let Ok(r) = rx.recv_timeout(Duration::from_millis(100)) {
                last = r;
            }
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(20 + (seed >> 33) % 400));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        reader.join().unwrap();
        while let Ok(r) = rx.try_recv() {
            last = r;
        }
        assert!(
            last > watermark,
            "attempt {attempt}: child made no progress"
        );
        watermark = last;
        let present = check(dir.path(), watermark);
        eprintln!("attempt {attempt}: flushed watermark {watermark}, rounds present {present}");
    }
}
