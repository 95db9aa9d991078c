//! The `Reservation` custom resource (`headroom.io/v1alpha1`, namespaced): capacity on a
//! node held for one pod before it exists, the [`ReservationSource`] the `Reservation`
//! plugin reads under `serve`, the status writer and the GC loop.
//!
//! ```yaml
//! apiVersion: headroom.io/v1alpha1
//! kind: Reservation
//! metadata: {name: build-42, namespace: ci}
//! spec:
//!   pod: {name: builder-42}            # or {selector: {matchLabels: {build: "42"}}}
//!   nodeName: worker-7
//!   resources: {cpu: "4", memory: 8Gi, disk: 20Gi}
//!   ttl: 30m                           # or expireAt: 2030-01-01T00:00:00Z
//! status: {phase: Active, lastTransitionTime: ..., message: ...}
//! ```
//!
//! Phases: `Pending` (its node is not in the cluster; the message says so), `Active`
//! (holding), `Consumed` (the pod was placed), `Expired` (`expireAt` passed). The GC loop
//! marks expired ones and deletes Consumed/Expired ones `keepFinished` after their last
//! transition.
//!
//! The scheduling cycle never waits on the API: [`KubeReservations`] is a cache the watch
//! feeds, and status changes it decides (consumed, expired, pending) go to a channel that a
//! background task writes with `PATCH .../reservations/NAME/status`. Only the leader writes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use headroom_scheduler::key::PodKey;
use headroom_scheduler::quantity::Quantity;
use headroom_scheduler::reservation::{Phase, Reservation as Hold, ReservationSource, ReservedFor};
use headroom_scheduler::selector::Selector;

/// Why a `Reservation` object cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// A field is missing or malformed; the message names it.
    #[error("reservation {id}: {field}: {message}")]
    Invalid {
        /// `namespace/name`.
        id: String,
        /// Field path (`spec.resources.cpu`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Which pod a reservation is for: exactly one of `name` and `selector`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservedPod {
    /// The pod's name, in the reservation's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A label selector: the first matching pod in the namespace that is placed consumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// What is held.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservedResources {
    /// CPU (`4`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<KQuantity>,
    /// Memory (`8Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<KQuantity>,
    /// Local disk (`20Gi`); only the real-disk accounting uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<KQuantity>,
}

/// A reservation's spec.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "headroom.io",
    version = "v1alpha1",
    kind = "Reservation",
    root = "ReservationResource",
    namespaced,
    status = "ReservationStatus",
    shortname = "hrsv",
    doc = "Capacity on a node held for one pod (by name or label selector) until it is placed or the reservation expires.",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Since","type":"date","jsonPath":".status.lastTransitionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ReservationSpec {
    /// The pod it is for.
    pub pod: ReservedPod,
    /// The node holding the capacity.
    pub node_name: String,
    /// What is held.
    pub resources: ReservedResources,
    /// When it expires (RFC 3339). Takes precedence over `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_at: Option<Time>,
    /// Lifetime from creation (`30m`, `2h`), when `expireAt` is not set. Neither: no expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// The lifecycle phase shown in the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReservationPhase {
    /// Its node does not exist (yet).
    Pending,
    /// Holding capacity.
    Active,
    /// The pod was placed.
    Consumed,
    /// `expireAt` passed.
    Expired,
}

impl From<ReservationPhase> for Phase {
    fn from(p: ReservationPhase) -> Phase {
        match p {
            ReservationPhase::Pending => Phase::Pending,
            ReservationPhase::Active => Phase::Active,
            ReservationPhase::Consumed => Phase::Consumed,
            ReservationPhase::Expired => Phase::Expired,
        }
    }
}

impl From<Phase> for ReservationPhase {
    fn from(p: Phase) -> ReservationPhase {
        match p {
            Phase::Pending => ReservationPhase::Pending,
            Phase::Active => ReservationPhase::Active,
            Phase::Consumed => ReservationPhase::Consumed,
            Phase::Expired => ReservationPhase::Expired,
        }
    }
}

