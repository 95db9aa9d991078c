//! The bundled Grafana dashboards against real data: Debian's `prometheus` on loopback
//! scrapes a running `headroom simulate --serve` (the full CI farm, so that it keeps
//! scheduling while Prometheus scrapes), and every panel query of every dashboard is
//! evaluated through Prometheus's HTTP API and must return data. The
//! dashboard JSON must parse and reference no data source but the `${datasource}` variable.
//!
//! Without `prometheus` installed the test is skipped with a message, unless `CI` is set:
//! then it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::prometheus::{Proc, free_port, start_prometheus};
use super::{repo, simulate_serving};

/// What `$__rate_interval` and friends become: Prometheus scrapes every second here, so a
/// 10 s rate window always holds several samples (Grafana would pick 4 × scrape interval).
const INTERVALS: [(&str, &str); 4] = [
    ("$__rate_interval", "10s"),
    ("${__rate_interval}", "10s"),
    ("$__interval", "5s"),
    ("$__range", "60s"),
];

const DASHBOARDS: [&str; 3] = ["scheduler", "headroom", "builders"];

/// A running `headroom simulate --serve`, killed on drop.
struct Simulation {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Simulation {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the full CI-farm simulation with the API on `listen` and waits for the address it
/// prints.
fn spawn_simulation(listen: &str) -> Simulation {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fast.yaml");
    std::fs::write(&config, "analytics: {refreshInterval: 1m}\n").unwrap();
    let farm = repo("examples/ci-farm.yaml");
    let args = [
        farm.to_str().unwrap(),
        "--policy",
        "headroom",
        "--config",
        config.to_str().unwrap(),
    ];
    let (child, url, mut err) = simulate_serving(&args, listen);
    // Keep draining stderr (the progress and the report) so the child never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Simulation {
        child,
        addr: url.trim_start_matches("http://").to_string(),
        _dir: dir,
    }
}

fn find_prometheus() -> Option<PathBuf> {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join("prometheus"))
        .find(|p| p.exists())
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn load_dashboards() -> Vec<(String, Value)> {
    DASHBOARDS
        .iter()
        .map(|name| {
            let path = repo(&format!("grafana/dashboards/{name}.json"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            (name.to_string(), v)
        })
        .collect()
}

/// Every `datasource` value anywhere in `v`, with its JSON path.
fn datasource_refs(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                if k == "datasource" {
                    out.push((p.clone(), x.clone()));
                }
                datasource_refs(x, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                datasource_refs(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Panels, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

#[test]
fn grafana_dashboards_parse_and_use_only_the_datasource_variable() {
    for (name, d) in load_dashboards() {
        assert!(
            d["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("headroom-")),
            "{name}: uid"
        );
        assert!(d["title"].is_string(), "{name}: title");
        let vars = d["templating"]["list"].as_array().expect("templating.list");
        let ds = vars
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap_or_else(|| panic!("{name}: no datasource variable"));
        assert_eq!(
            (ds["type"].as_str(), ds["query"].as_str()),
            (Some("datasource"), Some("prometheus")),
            "{name}"
        );

        let mut refs = Vec::new();
        datasource_refs(&d, &name, &mut refs);
        assert!(!refs.is_empty(), "{name}: no datasource reference at all");
        for (path, r) in &refs {
            let ok = match r {
                Value::String(s) => s == "${datasource}",
                Value::Object(o) => {
                    o.get("uid") == Some(&Value::from("${datasource}"))
                        && o.get("type").is_none_or(|t| t == "prometheus")
                }
                _ => false,
            };
            assert!(
                ok,
                "{path}: data source {r} is not the ${{datasource}} variable"
            );
        }

        let mut ids = std::collections::HashSet::new();
        for p in panels(&d) {
            assert!(
                ids.insert(p["id"].as_i64().expect("panel id")),
                "{name}: duplicate panel id {}",
                p["id"]
            );
            if p["type"] == "row" {
                continue;
            }
            let targets = p["targets"].as_array().expect("targets");
            assert!(
                !targets.is_empty(),
                "{name}: panel {} has no query",
                p["title"]
            );
            for t in targets {
                let expr = t["expr"].as_str().expect("expr");
                assert!(
                    expr.contains("headroom_"),
                    "{name}: {expr} reads no headroom metric"
                );
            }
        }
    }
    // The provisioning files are valid YAML pointing where docs/metrics.md says.
    let provider: Value = serde_norway::from_str(
        &std::fs::read_to_string(repo("grafana/provisioning/dashboards/headroom.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(provider["providers"][0]["type"], "file");
    assert_eq!(
        provider["providers"][0]["options"]["path"],
        "/var/lib/grafana/dashboards/headroom"
    );
    let datasources: Value = serde_norway::from_str(
        &std::fs::read_to_string(repo("grafana/provisioning/datasources/prometheus.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(datasources["datasources"][0]["type"], "prometheus");
}

/// `expr` with the intervals and the variables substituted.
fn substitute(expr: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = expr.to_string();
    for (k, v) in INTERVALS {
        out = out.replace(k, v);
    }
    // Longest names first, so `$node` does not eat part of `$nodes`.
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        let v = &vars[n];
        out = out
            .replace(&format!("${{{n}}}"), v)
            .replace(&format!("[[{n}]]"), v)
            .replace(&format!("${n}"), v);
    }
    out
}

#[test]
fn grafana_every_panel_query_returns_data_from_a_real_prometheus() {
    let Some(prometheus_bin) = find_prometheus() else {
        if in_ci() {
            panic!(
                "`prometheus` is not installed and CI is set: install it with \
                 apt-get install -y prometheus (scripts/test.sh does)"
            );
        }
        eprintln!(
            "SKIPPED grafana_every_panel_query_returns_data_from_a_real_prometheus: \
             `prometheus` is not installed (apt-get install -y prometheus; scripts/test.sh does)"
        );
        return;
    };
    // Prometheus runs (and scrapes every second) before the simulation starts, so the
    // counters behind the rate panels are seen moving: a simulation that ends before the
    // first scrape would rightly leave every 10 s rate NaN.
    let demo_addr = format!("127.0.0.1:{}", free_port());
    let mut prom = PromClient::start(&prometheus_bin, &demo_addr);
    let start = Instant::now();
    // Scraping has begun once `up` exists (0 while nothing listens yet): Prometheus
    // throttles target discovery, so being ready is not enough.
    prom.wait_for_up(start, "start scraping", &|_| true);
    let demo = spawn_simulation(&demo_addr);
    assert_eq!(demo.addr, demo_addr);
    // Prometheus has scraped headroom successfully.
    prom.wait_for_up(start, "scrape headroom", &|v| v == "1");

    let mut queries = dashboard_queries(&prom);
    assert!(queries.len() >= 20, "only {} panel queries", queries.len());
    queries.extend(upstream_queries());

    // Every query until it returns a finite value; rates need a few scrapes first. Panels
    // are time series, so each query is evaluated over the whole run (as Grafana draws it),
    // not only at "now": on a loaded machine the simulation may have finished scheduling
    // before a query is first asked, and a 10 s rate of a finished run is rightly NaN.
    let run_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - start.elapsed().as_secs_f64()
        - 5.0;
    assert_every_query_has_data(&prom, queries, run_start);
    assert_plausible_values(&prom);
}

/// A Prometheus scraping `demo_addr` every second, and a client of its HTTP API.
struct PromClient {
    prom: Proc,
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    base: String,
}

impl PromClient {
    fn start(prometheus_bin: &Path, demo_addr: &str) -> PromClient {
        let prom = start_prometheus(&prometheus_bin.display().to_string(), "headroom", demo_addr);
        PromClient {
            base: format!("http://127.0.0.1:{}", prom.port),
            prom,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            client: reqwest::Client::new(),
        }
    }

    /// GET `path` with `params`: the JSON answer, `None` if there is none (yet).
    fn api(&self, path: &str, params: Vec<(&str, String)>) -> Option<Value> {
        let url = format!("{}{path}", self.base);
        let client = self.client.clone();
        self.rt.block_on(async move {
            let r = client.get(&url).query(&params).send().await.ok()?;
            r.json::<Value>().await.ok()
        })
    }

    /// Waits until `up{job="headroom"}` has a series that `accept`s its value (60 s from
    /// `start` at most).
    fn wait_for_up(&mut self, start: Instant, what: &str, accept: &dyn Fn(&Value) -> bool) {
        loop {
            if let Ok(Some(status)) = self.prom.child.try_wait() {
                panic!("prometheus exited with {status}: {}", self.prom.log());
            }
            let up = self.api(
                "/api/v1/query",
                vec![("query", "up{job=\"headroom\"}".into())],
            );
            let seen = up.as_ref().is_some_and(|v| {
                v["data"]["result"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|s| accept(&s["value"][1])))
            });
            if seen {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "prometheus did not {what} within 60 s: {up:?}\n{}",
                self.prom.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Every panel query of the bundled dashboards (dashboard, panel title, expression), with
/// template variables resolved. A variable's query must list values (else the dropdown is
/// empty); panels are evaluated with what Grafana substitutes for the default "All".
fn dashboard_queries(prom: &PromClient) -> Vec<(String, String, String)> {
    let dashboards = load_dashboards();
    let mut queries: Vec<(String, String, String)> = Vec::new();
    for (name, d) in &dashboards {
        let mut vars = BTreeMap::new();
        for v in d["templating"]["list"].as_array().unwrap() {
            if v["type"] != "query" {
                continue;
            }
            let var = v["name"].as_str().unwrap().to_string();
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .or(v["definition"].as_str())
                .expect("variable query");
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{name}: variable {var}: only label_values(metric, label) is supported here, got {q}"));
            let (metric, label) = inner.rsplit_once(',').expect("label_values(metric, label)");
            let (metric, label) = (metric.trim(), label.trim());
            let deadline = Instant::now() + Duration::from_secs(30);
            let values = loop {
                let r = prom.api(
                    &format!("/api/v1/label/{label}/values"),
                    vec![("match[]", metric.to_string())],
                );
                let values: Vec<String> = r
                    .as_ref()
                    .and_then(|v| v["data"].as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                if !values.is_empty() || Instant::now() > deadline {
                    break values;
                }
                std::thread::sleep(Duration::from_millis(500));
            };
            assert!(
                !values.is_empty(),
                "{name}: variable {var} ({q}) lists no value"
            );
            let all_selected = v["current"]["value"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "$__all"));
            let value = match (all_selected, v["allValue"].as_str()) {
                (true, Some(all)) => all.to_string(),
                (true, None) => format!("({})", values.join("|")),
                (false, _) => values[0].clone(),
            };
            vars.insert(var, value);
        }
        for p in panels(d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = substitute(t["expr"].as_str().unwrap(), &vars);
                assert!(!expr.contains('$'), "{name}: unresolved variable in {expr}");
                queries.push((name.clone(), p["title"].as_str().unwrap().to_string(), expr));
            }
        }
    }
    queries
}

/// Issue #24: queries written for kube-scheduler work on headroom's upstream-named
/// metrics. kubernetes-mixin's `kube-scheduler.rules` record
/// `histogram_quantile(q, sum(rate(<metric>_bucket{job="kube-scheduler"}[5m]))
/// without(instance, pod))` (the job selector dropped: this one is `headroom`), its
/// scheduler dashboard and Koordinator's plot attempts by result and pending pods by
/// queue.
fn upstream_queries() -> Vec<(String, String, String)> {
    let mut queries = Vec::new();
    for (source, expr) in [
        (
            "kubernetes-mixin kube-scheduler.rules",
            "histogram_quantile(0.99, sum(rate(scheduler_scheduling_attempt_duration_seconds_bucket[5m])) without(instance, pod))",
        ),
        (
            "kubernetes-mixin kube-scheduler.rules",
            "histogram_quantile(0.99, sum(rate(scheduler_pod_scheduling_sli_duration_seconds_bucket[5m])) without(instance, pod))",
        ),
        (
            "scheduler dashboard: scheduling rate",
            "sum(rate(scheduler_schedule_attempts_total{result=\"scheduled\"}[1m])) by (profile)",
        ),
        (
            "scheduler dashboard: attempts by result",
            "sum by (result) (increase(scheduler_schedule_attempts_total[5m]))",
        ),
        (
            "scheduler dashboard: pending pods",
            "sum by (queue) (scheduler_pending_pods)",
        ),
        (
            "preemption",
            "sum(rate(scheduler_preemption_attempts_total[5m]))",
        ),
        (
            "scheduler dashboard: extension point latency",
            "histogram_quantile(0.99, sum(rate(scheduler_framework_extension_point_duration_seconds_bucket{extension_point=\"Score\"}[5m])) by (extension_point, le))",
        ),
        (
            "scheduler dashboard: plugin latency",
            "histogram_quantile(0.99, sum(rate(scheduler_plugin_execution_duration_seconds_bucket{extension_point=\"Filter\"}[5m])) by (plugin, le))",
        ),
    ] {
        queries.push(("upstream".into(), source.into(), expr.into()));
    }

    queries
}

/// Asks every query over the run until it returns a finite value (90 s at most).
fn assert_every_query_has_data(
    prom: &PromClient,
    queries: Vec<(String, String, String)>,
    run_start: f64,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut pending: Vec<(String, String, String, Option<Value>)> = queries
        .into_iter()
        .map(|(d, p, e)| (d, p, e, None))
        .collect();
    while !pending.is_empty() && Instant::now() < deadline {
        for q in pending.iter_mut() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            let r = prom.api(
                "/api/v1/query_range",
                vec![
                    ("query", q.2.clone()),
                    ("start", format!("{run_start:.3}")),
                    ("end", format!("{now:.3}")),
                    ("step", "1".into()),
                ],
            );
            q.3 = r;
        }
        pending.retain(|(_, _, _, r)| {
            let Some(r) = r else { return true };
            assert_eq!(r["status"], "success", "{r}");
            let has_data = r["data"]["result"].as_array().is_some_and(|a| {
                a.iter().any(|s| {
                    s["values"].as_array().into_iter().flatten().any(|p| {
                        p[1].as_str()
                            .and_then(|v| v.parse::<f64>().ok())
                            .is_some_and(f64::is_finite)
                    })
                })
            });
            !has_data
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let failures: Vec<String> = pending
        .iter()
        .map(|(d, p, e, r)| {
            format!(
                "{d} / {p}: {e}\n    -> {}",
                r.as_ref().map_or("no answer".into(), |r| r.to_string())
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "panel queries without data:\n{}",
        failures.join("\n")
    );
}

/// Plausible values, not only data: pods were scheduled under the `headroom` profile, and
/// the pending pods come in upstream's four queues.
fn assert_plausible_values(prom: &PromClient) {
    let instant = |q: &str| -> Vec<Value> {
        prom.api("/api/v1/query", vec![("query", q.to_string())])
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    };
    let scheduled =
        instant("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"headroom\"}");
    let n: f64 = scheduled
        .first()
        .and_then(|s| s["value"][1].as_str()?.parse().ok())
        .unwrap_or(0.0);
    assert!(n > 10.0, "scheduled attempts {n}: {scheduled:?}");
    let queues: Vec<String> = instant("scheduler_pending_pods")
        .iter()
        .filter_map(|s| s["metric"]["queue"].as_str().map(str::to_string))
        .collect();
    for q in ["active", "backoff", "unschedulable", "gated"] {
        assert!(queues.iter().any(|x| x == q), "{q} not in {queues:?}");
    }
}
