//! `headroom collect --once` pointed at a real Prometheus (Debian's `prometheus`), and at a
//! real VictoriaMetrics (Debian's `victoria-metrics`, a Prometheus-compatible store of the kind
//! big installations use instead: Thanos, Mimir, VictoriaMetrics), each scraping a real
//! node-exporter (`prometheus-node-exporter`), all on 127.0.0.1 ephemeral ports. The tests
//! check the stored node series against what node-exporter itself reports. If a program is
//! missing they fail and say how to install it; they never skip.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{run, run_ok};

/// A program started for a test, killed when dropped; its output goes to `log` in `dir`.
pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) port: u16,
    dir: tempfile::TempDir,
}

impl Proc {
    /// What the program wrote so far.
    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require(bin: &str, package: &str) -> String {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(bin);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!(
        "`{bin}` is not installed, so the test against a real {package} cannot run. \
         Install it with: apt-get update && apt-get install -y {package} (scripts/test.sh does)"
    );
}

pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP GET on loopback; returns (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

fn wait_until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn spawn(bin: &str, args: &[String], dir: tempfile::TempDir, port: u16, ready: &str) -> Proc {
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let mut p = Proc { child, port, dir };
    wait_until(Duration::from_secs(30), bin, || {
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("{bin} exited with {status}");
        }
        get(port, ready).filter(|(s, _)| *s == 200)
    });
    p
}

/// The value of a node-exporter sample line `name{...labels containing `filter`...} value`.
fn exporter_value(text: &str, name: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| l.contains(filter))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("node-exporter has no {name} {filter}"))
}

/// A real node-exporter with the collectors headroom's node signals read.
fn start_exporter() -> Proc {
    let exporter_bin = require("prometheus-node-exporter", "prometheus-node-exporter");

    let exporter_port = free_port();
    spawn(
        &exporter_bin,
        &[
            format!("--web.listen-address=127.0.0.1:{exporter_port}"),
            "--collector.disable-defaults".into(),
            "--collector.meminfo".into(),
            "--collector.filesystem".into(),
            "--collector.cpu".into(),
            "--collector.uname".into(),
        ],
        tempfile::tempdir().unwrap(),
        exporter_port,
        "/metrics",
    )
}

#[test]
fn collect_once_from_a_real_prometheus_stores_node_series() {
    let prometheus_bin = require("prometheus", "prometheus");
    let exporter = start_exporter();
    let prometheus = start_prometheus(
        &prometheus_bin,
        "node",
        &format!("127.0.0.1:{}", exporter.port),
    );
    let prom_port = prometheus.port;

    check_collect_once(prom_port, &exporter);
}

