//! A small in-process kube-apiserver speaking the real JSON and watch protocol, on
//! 127.0.0.1:0: lists with `metadata.resourceVersion`, `?watch=true&resourceVersion=N`
//! streams of `{"type": ..., "object": ...}` lines, `410 Gone` (as a watch `ERROR` event,
//! the way the real server reports an expired resourceVersion), `409 Conflict`, `404`,
//! `pods/binding`, `pods/status` strategic merge of conditions, merge patches, Leases with
//! optimistic concurrency, `events.k8s.io/v1` Events, the `Reservation` CRD, and the
//! volume objects (PersistentVolumes and claims, updated with optimistic concurrency as
//! VolumeBinding's PreBind does; StorageClasses, CSINodes).
//!
//! Error bodies are the ones recorded from a real kube-apiserver v1.36
//! (`tests/fixtures/kube-captures/`). Faults are injected with [`Fake::fail_watches`],
//! [`Fake::expire_watches`], [`Fake::forbid`], [`Fake::fail_bindings`], [`Fake::fail_events`], [`Fake::throttle_bindings`],
//! [`Fake::binding_latency`], [`Fake::answer_late`] and [`Fake::steal_next_binding`].

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// `(group, resource, verb)` as RBAC names it (`pods/binding` for subresources).
pub type Call = (String, String, String);

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    resource: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

/// One binding request the fake saw.
#[derive(Clone, Debug)]
pub struct BindingSeen {
    /// `namespace/name`.
    pub pod: String,
    /// Target node.
    pub node: String,
    /// The `x-replica` header of the request (which replica sent it).
    pub replica: String,
    /// The Lease holder when it arrived.
    pub holder: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
}

#[derive(Default)]
struct Inner {
    rv: u64,
    objects: BTreeMap<(String, String, String), Value>,
    log: Vec<Change>,
    compacted: u64,
    fail_watches: u32,
    /// Resources whose list and watch are refused with 403 (as for a ClusterRole that
    /// lacks them).
    forbidden: std::collections::HashSet<String>,
    fail_bindings: u32,
    /// Event creates still to answer 503 (an API server that cannot serve).
    fail_events: u32,
    throttle_bindings: (u32, u32),
    binding_latency: Duration,
    answer_late: (u32, Duration),
    bindings_in_flight: u32,
    max_bindings_in_flight: u32,
    black_hole: bool,
    tokens: HashMap<String, (String, Vec<String>)>,
    /// Service proxy backends: (namespace, service, port name) -> base URL.
    backends: HashMap<(String, String, String), String>,
    grants: Vec<(String, String, String)>,
    steal_next_binding: Option<String>,
    bindings: Vec<BindingSeen>,
    calls: Vec<Call>,
    uid: u64,
}

/// The fake API server.
#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
    changes: broadcast::Sender<Change>,
    drop_watches: broadcast::Sender<()>,
    /// Where it listens.
    pub addr: SocketAddr,
}

fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "nodes" => ("Node", "v1"),
        "pods" => ("Pod", "v1"),
        "namespaces" => ("Namespace", "v1"),
        "services" => ("Service", "v1"),
        "replicationcontrollers" => ("ReplicationController", "v1"),
        "replicasets" => ("ReplicaSet", "apps/v1"),
        "statefulsets" => ("StatefulSet", "apps/v1"),
        "events" => ("Event", "events.k8s.io/v1"),
        "leases" => ("Lease", "coordination.k8s.io/v1"),
        "reservations" => ("Reservation", "headroom.io/v1alpha1"),
        "persistentvolumes" => ("PersistentVolume", "v1"),
        "persistentvolumeclaims" => ("PersistentVolumeClaim", "v1"),
        "storageclasses" => ("StorageClass", "storage.k8s.io/v1"),
        "csinodes" => ("CSINode", "storage.k8s.io/v1"),
        "poddisruptionbudgets" => ("PodDisruptionBudget", "policy/v1"),
        "priorityclasses" => ("PriorityClass", "scheduling.k8s.io/v1"),
        _ => ("Unknown", "v1"),
    }
}

fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Response {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(body)).into_response()
}

