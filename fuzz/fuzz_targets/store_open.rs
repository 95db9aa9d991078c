//! Opening a damaged store: a directory whose sled `db` file is the input.
#![no_main]

use headroom_storage::{Store, StoreConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    if std::fs::write(dir.path().join("db"), data).is_err() {
        return;
    }
    if let Ok(store) = Store::open(dir.path(), StoreConfig::default()) {
        let _ = store.flush();
    }
});
