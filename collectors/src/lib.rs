//! `headroom-collectors`: pulls real usage into `headroom-storage`.
//!
//! Sources: the Prometheus HTTP API (configurable PromQL), the kubelet summary API
//! (`/stats/summary`, read-only port or API-server node proxy) and Prometheus text
//! exposition scrapes. Each source runs its own loop and writes timestamped samples.
