//! Signals that more than one configured source writes: one series per signal and node,
//! so the samples of the source that reports later are refused as out of order. Not an
//! error (the sources may cover different nodes): `serve` logs each as a warning and
//! `check-config` prints it.

use std::collections::BTreeMap;

use crate::config::{CollectorsConfig, ScrapeKind, SourceKind};
use crate::samples::Signal;

/// A stored signal that more than one configured source writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSignal {
    /// The signal.
    pub signal: Signal,
    /// The sources writing it, by name.
    pub sources: Vec<SourceKind>,
}

impl std::fmt::Display for SharedSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .sources
            .iter()
            .map(|s| format!("collectors.{s}"))
            .collect();
        write!(
            f,
            "{} write `{}`: a series has one timeline, so the samples of the source that \
             reports later are refused as out of order (counted in \
             headroom_collector_errors_total, reason sink) and the two sources' values \
             interleave; keep one source per signal",
            names.join(" and "),
            self.signal.metric()
        )?;
        if self.sources.contains(&SourceKind::Prometheus) {
            write!(
                f,
                " (an empty query, `collectors.prometheus.queries.{}: ''`, turns it off in \
                 Prometheus)",
                self.signal.metric()
            )?;
        }
        Ok(())
    }
}

/// The signals that more than one configured source writes (a kubelet source and a
/// Prometheus scraping the same kubelets' cAdvisor both write every node's memory).
/// Not an error: the sources may cover different nodes; `serve` logs each as a
/// warning and `check-config` prints it.
pub fn shared_signals(config: &CollectorsConfig) -> Vec<SharedSignal> {
    let mut by_signal: BTreeMap<Signal, Vec<SourceKind>> = BTreeMap::new();
    if let Some(p) = &config.prometheus {
        for (signal, _, _) in crate::prometheus::resolve_queries(p) {
            by_signal
                .entry(signal)
                .or_default()
                .push(SourceKind::Prometheus);
        }
    }
    if config.kubelet.is_some() {
        // The summary API reports every signal.
        for signal in Signal::ALL {
            by_signal
                .entry(signal)
                .or_default()
                .push(SourceKind::Kubelet);
        }
    }
    if let Some(s) = &config.scrape {
        let mut written: Vec<Signal> = Vec::new();
        for t in &s.targets {
            written.extend_from_slice(match t.kind {
                ScrapeKind::KubeletResource => &[
                    Signal::NodeCpuUsageCores,
                    Signal::NodeMemoryWorkingSetBytes,
                    Signal::ContainerCpuUsageCores,
                    Signal::ContainerMemoryWorkingSetBytes,
                ],
                ScrapeKind::NodeExporter => &[
                    Signal::NodeCpuUsageCores,
                    Signal::NodeMemoryAvailableBytes,
                    Signal::NodeMemoryWorkingSetBytes,
                    Signal::NodeFsAvailableBytes,
                    Signal::NodeFsCapacityBytes,
                ],
            });
        }
        written.sort();
        written.dedup();
        for signal in written {
            by_signal
                .entry(signal)
                .or_default()
                .push(SourceKind::Scrape);
        }
    }
    by_signal
        .into_iter()
        .filter(|(_, sources)| sources.len() > 1)
        .map(|(signal, mut sources)| {
            sources.sort_by_key(|s| s.as_str());
            SharedSignal { signal, sources }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> CollectorsConfig {
        serde_json::from_value(json).unwrap()
    }

    /// A kubelet source beside a Prometheus with its default queries shares every signal
    /// Prometheus has a default for; the queries turned off in Prometheus share nothing;
    /// a single source shares nothing.
    #[test]
    fn signals_written_by_two_sources_are_named() {
        let kubelet = serde_json::json!({"nodes": ["n1"]});
        let both = config(serde_json::json!({
            "prometheus": {"url": "http://p:9090"},
            "kubelet": kubelet,
        }));
        let shared = shared_signals(&both);
        let mem = shared
            .iter()
            .find(|s| s.signal == Signal::NodeMemoryWorkingSetBytes)
            .unwrap();
        assert_eq!(mem.sources, [SourceKind::Kubelet, SourceKind::Prometheus]);
        assert!(
            shared
                .iter()
                .all(|s| s.signal != Signal::PodEphemeralStorageUsedBytes),
            "Prometheus has no default for it"
        );
        let text = mem.to_string();
        assert!(
            text.contains("collectors.kubelet and collectors.prometheus")
                && text
                    .contains("`collectors.prometheus.queries.node_memory_working_set_bytes: ''`"),
            "{text}"
        );
        let off: serde_json::Map<String, serde_json::Value> = Signal::ALL
            .iter()
            .map(|s| (s.metric().to_string(), serde_json::json!("")))
            .collect();
        let split = config(serde_json::json!({
            "prometheus": {"url": "http://p:9090", "queries": off},
            "kubelet": kubelet,
        }));
        assert!(shared_signals(&split).is_empty());
        assert!(shared_signals(&config(serde_json::json!({"kubelet": kubelet}))).is_empty());
        let scrape = config(serde_json::json!({
            "kubelet": kubelet,
            "scrape": {"targets": [{"url": "http://n1:9100/metrics", "kind": "node_exporter"}]},
        }));
        let names: Vec<&str> = shared_signals(&scrape)
            .iter()
            .map(|s| s.signal.metric())
            .collect();
        assert!(
            names.contains(&"node_fs_capacity_bytes")
                && !names.contains(&"container_cpu_usage_cores")
        );
    }
}
