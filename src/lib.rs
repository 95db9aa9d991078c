//! headroom: a Kubernetes scheduler that places pods by what nodes and workloads really use.
