//! Reservation: capacity held on a node for a named pod (seed 002, exactly).
//!
//! - PreFilter reads the reservations once for the cycle; Skip when none holds capacity.
//! - Filter: `free = allocatable − requested`; every unexpired reservation on the node that
//!   is *not* for this pod is subtracted; the node is rejected when free CPU or free memory
//!   is less than the pod's request, with the seed's detailed reason
//!   (`free resource not enough after reservation: freeCPU 3900 - reservedCPU 2000 < needed
//!   3000`). The reserving pod may use its own reservation (it is not subtracted).
//! - Reserve: when the reserving pod is placed (on any node) its reservation is consumed;
//!   Unreserve gives it back if a later step fails.
//!
//! Expired reservations are ignored here and purged by [`run_purge`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::framework::{
    CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, Registered, ReservePlugin,
    Status, WrittenIn,
};
use crate::reservation::{Reservation, ReservationSource};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

use super::PluginDeps;

/// Plugin name.
pub const NAME: &str = "Reservation";
/// The reason counted in FailedScheduling messages (the numbers are in the detail).
pub const REASON: &str = "node(s) didn't have enough free resources after reservations";

/// The Reservation plugin.
pub struct ReservationPlugin {
    source: Arc<dyn ReservationSource>,
}

impl std::fmt::Debug for ReservationPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservationPlugin").finish_non_exhaustive()
    }
}

/// What PreFilter found for the cycle.
struct Held {
    /// Reservations holding capacity now.
    active: Vec<Reservation>,
}

/// Which reservation Reserve consumed, for Unreserve.
struct Consumed(String);

impl ReservationPlugin {
    /// Creates the plugin over the dependencies' reservation source.
    pub fn new(deps: &PluginDeps) -> Self {
        ReservationPlugin {
            source: deps.reservations.clone(),
        }
    }

    /// Registers its extension points (PreFilter, Filter, Reserve).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me.clone()),
            reserve: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for ReservationPlugin {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreFilterPlugin for ReservationPlugin {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let now = snapshot.usage().now_ms;
        let active: Vec<Reservation> = self
            .source
            .current()
            .iter()
            .filter(|r| r.holds_at(now))
            .cloned()
            .collect();
        if active.is_empty() {
            return (Status::skip(), None);
        }
        state.write(Held { active });
        (Status::success(), None)
    }
}

impl FilterPlugin for ReservationPlugin {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let held = match state.written_by::<Held>(NAME, WrittenIn::PreFilter) {
            Ok(h) => h,
            Err(e) => return e,
        };
        let (mut cpu, mut mem, mut n) = (0i64, 0i64, 0usize);
        for r in held
            .active
            .iter()
            .filter(|r| *r.node == *node.name && !r.is_for(pod))
        {
            cpu += r.cpu_milli;
            mem += r.memory_bytes;
            n += 1;
        }
        if n == 0 {
            return Status::success();
        }
        let free_cpu = node.allocatable.milli_cpu - node.requested.milli_cpu;
        let free_mem = node.allocatable.memory - node.requested.memory;
        let need = &pod.requests.requests;
        let mut parts = Vec::new();
        if free_cpu - cpu < need.milli_cpu {
            parts.push(format!(
                "freeCPU {free_cpu} - reservedCPU {cpu} < needed {}",
                need.milli_cpu
            ));
        }
        if free_mem - mem < need.memory {
            parts.push(format!(
                "freeMemory {free_mem} - reservedMemory {mem} < needed {}",
                need.memory
            ));
        }
        if parts.is_empty() {
            return Status::success();
        }
        // The seed's reason carries the numbers; it is worth building even off the explain
        // path, since rejections by reservation are rare and this is what operators grep for.
        Status::unschedulable(REASON).with_detail(format!(
            "free resource not enough after reservation: {} ({n} reservation(s) for other pods on {})",
            parts.join(", "),
            node.name
        ))
    }
}

impl ReservePlugin for ReservationPlugin {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(held) = state.read::<Held>() else {
            return Status::success();
        };
        // Prefer the reservation on the chosen node; else any for this pod (it is placed,
        // so a hold elsewhere is no longer needed either).
        let mine = held
            .active
            .iter()
            .filter(|r| r.is_for(pod))
            .max_by_key(|r| *r.node == *node);
        if let Some(r) = mine {
            let id = r.id.clone();
            self.source.consume(&id, &pod.key(), node);
            state.write(Consumed(id));
        }
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        if let Some(Consumed(id)) = state.read::<Consumed>() {
            self.source.release(id);
        }
    }
}

