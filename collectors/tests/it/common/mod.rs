//! Test helpers: a loopback HTTP fixture server and a harness for real Prometheus and
//! node-exporter processes (Debian packages `prometheus`, `prometheus-node-exporter`).
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the fixture answers.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Never answer (a hung kubelet).
    pub hang: bool,
}

impl Reply {
    pub fn ok(body: impl Into<Vec<u8>>) -> Self {
        Self {
            status: 200,
            body: body.into(),
            content_type: "application/json",
            delay: Duration::ZERO,
            hang: false,
        }
    }
    pub fn text(body: impl Into<Vec<u8>>) -> Self {
        Self {
            content_type: "text/plain; version=0.0.4",
            ..Self::ok(body)
        }
    }
    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            ..Self::ok(body)
        }
    }
    pub fn hang() -> Self {
        Self {
            hang: true,
            ..Self::ok("")
        }
    }
    pub fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
}

type Handler = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

/// A loopback HTTP/1.1 server answering each request with `handler(path_and_query)`.
pub struct Fixture {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicUsize>,
    /// Request heads (request line and headers) in arrival order.
    pub heads: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Fixture {
    pub async fn start(handler: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let handler: Handler = Arc::new(handler);
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let heads_w = heads.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let handler = handler.clone();
                let counter = counter.clone();
                let heads_w = heads_w.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let head = String::from_utf8_lossy(&buf);
                    heads_w.lock().unwrap().push(head.to_string());
                    let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let reply = handler(&target);
                    if reply.hang {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    if !reply.delay.is_zero() {
                        tokio::time::sleep(reply.delay).await;
                    }
                    let head = format!(
                        "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        reply.status,
                        reply.content_type,
                        reply.body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&reply.body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self {
            addr,
            requests,
            heads,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// A port free right now on 127.0.0.1 (the process binds it a moment later).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A child process killed (and reaped) on drop.
pub struct Proc {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Proc {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Finds a binary of a Debian package, failing with instructions if it is not installed:
/// these tests must not pass by skipping.
pub fn require_binary(bin: &str, package: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(bin);
        if p.exists() {
            return p;
        }
    }
    panic!(
        "`{bin}` is not installed, so the tests against a real {package} cannot run. \
         Install it with: apt-get update && apt-get install -y {package}"
    );
}

/// Blocks until `url` answers 2xx, or panics after `limit`.
pub async fn wait_ready(url: &str, limit: Duration, what: &str, proc: &mut Proc) {
    let client = reqwest::Client::new();
    let start = Instant::now();
    loop {
        if let Ok(r) = client.get(url).timeout(Duration::from_secs(1)).send().await
            && r.status().is_success()
        {
            return;
        }
        if let Ok(Some(status)) = proc.child.try_wait() {
            let log = std::fs::read_to_string(proc.dir.path().join("log")).unwrap_or_default();
            panic!("{what} exited with {status} before it was ready; log:\n{log}");
        }
        assert!(
            start.elapsed() < limit,
            "{what} not ready at {url} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn spawn(bin: &Path, args: &[String], dir: tempfile::TempDir, port: u16) -> Proc {
    let log = std::fs::File::create(dir.path().join("log")).expect("log file");
    let child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    Proc { child, port, dir }
}

/// Starts node-exporter on 127.0.0.1 with the collectors the tests use.
pub async fn start_node_exporter() -> Proc {
    let bin = require_binary("prometheus-node-exporter", "prometheus-node-exporter");
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let args = vec![
        format!("--web.listen-address=127.0.0.1:{port}"),
        "--collector.disable-defaults".into(),
        "--collector.cpu".into(),
        "--collector.meminfo".into(),
        "--collector.filesystem".into(),
        "--collector.uname".into(),
    ];
    let mut p = spawn(&bin, &args, dir, port);
    let url = format!("{}/metrics", p.url());
    wait_ready(&url, Duration::from_secs(20), "node-exporter", &mut p).await;
    p
}

/// Starts Prometheus on 127.0.0.1, scraping `targets` (`job` → `host:port`) every second.
pub async fn start_prometheus(targets: &[(&str, String)]) -> Proc {
    let bin = require_binary("prometheus", "prometheus");
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = String::from(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
    );
    for (job, target) in targets {
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        ));
    }
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).expect("write config");
    let data = dir.path().join("data");
    let args = vec![
        format!("--config.file={}", config_path.display()),
        format!("--storage.tsdb.path={}", data.display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        "--log.level=warn".into(),
    ];
    let mut p = spawn(&bin, &args, dir, port);
    let url = format!("{}/-/ready", p.url());
    wait_ready(&url, Duration::from_secs(30), "prometheus", &mut p).await;
    p
}

/// Polls `check` every 250 ms until it returns `Some`, or panics after `limit`.
pub async fn poll_until<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A schedule for tests: short timeout, quick retries, no jitter.
pub fn fast_schedule() -> headroom_collectors::config::ScheduleConfig {
    headroom_collectors::config::ScheduleConfig {
        interval: Duration::from_millis(300),
        jitter: Duration::ZERO,
        timeout: Duration::from_millis(800),
        retries: 1,
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(100),
        concurrency: 8,
    }
}