/// RFC 7386 merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    if let Value::Object(p) = patch {
        if !target.is_object() {
            *target = json!({});
        }
        let t = target.as_object_mut().unwrap();
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    } else {
        *target = patch.clone();
    }
}

/// The strategic merge the pods/status patches here need: `status.conditions` merged by
/// `type`, everything else as a merge patch; `$`-directives dropped.
fn strategic(target: &mut Value, patch: &Value) {
    let mut patch = patch.clone();
    if let Some(status) = patch.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| !k.starts_with('$'));
        if let Some(Value::Array(conds)) = status.remove("conditions") {
            let existing = target["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut merged = existing;
            for c in conds {
                let t = c["type"].clone();
                match merged.iter_mut().find(|e| e["type"] == t) {
                    Some(e) => merge(e, &c),
                    None => merged.push(c),
                }
            }
            if target.get("status").is_none() {
                target["status"] = json!({});
            }
            target["status"]["conditions"] = Value::Array(merged);
        }
    }
    merge(target, &patch);
}

impl Fake {
    /// Starts the server.
    pub async fn start() -> Fake {
        Fake::start_on(0).await
    }

    /// Starts the server on `port` of 127.0.0.1 (0: any), retrying for a few seconds while
    /// the port is still held (a client of a server that was there before).
    pub async fn start_on(port: u16) -> Fake {
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("binding 127.0.0.1:{port}: {e}"),
            }
        };
        let addr = listener.local_addr().unwrap();
        let (changes, _) = broadcast::channel(4096);
        let (drop_watches, _) = broadcast::channel(16);
        let fake = Fake {
            inner: Arc::new(Mutex::new(Inner {
                rv: 100,
                ..Default::default()
            })),
            changes,
            drop_watches,
            addr,
        };
        let app = Router::new().fallback(handle).with_state(fake.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        fake
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client for this server whose requests carry `x-replica: replica`.
    pub fn client(&self, replica: &str) -> kube::Client {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.default_namespace = "default".into();
        // As `headroom serve`'s own client: no hidden retries of 429/503/504.
        config.default_retry = false;
        config
            .headers
            .push(("x-replica".parse().unwrap(), replica.parse().unwrap()));
        kube::Client::try_from(config).unwrap()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    /// Creates or replaces an object (`ADDED`/`MODIFIED`), filling uid, resourceVersion
    /// and creationTimestamp.
    pub fn put(&self, resource: &str, mut obj: Value) -> Value {
        let mut inner = self.lock();
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let key = (resource.to_string(), ns.clone(), name);
        let existed = inner.objects.get(&key).cloned();
        if obj["metadata"]["uid"].is_null() {
            let uid = existed
                .as_ref()
                .and_then(|e| e["metadata"]["uid"].as_str().map(str::to_string))
                .unwrap_or_else(|| {
                    inner.uid += 1;
                    format!("00000000-0000-0000-0000-{:012}", inner.uid)
                });
            obj["metadata"]["uid"] = json!(uid);
        }
        if obj["metadata"]["creationTimestamp"].is_null() {
            obj["metadata"]["creationTimestamp"] = existed
                .as_ref()
                .map(|e| e["metadata"]["creationTimestamp"].clone())
                .unwrap_or_else(|| json!(headroom::kube::rfc3339(headroom::kube::now_ms())));
        }
        let (kind, api_version) = kind_of(resource);
        obj["kind"] = json!(kind);
        obj["apiVersion"] = json!(api_version);
        Self::commit(
            &mut inner,
            &self.changes,
            key,
            obj,
            if existed.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            },
        )
    }

    fn commit(
        inner: &mut Inner,
        tx: &broadcast::Sender<Change>,
        key: (String, String, String),
        mut obj: Value,
        kind: &'static str,
    ) -> Value {
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if kind == "DELETED" {
            inner.objects.remove(&key);
        } else {
            inner.objects.insert(key.clone(), obj.clone());
        }
        let change = Change {
            rv,
            resource: key.0,
            namespace: key.1,
            kind,
            object: obj.clone(),
        };
        inner.log.push(change.clone());
        let _ = tx.send(change);
        obj
    }

    /// Deletes an object (`DELETED`).
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) {
        let mut inner = self.lock();
        let key = (
            resource.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        if let Some(obj) = inner.objects.get(&key).cloned() {
            Self::commit(&mut inner, &self.changes, key, obj, "DELETED");
        }
    }

    /// An object, if present.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(
                resource.to_string(),
                namespace.to_string(),
                name.to_string(),
            ))
            .cloned()
    }

    /// Every version an object had (each write, the deletion last), oldest first.
    pub fn history(&self, resource: &str, namespace: &str, name: &str) -> Vec<Value> {
        self.lock()
            .log
            .iter()
            .filter(|c| {
                c.resource == resource
                    && c.namespace == namespace
                    && c.object["metadata"]["name"] == name
            })
            .map(|c| c.object.clone())
            .collect()
    }

    /// Every object of a resource.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        self.lock()
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The next `n` watch requests fail with 500.
    pub fn fail_watches(&self, n: u32) {
        self.lock().fail_watches = n;
    }

    /// Lists and watches of `resource` are refused with 403 until [`Fake::allow`].
    pub fn forbid(&self, resource: &str) {
        self.lock().forbidden.insert(resource.to_string());
    }

    /// Undoes [`Fake::forbid`].
    pub fn allow(&self, resource: &str) {
        self.lock().forbidden.remove(resource);
    }

    /// Compacts history (every resourceVersion seen so far becomes too old: watches
    /// resuming from them get 410 Gone) and closes open watches.
    pub fn expire_watches(&self) {
        {
            let mut inner = self.lock();
            inner.compacted = inner.rv;
            inner.log.clear();
        }
        let _ = self.drop_watches.send(());
    }

    /// The next `n` binding requests fail with 500.
    pub fn fail_bindings(&self, n: u32) {
        self.lock().fail_bindings = n;
    }

    /// The next `n` Event creates are answered `503 Service Unavailable`, as an API server
    /// that is starting or has lost etcd answers.
    pub fn fail_events(&self, n: u32) {
        self.lock().fail_events = n;
    }

    /// The next `n` binding requests are answered `429 Too Many Requests` with
    /// `retryAfterSeconds: retry_after_secs`, as a kube-apiserver under its
    /// max-requests-inflight limit answers.
    pub fn throttle_bindings(&self, n: u32, retry_after_secs: u32) {
        self.lock().throttle_bindings = (n, retry_after_secs);
    }

    /// Every binding request waits this long before it is served (a loaded server).
    pub fn binding_latency(&self, d: Duration) {
        self.lock().binding_latency = d;
    }

    /// The next `n` bindings are applied at once but answered only after `d` (the server
    /// bound the pod, the client timed out waiting for the answer).
    pub fn answer_late(&self, n: u32, d: Duration) {
        self.lock().answer_late = (n, d);
    }

    /// From now on the server accepts connections but never answers (a dead API server
    /// behind a live load balancer, the slowest way to fail); open watches end.
    pub fn black_hole(&self) {
        self.lock().black_hole = true;
        let _ = self.drop_watches.send(());
    }

    /// The service proxy (`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/...`)
    /// forwards to `url` for this Service port, as the real server forwards to its
    /// endpoints (the Service object itself must exist too: put it).
    pub fn route_service(&self, namespace: &str, service: &str, port: &str, url: &str) {
        self.lock().backends.insert(
            (namespace.into(), service.into(), port.into()),
            url.to_string(),
        );
    }

    /// A bearer token `TokenReview` authenticates as `user` in `groups`.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.lock().tokens.insert(
            token.to_string(),
            (
                user.to_string(),
                groups.iter().map(|g| g.to_string()).collect(),
            ),
        );
    }

    /// `SubjectAccessReview` allows `subject` (a user, or `group:NAME`) to `verb` every
    /// non-resource URL starting with `path_prefix` (RBAC's `nonResourceURLs` with `*`).
    pub fn grant(&self, subject: &str, verb: &str, path_prefix: &str) {
        self.lock().grants.push((
            subject.to_string(),
            verb.to_string(),
            path_prefix.to_string(),
        ));
    }

    /// The most binding requests the fake served at the same time.
    pub fn max_bindings_in_flight(&self) -> u32 {
        self.lock().max_bindings_in_flight
    }

    /// The next binding request finds its pod already bound to `node` by someone else
    /// (409, as recorded).
    pub fn steal_next_binding(&self, node: &str) {
        self.lock().steal_next_binding = Some(node.to_string());
    }

    /// Binding requests so far.
    pub fn bindings(&self) -> Vec<BindingSeen> {
        self.lock().bindings.clone()
    }

    /// API calls so far, as `(group, resource, verb)`.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Where pod `ns/name` is bound.
    pub fn node_of(&self, ns: &str, name: &str) -> Option<String> {
        self.get("pods", ns, name)?["spec"]["nodeName"]
            .as_str()
            .map(str::to_string)
    }

    /// Waits up to `secs` for `f` to hold.
    pub async fn wait_for(&self, secs: u64, what: &str, mut f: impl FnMut(&Fake) -> bool) {
        let end = tokio::time::Instant::now() + Duration::from_secs(secs);
        while !f(self) {
            assert!(
                tokio::time::Instant::now() < end,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn holder(inner: &Inner) -> Option<String> {
        inner
            .objects
            .iter()
            .find(|((r, _, _), _)| r == "leases")
            .and_then(|(_, v)| v["spec"]["holderIdentity"].as_str().map(str::to_string))
    }
}

/// The parsed request path.
struct Target {
    group: String,
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", g, _v, rest @ ..] => ((*g).to_string(), rest),
        _ => return None,
    };
    let s = |x: &&str| Some((*x).to_string());
    let t = |resource: &str,
             namespace: Option<String>,
             name: Option<String>,
             sub: Option<String>| Target {
        group: group.clone(),
        resource: resource.to_string(),
        namespace,
        name,
        sub,
    };
    Some(match rest {
        ["namespaces"] => t("namespaces", None, None, None),
        ["namespaces", n] => t("namespaces", None, s(n), None),
        ["namespaces", ns, r] => t(r, s(ns), None, None),
        ["namespaces", ns, r, n] => t(r, s(ns), s(n), None),
        ["namespaces", ns, r, n, sub] => t(r, s(ns), s(n), s(sub)),
        [r] => t(r, None, None, None),
        [r, n] => t(r, None, s(n), None),
        [r, n, sub] => t(r, None, s(n), s(sub)),
        _ => return None,
    })
}

fn query(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn handle(
    State(fake): State<Fake>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if fake.lock().black_hole {
        return std::future::pending().await;
    }
    if let Some(r) = service_proxy(&fake, &uri, &headers).await {
        return r;
    }
    let Some(t) = parse_path(uri.path()) else {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
            None,
        );
    };
    let q = query(&uri);
    let watching = q.get("watch").is_some_and(|v| v == "true" || v == "1");
    let verb = match (&method, t.name.is_some(), watching) {
        (&Method::GET, _, true) => "watch",
        (&Method::GET, true, false) => "get",
        (&Method::GET, false, false) => "list",
        (&Method::POST, _, _) => "create",
        (&Method::PUT, _, _) => "update",
        (&Method::PATCH, _, _) => "patch",
        (&Method::DELETE, _, _) => "delete",
        _ => "unknown",
    };
    let rbac_resource = match (&t.sub, verb) {
        (Some(sub), _) => format!("{}/{sub}", t.resource),
        // `create` of a pods/binding goes to the subresource; plain creates name no object.
        _ => t.resource.clone(),
    };
    fake.lock()
        .calls
        .push((t.group.clone(), rbac_resource, verb.to_string()));
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return status(400, "BadRequest", &format!("invalid JSON: {e}"), None),
        }
    };
    let ns = t.namespace.clone().unwrap_or_default();
    if matches!(verb, "list" | "watch") && fake.lock().forbidden.contains(&t.resource) {
        // The real server's words for a service account without the grant.
        let group = if t.group.is_empty() {
            ""
        } else {
            t.group.as_str()
        };
        return status(
            403,
            "Forbidden",
            &format!(
                "{} is forbidden: User \"system:serviceaccount:kube-system:headroom\" cannot {verb} resource \"{}\" in API group \"{group}\" at the cluster scope",
                t.resource, t.resource
            ),
            Some(json!({"kind": t.resource})),
        );
    }
    match (verb, t.sub.as_deref()) {
        ("watch", _) => watch(&fake, &t, &q).await,
        ("list", _) => list(&fake, &t, &q, &ns),
        ("get", None) => match fake.get(&t.resource, &ns, t.name.as_deref().unwrap_or("")) {
            Some(v) => axum::Json(v).into_response(),
            None => not_found(&t),
        },
        ("create", Some("binding")) => create_binding(&fake, &t, &headers, &body).await,
        ("create", None) if t.resource == "tokenreviews" => token_review(&fake, &body),
        ("create", None) if t.resource == "subjectaccessreviews" => access_review(&fake, &body),
        ("create", None) => create(&fake, &t, &ns, body),
        ("update", None) => update(&fake, &t, &ns, body),
        ("patch", sub) => patch(&fake, &t, &ns, &headers, sub, body),
        ("delete", None) => delete(&fake, &t, &ns),
        _ => status(405, "MethodNotAllowed", "not supported by the fake", None),
    }
}

