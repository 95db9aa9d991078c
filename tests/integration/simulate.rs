//! `headroom simulate` as users run it: the small CI farm compared with the request-based
//! baseline, determinism, seed 002's reservation scenario inspected through `--serve`, and
//! bad scenarios.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::{headroom, repo, run};

fn fast_config(dir: &tempfile::TempDir) -> String {
    // The usage view every simulated minute instead of every 15 s: the same decisions
    // within a step or two, a quarter of the polars work in a debug build.
    let p = dir.path().join("fast.yaml");
    std::fs::write(&p, "analytics: {refreshInterval: 1m}\n").unwrap();
    p.to_str().unwrap().to_string()
}

fn simulate_json(args: &[&str]) -> Value {
    let mut all = vec!["simulate", "--output", "json"];
    all.extend_from_slice(args);
    let o = run(&all);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The CI-farm quality bar (issue #6) on the small variant, on the mean of four seeds (one
/// seed of a 3-hour, 8-node farm varies by several points): every pod accounted for;
/// warm-cache placements ≥ 80 % and far above the baseline's; node-time above 90 % real
/// memory at most half the baseline's; a lower spread of real memory utilisation across
/// nodes (p95 − p50); more build time saved; scheduling latency p99 no worse (within one
/// simulation step, the resolution of time to schedule).
#[test]
fn ci_farm_small_against_the_requests_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(&dir);
    let scenario = repo("examples/ci-farm-small.yaml");
    let plot = dir.path().join("plot.svg");
    let seeds = ["1", "2", "3", "4"];
    let mut sums: std::collections::BTreeMap<(usize, &str), f64> = Default::default();
    for seed in seeds {
        let mut args = vec![
            scenario.to_str().unwrap(),
            "--compare",
            "--config",
            &config,
            "--seed",
            seed,
        ];
        if seed == "1" {
            args.extend(["--plot", plot.to_str().unwrap()]);
        }
        let v = simulate_json(&args);
        let p = v["policies"].as_array().unwrap();
        let (h, r) = (&p[0], &p[1]);
        assert_eq!(
            (h["policy"].as_str(), r["policy"].as_str()),
            (Some("headroom"), Some("requests"))
        );
        for x in [h, r] {
            // Same arrivals, nothing lost.
            assert_eq!(x["arrived"], h["arrived"]);
            let n = |k: &str| x[k].as_u64().unwrap();
            assert_eq!(
                n("arrived"),
                n("completed") + n("runningEnd") + n("pendingEnd") + n("lostAndResubmitted")
            );
            assert_eq!(n("pendingEnd"), 0, "seed {seed}");
            assert!(n("arrived") > 100);
        }
        for (i, x) in [h, r].into_iter().enumerate() {
            for k in [
                "warmRate",
                "nodeHoursMemoryAbove90",
                "memorySpreadP95MinusP50",
                "buildHoursSaved",
                "timeToScheduleP99S",
            ] {
                *sums.entry((i, k)).or_default() += x[k].as_f64().unwrap();
            }
        }
    }
    let mean = |i: usize, k: &str| sums[&(i, k)] / seeds.len() as f64;
    let (h, r) = (0, 1);
    let report = format!("{sums:?}");
    assert!(mean(h, "warmRate") >= 0.8, "{report}");
    assert!(mean(h, "warmRate") > mean(r, "warmRate") + 0.2, "{report}");
    assert!(
        mean(r, "nodeHoursMemoryAbove90") > 0.1,
        "no hot spots to avoid: {report}"
    );
    assert!(
        mean(h, "nodeHoursMemoryAbove90") <= mean(r, "nodeHoursMemoryAbove90") / 2.0,
        "{report}"
    );
    assert!(
        mean(h, "memorySpreadP95MinusP50") < mean(r, "memorySpreadP95MinusP50"),
        "{report}"
    );
    assert!(
        mean(h, "buildHoursSaved") > mean(r, "buildHoursSaved"),
        "{report}"
    );
    assert!(
        mean(h, "timeToScheduleP99S") <= mean(r, "timeToScheduleP99S") + 15.0,
        "{report}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.matches("<polyline").count() == 4,
        "{svg}"
    );
}

/// Same seed, same run; another seed, other arrivals.
#[test]
fn simulation_is_deterministic_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(&dir);
    let scenario = repo("examples/ci-farm-small.yaml");
    let strip = |mut v: Value| {
        for p in v["policies"].as_array_mut().unwrap() {
            let o = p.as_object_mut().unwrap();
            o.remove("decisionsPerSecond");
            o.remove("decisionWallS");
        }
        v
    };
    let args = [
        scenario.to_str().unwrap(),
        "--config",
        &config,
        "--seed",
        "5",
    ];
    let a = strip(simulate_json(&args));
    let b = strip(simulate_json(&args));
    assert_eq!(a, b);
    let c = strip(simulate_json(&[
        scenario.to_str().unwrap(),
        "--config",
        &config,
        "--seed",
        "6",
    ]));
    assert_ne!(a["policies"][0]["arrived"], Value::Null);
    assert_ne!(a, c);
}

