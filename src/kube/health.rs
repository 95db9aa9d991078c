//! Whether the API server answers, as every part of `serve` that talks to it sees it: the
//! watches, the lease, the binds, the events and the reporter's patches share one
//! [`ApiHealth`], so an API server that is down (or restarting, answering 503) is logged
//! once when it goes away, once per interval while it stays away (with how many calls
//! failed, by operation), and once when it answers again:
//!
//! ```text
//! WARN API server https://10.0.0.1:6443: watch of Pod failed; retrying, one line every 30s while it lasts error="… Connection refused (os error 111)"
//! INFO API server https://10.0.0.1:6443: reachable again after 42s, 310 failed attempts
//! ```
//!
//! Errors the server answered with for one request (a 409 conflict, a 403, a 422) are not
//! about reachability: each caller keeps reporting those itself.

use std::sync::Arc;

use kube::runtime::watcher;

use crate::logging::{Trouble, error_chain, now};

/// The API server's reachability as all of `serve`'s callers see it.
#[derive(Debug)]
pub struct ApiHealth {
    reach: Trouble,
}

impl ApiHealth {
    /// For the API server at `server` (its URL, as the kubeconfig names it; empty when
    /// unknown).
    pub fn new(server: &str) -> ApiHealth {
        let subject = match server {
            "" => "the API server".to_string(),
            url => format!("API server {url}"),
        };
        ApiHealth {
            reach: Trouble::new(subject, "reachable again"),
        }
    }

    /// The server answered a call (whatever it answered).
    pub fn answered(&self) {
        self.reach.ok(now());
    }

    /// A call of `op` failed with `e`. Returns true when the failure is the server being
    /// unreachable or unavailable, which this counts and logs (summarised) so the caller
    /// need not; false for an answer about the request itself, which the caller reports.
    pub fn failed(&self, op: &str, e: &kube::Error) -> bool {
        self.judge(op, Some(e), e)
    }

    /// A call of `op` failed for a reason the caller already judged to be the server
    /// unreachable or unavailable.
    pub fn lost(&self, op: &str, error: &dyn std::fmt::Display) {
        self.reach.failed(now(), op, error);
    }

    /// As [`failed`](Self::failed), for a watch's error.
    pub fn watch_failed(&self, op: &str, e: &watcher::Error) -> bool {
        let inner = match e {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => Some(e),
            // The server answered: an error event, or an object without a version.
            watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => None,
        };
        self.judge(op, inner, e)
    }

    /// Counts `shown` as unreachability when the client error behind it (`cause`) says so,
    /// else as an answer.
    fn judge(&self, op: &str, cause: Option<&kube::Error>, shown: &dyn std::error::Error) -> bool {
        if cause.is_some_and(unreachable) {
            self.reach.failed(now(), op, &error_chain(shown));
            true
        } else {
            self.answered();
            false
        }
    }

    /// Whether the server is unreachable now, as far as the last call knows.
    pub fn down(&self) -> bool {
        self.reach.ongoing()
    }
}

/// What one writer of `serve` (the event writer, the reporter) reports about its calls: the
/// server unreachable to the shared [`ApiHealth`] (once it is given one), any other failure
/// to the writer's own [`Trouble`], both summarised while they last.
#[derive(Debug)]
pub struct ApiCalls {
    refused: Trouble,
    health: std::sync::OnceLock<Arc<ApiHealth>>,
}

impl ApiCalls {
    /// For the writes of `what` (`event writes`), whose end of trouble reads `again`.
    pub fn new(what: &str, again: &'static str) -> ApiCalls {
        ApiCalls {
            refused: Trouble::new(what, again),
            health: std::sync::OnceLock::new(),
        }
    }

    /// Reports unreachability to `health` from now on (the first one given stays).
    pub fn report_to(&self, health: Arc<ApiHealth>) {
        let _ = self.health.set(health);
    }

    /// A call succeeded.
    pub fn ok(&self) {
        if let Some(h) = self.health.get() {
            h.answered();
        }
        self.refused.ok(now());
    }

    /// A call of `op` failed with `e`.
    pub fn failed(&self, op: &str, e: &kube::Error) {
        let counted = self.health.get().is_some_and(|h| h.failed(op, e));
        if !counted {
            self.refused.failed(now(), op, &error_chain(e));
        }
    }

    /// A call of `op` had no answer within `after`.
    pub fn timed_out(&self, op: &str, after: std::time::Duration) {
        self.refused
            .failed(now(), op, &format_args!("no answer within {after:?}"));
    }
}

/// Whether `e` says the API server could not be reached or could not serve at all (a
/// connection refused or reset, a TLS failure, a timeout, 503 or 504), rather than
/// answering about this one request.
pub fn unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 503 | 504),
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::ReadEvents(_)
        | kube::Error::RustlsTls(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "Reason").with_code(code),
        ))
    }

    #[test]
    fn only_unreachability_is_counted_here() {
        let h = ApiHealth::new("https://127.0.0.1:1");
        assert!(!h.failed("bind", &status(409)));
        assert!(!h.down());
        assert!(h.failed("bind", &status(503)));
        assert!(h.down());
        let refused = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        )));
        assert!(h.failed("watch of Pod", &refused));
        assert!(h.watch_failed("watch of Node", &watcher::Error::WatchFailed(refused)));
        // Any answer ends it, a refusal of this one request included.
        assert!(!h.failed("bind", &status(409)));
        assert!(!h.down());
    }
}
