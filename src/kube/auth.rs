//! Who may call `serve`'s HTTP endpoints, decided the way Kubernetes components decide it
//! for their secure ports ("delegated" authentication and authorisation):
//!
//! - **authentication**: a client certificate verified against `serve.security.clientCAFile`
//!   (its CN is the user, its O entries the groups — kube-scheduler calls the extender this
//!   way, with its extender `tlsConfig`), else an `Authorization: Bearer` token checked with a
//!   `TokenReview`; neither: `401`;
//! - **authorisation**: a `SubjectAccessReview` for the request's path and verb as a
//!   non-resource URL (`post /extender/bind`, `get /explain/ci/build-1`), so RBAC decides
//!   (`deploy/rbac.yaml` grants kube-scheduler the extender and a viewer role the API);
//!   denied: `403`;
//! - `/healthz` and `/readyz` (`alwaysAllowPaths`) answer anyone, for probes.
//!
//! Review answers are cached for `cacheTTL` (allowed and denied alike), so a busy extender
//! costs the API server a few reviews a minute, not two per request. Mode `none` turns all of
//! this off; it is accepted only when every listener is on a loopback address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::time::Instant;

use super::tls::PeerIdentity;
use crate::config::serve::{SecurityConfig, SecurityMode};
use headroom_scheduler::framework::BoxFuture;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    /// User name.
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// Asks the cluster who a token belongs to and what a user may do.
pub trait Reviewer: Send + Sync {
    /// `Some(user)` for a valid token, `None` for an invalid one.
    fn authenticate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>>;
    /// Whether `user` may `verb` the non-resource URL `path`.
    fn authorize<'a>(
        &'a self,
        user: &'a User,
        path: &'a str,
        verb: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>>;
}

/// The API server's `TokenReview` and `SubjectAccessReview`.
pub struct KubeReviewer {
    client: Client,
    timeout: Duration,
}

impl KubeReviewer {
    /// Reviews through `client`, each call bounded by `timeout`.
    pub fn new(client: Client, timeout: Duration) -> KubeReviewer {
        KubeReviewer { client, timeout }
    }
}

impl Reviewer for KubeReviewer {
    fn authenticate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>> {
        Box::pin(async move {
            let api: Api<TokenReview> = Api::all(self.client.clone());
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer =
                tokio::time::timeout(self.timeout, api.create(&PostParams::default(), &review))
                    .await
                    .map_err(|_| "TokenReview timed out".to_string())?
                    .map_err(|e| format!("TokenReview: {e}"))?;
            let status = answer.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let user = status.user.unwrap_or_default();
            Ok(Some(User {
                name: user.username.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
            }))
        })
    }

    fn authorize<'a>(
        &'a self,
        user: &'a User,
        path: &'a str,
        verb: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    groups: Some(user.groups.clone()),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(path.to_string()),
                        verb: Some(verb.to_string()),
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer =
                tokio::time::timeout(self.timeout, api.create(&PostParams::default(), &review))
                    .await
                    .map_err(|_| "SubjectAccessReview timed out".to_string())?
                    .map_err(|e| format!("SubjectAccessReview: {e}"))?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Cached review answers.
#[derive(Default)]
struct Cache {
    tokens: HashMap<String, (Instant, Option<User>)>,
    access: HashMap<(User, String, String), (Instant, bool)>,
}

/// Bounds each cache: past it, the cache starts over (a flood of distinct tokens must not
/// grow memory).
const CACHE_MAX: usize = 10_000;

/// The authentication and authorisation layer (cheap to clone).
#[derive(Clone)]
pub struct Auth {
    mode: SecurityMode,
    allow: Arc<Vec<String>>,
    ttl: Duration,
    reviewer: Arc<dyn Reviewer>,
    cache: Arc<Mutex<Cache>>,
    requests: Family<ResultLabel, Counter>,
}

impl Auth {
    /// A layer for `config`, asking `reviewer`.
    pub fn new(config: &SecurityConfig, reviewer: Arc<dyn Reviewer>) -> Auth {
        Auth {
            mode: config.mode,
            allow: Arc::new(config.always_allow_paths.clone()),
            ttl: config.cache_ttl,
            reviewer,
            cache: Arc::new(Mutex::new(Cache::default())),
            requests: Family::default(),
        }
    }

