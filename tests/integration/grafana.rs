//! Grafana dashboards: placeholder, filled below.
