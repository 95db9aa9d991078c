//! Prometheus HTTP API answers (`/api/v1/query`, `/api/v1/query_range`); the first byte
//! picks the HTTP status the body came with.
#![no_main]

use headroom_collectors::prometheus::decode_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let status = [200, 400, 422, 503][usize::from(*first) % 4];
    let _ = decode_response("http://p/api/v1/query", status, "sig", "up", body);
});
