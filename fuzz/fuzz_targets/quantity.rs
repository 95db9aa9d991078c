//! Kubernetes quantities: parse, then every conversion and rendering.
#![no_main]

use headroom::quantity::{Quantity, format_bytes, format_milli};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = Quantity::parse(s) {
        let _ = (q.value(), q.milli_value(), q.nano_value(), q.to_string());
        let _ = (format_bytes(q.value()), format_milli(q.milli_value()));
    }
});
