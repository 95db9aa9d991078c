//! The maintenance task on tokio's paused clock: no real sleeping.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom_storage::*;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Clone)]
struct Fake {
    start: Instant,
    calls: Arc<Mutex<Vec<(&'static str, u64)>>>,
    fail_maintain: Arc<AtomicU32>,
}

impl Fake {
    fn new(fail_maintain: u32) -> Fake {
        Fake {
            start: Instant::now(),
            calls: Arc::default(),
            fail_maintain: Arc::new(AtomicU32::new(fail_maintain)),
        }
    }
    fn record(&self, what: &'static str) {
        let secs = (Instant::now() - self.start).as_secs();
        self.calls.lock().unwrap().push((what, secs));
    }
    fn times(&self, what: &str) -> Vec<u64> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0 == what)
            .map(|c| c.1)
            .collect()
    }
}

impl MaintenanceTarget for Fake {
    fn flush(&self) -> Result<FlushStats> {
        self.record("flush");
        Ok(FlushStats::default())
    }
    fn maintain(&self, _now_ms: i64) -> Result<MaintenanceStats> {
        self.record("maintain");
        if self.fail_maintain.load(Ordering::SeqCst) > 0 {
            self.fail_maintain.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::InvalidArgument("injected failure".into()));
        }
        Ok(MaintenanceStats::default())
    }
}

fn config() -> MaintenanceConfig {
    MaintenanceConfig {
        flush_interval: Duration::from_secs(10),
        maintenance_interval: Duration::from_secs(60),
        backoff_min: Duration::from_secs(1),
        backoff_max: Duration::from_secs(4),
        clock: Arc::new(|| 0),
    }
}

#[tokio::test(start_paused = true)]
async fn periodic_flush_and_passes() {
    let fake = Fake::new(0);
    let report = run_maintenance(
        fake.clone(),
        config(),
        Arc::new(Notify::new()),
        tokio::time::sleep(Duration::from_secs(125)),
    )
    .await;
    assert_eq!(fake.times("maintain"), vec![60, 120]);
    assert_eq!(
        fake.times("flush"),
        vec![10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 125]
    );
    assert_eq!(report.flushes, 10);
    assert_eq!(report.passes, 2);
    assert_eq!(report.failures, 0);
    assert!(report.final_flush_ok);
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_on_failure() {
    let fake = Fake::new(4);
    let cfg = MaintenanceConfig {
        flush_interval: Duration::from_secs(1000),
        ..config()
    };
    let report = run_maintenance(
        fake.clone(),
        cfg,
        Arc::new(Notify::new()),
        tokio::time::sleep(Duration::from_secs(140)),
    )
    .await;
    // 60 fails, retries after 1, 2, 4, 4 (capped) s; the 5th attempt succeeds; next
    // regular pass 60 s later.
    assert_eq!(fake.times("maintain"), vec![60, 61, 63, 67, 71, 131]);
    assert_eq!(report.failures, 4);
    assert_eq!(report.passes, 2);
}

#[tokio::test(start_paused = true)]
async fn trigger_is_coalesced() {
    let fake = Fake::new(0);
    let trigger = Arc::new(Notify::new());
    for _ in 0..5 {
        trigger.notify_one();
    }
    let t2 = trigger.clone();
    let task = tokio::spawn(run_maintenance(
        fake.clone(),
        config(),
        trigger.clone(),
        tokio::time::sleep(Duration::from_secs(65)),
    ));
    tokio::time::sleep(Duration::from_secs(30)).await;
    for _ in 0..3 {
        t2.notify_one();
    }
    let report = task.await.unwrap();
    // Five notifications before start → one pass at 0; three at 30 s → one pass at 30;
    // then the regular pass 60 s after that would be at 90, after shutdown.
    assert_eq!(fake.times("maintain"), vec![0, 30]);
    assert_eq!(report.triggered, 2);
    assert_eq!(report.passes, 2);
}

#[tokio::test(start_paused = true)]
async fn drives_a_real_store() {
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let labels = Labels::new([("node", "n1")]).unwrap();
    store
        .append("node_memory_available_bytes", &labels, 1_000, 5.0)
        .unwrap();
    let report = run_maintenance(
        store.clone(),
        MaintenanceConfig::from(store.config()),
        Arc::new(Notify::new()),
        tokio::time::sleep(Duration::from_secs(25)),
    )
    .await;
    assert_eq!(report.flushes, 2);
    assert!(report.final_flush_ok);
    assert_eq!(store.stats().pending_wal_bytes, 0);
}
