//! `/ui` as an operator opens it: a real `serve` against the fake API server schedules a few
//! pods, and headless Chromium (Debian's `chromium`) loads every page through the fake's
//! service proxy (`/api/v1/namespaces/headroom-system/services/headroom:viewer/proxy/ui/`,
//! what `kubectl proxy` exposes) to `serve.viewerListen`. Each page must load with no
//! console message (no script error, no CSP violation, no failed load), show what it is
//! about, and paint a screenshot that is not blank; the pods page's form lands on the pod's
//! page through the proxy (a relative redirect); every link of every page must resolve
//! under the proxy prefix and answer. The authenticated inspection API serves the same
//! pages only to callers RBAC allows. If `chromium` is missing the test fails and says how
//! to install it; it never skips.

use std::path::{Path, PathBuf};
use std::time::Duration;

use headroom_storage::{Store, StoreConfig};
use serde_json::json;

use super::fake::Fake;

fn chromium() -> PathBuf {
    let p = Path::new("/usr/bin/chromium");
    assert!(
        p.exists(),
        "`chromium` is not installed, so the /ui pages cannot be loaded in a browser. \
         Install it with: apt-get update && apt-get install -y chromium (scripts/test.sh does)"
    );
    p.to_path_buf()
}

/// What Chromium made of a page: the DOM after load, its console messages, the screenshot.
struct Loaded {
    dom: String,
    console: Vec<String>,
    png: PathBuf,
}

/// How long one page may take: a browser that hangs fails the test instead of CI.
const PAGE_DEADLINE: Duration = Duration::from_secs(60);

/// Loads `url` in headless Chromium (one process; its profile and output in `dir`), 1200×900.
fn load(chromium: &Path, url: &str, png: &Path, dir: &Path) -> Loaded {
    // Output goes to files, not pipes: the process is polled against a deadline, and a
    // full pipe would stall it.
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1200,900",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("run chromium");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > PAGE_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took over {PAGE_DEADLINE:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(status.success(), "chromium failed on {url}: {stderr}");
    Loaded {
        dom: std::fs::read_to_string(&out_path).unwrap(),
        console: stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
            .map(str::to_string)
            .collect(),
        png: png.to_path_buf(),
    }
}

/// Distinct colours and the share of pixels that differ from the most common one.
fn paint(png: &Path) -> (usize, f64) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png).expect("screenshot written"),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = info.color_type.samples();
    assert!(bpp >= 3, "{:?}", info.color_type);
    let mut counts = std::collections::HashMap::<[u8; 3], usize>::new();
    for px in buf[..info.buffer_size()].chunks_exact(bpp) {
        *counts.entry([px[0], px[1], px[2]]).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    let background = counts.values().max().copied().unwrap_or(0);
    (counts.len(), 1.0 - background as f64 / total as f64)
}

/// The `href`s in a DOM dump.
fn hrefs(dom: &str) -> Vec<String> {
    dom.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(|s| s.replace("&amp;", "&"))
        .collect()
}

fn node(name: &str, cpu: &str, taint: bool) -> serde_json::Value {
    let mut n = super::node(name, cpu);
    if taint {
        n["spec"]["taints"] = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
    }
    n
}