/// A list: every object of the resource (in the namespace, if one is given); a continue
/// token is refused as the real server refuses one it did not issue.
fn list(fake: &Fake, t: &Target, q: &HashMap<String, String>, ns: &str) -> Response {
    if q.get("continue").is_some_and(|c| !c.is_empty()) {
        return status(
            400,
            "BadRequest",
            "invalid continue token: continue key is not valid: invalid character '\\x81' looking for beginning of value",
            None,
        );
    }
    let inner = fake.lock();
    let items: Vec<Value> = inner
        .objects
        .iter()
        .filter(|((r, n, _), _)| *r == t.resource && (t.namespace.is_none() || *n == ns))
        .map(|(_, v)| v.clone())
        .collect();
    let (kind, api_version) = kind_of(&t.resource);
    axum::Json(json!({
        "kind": format!("{kind}List"), "apiVersion": api_version,
        "metadata": {"resourceVersion": inner.rv.to_string()},
        "items": items,
    }))
    .into_response()
}

/// A pods/binding create: the configured latency, throttling (429 with `Retry-After`) and
/// late answers around [`bind`].
async fn create_binding(fake: &Fake, t: &Target, headers: &HeaderMap, body: &Value) -> Response {
    let latency = {
        let mut i = fake.lock();
        i.bindings_in_flight += 1;
        i.max_bindings_in_flight = i.max_bindings_in_flight.max(i.bindings_in_flight);
        i.binding_latency
    };
    tokio::time::sleep(latency).await;
    let throttled = {
        let mut i = fake.lock();
        if i.throttle_bindings.0 > 0 {
            i.throttle_bindings.0 -= 1;
            let seen = BindingSeen {
                pod: format!(
                    "{}/{}",
                    t.namespace.clone().unwrap_or_default(),
                    t.name.clone().unwrap_or_default()
                ),
                node: body["target"]["name"].as_str().unwrap_or("").to_string(),
                replica: String::new(),
                holder: None,
                status: 429,
            };
            i.bindings.push(seen);
            Some(i.throttle_bindings.1)
        } else {
            None
        }
    };
    let response = match throttled {
        Some(secs) => {
            let mut r = status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                Some(json!({"retryAfterSeconds": secs})),
            );
            r.headers_mut()
                .insert("retry-after", secs.to_string().parse().unwrap());
            r
        }
        None => {
            let r = bind(fake, t, headers, body);
            let late = {
                let mut i = fake.lock();
                if i.answer_late.0 > 0 && r.status() == StatusCode::CREATED {
                    i.answer_late.0 -= 1;
                    Some(i.answer_late.1)
                } else {
                    None
                }
            };
            if let Some(d) = late {
                tokio::time::sleep(d).await;
            }
            r
        }
    };
    fake.lock().bindings_in_flight -= 1;
    response
}

