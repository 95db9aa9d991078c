//! A stand-in CI build for replays on real nodes (`scripts/kit-replay.py`, issue #72).
//!
//! The pod object says nothing of how much the build will use: the scheduler under test must
//! learn usage as in production, from the kubelets, Prometheus and its own history. So the
//! build asks the replay driver for its profile by its own name, out of band, when it starts
//! ([`fetch_profile`]), then for its run time holds and touches memory along the profile's
//! ramp ([`Profile::memory_at`]) and burns its share of CPU. Its builder's cache directory on
//! the node (a hostPath) makes the start warm or cold ([`Profile::run_ms`]); the build fills
//! it as it starts, as a build tool's cache is filled, so the next run there is warm.
//!
//! std only, so it links statically into a one-file OCI image.

use std::fmt;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// What the driver says this build does, at the nodes' scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The builder (its cache directory's name on the node).
    pub builder: String,
    /// Memory the build holds once its ramp is over, bytes.
    pub memory_bytes: u64,
    /// How long the memory takes to ramp up (from a tenth of it), ms.
    pub ramp_ms: u64,
    /// CPU it burns, cores (at most one: one thread).
    pub cpu_cores: f64,
    /// Run time with a cold cache, ms.
    pub cold_ms: u64,
    /// Run time with a warm cache, ms.
    pub warm_ms: u64,
    /// Bytes a cold run writes into the cache.
    pub cache_bytes: u64,
}

/// Why a profile could not be read or fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A line of the profile is not `key value`, or a value does not parse.
    Field {
        /// The key (or the line, when it has no value).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A key the profile must have is absent.
    Missing(&'static str),
    /// The driver could not be reached or answered with an error.
    Driver(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Field { field, message } => write!(f, "profile field {field}: {message}"),
            Error::Missing(k) => write!(f, "profile field {k}: missing"),
            Error::Driver(m) => write!(f, "replay driver: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl Profile {
    /// Parses the driver's answer: one `key value` per line (blank lines and `#` comments
    /// skipped, unknown keys refused so a driver and a build that disagree fail loudly).
    pub fn parse(text: &str) -> Result<Profile, Error> {
        let mut builder = None;
        let (mut memory, mut ramp, mut cpu, mut cold, mut warm, mut cache) =
            (None, None, None, None, None, None);
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once(' ') else {
                return Err(Error::Field {
                    field: line.into(),
                    message: "expected `key value`".into(),
                });
            };
            let value = value.trim();
            let int = |v: &str| {
                v.parse::<u64>().map_err(|e| Error::Field {
                    field: key.into(),
                    message: format!("{v:?}: {e}"),
                })
            };
            match key {
                "builder" => builder = Some(value.to_string()),
                "memory_bytes" => memory = Some(int(value)?),
                "ramp_ms" => ramp = Some(int(value)?),
                "cold_ms" => cold = Some(int(value)?),
                "warm_ms" => warm = Some(int(value)?),
                "cache_bytes" => cache = Some(int(value)?),
                "cpu_cores" => {
                    let v = value.parse::<f64>().map_err(|e| Error::Field {
                        field: key.into(),
                        message: format!("{value:?}: {e}"),
                    })?;
                    if !v.is_finite() || v < 0.0 {
                        return Err(Error::Field {
                            field: key.into(),
                            message: format!("must be a non-negative number, got {value}"),
                        });
                    }
                    cpu = Some(v);
                }
                _ => {
                    return Err(Error::Field {
                        field: key.into(),
                        message: "unknown key".into(),
                    });
                }
            }
        }
        let builder = builder.ok_or(Error::Missing("builder"))?;
        if builder.is_empty()
            || !builder
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            || builder.starts_with('.')
        {
            // It names a directory on the node: no path separators, no `..`.
            return Err(Error::Field {
                field: "builder".into(),
                message: format!("{builder:?} is not a plain name"),
            });
        }
        Ok(Profile {
            builder,
            memory_bytes: memory.ok_or(Error::Missing("memory_bytes"))?,
            ramp_ms: ramp.ok_or(Error::Missing("ramp_ms"))?,
            cpu_cores: cpu.ok_or(Error::Missing("cpu_cores"))?,
            cold_ms: cold.ok_or(Error::Missing("cold_ms"))?,
            warm_ms: warm.ok_or(Error::Missing("warm_ms"))?,
            cache_bytes: cache.unwrap_or(0),
        })
    }

    /// Memory held `age_ms` into the run: the simulator's ramp (`simulate`'s `RAMP_MS`),
    /// from a tenth of the full amount at the start to all of it at `ramp_ms`.
    pub fn memory_at(&self, age_ms: u64) -> u64 {
        let share = if self.ramp_ms == 0 {
            1.0
        } else {
            (age_ms as f64 / self.ramp_ms as f64).clamp(0.1, 1.0)
        };
        (self.memory_bytes as f64 * share) as u64
    }

    /// Run time with the cache found `warm` or not.
    pub fn run_ms(&self, warm: bool) -> u64 {
        if warm { self.warm_ms } else { self.cold_ms }
    }
}

/// The IPv4 default gateway in a `/proc/net/route` table (the host side of a pod's bridge
/// network, where the replay driver listens), if there is one.
pub fn default_gateway(route_table: &str) -> Option<Ipv4Addr> {
    route_table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || f[1] != "00000000" {
            return None;
        }
        // Hex in the kernel's byte order (little-endian on the hosts this runs on).
        let g = u32::from_str_radix(f[2], 16).ok()?;
        (g != 0).then(|| Ipv4Addr::from(g.to_le_bytes()))
    })
}

