//! PodTopologySpread (placeholder until the full plugin lands).

use serde::{Deserialize, Serialize};

use crate::framework::Registered;

/// Plugin name.
pub const NAME: &str = "PodTopologySpread";

/// Arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct PodTopologySpreadArgs {}

/// The plugin.
#[derive(Debug, Default)]
pub struct PodTopologySpread;

impl PodTopologySpread {
    /// Creates the plugin.
    pub fn new(_args: PodTopologySpreadArgs) -> Self {
        PodTopologySpread
    }

    /// Registers its extension points.
    pub fn register(self) -> Registered {
        Registered::new(NAME)
    }
}