/// Seed 002 as a simulation, inspected through the API that `--serve` keeps up: the
/// reserved pod lands on worker-1, the normal 3-core pod stays pending.
#[test]
fn reservations_scenario_through_serve() {
    let mut child = headroom()
        .args([
            "simulate",
            repo("examples/reservations.yaml").to_str().unwrap(),
            "--serve",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 {
        if let Some(a) = line.trim().strip_prefix("serving the inspection API on ") {
            addr = Some(a.to_string());
        }
        if line.contains("simulation done") {
            break;
        }
        line.clear();
    }
    let addr = addr.expect("the API address is printed");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let get = |path: &str| -> (u16, Value) {
        rt.block_on(async {
            let r = reqwest::Client::new()
                .get(format!("{addr}{path}"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            (code, r.json().await.unwrap_or(Value::Null))
        })
    };
    let (code, reserved) = get("/explain/default/reserved-3");
    assert_eq!(code, 200, "{reserved}");
    assert_eq!(reserved["node"], "worker-1");
    let (_, normal) = get("/explain/default/normal-2");
    assert_eq!(normal["placed"], false);
    assert!(
        normal["message"]
            .as_str()
            .unwrap()
            .starts_with("0/3 nodes are available")
    );
    let (code, _) = get("/explain/default/nope");
    assert_eq!(code, 404);
    let (_, queue) = get("/queue");
    assert_eq!(queue["pods"][0]["name"], "normal-2");
    // SIGTERM stops the server; the simulation itself accounted for every pod.
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn bad_scenarios_exit_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("nodes: []\n", ": nodes: at least one node is required"),
        (
            "nodes: [{count: 1}]\nworkloads: [{name: w, requests: {cpu: 1, memory: 1Gi}, usage: {cpu: [2, 1]}}]\n",
            "workloads[0].usage.cpu",
        ),
        ("nodes: [{count: 1, cpu: lots}]\n", "nodes[0].cpu"),
        (
            "nodes: [{count: 1}]\nevents: [{at: 1m, burst: {workload: nope, count: 1}}]\n",
            "events[0].burst.workload",
        ),
        ("nodes: [{count: 1}]\nbogus: 1\n", "bogus"),
    ];
    for (i, (text, field)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("s{i}.yaml"));
        std::fs::write(&p, text).unwrap();
        let o = run(&["simulate", p.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(field), "{text}: {err}");
    }
}

/// A workload's `schedulerName` picks the profile that decides its pods (as a pod's
/// `spec.schedulerName` does under `serve`); a name no profile has is an error naming the
/// field, not pods left pending.
#[test]
fn workloads_are_decided_by_the_profile_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        // `ci` places pods whatever they request: only its pods can run on these nodes.
        "profiles: [{schedulerName: headroom}, {schedulerName: ci, plugins: {NodeResourcesFit: {enabled: false}, RealMemoryFit: {enabled: false}}}]\n",
    )
    .unwrap();
    let scenario = |name: &str| {
        let p = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &p,
            format!(
                "duration: 10m\nnodes: [{{count: 2}}]\nworkloads:\n  - {{name: w, kind: service, count: 3, schedulerName: {name}, requests: {{cpu: \"500\", memory: 1Gi}}}}\n"
            ),
        )
        .unwrap();
        p
    };
    let ok = scenario("ci");
    let v = simulate_json(&[ok.to_str().unwrap(), "--config", config.to_str().unwrap()]);
    assert_eq!(v["policies"][0]["placed"], 3, "{v}");
    // The same pods under the first profile: 500 CPUs fit nowhere.
    let first = scenario("headroom");
    let o = run(&[
        "simulate",
        first.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--output",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["policies"][0]["placed"], 0, "{v}");
    let bad = scenario("nope");
    let o = run(&[
        "simulate",
        bad.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("workloads[0].schedulerName") && err.contains("headroom, ci"),
        "{err}"
    );
}

/// A second simulation on the same `--data-dir` appends a later run (it used to fail with
/// "out-of-order sample"); the store holds both.
#[test]
fn a_second_simulation_on_the_same_data_dir_appends() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let scenario = repo("examples/reservations.yaml");
    for _ in 0..2 {
        let o = run(&[
            "simulate",
            scenario.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--output",
            "json",
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = run(&[
        "series",
        "--data-dir",
        data.to_str().unwrap(),
        "--match",
        "node_memory_working_set_bytes",
        "--output",
        "json",
    ]);
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    // The second run started a day after the first one's newest sample.
    let last = rows[0]["last_ts_ms"].as_i64().unwrap();
    assert!(
        last > headroom::simulate::EPOCH_MS + 24 * 3_600_000,
        "{rows}"
    );
}
