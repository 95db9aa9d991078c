//! The configuration file (`--config`, `check-config`): parse and validate, then render the
//! effective configuration.
#![no_main]

use headroom::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(c) = Config::from_yaml(text, "fuzz.yaml")
    {
        let _ = c.to_yaml();
    }
});
