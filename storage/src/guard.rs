//! Last line of defence around sled's recovery: a panic inside it (sled 0.34 indexes
//! past the end of its segment table when the `db` file is shorter than its snapshot
//! says, among others) becomes an error instead of taking the process down, and does not
//! print a backtrace to the user.
//!
//! The panic hook is process-global, so it is swapped only while at least one guarded
//! call runs (a counter under a mutex), restored by the last one to leave, and while
//! installed it stays silent only for panics on a thread inside a guarded call: panics
//! anywhere else are passed to the previous hook unchanged.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::{Arc, Mutex};

type Hook = Arc<dyn Fn(&PanicHookInfo<'_>) + Send + Sync + 'static>;

thread_local! {
    /// Set while this thread runs a guarded call.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
    /// Where and why the guarded call panicked (recorded by the hook).
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Number of guarded calls running and the hook that was installed before the first.
static HOOK: Mutex<(usize, Option<Hook>)> = Mutex::new((0, None));

struct Installed;

impl Installed {
    fn new() -> Installed {
        let mut h = HOOK.lock().unwrap_or_else(|e| e.into_inner());
        if h.0 == 0 {
            let prev: Hook = Arc::from(panic::take_hook());
            let forward = prev.clone();
            panic::set_hook(Box::new(move |info| {
                if GUARDED.with(Cell::get) {
                    let at = info
                        .location()
                        .map(|l| format!(" at {}:{}", short_path(l.file()), l.line()))
                        .unwrap_or_default();
                    let text = format!("{}{at}", payload_text(info.payload()));
                    LAST.with(|l| *l.borrow_mut() = Some(text));
                } else {
                    forward(info);
                }
            }));
            h.1 = Some(prev);
        }
        h.0 += 1;
        Installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let mut h = HOOK.lock().unwrap_or_else(|e| e.into_inner());
        h.0 -= 1;
        if h.0 == 0
            && let Some(prev) = h.1.take()
        {
            drop(panic::take_hook());
            panic::set_hook(Box::new(move |info| prev(info)));
        }
    }
}

/// `.../sled-0.34.7/src/pagecache/segment.rs` → `sled-0.34.7/src/pagecache/segment.rs`.
fn short_path(file: &str) -> &str {
    file.find("sled-").map_or(file, |i| &file[i..])
}

fn payload_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".into()
    }
}

/// Runs `f`, turning a panic on this thread into `Err(description)` (message and
/// location) without printing it.
pub(crate) fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let installed = Installed::new();
    let was = GUARDED.with(|g| g.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    drop(installed);
    result.map_err(|payload| {
        LAST.with(|l| l.borrow_mut().take())
            .unwrap_or_else(|| payload_text(payload.as_ref()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_errors() {
        assert_eq!(catch_panic(|| 7), Ok(7));
        let e = catch_panic(|| -> u8 { panic!("boom {}", 1) }).unwrap_err();
        assert!(e.starts_with("boom 1 at ") && e.contains("guard.rs"), "{e}");
        // Nested guarded calls.
        let e = catch_panic(|| catch_panic(|| -> u8 { panic!("inner") })).unwrap();
        assert!(e.unwrap_err().starts_with("inner"));
    }
}
