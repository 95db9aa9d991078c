//! Pod metadata for the collectors: where pods come from ([`PodLister`]) and an index of
//! their builders ([`headroom_scheduler::identity`] says how a pod's builder is found).

use std::collections::HashMap;

use headroom_scheduler::key::Uid;
use k8s_openapi::api::core::v1::Pod;

pub use headroom_scheduler::identity::{
    BuilderId, IdentityConfig, IdentitySource, builder_identity,
};

/// Source of pod metadata (labels, owners, phase), e.g. an informer cache in the CLI.
///
/// Sync on purpose: reflector stores are read synchronously, and the collectors call this
/// once per cycle.
pub trait PodLister: Send + Sync {
    /// The pods currently known (shared: a lister backed by a cache hands out its `Arc`s
    /// instead of copying every pod each cycle).
    fn pods(&self) -> Vec<std::sync::Arc<Pod>>;
}

/// A fixed list of pods (tests, or a one-off listing).
#[derive(Debug, Clone, Default)]
pub struct StaticPods(pub Vec<Pod>);

impl PodLister for StaticPods {
    fn pods(&self) -> Vec<std::sync::Arc<Pod>> {
        self.0.iter().cloned().map(std::sync::Arc::new).collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodInfo {
    pub builder: BuilderId,
    /// Phase `Succeeded` or `Failed`: the run is over even if stats still list it.
    pub ended: bool,
}

/// Pod metadata indexed by UID and by `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct PodIndex {
    by_uid: HashMap<Uid, PodInfo>,
    by_name: HashMap<String, PodInfo>,
}

impl PodIndex {
    pub fn build<'a>(pods: impl IntoIterator<Item = &'a Pod>, config: &IdentityConfig) -> Self {
        let mut index = PodIndex::default();
        for pod in pods {
            let meta = &pod.metadata;
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            let info = PodInfo {
                builder: builder_identity(meta, config),
                ended: matches!(phase, Some("Succeeded" | "Failed")),
            };
            if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
                index.by_name.insert(format!("{ns}/{name}"), info.clone());
            }
            if let Some(uid) = &meta.uid {
                index.by_uid.insert(Uid::from(uid.as_str()), info);
            }
        }
        index
    }

    pub fn get(&self, uid: &str, namespace: &str, name: &str) -> Option<&PodInfo> {
        self.by_uid
            .get(uid)
            .or_else(|| self.by_name.get(&format!("{namespace}/{name}")))
    }
}