/// Purges expired reservations every `every` until `shutdown`, with the time from `now_ms`
/// (wall clock under `serve`, simulated time in the simulator). Returns how many changed.
pub async fn run_purge(
    source: Arc<dyn ReservationSource>,
    every: Duration,
    now_ms: impl Fn() -> i64,
    shutdown: impl Future<Output = ()>,
) -> usize {
    tokio::pin!(shutdown);
    let mut total = 0;
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => return total,
            _ = tick.tick() => {
                let n = source.purge_expired(now_ms());
                if n > 0 {
                    tracing::info!(purged = n, "expired or consumed reservations purged");
                }
                total += n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use crate::reservation::{InMemoryReservations, Phase, ReservedFor};
    use serde_json::json;

    fn reservation(id: &str, pod: &str, node: &str, cpu: i64, expire: i64) -> Reservation {
        Reservation {
            id: id.into(),
            namespace: "default".into(),
            pod: ReservedFor::Name(pod.into()),
            node: node.into(),
            cpu_milli: cpu,
            memory_bytes: 0,
            disk_bytes: 0,
            expire_at_ms: expire,
            phase: Phase::Active,
        }
    }

    fn cpu_pod(name: &str, cpu: &str) -> PodInfo {
        info(pod(
            name,
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}),
        ))
    }

    #[test]
    fn filter_table() {
        let source = Arc::new(InMemoryReservations::new(vec![
            reservation("r1", "db-0", "a", 2000, NOW_MS + 60_000),
            reservation("old", "db-1", "b", 4000, NOW_MS - 1),
        ]));
        let deps = PluginDeps::default().with_reservations(source.clone());
        let reg = ReservationPlugin::new(&deps).register();
        let mut snap = Snapshot::build([node("a", json!({})), node("b", json!({}))], []);
        snap.usage_mut().now_ms = NOW_MS;

        // A 3-core pod: 4 − 2 reserved < 3 on a; b's reservation expired.
        let got = filter_all(&reg, &snap, &cpu_pod("web", "3"));
        assert_eq!(got[0].1.code, Code::Unschedulable);
        assert_eq!(
            got[0].1.detail.as_deref(),
            Some(
                "free resource not enough after reservation: freeCPU 4000 - reservedCPU 2000 < needed 3000 (1 reservation(s) for other pods on a)"
            )
        );
        assert_eq!(got[1].1.code, Code::Success);
        // The reserving pod may use its own.
        let got = filter_all(&reg, &snap, &cpu_pod("db-0", "3"));
        assert_eq!(got[0].1.code, Code::Success);
        // 2 cores still fit beside the hold.
        assert_eq!(
            filter_all(&reg, &snap, &cpu_pod("web", "2"))[0].1.code,
            Code::Success
        );

        // Nothing active: PreFilter skips.
        snap.usage_mut().now_ms = NOW_MS + 120_000;
        assert_eq!(
            filter_all(&reg, &snap, &cpu_pod("web", "3"))[0].1.code,
            Code::Skip
        );
    }

    #[test]
    fn reserve_consumes_and_unreserve_releases() {
        let source = Arc::new(InMemoryReservations::new(vec![reservation(
            "r1",
            "db-0",
            "a",
            2000,
            i64::MAX,
        )]));
        let deps = PluginDeps::default().with_reservations(source.clone());
        let plugin = ReservationPlugin::new(&deps);
        let snap = Snapshot::build([node("a", json!({})), node("b", json!({}))], []);
        let mut state = CycleState::new(false);
        let p = cpu_pod("db-0", "1");
        let _ = plugin.pre_filter(&mut state, &p, &snap);
        // Placed on another node: still consumed.
        assert!(plugin.reserve(&mut state, &p, "b").is_success());
        assert_eq!(source.current()[0].phase, Phase::Consumed);
        plugin.unreserve(&mut state, &p, "b");
        assert_eq!(source.current()[0].phase, Phase::Active);
    }

    #[tokio::test(start_paused = true)]
    async fn purge_loop_on_paused_clock() {
        let source = Arc::new(InMemoryReservations::new(vec![
            reservation("soon", "x", "a", 1, 5_000),
            reservation("later", "y", "a", 1, 50_000),
        ]));
        let start = tokio::time::Instant::now();
        let clock = move || (tokio::time::Instant::now() - start).as_millis() as i64;
        let purged = run_purge(
            source.clone(),
            Duration::from_secs(10),
            clock,
            tokio::time::sleep(Duration::from_secs(25)),
        )
        .await;
        // Ticks at 0, 10 s, 20 s: "soon" expired at 5 s and went at 10 s.
        assert_eq!(purged, 1);
        assert_eq!(source.current().len(), 1);
        assert_eq!(source.current()[0].id, "later");
    }
}