/// A TokenReview: authenticated when the token is one the test registered.
fn token_review(fake: &Fake, body: &Value) -> Response {
    let token = body["spec"]["token"].as_str().unwrap_or("");
    let user = fake.lock().tokens.get(token).cloned();
    let status = match user {
        Some((name, groups)) => json!({"authenticated": true,
            "user": {"username": name, "groups": groups}}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    let mut review = body.clone();
    review["status"] = status;
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

/// A SubjectAccessReview for a non-resource path: allowed by the test's grants (user or
/// `group:` subject, verb, path prefix).
fn access_review(fake: &Fake, body: &Value) -> Response {
    let spec = &body["spec"];
    let user = spec["user"].as_str().unwrap_or("").to_string();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let path = spec["nonResourceAttributes"]["path"].as_str().unwrap_or("");
    let verb = spec["nonResourceAttributes"]["verb"].as_str().unwrap_or("");
    let allowed = fake.lock().grants.iter().any(|(who, v, prefix)| {
        let subject = match who.strip_prefix("group:") {
            Some(g) => groups.iter().any(|x| x == g),
            None => *who == user,
        };
        subject && v == verb && path.starts_with(prefix.as_str())
    });
    let mut review = body.clone();
    review["status"] = json!({"allowed": allowed});
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

/// Takes one injected fault from `left`: whether this request fails.
fn take(left: &mut u32) -> bool {
    let fail = *left > 0;
    *left = left.saturating_sub(1);
    fail
}

/// A create: 409 AlreadyExists as the real server words it, else stored in the namespace.
fn create(fake: &Fake, t: &Target, ns: &str, body: Value) -> Response {
    if t.resource == "events" && take(&mut fake.lock().fail_events) {
        return status(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            None,
        );
    }
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    if fake.get(&t.resource, ns, &name).is_some() {
        return status(
            409,
            "AlreadyExists",
            &format!("{}.{} \"{name}\" already exists", t.resource, t.group),
            Some(json!({"name": name, "group": t.group, "kind": t.resource})),
        );
    }
    let mut obj = body;
    obj["metadata"]["namespace"] = json!(ns);
    (StatusCode::CREATED, axum::Json(fake.put(&t.resource, obj))).into_response()
}

/// An update: 409 Conflict on a stale resourceVersion, else stored keeping the uid.
fn update(fake: &Fake, t: &Target, ns: &str, body: Value) -> Response {
    let name = t.name.clone().unwrap_or_default();
    let Some(current) = fake.get(&t.resource, ns, &name) else {
        return not_found(t);
    };
    if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                t.resource, t.group
            ),
            Some(json!({"name": name, "group": t.group, "kind": t.resource})),
        );
    }
    let mut obj = body;
    obj["metadata"]["namespace"] = json!(ns);
    obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
    axum::Json(fake.put(&t.resource, obj)).into_response()
}

/// A merge or strategic-merge patch; on the status subresource only the status changes.
fn patch(
    fake: &Fake,
    t: &Target,
    ns: &str,
    headers: &HeaderMap,
    sub: Option<&str>,
    body: Value,
) -> Response {
    let name = t.name.clone().unwrap_or_default();
    let Some(mut current) = fake.get(&t.resource, ns, &name) else {
        return not_found(t);
    };
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let body = if sub == Some("status") {
        // A status patch changes only the status.
        json!({"status": body.get("status").cloned().unwrap_or(Value::Null)})
    } else {
        body
    };
    if ct.contains("strategic-merge-patch") {
        strategic(&mut current, &body);
    } else {
        merge(&mut current, &body);
    }
    axum::Json(fake.put(&t.resource, current)).into_response()
}

/// A delete: the object as it was, or 404.
fn delete(fake: &Fake, t: &Target, ns: &str) -> Response {
    let name = t.name.clone().unwrap_or_default();
    match fake.get(&t.resource, ns, &name) {
        Some(v) => {
            fake.delete(&t.resource, ns, &name);
            axum::Json(v).into_response()
        }
        None => not_found(t),
    }
}

fn not_found(t: &Target) -> Response {
    let name = t.name.clone().unwrap_or_default();
    let what = if t.group.is_empty() {
        t.resource.clone()
    } else {
        format!("{}.{}", t.resource, t.group)
    };
    let mut details = json!({"name": name, "kind": t.resource});
    if !t.group.is_empty() {
        details["group"] = json!(t.group);
    }
    status(
        404,
        "NotFound",
        &format!("{what} \"{name}\" not found"),
        Some(details),
    )
}

fn bind(fake: &Fake, t: &Target, headers: &HeaderMap, body: &Value) -> Response {
    let ns = t.namespace.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let node = body["target"]["name"].as_str().unwrap_or("").to_string();
    let replica = headers
        .get("x-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut inner = fake.inner.lock().unwrap();
    let holder = Fake::holder(&inner);
    let record = |inner: &mut Inner, code: u16| {
        inner.bindings.push(BindingSeen {
            pod: format!("{ns}/{name}"),
            node: node.clone(),
            replica: replica.clone(),
            holder: holder.clone(),
            status: code,
        })
    };
    if take(&mut inner.fail_bindings) {
        record(&mut inner, 500);
        return status(
            500,
            "InternalError",
            "Internal error occurred: injected by the fake",
            None,
        );
    }
    let key = ("pods".to_string(), ns.clone(), name.clone());
    let Some(mut pod) = inner.objects.get(&key).cloned() else {
        record(&mut inner, 404);
        return status(
            404,
            "NotFound",
            &format!("pods \"{name}\" not found"),
            Some(json!({"name": name, "kind": "pods"})),
        );
    };
    if let Some(thief) = inner.steal_next_binding.take() {
        pod["spec"]["nodeName"] = json!(thief);
        pod = Fake::commit(&mut inner, &fake.changes, key.clone(), pod, "MODIFIED");
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
    if let Some(want) = body["metadata"]["uid"].as_str()
        && want != uid
    {
        record(&mut inner, 409);
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on pods \"{name}\": StorageError: invalid object, Code: 4, Key: /registry/pods/{ns}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
            ),
            Some(json!({"name": name, "kind": "pods"})),
        );
    }
    if let Some(bound) = pod["spec"]["nodeName"].as_str() {
        let bound = bound.to_string();
        record(&mut inner, 409);
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{bound}\""
            ),
            Some(json!({"name": name, "kind": "pods/binding"})),
        );
    }
    pod["spec"]["nodeName"] = json!(node);
    // As kube-apiserver's setPodNodeAndMetadata: the Binding's annotations and labels are
    // merged onto the pod.
    for field in ["annotations", "labels"] {
        if let Some(extra) = body["metadata"][field].as_object() {
            if !pod["metadata"][field].is_object() {
                pod["metadata"][field] = json!({});
            }
            for (k, v) in extra {
                pod["metadata"][field][k] = v.clone();
            }
        }
    }
    strategic(
        &mut pod,
        &json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": headroom::kube::rfc3339(headroom::kube::now_ms())}]}}),
    );
    Fake::commit(&mut inner, &fake.changes, key, pod, "MODIFIED");
    record(&mut inner, 201);
    (
        StatusCode::CREATED,
        axum::Json(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})),
    )
        .into_response()
}