/// A real Prometheus scraping `target` as job `job` every second, ready to answer.
pub(super) fn start_prometheus(bin: &str, job: &str, target: &str) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: {job}\n    static_configs: [{{targets: ['{target}']}}]\n"
        ),
    )
    .unwrap();
    let args = vec![
        format!("--config.file={}", config.display()),
        format!("--storage.tsdb.path={}", dir.path().join("data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        "--log.level=warn".into(),
    ];
    spawn(bin, &args, dir, port, "/-/ready")
}

/// VictoriaMetrics scraping node-exporter, queried through its Prometheus-compatible HTTP API
/// by the very same collector configuration.
#[test]
fn collect_once_from_a_real_victoria_metrics_stores_node_series() {
    let vm_bin = require("victoria-metrics", "victoria-metrics");
    let exporter = start_exporter();
    let vm_dir = tempfile::tempdir().unwrap();
    let vm_port = free_port();
    let scrape = vm_dir.path().join("scrape.yml");
    std::fs::write(
        &scrape,
        format!(
            "global: {{scrape_interval: 1s}}\n\
             scrape_configs:\n  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
            exporter.port
        ),
    )
    .unwrap();
    let args = vec![
        format!("-promscrape.config={}", scrape.display()),
        format!("-storageDataPath={}", vm_dir.path().join("data").display()),
        format!("-httpListenAddr=127.0.0.1:{vm_port}"),
        // Serve the newest samples at once (the default hides the last 30 s).
        "-search.latencyOffset=0s".into(),
        "-loggerLevel=ERROR".into(),
    ];
    let _vm = spawn(&vm_bin, &args, vm_dir, vm_port, "/health");
    check_collect_once(vm_port, &exporter);
}

/// `collect --once` against the Prometheus HTTP API on `port` (Prometheus or a compatible
/// store scraping `exporter`): node series stored under the machine's node name, with the
/// values node-exporter reports.
fn check_collect_once(prom_port: u16, exporter: &Proc) {
    // headroom's config: node signals only (no cAdvisor here), instances mapped to node names
    // through node_uname_info, as on a stock kube-prometheus stack without a node label.
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("headroom.yaml");
    std::fs::write(
        &config,
        format!(
            "collectors:\n  prometheus:\n    url: http://127.0.0.1:{prom_port}\n    rateWindow: 5s\n\
             \x20   instanceMap: {{query: node_uname_info}}\n\
             \x20   queries:\n      container_cpu_usage_cores: ''\n      container_memory_working_set_bytes: ''\n\
             \x20     pod_ephemeral_storage_used_bytes: ''\n      node_imagefs_available_bytes: ''\n\
             \x20     node_imagefs_capacity_bytes: ''\n"
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();

    // Wait until Prometheus has what the collector needs: node_uname_info (else instances
    // fall back to their IP as node name) and two CPU points for rate() over 5 s.
    for query in ["node_uname_info", "rate(node_cpu_seconds_total%5B5s%5D)"] {
        wait_until(Duration::from_secs(60), query, || {
            let (status, body) = get(prom_port, &format!("/api/v1/query?query={query}"))?;
            (status == 200 && body.contains("\"metric\"")).then_some(())
        });
    }
    // Each attempt gets a fresh store, so the one checked below holds one clean cycle.
    let mut attempt = 0;
    let (report, data): (Value, std::path::PathBuf) =
        wait_until(Duration::from_secs(60), "a clean collect --once", || {
            attempt += 1;
            let data = work.path().join(format!("data-{attempt}"));
            let d = data.to_str().unwrap();
            let o = run(&[
                "collect",
                "--once",
                "--config",
                cfg,
                "--data-dir",
                d,
                "--output",
                "json",
            ]);
            (o.status.code() == Some(0)).then(|| (serde_json::from_slice(&o.stdout).unwrap(), data))
        });
    let data_s = data.to_str().unwrap();
    assert!(report.to_string().contains("samples"), "{report}");

    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let (_, metrics) = get(exporter.port, "/metrics").unwrap();
    let series = |selector: &str| -> Vec<Value> {
        let o = run_ok(&[
            "series",
            "--data-dir",
            data_s,
            "--match",
            selector,
            "--output",
            "json",
        ]);
        serde_json::from_slice::<Value>(&o.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };

    // Filesystem size of "/" is stable: it must be exactly what node-exporter reports.
    let fs = series("node_fs_capacity_bytes");
    assert_eq!(fs.len(), 1, "{fs:?}");
    assert!(
        fs[0].to_string().contains(&hostname),
        "node mapped from node_uname_info: {fs:?}"
    );
    let want = exporter_value(&metrics, "node_filesystem_size_bytes", "mountpoint=\"/\"");
    assert_eq!(fs[0]["last_value"].as_f64().unwrap(), want, "{fs:?}");

    // Available memory moves a little between reads: within 10 % of node-exporter's value.
    let mem = series("node_memory_available_bytes");
    let got = mem[0]["last_value"].as_f64().unwrap();
    let want = exporter_value(&metrics, "node_memory_MemAvailable_bytes", "");
    assert!(
        (got - want).abs() / want < 0.10,
        "stored {got}, node-exporter {want}"
    );

    // CPU usage is a rate over real counters: positive and at most the machine's cores.
    let cpu = series("node_cpu_usage_cores");
    let cores = std::thread::available_parallelism().map_or(64, |n| n.get()) as f64;
    let used = cpu[0]["last_value"].as_f64().unwrap();
    assert!(
        used >= 0.0 && used <= cores + 0.5,
        "cpu {used} of {cores} cores"
    );
}