    /// Registers `headroom_auth_requests_total{result}` on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        for result in ["allowed", "unauthenticated", "forbidden", "error"] {
            let _ = self.requests.get_or_create(&ResultLabel { result });
        }
        metrics.register(
            "headroom_auth_requests",
            "Requests by authentication and authorisation result (allowed, unauthenticated, forbidden, error)",
            self.requests.clone(),
        );
    }

    fn count(&self, result: &'static str) {
        self.requests.get_or_create(&ResultLabel { result }).inc();
    }

    fn cached_token(&self, token: &str) -> Option<Option<User>> {
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        c.tokens
            .get(token)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, u)| u.clone())
    }

    /// The caller: a verified client certificate's subject, else the owner of the bearer
    /// token (read from `req` before any await: a request is not `Sync`).
    async fn user(
        &self,
        peer: Option<PeerIdentity>,
        token: Option<String>,
    ) -> Result<Option<User>, String> {
        if let Some(id) = peer {
            return Ok(Some(User {
                name: id.user,
                groups: id.groups,
            }));
        }
        let Some(token) = token else {
            return Ok(None);
        };
        let token = token.as_str();
        if let Some(u) = self.cached_token(token) {
            return Ok(u);
        }
        let u = self.reviewer.authenticate(token).await?;
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.tokens.len() >= CACHE_MAX {
            c.tokens.clear();
        }
        c.tokens
            .insert(token.to_string(), (Instant::now(), u.clone()));
        Ok(u)
    }

    async fn allowed(&self, user: &User, path: &str, verb: &str) -> Result<bool, String> {
        let key = (user.clone(), path.to_string(), verb.to_string());
        {
            let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, ok)) = c.access.get(&key)
                && at.elapsed() < self.ttl
            {
                return Ok(*ok);
            }
        }
        let ok = self.reviewer.authorize(user, path, verb).await?;
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.access.len() >= CACHE_MAX {
            c.access.clear();
        }
        c.access.insert(key, (Instant::now(), ok));
        Ok(ok)
    }
}

fn refuse(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// The middleware: lets the request through, or answers `401`/`403`/`503` with
/// `{"error": ...}`. Mount with `axum::middleware::from_fn_with_state(auth, authorize)`.
pub async fn authorize(State(auth): State<Auth>, req: Request, next: Next) -> Response {
    if auth.mode == SecurityMode::None || auth.allow.iter().any(|p| p == req.uri().path()) {
        return next.run(req).await;
    }
    let peer = req.extensions().get::<PeerIdentity>().cloned();
    let token = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let user = match auth.user(peer, token).await {
        Ok(Some(u)) => u,
        Ok(None) => {
            auth.count("unauthenticated");
            return refuse(
                StatusCode::UNAUTHORIZED,
                "unauthorized: present a client certificate signed by serve.security.clientCAFile or a bearer token".into(),
            );
        }
        Err(e) => {
            auth.count("error");
            tracing::warn!(error = %e, "authentication failed");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot authenticate now: {e}"),
            );
        }
    };
    let verb = req.method().as_str().to_ascii_lowercase();
    let path = req.uri().path().to_string();
    match auth.allowed(&user, &path, &verb).await {
        Ok(true) => {
            auth.count("allowed");
            next.run(req).await
        }
        Ok(false) => {
            auth.count("forbidden");
            refuse(
                StatusCode::FORBIDDEN,
                format!("forbidden: user {:?} may not {verb} {path}", user.name),
            )
        }
        Err(e) => {
            auth.count("error");
            tracing::warn!(error = %e, "authorisation failed");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot authorise now: {e}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Token "good" is alice (group ci); alice may get /explain/*, nobody else anything.
    #[derive(Default)]
    struct Table {
        calls: AtomicU32,
    }

    impl Reviewer for Table {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<User>, String>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok((token == "good").then(|| User {
                    name: "alice".into(),
                    groups: vec!["ci".into()],
                }))
            })
        }

        fn authorize<'a>(
            &'a self,
            user: &'a User,
            path: &'a str,
            verb: &'a str,
        ) -> BoxFuture<'a, Result<bool, String>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok(user.name == "alice" && verb == "get" && path.starts_with("/explain/"))
            })
        }
    }

    async fn call(app: &axum::Router, path: &str, token: Option<&str>) -> u16 {
        use tower::ServiceExt;
        let mut req = axum::http::Request::builder().uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        app.clone()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    #[tokio::test]
    async fn unauthenticated_forbidden_allowed_and_cached() {
        let reviewer = Arc::new(Table::default());
        let auth = Auth::new(&SecurityConfig::default(), reviewer.clone());
        let app = axum::Router::new()
            .route("/explain/{ns}/{pod}", axum::routing::get(|| async { "ok" }))
            .route("/nodes", axum::routing::get(|| async { "ok" }))
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(auth, authorize));
        assert_eq!(call(&app, "/healthz", None).await, 200);
        assert_eq!(call(&app, "/explain/ci/p", None).await, 401);
        assert_eq!(call(&app, "/explain/ci/p", Some("bad")).await, 401);
        assert_eq!(call(&app, "/nodes", Some("good")).await, 403);
        assert_eq!(call(&app, "/explain/ci/p", Some("good")).await, 200);
        let before = reviewer.calls.load(Ordering::SeqCst);
        assert_eq!(call(&app, "/explain/ci/p", Some("good")).await, 200);
        assert_eq!(reviewer.calls.load(Ordering::SeqCst), before, "cached");
    }
}