/// A reservation's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    /// Current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ReservationPhase>,
    /// When the phase last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Why it is in this phase (e.g. `node "worker-9" does not exist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The pod that consumed it (`namespace/name`) and the node it went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed_by: Option<String>,
    /// The effective expiry (from `expireAt` or `ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_at: Option<Time>,
}

/// The CRD as YAML (what `headroom crd` prints and `deploy/crd.yaml` holds).
pub fn crd_yaml() -> String {
    let crd = ReservationResource::crd();
    let body = serde_norway::to_string(&crd).unwrap_or_else(|e| format!("# {e}\n"));
    format!(
        "# Generated by `headroom crd` from src/kube/crd.rs; do not edit.\n---\n{}",
        body.strip_prefix("---\n").unwrap_or(&body)
    )
}

fn time_ms(t: &Time) -> i64 {
    t.0.as_millisecond()
}

fn to_time(ms: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(Time)
}

/// `namespace/name` of an object.
pub fn id_of(r: &ReservationResource) -> String {
    format!("{}/{}", r.namespace().unwrap_or_default(), r.name_any())
}

fn quantity(id: &str, field: &str, q: Option<&KQuantity>, milli: bool) -> Result<i64, CrdError> {
    let Some(q) = q else { return Ok(0) };
    let parsed = Quantity::parse(&q.0).map_err(|e| CrdError::Invalid {
        id: id.to_string(),
        field: field.to_string(),
        message: format!("{:?}: {e}", q.0),
    })?;
    if parsed.is_negative() {
        return Err(CrdError::Invalid {
            id: id.to_string(),
            field: field.to_string(),
            message: format!("{:?} is negative", q.0),
        });
    }
    Ok(if milli {
        parsed.milli_value()
    } else {
        parsed.value()
    })
}

/// The expiry of a reservation, ms since the epoch (`i64::MAX` for none).
pub fn expiry_ms(r: &ReservationResource) -> Result<i64, CrdError> {
    if let Some(t) = &r.spec.expire_at {
        return Ok(time_ms(t));
    }
    let Some(ttl) = &r.spec.ttl else {
        return Ok(i64::MAX);
    };
    let d = humantime_serde::re::humantime::parse_duration(ttl).map_err(|e| CrdError::Invalid {
        id: id_of(r),
        field: "spec.ttl".into(),
        message: format!("{ttl:?}: {e}"),
    })?;
    let created = r
        .metadata
        .creation_timestamp
        .as_ref()
        .map(time_ms)
        .unwrap_or_else(super::now_ms);
    Ok(created.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}

/// Converts an object into the scheduler's hold. The phase is the status' Consumed or
/// Expired when set; otherwise Active when `node_exists`, else Pending.
pub fn to_hold(r: &ReservationResource, node_exists: bool) -> Result<Hold, CrdError> {
    let id = id_of(r);
    let namespace = r.namespace().unwrap_or_default();
    let invalid = |field: &str, message: String| CrdError::Invalid {
        id: id.clone(),
        field: field.to_string(),
        message,
    };
    let pod = match (&r.spec.pod.name, &r.spec.pod.selector) {
        (Some(n), None) if !n.is_empty() => ReservedFor::Name(n.clone()),
        (None, Some(s)) => ReservedFor::Selector(
            Selector::from_label_selector(Some(s), "spec.pod.selector")
                .map_err(|e| invalid("spec.pod.selector", e.to_string()))?,
        ),
        _ => {
            return Err(invalid(
                "spec.pod",
                "exactly one of name and selector is required".into(),
            ));
        }
    };
    if r.spec.node_name.is_empty() {
        return Err(invalid("spec.nodeName", "must not be empty".into()));
    }
    let res = &r.spec.resources;
    let phase = match r.status.as_ref().and_then(|s| s.phase) {
        Some(ReservationPhase::Consumed) => Phase::Consumed,
        Some(ReservationPhase::Expired) => Phase::Expired,
        _ if node_exists => Phase::Active,
        _ => Phase::Pending,
    };
    Ok(Hold {
        id: id.clone(),
        namespace,
        pod,
        node: r.spec.node_name.clone(),
        cpu_milli: quantity(&id, "spec.resources.cpu", res.cpu.as_ref(), true)?,
        memory_bytes: quantity(&id, "spec.resources.memory", res.memory.as_ref(), false)?,
        disk_bytes: quantity(&id, "spec.resources.disk", res.disk.as_ref(), false)?,
        expire_at_ms: expiry_ms(r)?,
        phase,
    })
}

/// One status change to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The new phase.
    pub phase: ReservationPhase,
    /// Why.
    pub message: Option<String>,
    /// `namespace/pod on node`, for Consumed.
    pub consumed_by: Option<String>,
    /// The effective expiry, ms.
    pub expire_at_ms: Option<i64>,
    /// When the change was decided, ms.
    pub at_ms: i64,
}

