//! The `headroom` binary.
fn main() {}
