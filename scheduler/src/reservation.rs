//! Reservations (seed 002): capacity on a node held for one named pod before it exists.
//!
//! A [`Reservation`] holds CPU, memory and optionally disk on one node for one pod (by
//! namespace and name, or by a label selector in a namespace) until `expire_at_ms`. The
//! `Reservation` plugin subtracts every unexpired reservation that is *not* for the pod
//! being scheduled from the node's free resources; the reserving pod may use its own. When
//! the reserving pod is placed (on any node) its reservation is consumed.
//!
//! Reservations reach the scheduler through the [`ReservationSource`] trait, so the
//! simulator and `place --usage` ([`InMemoryReservations`]) and the Kubernetes
//! `Reservation` custom resource (under `serve`) feed the same plugin. A source must never
//! do I/O in these calls: they run inside the scheduling cycle. A source backed by the API
//! server keeps a reflector cache and queues status writes for a background task.

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::key::PodKey;
use crate::selector::{Labels, Selector};
use crate::snapshot::PodInfo;

/// Which pod a reservation is for.
#[derive(Debug, Clone)]
pub enum ReservedFor {
    /// Exactly this pod name (in the reservation's namespace).
    Name(String),
    /// Any pod in the namespace whose labels match (the first one placed consumes it).
    Selector(Selector),
}

/// Lifecycle of a reservation, as the CRD's status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Created, its node is not (yet) known to the scheduler.
    Pending,
    /// Holding capacity on its node.
    Active,
    /// The reserving pod was placed; the hold is released.
    Consumed,
    /// `expireAt` passed before the pod came.
    Expired,
}

/// One hold on one node.
#[derive(Debug, Clone)]
pub struct Reservation {
    /// Identifier (the custom resource's `namespace/name`, or a name from a usage file).
    pub id: String,
    /// Namespace of the reserving pod.
    pub namespace: String,
    /// The pod it is for.
    pub pod: ReservedFor,
    /// The node holding the capacity.
    pub node: String,
    /// CPU held, millicores.
    pub cpu_milli: i64,
    /// Memory held, bytes.
    pub memory_bytes: i64,
    /// Disk held, bytes (only the `RealDiskFit` accounting uses it).
    pub disk_bytes: i64,
    /// Expiry, milliseconds since the epoch; `i64::MAX` for none.
    pub expire_at_ms: i64,
    /// Current phase.
    pub phase: Phase,
}

impl Reservation {
    /// Whether this reservation is for `pod`.
    pub fn is_for(&self, pod: &PodInfo) -> bool {
        self.is_for_parts(&pod.namespace, &pod.name, pod.labels())
    }

    /// Whether this reservation is for the pod `namespace/name` with `labels`.
    pub fn is_for_parts(&self, namespace: &str, name: &str, labels: &Labels) -> bool {
        if self.namespace != namespace {
            return false;
        }
        match &self.pod {
            ReservedFor::Name(n) => n == name,
            ReservedFor::Selector(s) => s.matches(labels),
        }
    }

    /// Whether it holds capacity at `now_ms` (active and not expired).
    pub fn holds_at(&self, now_ms: i64) -> bool {
        self.phase == Phase::Active && now_ms < self.expire_at_ms
    }

    /// Human-readable target, for reasons: `ns/name` or `ns/{selector}`.
    pub fn target(&self) -> String {
        match &self.pod {
            ReservedFor::Name(n) => PodKey::new(self.namespace.as_str(), n.as_str()).to_string(),
            ReservedFor::Selector(s) => format!("{}/{s:?}", self.namespace),
        }
    }
}

/// Where the scheduler reads reservations from and reports their use.
///
/// Calls happen inside the scheduling cycle and must not block on I/O.
pub trait ReservationSource: Send + Sync {
    /// A consistent copy of the current reservations (all phases; the plugin checks
    /// [`Reservation::holds_at`]). Cheap: an `Arc` of an immutable list.
    fn current(&self) -> Arc<[Reservation]>;

    /// The reserving pod was assumed on `node`: mark reservation `id` consumed.
    fn consume(&self, id: &str, pod: &PodKey, node: &str);

    /// Undo [`consume`](Self::consume) (a later step failed before binding).
    fn release(&self, id: &str);