impl StatusWrite {
    /// The merge patch body for the status subresource.
    pub fn patch(&self) -> serde_json::Value {
        let status = ReservationStatus {
            phase: Some(self.phase),
            last_transition_time: to_time(self.at_ms),
            message: self.message.clone(),
            consumed_by: self.consumed_by.clone(),
            expire_at: self
                .expire_at_ms
                .filter(|ms| *ms != i64::MAX)
                .and_then(to_time),
        };
        serde_json::json!({ "status": status })
    }
}

#[derive(Default)]
struct Inner {
    objects: HashMap<String, Arc<ReservationResource>>,
    nodes: HashSet<String>,
    nodes_synced: bool,
    /// Phases decided here and not yet seen back from the watch (consumed, expired).
    overrides: HashMap<String, Phase>,
    /// The last status queued per id, so a repeated rebuild does not queue it again.
    reported: HashMap<String, (ReservationPhase, Option<String>)>,
    list: Arc<[Hold]>,
    invalid: HashMap<String, CrdError>,
}

/// The reservation cache behind the `Reservation` plugin under `serve`.
pub struct KubeReservations {
    inner: RwLock<Inner>,
    writes: mpsc::UnboundedSender<StatusWrite>,
    clock: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for KubeReservations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeReservations")
            .field("reservations", &self.current().len())
            .finish()
    }
}

impl KubeReservations {
    /// A cache whose status changes go to the returned receiver (hand it to
    /// [`run_status_writer`]). `clock` gives ms since the epoch.
    pub fn new(
        clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> (Arc<KubeReservations>, mpsc::UnboundedReceiver<StatusWrite>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Arc::new(KubeReservations {
                inner: RwLock::new(Inner::default()),
                writes: tx,
                clock,
            }),
            rx,
        )
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        // A panic mid-update leaves a list that is still a consistent copy; keep going.
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A watched object was added or changed.
    pub fn apply(&self, r: Arc<ReservationResource>) {
        let mut inner = self.write();
        let id = id_of(&r);
        // The watch now shows what we wrote: drop the local override once it agrees.
        if let (Some(o), Some(p)) = (
            inner.overrides.get(&id).copied(),
            r.status.as_ref().and_then(|s| s.phase),
        ) && Phase::from(p) == o
        {
            inner.overrides.remove(&id);
        }
        inner.objects.insert(id, r);
        self.rebuild(&mut inner);
    }

    /// A watched object was deleted.
    pub fn delete(&self, namespace: &str, name: &str) {
        let mut inner = self.write();
        let id = format!("{namespace}/{name}");
        inner.objects.remove(&id);
        inner.overrides.remove(&id);
        inner.reported.remove(&id);
        self.rebuild(&mut inner);
    }

    /// A re-list: replaces every object.
    pub fn replace_all(&self, list: Vec<Arc<ReservationResource>>) {
        let mut inner = self.write();
        inner.objects = list.into_iter().map(|r| (id_of(&r), r)).collect();
        let ids: HashSet<String> = inner.objects.keys().cloned().collect();
        inner.overrides.retain(|k, _| ids.contains(k));
        inner.reported.retain(|k, _| ids.contains(k));
        self.rebuild(&mut inner);
    }

    /// The set of node names changed (`synced`: the node list is complete, so a missing
    /// node really is missing).
    pub fn set_nodes(&self, nodes: impl IntoIterator<Item = String>, synced: bool) {
        let mut inner = self.write();
        inner.nodes = nodes.into_iter().collect();
        inner.nodes_synced = synced;
        self.rebuild(&mut inner);
    }

    /// A node appeared or went away.
    pub fn node_changed(&self, name: &str, exists: bool) {
        let mut inner = self.write();
        let changed = if exists {
            inner.nodes.insert(name.to_string())
        } else {
            inner.nodes.remove(name)
        };
        if changed {
            self.rebuild(&mut inner);
        }
    }

    /// Objects that could not be read, with why.
    pub fn invalid(&self) -> Vec<CrdError> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.invalid.values().cloned().collect()
    }

