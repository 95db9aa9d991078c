//! `Status`: what a plugin says about a pod (and a node), as upstream's `framework.Status`.

use std::borrow::Cow;
use std::fmt;

use smallvec::SmallVec;

/// The outcome class of a plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Code {
    /// The plugin is satisfied.
    Success,
    /// Something went wrong that is not about the pod or node (a bug, missing state).
    Error,
    /// The node does not fit now; preemption might help.
    Unschedulable,
    /// The node does not fit and nothing about other pods would change that.
    UnschedulableAndUnresolvable,
    /// The plugin has nothing to do for this pod (its later extension points are not run).
    Skip,
    /// Permit only: the pod is not to be bound now and waits; the plugin returns how long
    /// it may wait at most with it. Unlike upstream's waiting pod, which keeps its node
    /// reserved, headroom's is unreserved and goes back to the queue: the one Permit that
    /// waits (History's warm wait) holds a build *off* the node the cycle chose.
    Wait,
}

impl Code {
    /// The code as upstream's `Code.String()` writes it (the `status` label of its
    /// metrics).
    pub fn upstream_name(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Skip => "Skip",
            Code::Wait => "Wait",
        }
    }
}

/// Short reasons (the upstream strings the FailedScheduling summary counts). Almost always
/// static strings: building them must not allocate on the hot path.
pub type Reasons = SmallVec<[Cow<'static, str>; 1]>;

/// A plugin's verdict.
#[derive(Debug, PartialEq, Eq)]
pub struct Status {
    /// The class.
    pub code: Code,
    /// The upstream-style reasons (e.g. `Insufficient cpu`).
    pub reasons: Reasons,
    /// The plugin that produced it (set by the framework).
    pub plugin: &'static str,
    /// The numbers behind the verdict, filled only when the cycle is asked to explain.
    pub detail: Option<String>,
}

impl Clone for Status {
    /// Cheap for the usual one static reason (filters clone one status per rejected node).
    #[inline]
    fn clone(&self) -> Status {
        let reasons = match self.reasons.as_slice() {
            [Cow::Borrowed(r)] => {
                let mut one = Reasons::new();
                one.push(Cow::Borrowed(*r));
                one
            }
            _ => self.reasons.clone(),
        };
        Status {
            code: self.code,
            reasons,
            plugin: self.plugin,
            detail: self.detail.clone(),
        }
    }
}

impl Status {
    /// Success.
    #[inline]
    pub const fn success() -> Status {
        Status {
            code: Code::Success,
            reasons: SmallVec::new_const(),
            plugin: "",
            detail: None,
        }
    }

    /// Skip.
    #[inline]
    pub const fn skip() -> Status {
        Status {
            code: Code::Skip,
            reasons: SmallVec::new_const(),
            plugin: "",
            detail: None,
        }
    }

    /// A status with one reason.
    #[inline]
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Status {
        let mut reasons = Reasons::new();
        reasons.push(reason.into());
        Status {
            code,
            reasons,
            plugin: "",
            detail: None,
        }
    }

    /// `Unschedulable` with one reason.
    #[inline]
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Unschedulable, reason)
    }

    /// `UnschedulableAndUnresolvable` with one reason.
    #[inline]
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// `Wait` with one reason (Permit only).
    pub fn wait(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Wait, reason)
    }

    /// `Error` with a message.
    pub fn error(message: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Error, message)
    }

    /// Attaches the numbers behind the verdict.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Status {
        self.detail = Some(detail.into());
        self
    }

    /// Attaches the producing plugin's name.
    pub fn with_plugin(mut self, plugin: &'static str) -> Status {
        self.plugin = plugin;
        self
    }

    /// True for `Success`.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// True for `Skip`.
    #[inline]
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// True for the two unschedulable codes.
    #[inline]
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The reasons joined by `, ` (upstream's `Status.Message()`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.code)?;
        if !self.plugin.is_empty() {
            write!(f, " ({})", self.plugin)?;
        }
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.message())?;
        }
        if let Some(d) = &self.detail {
            write!(f, " [{d}]")?;
        }
        Ok(())
    }
}
