//! A kubelet that runs each pod bound to its node as a real process (`headroom-workload`)
//! in the node's memory cgroup, with the node's memory a hard wall, so the kernel's OOM
//! killer judges placements as on a real node (issue #72; the kit's real kubelets are
//! `scripts/kit-nodes.sh`, which CI cannot run). It reports like a kubelet:
//!
//! - pod status on the fake API server: `Running` when started, then `Succeeded`, or
//!   `Failed` with the container's `terminated: {exitCode, reason}`: a process the kernel
//!   killed for memory (SIGKILL and an `oom_kill` in its own cgroup's counters) ends
//!   `exitCode: 137, reason: OOMKilled`, as containerd reports it;
//! - `/stats/summary`, from the cgroups: the node's working set (usage less inactive file
//!   pages) and each pod's.
//!
//! Needs root and a writable memory cgroup (v1 `memory` hierarchy or v2 with the memory
//! controller); [`Cgroups::open`] says why not otherwise, and the tests skip saying so.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

use super::fake::Fake;
use super::kubelet::{PodStats, summary_json};

/// Where this test process's cgroups live, and which version they are; shared by the
/// nodes, removed when the last of them is dropped.
#[derive(Clone, Debug)]
pub struct Cgroups {
    root: Arc<Root>,
    v2: bool,
}

/// The test's own cgroup directory.
#[derive(Debug)]
struct Root(PathBuf);