    /// Every object (for the GC loop).
    pub fn objects(&self) -> Vec<Arc<ReservationResource>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.objects.values().cloned().collect()
    }

    fn queue(&self, inner: &mut Inner, w: StatusWrite) {
        let id = format!("{}/{}", w.namespace, w.name);
        inner.reported.insert(id, (w.phase, w.message.clone()));
        // The receiver is gone only at shutdown; nothing is left to write to then.
        let _ = self.writes.send(w);
    }

    fn rebuild(&self, inner: &mut Inner) {
        let now = (self.clock)();
        let mut list = Vec::with_capacity(inner.objects.len());
        let mut invalid = HashMap::new();
        let mut writes = Vec::new();
        let mut ids: Vec<&String> = inner.objects.keys().collect();
        ids.sort();
        for id in ids {
            let r = &inner.objects[id];
            let exists = inner.nodes.contains(&r.spec.node_name) || !inner.nodes_synced;
            match to_hold(r, exists) {
                Ok(mut h) => {
                    if let Some(o) = inner.overrides.get(id) {
                        h.phase = *o;
                    }
                    // Report Pending (node missing) and Active (node present) once each;
                    // Consumed and Expired are reported where they are decided.
                    let status = r.status.as_ref();
                    let want = match h.phase {
                        Phase::Pending if inner.nodes_synced => Some((
                            ReservationPhase::Pending,
                            Some(format!("node {:?} does not exist", h.node)),
                        )),
                        Phase::Active if inner.nodes_synced => {
                            Some((ReservationPhase::Active, None))
                        }
                        _ => None,
                    };
                    if let Some(want) = want {
                        let shown = (
                            status.and_then(|s| s.phase),
                            status.and_then(|s| s.message.clone()),
                        );
                        let already = shown == (Some(want.0), want.1.clone())
                            || inner.reported.get(id) == Some(&want);
                        if !already {
                            writes.push(StatusWrite {
                                namespace: h.namespace.clone(),
                                name: r.name_any(),
                                phase: want.0,
                                message: want.1,
                                consumed_by: None,
                                expire_at_ms: Some(h.expire_at_ms),
                                at_ms: now,
                            });
                        }
                    }
                    list.push(h);
                }
                Err(e) => {
                    invalid.insert(id.clone(), e);
                }
            }
        }
        for (id, e) in &invalid {
            if !inner.invalid.contains_key(id) {
                tracing::warn!(reservation = %id, error = %e, "ignoring an unreadable reservation");
            }
        }
        inner.invalid = invalid;
        inner.list = list.into();
        for w in writes {
            self.queue(inner, w);
        }
    }

    fn set_phase(
        &self,
        id: &str,
        phase: Phase,
        consumed_by: Option<String>,
        message: Option<String>,
    ) {
        let mut inner = self.write();
        let Some((namespace, name)) = id.split_once('/') else {
            return;
        };
        inner.overrides.insert(id.to_string(), phase);
        let expire = inner
            .list
            .iter()
            .find(|h| h.id == id)
            .map(|h| h.expire_at_ms);
        let w = StatusWrite {
            namespace: namespace.to_string(),
            name: name.to_string(),
            phase: phase.into(),
            message,
            consumed_by,
            expire_at_ms: expire,
            at_ms: (self.clock)(),
        };
        self.queue(&mut inner, w);
        self.rebuild(&mut inner);
    }
}

