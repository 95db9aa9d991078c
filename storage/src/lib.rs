//! `headroom-storage`: headroom's embedded time-series store on sled.
//!
//! It keeps samples (metric name + label set → timestamped f64 values), per-builder run
//! records and placement history, the scheduler's decision log and small keyed state, so
//! headroom runs with no external database and survives restarts. It depends on sled and
//! serde only: no Kubernetes types and no analytics engine, so the layering stays clean.