impl Cgroups {
    /// A cgroup of this test process's own (removed on drop of every node), or why it can't
    /// be made here.
    pub fn open(tag: &str) -> Result<Cgroups, String> {
        let name = format!("headroom-it-{}-{tag}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (root, v2) = if v1.join("memory.limit_in_bytes").exists() || v1.is_dir() {
            (v1.join(&name), false)
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            let base = Path::new("/sys/fs/cgroup");
            let controllers = std::fs::read_to_string(base.join("cgroup.controllers"))
                .map_err(|e| format!("cgroup v2: {e}"))?;
            if !controllers.split_whitespace().any(|c| c == "memory") {
                return Err("cgroup v2 without the memory controller".into());
            }
            (base.join(&name), true)
        } else {
            return Err("no memory cgroup mounted at /sys/fs/cgroup".into());
        };
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("cannot create {}: {e} (not root?)", root.display()))?;
        if !v2 {
            // A node's limit must hold its pods' cgroups too (the default on recent
            // kernels; older ones inherit 0 from the root).
            let _ = std::fs::write(root.join("memory.use_hierarchy"), "1");
            let on = std::fs::read_to_string(root.join("memory.use_hierarchy"))
                .is_ok_and(|v| v.trim() == "1");
            if !on {
                let _ = std::fs::remove_dir(&root);
                return Err(format!("{}: memory.use_hierarchy is not 1", root.display()));
            }
        }
        if v2 {
            // Children get the memory controller.
            let _ = std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
            std::fs::write(root.join("cgroup.subtree_control"), "+memory").map_err(|e| {
                let _ = std::fs::remove_dir(&root);
                format!("{}: cannot enable memory: {e}", root.display())
            })?;
        }
        Ok(Cgroups {
            root: Arc::new(Root(root)),
            v2,
        })
    }

    fn node_dir(&self, node: &str, limit: u64) -> Result<PathBuf, String> {
        let d = self.root.0.join(node);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        let (file, subtree) = if self.v2 {
            ("memory.max", true)
        } else {
            ("memory.limit_in_bytes", false)
        };
        std::fs::write(d.join(file), limit.to_string())
            .map_err(|e| format!("{}/{file}: {e}", d.display()))?;
        if subtree {
            std::fs::write(d.join("cgroup.subtree_control"), "+memory")
                .map_err(|e| format!("{}: {e}", d.display()))?;
        }
        Ok(d)
    }

    /// Working set of cgroup `d`: usage less inactive file pages, as the kubelet computes it.
    fn working_set(&self, d: &Path) -> u64 {
        let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
        let stat = read("memory.stat");
        let field = |k: &str| {
            stat.lines()
                .find_map(|l| {
                    l.strip_prefix(k)?
                        .strip_prefix(' ')?
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or(0)
        };
        let (usage, inactive) = if self.v2 {
            (read("memory.current"), field("inactive_file"))
        } else {
            (read("memory.usage_in_bytes"), field("total_inactive_file"))
        };
        usage
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
            .saturating_sub(inactive)
    }

    /// OOM kills the kernel counted in cgroup `d` (the victim's own cgroup holds them).
    fn oom_kills(&self, d: &Path) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(d.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // Children first; a cgroup with processes left cannot go (they were killed).
        if let Ok(nodes) = std::fs::read_dir(&self.0) {
            for n in nodes.flatten().filter(|e| e.path().is_dir()) {
                if let Ok(pods) = std::fs::read_dir(n.path()) {
                    for p in pods.flatten().filter(|e| e.path().is_dir()) {
                        let _ = std::fs::remove_dir(p.path());
                    }
                }
                let _ = std::fs::remove_dir(n.path());
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// How a pod's process ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// `Succeeded` or `Failed`.
    pub phase: &'static str,
    /// The container's exit code (137 for a SIGKILL).
    pub exit_code: i32,
    /// `OOMKilled`, `Completed` or `Error`.
    pub reason: &'static str,
    /// OOM kills the kernel counted in the pod's cgroup.
    pub kernel_oom_kills: u64,
}

struct Proc {
    child: Child,
    cgroup: PathBuf,
    namespace: String,
    uid: String,
}

#[derive(Default)]
struct Inner {
    running: HashMap<String, Proc>,
    ended: HashMap<String, Ended>,
}

/// One node's process kubelet.
pub struct ProcessKubelet {
    node: String,
    cg: Cgroups,
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
    /// Where `/stats/summary` answers.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// The `headroom-workload` binary: beside `headroom` (the workspace's test build makes it),
/// else built now, in the profile `headroom` was built in (`cargo test --release` too).
pub fn workload_binary() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_headroom")).parent().unwrap();
    let bin = dir.join("headroom-workload");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut args = vec!["build", "-q", "-p", "headroom-workload"];
        if dir.ends_with("release") {
            args.push("--release");
        }
        let ok = Command::new(cargo)
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok && bin.exists(), "cannot build headroom-workload");
    }
    bin
}

impl ProcessKubelet {
    /// A kubelet for `node` of `limit` bytes (the wall), starting the pods the fake binds to
    /// it with the workload fetching its profile from `driver` (`host:port`).
    pub async fn start(
        fake: &Fake,
        cg: &Cgroups,
        node: &str,
        limit: u64,
        driver: SocketAddr,
    ) -> ProcessKubelet {
        let dir = cg.node_dir(node, limit).expect("node cgroup");
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/stats/summary", get(summary))
            .with_state((node.to_string(), cg.clone(), dir.clone(), inner.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let task = tokio::spawn(sync_loop(
            fake.clone(),
            node.to_string(),
            cg.clone(),
            dir.clone(),
            inner.clone(),
            driver,
        ));
        ProcessKubelet {
            node: node.to_string(),
            cg: cg.clone(),
            dir,
            inner,
            addr,
            task,
        }
    }

    /// How the pod `name` ended, if it has.
    pub fn ended(&self, name: &str) -> Option<Ended> {
        self.inner.lock().unwrap().ended.get(name).cloned()
    }

    /// The node's working set now, bytes.
    pub fn working_set(&self) -> u64 {
        self.cg.working_set(&self.dir)
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }
}

impl Drop for ProcessKubelet {
    fn drop(&mut self) {
        self.task.abort();
        for (_, mut p) in self.inner.lock().unwrap().running.drain() {
            let _ = p.child.kill();
            let _ = p.child.wait();
            let _ = std::fs::remove_dir(&p.cgroup);
        }
    }
}

/// Starts the pods bound to the node, reaps the ones that ended and writes their status.
async fn sync_loop(
    fake: Fake,
    node: String,
    cg: Cgroups,
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
    driver: SocketAddr,
) {
    let workload = workload_binary();
    let cache = tempfile::Builder::new()
        .prefix(&format!("kubelet-{node}-"))
        .tempdir()
        .unwrap();
    eprintln!("{node}: workload logs in {}", cache.path().display());
    loop {
        for p in fake.list("pods") {
            if p["spec"]["nodeName"] != node.as_str() {
                continue;
            }
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let ns = p["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            {
                let i = inner.lock().unwrap();
                if i.running.contains_key(&name) || i.ended.contains_key(&name) {
                    continue;
                }
            }
            let pod_cg = dir.join(&name);
            std::fs::create_dir(&pod_cg).expect("the pod's cgroup, in the node's");
            // The shell puts itself in the pod's cgroup before it becomes the workload, so
            // every page the build touches is charged there.
            let child = Command::new("sh")
                .arg("-c")
                .arg(r#"echo $$ > "$1/cgroup.procs" && exec "$2" --pod "$3" --driver "$4" --cache "$5""#)
                .arg("sh")
                .arg(&pod_cg)
                .arg(&workload)
                .arg(format!("{ns}/{name}"))
                .arg(driver.to_string())
                .arg(cache.path().join(&node))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(cache.path().join(format!("{name}.log"))).map_or_else(|_| Stdio::null(), Stdio::from))
                .spawn()
                .expect("spawn the workload");
            set_status(&fake, &ns, &name, json!({"phase": "Running"}));
            let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
            inner.lock().unwrap().running.insert(
                name,
                Proc {
                    child,
                    cgroup: pod_cg,
                    namespace: ns,
                    uid,
                },
            );
        }
        let mut done = Vec::new();
        {
            let mut i = inner.lock().unwrap();
            for (name, p) in i.running.iter_mut() {
                if let Ok(Some(status)) = p.child.try_wait() {
                    done.push((name.clone(), status));
                }
            }
            for (name, status) in done {
                let p = i.running.remove(&name).unwrap();
                use std::os::unix::process::ExitStatusExt;
                let kernel_oom_kills = cg.oom_kills(&p.cgroup);
                let _ = std::fs::remove_dir(&p.cgroup);
                let (exit_code, killed) = match (status.code(), status.signal()) {
                    (Some(c), _) => (c, false),
                    (None, Some(s)) => (128 + s, s == 9),
                    (None, None) => (255, false),
                };
                // SIGKILL with the kernel's count: the OOM killer, not another killer.
                let oom = killed && kernel_oom_kills > 0;
                let e = Ended {
                    phase: if exit_code == 0 {
                        "Succeeded"
                    } else {
                        "Failed"
                    },
                    exit_code,
                    reason: match (oom, exit_code) {
                        (true, _) => "OOMKilled",
                        (false, 0) => "Completed",
                        _ => "Error",
                    },
                    kernel_oom_kills,
                };
                set_status(
                    &fake,
                    &p.namespace,
                    &name,
                    json!({"phase": e.phase, "containerStatuses": [{"name": "build",
                        "state": {"terminated": {"exitCode": e.exit_code, "reason": e.reason}}}]}),
                );
                i.ended.insert(name, e);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn set_status(fake: &Fake, ns: &str, name: &str, status: Value) {
    if let Some(mut p) = fake.get("pods", ns, name) {
        for (k, v) in status.as_object().unwrap() {
            p["status"][k] = v.clone();
        }
        fake.put("pods", p);
    }
}

async fn summary(
    State((node, cg, dir, inner)): State<(String, Cgroups, PathBuf, Arc<Mutex<Inner>>)>,
) -> axum::Json<Value> {
    let i = inner.lock().unwrap();
    let pods: Vec<PodStats> = i
        .running
        .iter()
        .map(|(name, p)| PodStats {
            namespace: p.namespace.clone(),
            name: name.clone(),
            uid: p.uid.clone(),
            cpu: 0.01,
            memory: cg.working_set(&p.cgroup) as f64,
        })
        .collect();
    let memory = cg.working_set(&dir) as f64;
    axum::Json(summary_json(&node, 0.1, memory, &pods, "build"))
}