/// Reservations whose node is missing show `Pending`: the cluster state tells the cache.
impl crate::cluster::NodeObserver for KubeReservations {
    fn node_changed(&self, name: &str, exists: bool) {
        KubeReservations::node_changed(self, name, exists);
    }

    fn nodes_listed(&self, names: &std::collections::HashSet<String>) {
        self.set_nodes(names.iter().cloned(), true);
    }
}

impl ReservationSource for KubeReservations {
    fn current(&self) -> Arc<[Hold]> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .clone()
    }

    fn consume(&self, id: &str, pod: &PodKey, node: &str) {
        self.set_phase(id, Phase::Consumed, Some(format!("{pod} on {node}")), None);
    }

    fn release(&self, id: &str) {
        let mut inner = self.write();
        if inner.overrides.get(id) == Some(&Phase::Consumed) {
            inner.overrides.insert(id.to_string(), Phase::Active);
            drop(inner);
            self.set_phase(id, Phase::Active, None, None);
        }
    }

    fn purge_expired(&self, now_ms: i64) -> usize {
        let expired: Vec<String> = self
            .current()
            .iter()
            .filter(|h| {
                matches!(h.phase, Phase::Active | Phase::Pending) && now_ms >= h.expire_at_ms
            })
            .map(|h| h.id.clone())
            .collect();
        for id in &expired {
            self.set_phase(id, Phase::Expired, None, Some("expireAt passed".into()));
        }
        expired.len()
    }
}

/// Writes queued status changes with `PATCH .../status` (merge patch), while `leader` is
/// true (followers drop them: the leader decides). Errors are logged and counted; a
/// missing object (deleted meanwhile) is not an error. Drains what is queued at shutdown.
pub async fn run_status_writer(
    api: impl Fn(&str) -> Api<ReservationResource> + Send,
    mut rx: mpsc::UnboundedReceiver<StatusWrite>,
    leader: watch::Receiver<bool>,
    shutdown: impl std::future::Future<Output = ()>,
) -> (u64, u64) {
    let (mut written, mut failed) = (0u64, 0u64);
    tokio::pin!(shutdown);
    let mut stopping = false;
    loop {
        let w = if stopping {
            match rx.try_recv() {
                Ok(w) => w,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                biased;
                w = rx.recv() => match w { Some(w) => w, None => break },
                _ = &mut shutdown => { stopping = true; continue; }
            }
        };
        if !*leader.borrow() {
            continue;
        }
        let res = api(&w.namespace)
            .patch_status(&w.name, &PatchParams::default(), &Patch::Merge(w.patch()))
            .await;
        match res {
            Ok(_) => written += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(reservation = %format!("{}/{}", w.namespace, w.name), error = %e, "writing reservation status failed");
            }
        }
    }
    (written, failed)
}

/// What the GC loop does with one reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcAction {
    /// Delete `namespace/name`: it finished more than `keepFinished` ago.
    Delete(String, String),
}