/// One plain HTTP/1.0 GET of `path` on `addr` (`host:port`); the body when the status is
/// 200. No TLS, no redirects: the driver is on the pod's own host.
pub fn http_get(addr: &str, path: &str, timeout: Duration) -> Result<String, Error> {
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| Error::Driver(format!("{addr}: {e}")))?
        .next()
        .ok_or_else(|| Error::Driver(format!("{addr}: no address")))?;
    let mut s = TcpStream::connect_timeout(&sock, timeout)
        .map_err(|e| Error::Driver(format!("{addr}: {e}")))?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| Error::Driver(format!("{addr}: {e}")))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| Error::Driver(format!("{addr}{path}: {e}")))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::Driver(format!("{addr}{path}: no HTTP header")))?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(Error::Driver(format!(
            "{addr}{path}: status {status}: {}",
            body.trim()
        )));
    }
    Ok(body.to_string())
}

/// The profile of pod `namespace/name` from the driver at `addr`.
pub fn fetch_profile(addr: &str, namespace: &str, name: &str) -> Result<Profile, Error> {
    let body = http_get(
        addr,
        &format!("/profile/{namespace}/{name}"),
        Duration::from_secs(5),
    )?;
    Profile::parse(&body)
}

/// Memory held in pages the kernel must back: grown in 1 MiB chunks, each page written.
#[derive(Default)]
pub struct Held {
    chunks: Vec<Vec<u8>>,
}

/// The size of one chunk of [`Held`].
pub const CHUNK: usize = 1 << 20;

impl Held {
    /// Grows what is held to at least `bytes` (never shrinks: a build's heap rarely goes
    /// back to the kernel), writing every page of each new chunk so it is resident.
    pub fn grow_to(&mut self, bytes: u64) {
        while (self.chunks.len() * CHUNK) < bytes as usize {
            let mut c = vec![0u8; CHUNK];
            for i in (0..CHUNK).step_by(4096) {
                c[i] = 1;
            }
            self.chunks.push(c);
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        (self.chunks.len() * CHUNK) as u64
    }

    /// Writes one byte in every page again (keeps them in the working set).
    pub fn touch(&mut self) {
        for c in &mut self.chunks {
            for i in (0..CHUNK).step_by(4096) {
                c[i] = c[i].wrapping_add(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "builder cpp-b3\nmemory_bytes 104857600\nramp_ms 60000\n\
                        cpu_cores 0.05\ncold_ms 90000\nwarm_ms 54000\ncache_bytes 4096\n";

    #[test]
    fn parses_a_profile_and_ramps_its_memory() {
        let p = Profile::parse(GOOD).unwrap();
        assert_eq!(p.builder, "cpp-b3");
        assert_eq!(p.memory_at(0), 10_485_760);
        assert_eq!(p.memory_at(30_000), 52_428_800);
        assert_eq!(p.memory_at(600_000), 104_857_600);
        assert_eq!((p.run_ms(true), p.run_ms(false)), (54_000, 90_000));
    }

    #[test]
    fn bad_profiles_name_the_field() {
        for (text, want) in [
            (
                GOOD.replace("memory_bytes 104857600", "memory_bytes lots"),
                "profile field memory_bytes",
            ),
            (
                GOOD.replace("ramp_ms 60000\n", ""),
                "profile field ramp_ms: missing",
            ),
            (
                GOOD.replace("cpu_cores 0.05", "cpu_cores -1"),
                "profile field cpu_cores",
            ),
            (GOOD.replace("cpp-b3", "../etc"), "profile field builder"),
            (
                format!("{GOOD}colour blue\n"),
                "profile field colour: unknown",
            ),
            (format!("{GOOD}lonely\n"), "profile field lonely"),
        ] {
            let e = Profile::parse(&text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e} (wanted {want})");
        }
    }

    #[test]
    fn finds_the_default_gateway() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     eth0\t00580A0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\n\
                     eth0\t00000000\t01580A0A\t0003\t0\t0\t0\t00000000\n";
        assert_eq!(default_gateway(table), Some(Ipv4Addr::new(10, 10, 88, 1)));
        assert_eq!(default_gateway("Iface\tDestination\n"), None);
    }

    proptest::proptest! {
        /// What the driver answers is bytes off a socket: any text, and any mutation of a
        /// good profile, parses or is refused with a message naming a field; never a panic.
        #[test]
        fn any_answer_parses_or_names_a_field(
            junk in "\\PC{0,200}",
            cut in 0usize..200,
            insert in "[a-z_ .0-9\n-]{0,20}",
        ) {
            let check = |t: &str| match Profile::parse(t) {
                Ok(p) => assert!(!p.builder.is_empty()),
                Err(e) => assert!(e.to_string().starts_with("profile field "), "{e}"),
            };
            check(&junk);
            let mut g = GOOD.to_string();
            let at = g.char_indices().map(|(i, _)| i).nth(cut % GOOD.len()).unwrap_or(0);
            g.insert_str(at, &insert);
            check(&g);
            let route = format!("Iface\tDestination\tGateway\n{junk}\n{insert}\n");
            let _ = default_gateway(&route);
        }
    }

    #[test]
    fn held_memory_grows_by_whole_chunks() {
        let mut h = Held::default();
        h.grow_to(3 * CHUNK as u64 + 1);
        assert_eq!(h.bytes(), 4 * CHUNK as u64);
        h.grow_to(CHUNK as u64);
        assert_eq!(h.bytes(), 4 * CHUNK as u64);
        h.touch();
    }
}
