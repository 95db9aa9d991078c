//! Everything after a decision, owned by the engine: the channel from the scheduling loop
//! ([`channel`]), the sink that keeps decisions ([`sink`]: metrics, the in-memory
//! [`DecisionLog`] behind `/explain`, the store, the placement history), and the one
//! hand-off to the mode: a [`Settled`] record per decision, given to the mode's
//! [`OutcomeHandler`].
//!
//! ```text
//! scheduling loop ── Decided (at cycle time) ──────────────┐
//!        └─ bind task ── Settled (decision ⨝ bind result) ──┤ one channel, in order
//!                                                           ▼
//!                     sink: metrics, DecisionLog, store (explanations, placement history)
//!                                                           │ Settled (+ history)
//!                                                           ▼
//!                     OutcomeHandler: serve's reporter (events, conditions, evictions,
//!                     bk-ci annotation); simulate's (preemption's victims leave)
//! ```
//!
//! Why one channel: a placed pod's decision and its bind result used to travel on two
//! channels, and the reporter parked bind results that overtook their decision. The bind
//! task now sends its result after the loop sent the decision, on the same channel, joined
//! with what the mode needs from the decision, so nobody joins anything afterwards.

pub mod channel;
pub mod log;
pub mod sink;

use std::sync::Arc;

pub use channel::{
    ChannelBounds, Decided, DecisionReceiver, DecisionSender, Record, SUMMARY_NOTE, SendError,
    decision_channel,
};
pub use log::{
    DecisionInputs, DecisionLog, ExplainResponse, LogLimits, LoggedDecision, NodeInputs,
    approx_bytes,
};
pub use sink::{STORED_NODES, Sink, SinkReport, run_decision_sink};

use headroom_scheduler::framework::{BindOutcome, Decision, Fallback, Nomination, Outcome};
use headroom_scheduler::key::{PodKey, Uid};
use headroom_scheduler::snapshot::PodInfo;

/// What a decision came to, as a mode acts on it: the decision's outcome (with the usage
/// fallback that placed the pod and preemption's nomination) joined with its bind result
/// when the pod was placed, and the builder's placement history once the engine recorded
/// the placement. The per-node numbers stay in the [`DecisionLog`].
#[derive(Debug, Clone)]
pub struct Settled {
    /// The pod.
    pub pod: PodKey,
    /// The pod's uid (empty when the pod had none).
    pub uid: Uid,
    /// The profile that decided.
    pub profile: String,
    /// Placed, unschedulable or an error, with the message users see.
    pub outcome: Outcome,
    /// The usage fallback, when it placed the pod.
    pub fallback: Option<Fallback>,
    /// Preemption's nomination (node and victims), when the pod is to preempt.
    pub nomination: Option<Nomination>,
    /// The bind, when the pod was placed.
    pub bind: Option<Bound>,
    /// The placed pod's builder (absent for a bare pod, whose identity is itself).
    pub builder: Option<String>,
    /// The builder's placement history, newest first, after the engine recorded this
    /// placement (absent without a store, a builder or a successful bind).
    pub history: Option<Vec<String>>,
    /// Bound through the extender's `/bind`, for kube-scheduler, which decided and writes
    /// the pod's events and conditions itself: the engine records the placement as for
    /// its own binds, and the mode writes nothing.
    pub by_extender: bool,
}

/// A placed pod's bind.
#[derive(Debug, Clone)]
pub struct Bound {
    /// The pod as it was assumed on its node.
    pub pod: Arc<PodInfo>,
    /// The node.
    pub node: String,
    /// What the bind (or a PreBind that failed) came to.
    pub outcome: BindOutcome,
}

impl Settled {
    /// The parts of `decision` a mode acts on; `builder` as the scheduler recorded the
    /// placement.
    pub fn of(decision: &Decision, builder: Option<String>) -> Settled {
        Settled {
            pod: decision.key(),
            uid: decision.uid.clone(),
            profile: decision.profile.clone(),
            outcome: decision.outcome.clone(),
            fallback: decision.fallback.clone(),
            nomination: decision.nomination.clone(),
            bind: None,
            builder,
            history: None,
            by_extender: false,
        }
    }

    /// A bind kube-scheduler asked of the extender (`/bind`): `pod` to `node` under the
    /// extender's `profile`, with what it came to; `builder` as the identity rule names the
    /// pod's (absent for a bare pod, as in the scheduler's own binds).
    pub fn extender_bind(
        pod: Arc<PodInfo>,
        node: &str,
        profile: &str,
        builder: Option<String>,
        outcome: BindOutcome,
    ) -> Settled {
        Settled {
            pod: pod.key(),
            uid: pod.uid.clone(),
            profile: profile.to_string(),
            outcome: Outcome::Placed { node: node.into() },
            fallback: None,
            nomination: None,
            bind: Some(Bound {
                pod,
                node: node.to_string(),
                outcome,
            }),
            builder,
            history: None,
            by_extender: true,
        }
    }

    /// Whether the pod was placed and bound.
    pub fn bound(&self) -> bool {
        self.bind.as_ref().is_some_and(|b| b.outcome.is_bound())
    }
}

/// What a mode does with what its decisions came to: `serve` writes events and conditions,
/// evicts preemption's victims and annotates; `simulate` takes victims out of its farm;
/// `place` out of its what-if snapshot (`preemption::EvictAtOnce`, called by `place`
/// itself: a what-if makes no bind, so it does not go through the sink).
///
/// The engine's sink calls it for every settled decision, in decision order (a placed pod
/// once its bind ended). It runs on the sink's task, so it must not block: a mode with slow
/// work (API calls) hands it to a task of its own, bounded, and loses that work rather
/// than holding up the sink.
pub trait OutcomeHandler: Send + Sync {
    /// One settled decision.
    fn settled(&self, settled: Settled);
}