/// The deletions due at `now_ms`: Consumed or Expired reservations whose last transition
/// is older than `keep_finished`.
pub fn gc_plan(
    objects: &[Arc<ReservationResource>],
    now_ms: i64,
    keep_finished: Duration,
) -> Vec<GcAction> {
    let keep = i64::try_from(keep_finished.as_millis()).unwrap_or(i64::MAX);
    let mut out: Vec<GcAction> = objects
        .iter()
        .filter_map(|r| {
            let s = r.status.as_ref()?;
            let finished = matches!(
                s.phase,
                Some(ReservationPhase::Consumed | ReservationPhase::Expired)
            );
            let since = s.last_transition_time.as_ref().map(time_ms)?;
            (finished && now_ms.saturating_sub(since) >= keep)
                .then(|| GcAction::Delete(r.namespace().unwrap_or_default(), r.name_any()))
        })
        .collect();
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

/// Deletes one reservation (the GC loop's only API call; a trait object so that the loop
/// runs on tokio's paused clock in tests).
pub type Deleter = Arc<
    dyn Fn(String, String) -> headroom_scheduler::framework::BoxFuture<'static, Result<(), String>>
        + Send
        + Sync,
>;

/// A [`Deleter`] over the API.
pub fn api_deleter(client: kube::Client) -> Deleter {
    Arc::new(move |ns: String, name: String| {
        let api: Api<ReservationResource> = Api::namespaced(client.clone(), &ns);
        Box::pin(async move {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
    })
}

/// Every `interval` while leader: marks expired reservations (status Expired) and deletes
/// finished ones older than `keep_finished`. Returns (marked expired, deleted).
pub async fn run_gc(
    source: Arc<KubeReservations>,
    deleter: Deleter,
    interval: Duration,
    keep_finished: Duration,
    leader: watch::Receiver<bool>,
    shutdown: impl std::future::Future<Output = ()>,
) -> (usize, usize) {
    let (mut expired, mut deleted) = (0usize, 0usize);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = tick.tick() => {}
        }
        if !*leader.borrow() {
            continue;
        }
        let now = (source.clock)();
        expired += source.purge_expired(now);
        for GcAction::Delete(ns, name) in gc_plan(&source.objects(), now, keep_finished) {
            match deleter(ns.clone(), name.clone()).await {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(reservation = %format!("{ns}/{name}"), error = %e, "deleting a finished reservation failed")
                }
            }
        }
    }
    (expired, deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    fn res(name: &str, json: serde_json::Value) -> Arc<ReservationResource> {
        let mut v = serde_json::json!({
            "apiVersion": "headroom.io/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name, "namespace": "ci", "creationTimestamp": "2030-01-01T00:00:00Z"},
            "spec": {"pod": {"name": "p"}, "nodeName": "n1", "resources": {"cpu": "2", "memory": "1Gi"}}
        });
        merge(&mut v, json);
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    const T0: i64 = 1_893_456_000_000; // 2030-01-01T00:00:00Z

    #[test]
    fn conversion_and_errors() {
        let h = to_hold(&res("a", serde_json::json!({"spec": {"ttl": "30m"}})), true).unwrap();
        assert_eq!(
            (h.cpu_milli, h.memory_bytes, h.disk_bytes),
            (2000, 1 << 30, 0)
        );
        assert_eq!(h.expire_at_ms, T0 + 30 * 60 * 1000);
        assert_eq!(h.phase, Phase::Active);
        assert_eq!(h.id, "ci/a");
        let h = to_hold(&res("a", serde_json::json!({})), false).unwrap();
        assert_eq!((h.phase, h.expire_at_ms), (Phase::Pending, i64::MAX));
        let cases = [
            (
                serde_json::json!({"spec": {"resources": {"cpu": "lots"}}}),
                "spec.resources.cpu",
            ),
            (
                serde_json::json!({"spec": {"pod": {"name": null}}}),
                "spec.pod",
            ),
            (serde_json::json!({"spec": {"ttl": "soon"}}), "spec.ttl"),
            (
                serde_json::json!({"spec": {"resources": {"memory": "-1Gi"}}}),
                "spec.resources.memory",
            ),
        ];
        for (patch, field) in cases {
            let e = to_hold(&res("a", patch.clone()), true)
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{patch}: {e}");
        }
        let crd = crd_yaml();
        assert!(
            crd.contains("reservations.headroom.io") && crd.contains("v1alpha1"),
            "{crd}"
        );
    }

    #[test]
    fn lifecycle_and_status_writes() {
        let now = Arc::new(AtomicI64::new(T0));
        let clock = {
            let now = now.clone();
            Arc::new(move || now.load(Ordering::SeqCst))
        };
        let (src, mut rx) = KubeReservations::new(clock);
        src.apply(res("a", serde_json::json!({"spec": {"ttl": "1h"}})));
        src.apply(res(
            "b",
            serde_json::json!({"spec": {"nodeName": "gone", "pod": {"name": "q"}}}),
        ));
        // Nodes not synced yet: everything counts as present, nothing is reported.
        assert!(rx.try_recv().is_err());
        assert!(src.current().iter().all(|h| h.phase == Phase::Active));
        src.set_nodes(["n1".to_string()], true);
        let mut writes: Vec<StatusWrite> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        writes.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(writes.len(), 2);
        assert_eq!(
            (writes[0].name.as_str(), writes[0].phase),
            ("a", ReservationPhase::Active)
        );
        assert_eq!(
            (writes[1].name.as_str(), writes[1].phase),
            ("b", ReservationPhase::Pending)
        );
        assert_eq!(
            writes[1].message.as_deref(),
            Some("node \"gone\" does not exist")
        );
        assert_eq!(writes[1].patch()["status"]["phase"], "Pending");
        // A rebuild does not queue the same status twice.
        src.node_changed("other", true);
        assert!(rx.try_recv().is_err());

        src.consume("ci/a", &PodKey::new("ci", "p"), "n1");
        let w = rx.try_recv().unwrap();
        assert_eq!(
            (w.phase, w.consumed_by.as_deref()),
            (ReservationPhase::Consumed, Some("ci/p on n1"))
        );
        assert_eq!(
            src.current().iter().find(|h| h.id == "ci/a").unwrap().phase,
            Phase::Consumed
        );
        src.release("ci/a");
        assert_eq!(rx.try_recv().unwrap().phase, ReservationPhase::Active);
        assert_eq!(
            src.current().iter().find(|h| h.id == "ci/a").unwrap().phase,
            Phase::Active
        );

        // An hour later "a" expires ("b" never does).
        now.store(T0 + 3600 * 1000, Ordering::SeqCst);
        assert_eq!(src.purge_expired(T0 + 3600 * 1000), 1);
        let w = rx.try_recv().unwrap();
        assert_eq!((w.name.as_str(), w.phase), ("a", ReservationPhase::Expired));

        // GC: a finished reservation goes keepFinished after its transition.
        let done = res(
            "a",
            serde_json::json!({"status": {"phase": "Expired", "lastTransitionTime": "2030-01-01T01:00:00Z"}}),
        );
        let keep = Duration::from_secs(600);
        assert!(
            gc_plan(
                std::slice::from_ref(&done),
                T0 + 3600 * 1000 + 599_000,
                keep
            )
            .is_empty()
        );
        assert_eq!(
            gc_plan(
                &[done, res("b", serde_json::json!({}))],
                T0 + 3600 * 1000 + 600_000,
                keep
            ),
            vec![GcAction::Delete("ci".into(), "a".into())]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gc_loop_runs_only_while_leader() {
        let now = Arc::new(AtomicI64::new(T0));
        let clock = {
            let now = now.clone();
            Arc::new(move || now.load(Ordering::SeqCst))
        };
        let (src, _rx) = KubeReservations::new(clock);
        src.set_nodes(["n1".to_string()], true);
        src.apply(res("old", serde_json::json!({"status": {"phase": "Consumed", "lastTransitionTime": "2030-01-01T00:00:00Z"}})));
        src.apply(res("live", serde_json::json!({"spec": {"ttl": "5m"}})));
        let deleted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let deleter: Deleter = {
            let deleted = deleted.clone();
            let src = src.clone();
            // As the API server would: the watch then reports the deletion.
            Arc::new(move |ns, name| {
                deleted.lock().unwrap().push(format!("{ns}/{name}"));
                src.delete(&ns, &name);
                Box::pin(async { Ok(()) })
            })
        };
        let (leader_tx, leader_rx) = watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let gc = tokio::spawn(run_gc(
            src.clone(),
            deleter,
            Duration::from_secs(60),
            Duration::from_secs(600),
            leader_rx,
            async {
                let _ = stop_rx.await;
            },
        ));
        // 11 minutes as a follower: nothing happens.
        now.store(T0 + 11 * 60 * 1000, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(11 * 60)).await;
        assert!(deleted.lock().unwrap().is_empty());
        leader_tx.send(true).unwrap();
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(*deleted.lock().unwrap(), vec!["ci/old".to_string()]);
        stop_tx.send(()).unwrap();
        let (expired, n) = gc.await.unwrap();
        assert_eq!((expired, n), (1, 1), "live (ttl 5m) expired, old deleted");
    }
}