/// Starts `serve` with a viewer listener over a small cluster with measured usage (all
/// nodes but node-d), then adds the pods once the usage view is computed and waits until
/// those that fit are bound.
async fn cluster(fake: &Fake, store: Store) -> super::Running {
    fake.put("namespaces", super::namespace("default"));
    for (name, cpu, taint) in [
        ("node-a", "8", false),
        ("node-b", "4", false),
        ("node-c", "2", false),
        ("node-d", "8", true),
    ] {
        fake.put("nodes", node(name, cpu, taint));
    }
    let names: Vec<String> = ["node-a", "node-b", "node-c", "node-d"]
        .map(String::from)
        .to_vec();
    let now = headroom::api::wall_clock_ms();
    for k in 0..5u64 {
        let ts = now - 50_000 + k as i64 * 10_000;
        crate::api::write_node_samples(&store, &names, ts, k);
        // node-c runs hot: 96 % of its memory in real use, for the advice page.
        let labels = headroom_storage::Labels::new([("node", "node-c")]).unwrap();
        store
            .append("node_memory_working_set_bytes", &labels, ts + 1, 16.5e9)
            .unwrap();
    }
    // A pod already running there, which the advice may move.
    let mut running = super::pod("db-0", "default-scheduler", "500m");
    running["spec"]["nodeName"] = json!("node-c");
    running["status"] = json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"});
    fake.put("pods", running);
    let yaml = "scheduler: {seed: 1}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  viewerListen: 127.0.0.1:0\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n";
    let running = super::serve_with_store(fake, yaml, "a", store).await;
    // The pods come once the usage view is computed, so that their decisions use it.
    let nodes = format!(
        "http://{}/nodes",
        running.bound.viewer.expect("viewerListen bound")
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let list: serde_json::Value = reqwest::get(&nodes).await.unwrap().json().await.unwrap();
        if list["usageGeneratedMs"].as_i64().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no usage view: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (name, cpu) in [
        ("build-0", "1"),
        ("build-1", "1"),
        ("build-2", "500m"),
        ("build-big", "3"),
        ("huge", "64"),
    ] {
        fake.put("pods", super::pod(name, "headroom", cpu));
    }
    fake.wait_for(15, "the pods that fit bound", |f| {
        ["build-0", "build-1", "build-2", "build-big"]
            .iter()
            .all(|p| f.node_of("default", p).is_some())
    })
    .await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_pages_load_in_headless_chromium_through_the_service_proxy() {
    let chromium = chromium();
    let fake = Fake::start().await;
    fake.add_token("t-alice", "alice", &[]);
    fake.add_token("t-bob", "bob", &[]);
    fake.grant("alice", "get", "/ui");
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let running = cluster(&fake, store).await;
    let bound = &running.bound;

    // The authenticated inspection API: the pages need a caller RBAC allows.
    let tls = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let api = format!("https://{}/ui/pods/default/build-big", bound.api);
    let status = |token: Option<&'static str>| {
        let mut r = tls.get(&api);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        async move { r.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(None).await, 401);
    assert_eq!(status(Some("t-bob")).await, 403);
    assert_eq!(status(Some("t-alice")).await, 200);

    // The browser, through the service proxy to the viewer listener.
    let viewer = bound.viewer.expect("viewerListen bound");
    fake.put(
        "services",
        json!({"metadata": {"name": "headroom", "namespace": "headroom-system"},
               "spec": {"ports": [{"name": "viewer", "port": 10262}]}}),
    );
    fake.route_service(
        "headroom-system",
        "headroom",
        "viewer",
        &format!("http://{viewer}"),
    );
    let base = format!(
        "{}/api/v1/namespaces/headroom-system/services/headroom:viewer/proxy",
        fake.url()
    );
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let pages: [(&str, &str, &[&str]); 6] = [
        (
            "pods",
            "/ui/",
            &["default/build-big", "default/huge", "unschedulable"],
        ),
        (
            "pod",
            "/ui/pods/default/build-big",
            &[
                "TaintToleration",
                "NodeResourcesFit",
                "Inputs",
                "class=\"fill score\"",
            ],
        ),
        (
            "nodes",
            "/ui/nodes",
            &["node-d", "measured", "class=\"fill req\""],
        ),
        (
            "queue",
            "/ui/queue",
            &["href=\"../ui/pods/default/huge\"", "Insufficient cpu"],
        ),
        ("advice", "/ui/advice", &["<h2>node-c</h2>", "default/db-0"]),
        // The pods page's form, as the browser submits it: redirected to the pod's page.
        (
            "find",
            "/ui/find?pod=default%2Fbuild-big",
            &["<title>default/build-big · headroom</title>"],
        ),
    ];
    let mut links = std::collections::BTreeSet::new();
    for (name, path, wants) in pages {
        let url = format!("{base}{path}");
        let (chromium, png, scratch) = (
            chromium.clone(),
            shots.join(format!("ui-{name}.png")),
            scratch.path().to_path_buf(),
        );
        let page = tokio::task::spawn_blocking(move || load(&chromium, &url, &png, &scratch))
            .await
            .unwrap();
        assert!(page.console.is_empty(), "{path}: {:?}", page.console);
        assert!(
            page.dom.contains("<header><b>headroom</b>"),
            "{path}: {}",
            page.dom
        );
        for want in wants {
            assert!(page.dom.contains(want), "{path} lacks {want}: {}", page.dom);
        }
        let (colours, painted) = paint(&page.png);
        assert!(
            colours > 20 && painted > 0.03,
            "{path}: a blank screenshot? {colours} colours, {:.1} % painted",
            painted * 100.0
        );
        if name == "find" {
            continue; // the pod's page, whose links were checked; relative to where it landed
        }
        let page_url = reqwest::Url::parse(&format!("{base}{path}")).unwrap();
        for href in hrefs(&page.dom).iter().filter(|h| !h.starts_with("data:")) {
            links.insert((path, href.clone(), page_url.join(href).unwrap()));
        }
    }
    // Every link of every page resolves under the proxy prefix: navigation, pods, the
    // JSON and text of a decision, nodes.
    assert!(links.len() >= 5 * 4 + 5 + 2 + 4, "{links:?}");
    for (path, href, url) in &links {
        assert!(
            url.as_str().starts_with(&base),
            "{path}: {href} leaves the proxy: {url}"
        );
        let r = reqwest::get(url.clone()).await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}: {href} → {url}");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(60), "the browser took {took:?}");
    eprintln!(
        "six pages in chromium: {took:?}; screenshots in {}",
        shots.display()
    );
    running.stop().await;
}