async fn watch(fake: &Fake, t: &Target, q: &HashMap<String, String>) -> Response {
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout: u64 = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(290);
    let mut live = fake.changes.subscribe();
    let mut dropped = fake.drop_watches.subscribe();
    let (backlog, too_old) = {
        let mut inner = fake.lock();
        if take(&mut inner.fail_watches) {
            drop(inner);
            return status(
                500,
                "InternalError",
                "Internal error occurred: injected by the fake",
                None,
            );
        }
        let too_old = from != 0 && from < inner.compacted;
        let backlog: Vec<Change> = inner.log.iter().filter(|c| c.rv > from).cloned().collect();
        (backlog, too_old)
    };
    let resource = t.resource.clone();
    let namespace = t.namespace.clone();
    let matches = move |c: &Change| {
        c.resource == resource && namespace.as_ref().is_none_or(|n| *n == c.namespace)
    };
    let line = |v: Value| -> Result<Bytes, Infallible> {
        let mut s = v.to_string();
        s.push('\n');
        Ok(Bytes::from(s))
    };
    let stream = async_stream(
        move |tx: tokio::sync::mpsc::Sender<Result<Bytes, Infallible>>| async move {
            if too_old {
                let _ = tx
                    .send(line(json!({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {from} ({})", from + 1),
                    "reason": "Expired", "code": 410}})))
                    .await;
                return;
            }
            let mut last = from;
            for c in backlog.into_iter().filter(|c| matches(c)) {
                last = last.max(c.rv);
                if tx
                    .send(line(json!({"type": c.kind, "object": c.object})))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let end = tokio::time::sleep(Duration::from_secs(timeout));
            tokio::pin!(end);
            loop {
                tokio::select! {
                    _ = &mut end => return,
                    _ = dropped.recv() => return,
                    c = live.recv() => match c {
                        Ok(c) if c.rv > last && matches(&c) => {
                            last = c.rv;
                            if tx.send(line(json!({"type": c.kind, "object": c.object}))).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        },
    );
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// A stream fed by a spawned producer.
fn async_stream<F, Fut>(f: F) -> impl futures::Stream<Item = Result<Bytes, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Bytes, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// `GET /api/v1/namespaces/NS/services/[SCHEME:]NAME[:PORT]/proxy/PATH`, as kube-apiserver
/// answers it: 403 when `services/proxy` is forbidden ([`Fake::forbid`]), 404 for a Service
/// that does not exist, 503 when it has no endpoints, else the backend's answer, fetched
/// without the caller's `Authorization` (the real server drops it after authenticating).
async fn service_proxy(fake: &Fake, uri: &Uri, headers: &HeaderMap) -> Option<Response> {
    let rest = uri.path().strip_prefix("/api/v1/namespaces/")?;
    let (ns, rest) = rest.split_once("/services/")?;
    let (spec, path) = rest.split_once("/proxy")?;
    let mut parts = spec.split(':').collect::<Vec<_>>();
    if parts.len() == 3 {
        parts.remove(0);
    }
    let (name, port) = (parts[0], parts.get(1).copied().unwrap_or(""));
    let user = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|t| fake.lock().tokens.get(t).map(|(u, _)| u.clone()))
        .unwrap_or_else(|| "system:anonymous".into());
    fake.lock()
        .calls
        .push((String::new(), "services/proxy".into(), "get".into()));
    if fake.lock().forbidden.contains("services/proxy") {
        return Some(status(
            403,
            "Forbidden",
            &format!(
                "services \"{name}\" is forbidden: User \"{user}\" cannot get resource \"services/proxy\" in API group \"\" in the namespace \"{ns}\""
            ),
            Some(json!({"name": name, "kind": "services"})),
        ));
    }
    if fake.get("services", ns, name).is_none() {
        return Some(status(
            404,
            "NotFound",
            &format!("services \"{name}\" not found"),
            Some(json!({"name": name, "kind": "services"})),
        ));
    }
    let backend = fake
        .lock()
        .backends
        .get(&(ns.to_string(), name.to_string(), port.to_string()))
        .cloned();
    let Some(base) = backend else {
        return Some(status(
            503,
            "ServiceUnavailable",
            &format!("no endpoints available for service \"{name}\""),
            None,
        ));
    };
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let answer = async {
        // As kube-apiserver: a redirect goes back to the caller (a relative `Location` as
        // is), it is not followed here.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let r = client.get(format!("{base}{path}{query}")).send().await?;
        let code = r.status().as_u16();
        // The backend's own type: JSON, text, or the `/ui` pages' HTML.
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let ct = header("content-type").unwrap_or_else(|| "application/json".into());
        let location = header("location");
        Ok::<_, reqwest::Error>((code, ct, location, r.bytes().await?))
    };
    Some(match answer.await {
        Ok((code, ct, location, body)) => {
            let mut b = Response::builder().status(code).header("content-type", ct);
            if let Some(l) = location {
                b = b.header("location", l);
            }
            b.body(Body::from(body)).unwrap()
        }
        Err(e) => status(
            503,
            "ServiceUnavailable",
            &format!("error trying to reach service: {e}"),
            None,
        ),
    })
}
