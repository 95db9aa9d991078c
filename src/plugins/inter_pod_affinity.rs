//! InterPodAffinity (placeholder until the full plugin lands).

use serde::{Deserialize, Serialize};

use crate::framework::Registered;

/// Plugin name.
pub const NAME: &str = "InterPodAffinity";

/// Arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct InterPodAffinityArgs {}

/// The plugin.
#[derive(Debug, Default)]
pub struct InterPodAffinity;

impl InterPodAffinity {
    /// Creates the plugin.
    pub fn new(_args: InterPodAffinityArgs) -> Self {
        InterPodAffinity
    }

    /// Registers its extension points.
    pub fn register(self) -> Registered {
        Registered::new(NAME)
    }
}
