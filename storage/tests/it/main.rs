//! headroom-storage's integration tests, in one binary (one link step).

mod compaction;
mod crash;
mod damage;
mod failsafe;
mod maintenance;
mod model;
mod rescue;

mod store;
