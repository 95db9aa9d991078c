//! `headroom-workload`: one stand-in CI build (see the library's docs).
//!
//! ```text
//! headroom-workload [--pod NAMESPACE/NAME] [--driver HOST:PORT|gateway:PORT] [--cache DIR]
//! ```
//!
//! The pod comes from `POD_NAMESPACE`/`POD_NAME` (the downward API) unless given; the
//! driver from `HEADROOM_REPLAY_DRIVER`, default `gateway:18099` (the pod network's
//! gateway, which is the host); the cache directory defaults to `/cache`. Exit status 0 when
//! the build ran its time, 2 on bad arguments or a profile it could not get.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use headroom_workload::{Held, Profile, default_gateway, fetch_profile, http_get};

/// How often the build grows its memory: one slice of CPU burn and sleep.
const TICK: Duration = Duration::from_millis(100);
/// How long it keeps asking for its profile (the driver may be busy creating pods).
const PROFILE_PATIENCE: Duration = Duration::from_secs(60);

struct Args {
    namespace: String,
    name: String,
    driver: String,
    cache: PathBuf,
}

fn args() -> Result<Args, String> {
    let mut pod = None;
    let mut driver = std::env::var("HEADROOM_REPLAY_DRIVER").ok();
    let mut cache = PathBuf::from("/cache");
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a}: needs a value"));
        match a.as_str() {
            "--pod" => pod = Some(value()?),
            "--driver" => driver = Some(value()?),
            "--cache" => cache = PathBuf::from(value()?),
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    let (namespace, name) = match pod {
        Some(p) => {
            let (ns, n) = p
                .split_once('/')
                .ok_or(format!("--pod: expected NAMESPACE/NAME, got {p:?}"))?;
            (ns.to_string(), n.to_string())
        }
        None => (
            std::env::var("POD_NAMESPACE").map_err(|_| "POD_NAMESPACE is not set")?,
            std::env::var("POD_NAME").map_err(|_| "POD_NAME is not set")?,
        ),
    };
    let driver = driver.unwrap_or_else(|| "gateway:18099".into());
    let driver = match driver.strip_prefix("gateway:") {
        Some(port) => {
            let table = std::fs::read_to_string("/proc/net/route")
                .map_err(|e| format!("--driver gateway: /proc/net/route: {e}"))?;
            let gw = default_gateway(&table).ok_or("--driver gateway: no default route")?;
            format!("{gw}:{port}")
        }
        None => driver,
    };
    Ok(Args {
        namespace,
        name,
        driver,
        cache,
    })
}

/// Finds the builder's cache warm or fills it (a cold run fills it as it starts).
fn cache(dir: &Path, p: &Profile) -> std::io::Result<bool> {
    let d = dir.join(&p.builder);
    let ready = d.join("ready");
    if ready.exists() {
        // A warm build reads its cache.
        let _ = std::fs::read(d.join("cache"));
        return Ok(true);
    }
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join("cache"), vec![7u8; p.cache_bytes as usize])?;
    std::fs::write(ready, b"")?;
    Ok(false)
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("headroom-workload: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let profile = loop {
        match fetch_profile(&a.driver, &a.namespace, &a.name) {
            Ok(p) => break p,
            Err(e) if started.elapsed() < PROFILE_PATIENCE => {
                eprintln!("headroom-workload: {e}; retrying");
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => {
                eprintln!("headroom-workload: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let warm = cache(&a.cache, &profile).unwrap_or_else(|e| {
        eprintln!(
            "headroom-workload: cache {}: {e}; running cold",
            a.cache.display()
        );
        false
    });
    let run = Duration::from_millis(profile.run_ms(warm));
    println!(
        "{}/{}: builder {} {} for {:?}, up to {} bytes",
        a.namespace,
        a.name,
        profile.builder,
        if warm { "warm" } else { "cold" },
        run,
        profile.memory_bytes
    );
    // What the build tells the driver (`started`, `done`); a driver that missed it loses
    // only its count of warm starts, so the build goes on.
    let report = |what: &str| {
        let path = format!("/{what}/{}/{}?warm={}", a.namespace, a.name, warm as u8);
        if let Err(e) = http_get(&a.driver, &path, Duration::from_secs(5)) {
            eprintln!("headroom-workload: {e}");
        }
    };
    report("started");
    let t0 = Instant::now();
    let mut held = Held::default();
    let burn = TICK.mul_f64(profile.cpu_cores.min(1.0));
    let mut spin = 0u64;
    while t0.elapsed() < run {
        held.grow_to(profile.memory_at(t0.elapsed().as_millis() as u64));
        let slice = Instant::now();
        while slice.elapsed() < burn {
            spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(1));
        }
        std::thread::sleep(TICK.saturating_sub(slice.elapsed()));
    }
    held.touch();
    report("done");
    println!(
        "{}/{}: done, held {} bytes",
        a.namespace,
        a.name,
        held.bytes()
    );
    ExitCode::SUCCESS
}