    /// Marks every active reservation expired at `now_ms` as `Expired` and drops consumed
    /// and expired ones older than the source's grace; returns how many changed.
    fn purge_expired(&self, now_ms: i64) -> usize;
}

/// Reservations held in memory: `place --usage`, the simulator, and tests.
#[derive(Debug, Default)]
pub struct InMemoryReservations {
    list: RwLock<Arc<[Reservation]>>,
}

impl InMemoryReservations {
    /// A source holding `reservations`.
    pub fn new(reservations: Vec<Reservation>) -> InMemoryReservations {
        InMemoryReservations {
            list: RwLock::new(reservations.into()),
        }
    }

    /// Adds a reservation (replacing one with the same id).
    pub fn upsert(&self, r: Reservation) {
        self.update(|v| {
            v.retain(|x| x.id != r.id);
            v.push(r);
        });
    }

    fn update(&self, f: impl FnOnce(&mut Vec<Reservation>)) {
        // A poisoned lock only means another thread panicked mid-update of a list we
        // replace wholesale; the old list is still consistent, so keep using it.
        let mut guard = self.list.write().unwrap_or_else(|e| e.into_inner());
        let mut v = guard.to_vec();
        f(&mut v);
        *guard = v.into();
    }
}

impl ReservationSource for InMemoryReservations {
    fn current(&self) -> Arc<[Reservation]> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn consume(&self, id: &str, _pod: &PodKey, _node: &str) {
        self.update(|v| {
            for r in v.iter_mut().filter(|r| r.id == id) {
                r.phase = Phase::Consumed;
            }
        });
    }

    fn release(&self, id: &str) {
        self.update(|v| {
            for r in v
                .iter_mut()
                .filter(|r| r.id == id && r.phase == Phase::Consumed)
            {
                r.phase = Phase::Active;
            }
        });
    }

    fn purge_expired(&self, now_ms: i64) -> usize {
        let mut changed = 0;
        self.update(|v| {
            let before = v.len();
            v.retain(|r| r.phase == Phase::Active);
            changed += before - v.len();
            for r in v.iter_mut() {
                if now_ms >= r.expire_at_ms {
                    r.phase = Phase::Expired;
                    changed += 1;
                }
            }
            v.retain(|r| r.phase == Phase::Active);
        });
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: &str, pod: &str, expire: i64) -> Reservation {
        Reservation {
            id: id.into(),
            namespace: "default".into(),
            pod: ReservedFor::Name(pod.into()),
            node: "worker-1".into(),
            cpu_milli: 2000,
            memory_bytes: 0,
            disk_bytes: 0,
            expire_at_ms: expire,
            phase: Phase::Active,
        }
    }

    #[test]
    fn lifecycle_in_memory() {
        let src = InMemoryReservations::new(vec![r("a", "p", 100), r("b", "q", 1000)]);
        assert!(src.current()[0].holds_at(99));
        assert!(!src.current()[0].holds_at(100));
        src.consume("a", &PodKey::new("default", "p"), "worker-1");
        assert_eq!(src.current()[0].phase, Phase::Consumed);
        src.release("a");
        assert_eq!(src.current()[0].phase, Phase::Active);
        // At 100 "a" expires and goes; "b" stays.
        assert_eq!(src.purge_expired(100), 1);
        let now = src.current();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].id, "b");
        src.consume("b", &PodKey::new("default", "q"), "worker-2");
        assert_eq!(src.purge_expired(200), 1);
        assert!(src.current().is_empty());
    }

    #[test]
    fn is_for_name_and_selector() {
        let labels: Labels = [("app".to_string(), "db".to_string())]
            .into_iter()
            .collect();
        let by_name = r("a", "p", i64::MAX);
        assert!(by_name.is_for_parts("default", "p", &labels));
        assert!(!by_name.is_for_parts("other", "p", &labels));
        assert!(!by_name.is_for_parts("default", "q", &labels));
        let by_sel = Reservation {
            pod: ReservedFor::Selector(Selector::from_map(&labels)),
            ..r("s", "", i64::MAX)
        };
        assert!(by_sel.is_for_parts("default", "anything", &labels));
        assert!(!by_sel.is_for_parts("default", "anything", &Labels::new()));
    }
}
