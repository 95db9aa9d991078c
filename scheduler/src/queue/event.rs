//! The record of why an attempt failed: the plugins blamed, whose declared
//! [`ClusterEvents`](crate::framework::ClusterEvents) decide which events are worth a retry.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::framework::{Code, Decision, Outcome, Status};

/// How an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureKind {
    /// No node fits: the pod waits among the unschedulable pods for a helpful event.
    Unschedulable,
    /// Something went wrong that is not about fit (a plugin error, a failed bind): the pod is
    /// retried after its backoff, without waiting for an event.
    Error,
}

/// Why a scheduling attempt failed, as [`SchedulingQueue::add_unschedulable`](super::SchedulingQueue::add_unschedulable)
/// needs it: the kind, the plugins that rejected the pod (upstream's `UnschedulablePlugins`),
/// and the message shown in `/queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Unschedulable or error.
    pub kind: FailureKind,
    /// The plugins that rejected the pod on some node or in PreFilter.
    pub plugins: BTreeSet<&'static str>,
    /// The FailedScheduling message.
    pub message: String,
}

impl Failure {
    /// An unschedulable failure blamed on `plugins`.
    pub fn unschedulable(
        message: impl Into<String>,
        plugins: impl IntoIterator<Item = &'static str>,
    ) -> Self {
        Failure {
            kind: FailureKind::Unschedulable,
            plugins: plugins.into_iter().filter(|p| !p.is_empty()).collect(),
            message: message.into(),
        }
    }

    /// An error (retried after backoff regardless of events).
    pub fn error(message: impl Into<String>) -> Self {
        Failure {
            kind: FailureKind::Error,
            plugins: BTreeSet::new(),
            message: message.into(),
        }
    }
}

impl From<&Status> for Failure {
    /// Rejections become unschedulable failures blamed on the status's plugin; anything else
    /// (an `Error`, or a success/skip that still ended the attempt) is an error.
    fn from(s: &Status) -> Self {
        if s.is_rejected() {
            Failure::unschedulable(s.message(), [s.plugin])
        } else if s.code == Code::Error {
            Failure::error(s.message())
        } else {
            Failure::error(s.to_string())
        }
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure::from(&s)
    }
}

impl From<&Decision> for Failure {
    /// An unschedulable outcome is blamed on every plugin that rejected some node or the pod
    /// in PreFilter, and a warm hold on the plugin it names; an error outcome (or a placed
    /// pod whose later steps failed) is an error.
    fn from(d: &Decision) -> Self {
        match &d.outcome {
            Outcome::Unschedulable { message } => {
                let plugins = d
                    .pre_filter
                    .iter()
                    .filter(|s| s.is_rejected())
                    .chain(d.rejected.iter().map(|(_, s)| s))
                    .chain(d.absent.iter())
                    .map(|s| s.plugin)
                    .chain(d.warm_hold.iter().map(|h| h.plugin));
                Failure::unschedulable(message.clone(), plugins)
            }
            Outcome::Error { message } => Failure::error(message.clone()),
            Outcome::Placed { node } => Failure::error(format!("placed on {node} but not bound")),
        }
    }
}
