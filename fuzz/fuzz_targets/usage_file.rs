//! The usage file (`place --usage`).
#![no_main]

use headroom::usage::file::UsageFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = UsageFile::parse(text, "fuzz.yaml", 1_767_225_600_000);
    }
});
