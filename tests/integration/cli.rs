//! The CLI as users run it: `place` on the bundled examples and on bad input, `check-config`.

use serde_json::Value;

use super::{documentation, repo, run, write};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn place_example_pod() {
    let o = run(&[
        "place",
        "--cluster",
        repo("examples/cluster.yaml").to_str().unwrap(),
        "--pod",
        repo("examples/pod.yaml").to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let r = &v[0];
    assert_eq!(r["pod"], "ci/builder-c-1");
    // build-2 has 12 free CPUs and build-1 8: LeastAllocated prefers build-2.
    assert_eq!(r["node"], "build-2");
    let nodes = r["nodes"].as_array().unwrap();
    let verdict = |n: &str| nodes.iter().find(|x| x["name"] == n).unwrap().clone();
    assert_eq!(verdict("db-1")["plugin"], "TaintToleration");
    assert_eq!(
        verdict("build-3")["reasons"][0],
        "node(s) were unschedulable"
    );
    let b2 = verdict("build-2");
    assert_eq!(b2["chosen"], true);
    let fit = b2["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["plugin"] == "NodeResourcesFit")
        .unwrap();
    assert!(fit["detail"].as_str().unwrap().contains("cpu"), "{fit}");
    assert_eq!(
        fit["weighted"],
        fit["normalized"].as_i64().unwrap() * fit["weight"].as_i64().unwrap()
    );
}

#[test]
fn place_sequence_sees_previous_placements_and_exits_3() {
    let o = run(&[
        "place",
        "--cluster",
        repo("examples/cluster.yaml").to_str().unwrap(),
        "--pod",
        repo("examples/pods.yaml").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("pod ci/builder-d-1"), "{text}");
    // After builder-d-1 takes 8 CPUs on build-2, builder-e-1 still fits on build-1 (8 free)...
    assert!(
        text.contains("pod ci/builder-e-1 (profile headroom)\n  placed on build-1"),
        "{text}"
    );
    // ...and mysql-1's anti-affinity keeps it off db-1, where mysql-0 runs.
    assert!(
        text.contains("pod db/mysql-1 (profile headroom)\n  not placed: 0/4 nodes are available:"),
        "{text}"
    );
}

#[test]
fn bad_input_exits_2_naming_object_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = repo("examples/cluster.yaml");
    let cases = [
        (
            "kind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: [{name: c, resources: {requests: {cpu: [1]}}}]}\n",
            "Pod \"ns/p\": spec.containers[0].resources.requests.cpu: invalid type: sequence, expected Quantity",
        ),
        (
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: 7}\n",
            "Pod \"default/p\": spec.containers: invalid type",
        ),
        ("{not yaml: [\n", "not valid YAML/JSON"),
        // Regressions (issue #15, 7 and 8): a negative request, a pod without a name.
        (
            "kind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, resources: {requests: {cpu: '-1'}}}]}\n",
            "Pod \"default/x\": spec.containers[0].resources.requests.cpu: must not be negative",
        ),
        (
            "kind: Pod\nspec: {containers: []}\n",
            "Pod: metadata.name: must not be empty",
        ),
        ("kind: Node\nmetadata: {name: n}\n", "no Pod objects found"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let pod = write(&dir, &format!("pod{i}.yaml"), text);
        let o = run(&[
            "place",
            "--cluster",
            cluster.to_str().unwrap(),
            "--pod",
            &pod,
        ]);
        assert_eq!(o.status.code(), Some(2), "{text}");
        assert!(stderr(&o).contains(want), "{text}: {}", stderr(&o));
    }
    // Regression (issue #15, 5): a 65,536-character node name panicked the text output;
    // it is not a valid Node name.
    let long = write(
        &dir,
        "long.yaml",
        format!("kind: Node\nmetadata: {{name: {}}}\n", "n".repeat(65_536)),
    );
    let pod = write(
        &dir,
        "ok.yaml",
        "kind: Pod\nmetadata: {name: ok}\nspec: {containers: []}\n",
    );
    let o = run(&["place", "--cluster", &long, "--pod", &pod]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("Node \"nnnn"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("metadata.name: must be at most 253 characters, got 65536"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "place",
        "--cluster",
        "/nonexistent.yaml",
        "--pod",
        "/nonexistent.yaml",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent.yaml"));
}

#[test]
fn bad_quantities_reject_the_pod_or_the_node_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = write(
        &dir,
        "cluster.yaml",
        "kind: Node\nmetadata: {name: good}\nstatus: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}\n---\nkind: Node\nmetadata: {name: broken}\nstatus: {allocatable: {cpu: four, memory: 8Gi, pods: '10'}}\n",
    );
    let pod = write(
        &dir,
        "pod.yaml",
        "kind: Pod\nmetadata: {name: ok}\nspec: {containers: [{name: c, resources: {requests: {cpu: 500m}}}]}\n---\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c, resources: {requests: {memory: 1Gb}}}]}\n",
    );
    let o = run(&[
        "place",
        "--cluster",
        &cluster,
        "--pod",
        &pod,
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v[0]["node"], "good");
    let broken = v[0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "broken")
        .unwrap()
        .clone();
    assert!(
        broken["detail"]
            .as_str()
            .unwrap()
            .contains("status.allocatable[cpu]"),
        "{broken}"
    );
    assert_eq!(v[1]["placed"], false);
    let msg = v[1]["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.containers[0].resources.requests[memory]") && msg.contains("1Gb"),
        "{msg}"
    );
}

#[test]
fn check_config_prints_effective_config_or_names_the_field() {
    let o = run(&[
        "check-config",
        repo("examples/config.yaml").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("type: MostAllocated"), "{out}");
    assert!(out.contains("seed: 42"), "{out}");
    // The fast farm's settings (kit-replay.py --config) are a valid configuration.
    let o = run(&[
        "check-config",
        repo("examples/real-nodes-config.yaml").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("nodeWindow: 30s"), "{}", stdout(&o));

    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        &dir,
        "bad.yaml",
        "profiles:\n  - schedulerName: headroom\n    plugins:\n      TaintToleration: {wieght: 3}\n",
    );
    let o = run(&["check-config", &bad]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("profiles[0].plugins.TaintToleration") && err.contains("wieght"),
        "{err}"
    );

    // This session's settings: a bad band or duration names its field.
    for (text, field) in [
        (
            "profiles: [{schedulerName: headroom, pluginArgs: {history: {headroomBand: -5}}}]\n",
            "pluginArgs.history.headroomBand: -5 is not in 0..=100",
        ),
        ("usage: {warmup: 5 parsecs}\n", "usage.warmup"),
        ("analytics: {nodeWindow: soon}\n", "analytics.nodeWindow"),
    ] {
        let bad = write(&dir, "bad2.yaml", text);
        let o = run(&["check-config", &bad]);
        assert_eq!(o.status.code(), Some(2), "{text}");
        assert!(stderr(&o).contains(field), "{text}: {}", stderr(&o));
    }
    // A valid file: its effective configuration on stdout.
    let valid = |name: &str, text: &str| -> String {
        let path = write(&dir, name, text);
        let o = run(&["check-config", &path]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    let out = valid(
        "good.yaml",
        "usage: {warmup: 90s}\nprofiles: [{schedulerName: headroom, pluginArgs: {history: {headroomBand: 25}}}]\n",
    );
    assert!(out.contains("headroomBand: 25"), "{out}");
    assert!(out.contains("warmup: 1m 30s"), "{out}");
    assert!(
        !out.contains("# note:"),
        "every section applies everywhere: {out}"
    );

    // Sections a mode does not use are named, not accepted silently; the backoffs are
    // upstream's fields, validated as upstream does.
    let out = valid(
        "partial.yaml",
        "serve: {decisionAnnotation: false}\ncollectors: {kubelet: {nodes: [n1]}}\nscheduler: {podInitialBackoffSeconds: 2, podMaxBackoffSeconds: 20}\n",
    );
    for note in [
        "# note: serve is set but `headroom simulate` does not use it",
        "# note: serve is set but `headroom place` does not use it",
        "# note: collectors (prometheus, kubelet, scrape, runs) is set but `headroom simulate` does not use it",
        "# note: scheduler.podInitialBackoffSeconds/podMaxBackoffSeconds is set but `headroom place` does not use it",
    ] {
        assert!(out.contains(note), "{note}\n{out}");
    }
    assert!(out.contains("podMaxBackoffSeconds: 20"), "{out}");
    assert!(!out.contains("# warning:"), "one source: {out}");

    // Two sources writing the same series: said, not refused (they may cover other nodes).
    let out = valid(
        "shared.yaml",
        "collectors: {kubelet: {nodes: [n1]}, prometheus: {url: 'http://127.0.0.1:9090'}}\n",
    );
    assert!(
        out.contains(
            "# warning: collectors.kubelet and collectors.prometheus write `node_memory_working_set_bytes`"
        ),
        "{out}"
    );
    let bad = write(
        &dir,
        "bad3.yaml",
        "scheduler: {podInitialBackoffSeconds: 5, podMaxBackoffSeconds: 2}\n",
    );
    let o = run(&["check-config", &bad]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("scheduler.podMaxBackoffSeconds"),
        "{}",
        stderr(&o)
    );

    // A config given to `place` is used: disabling TaintToleration lets the pod onto db-1.
    let cfg = write(
        &dir,
        "cfg.yaml",
        "profiles:\n  - plugins: {TaintToleration: {enabled: false}, NodeUnschedulable: {enabled: false}}\n",
    );
    let pod = write(
        &dir,
        "p.yaml",
        "kind: Pod\nmetadata: {name: p}\nspec: {nodeSelector: {kubernetes.io/hostname: db-1}, containers: [{name: c}]}\n",
    );
    let o = run(&[
        "place",
        "--config",
        &cfg,
        "--cluster",
        repo("examples/cluster.yaml").to_str().unwrap(),
        "--pod",
        &pod,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

/// Every configuration the docs show (each ```yaml block of the README and of `docs/*.md`:
/// the configuration reference, the placement notes quoting the configurations they
/// measured) loads, and every usage file they show (```yaml usage-file) places a pod.
#[test]
fn documented_configuration_examples_are_valid() {
    let docs = documentation();
    let dir = tempfile::tempdir().unwrap();
    let mut blocks = 0;
    for (doc, text) in &docs {
        for (i, block) in text.split("```yaml\n").skip(1).enumerate() {
            let yaml = block.split("```").next().unwrap();
            let path = write(&dir, &format!("block{blocks}.yaml"), yaml);
            let o = run(&["check-config", &path]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{doc} yaml block {i}:\n{yaml}\n{}",
                stderr(&o)
            );
            blocks += 1;
        }
    }
    // 4 in docs/configuration.md (the configuration, the store and collectors, the usage
    // settings, the peers' profiles), 1 in docs/operator-guide.md (serve's security) and 4
    // in docs/placement.md.
    assert!(
        blocks >= 9,
        "the docs document the configuration in YAML blocks: {blocks} found"
    );
    // Usage-file examples are checked by `place --usage` on a one-node cluster.
    let cluster = write(
        &dir,
        "cluster.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: worker-1}\nstatus: {allocatable: {cpu: \"4\", memory: 8Gi, pods: \"10\"}}\n",
    );
    let pod = write(
        &dir,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n",
    );
    let mut usage_blocks = 0;
    for (doc, text) in &docs {
        for (i, block) in text.split("```yaml usage-file\n").skip(1).enumerate() {
            let yaml = block.split("```").next().unwrap();
            let path = write(&dir, &format!("usage{usage_blocks}.yaml"), yaml);
            let o = run(&[
                "place",
                "--cluster",
                &cluster,
                "--pod",
                &pod,
                "--usage",
                &path,
            ]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{doc} usage block {i}:\n{yaml}\n{}",
                stderr(&o)
            );
            usage_blocks += 1;
        }
    }
    assert!(usage_blocks >= 1, "the docs show a usage file");
}

/// Every file under `dir` with its bytes.
fn files_of(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            let bytes = if p.is_file() {
                std::fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            out.insert(p, bytes);
        }
    }
    out
}

#[test]
fn series_and_place_refuse_a_directory_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("random.bin"), [7u8, 0, 255, 42, 13]).unwrap();
    let before = files_of(&home);
    let want = format!(
        "{} is not a headroom store (no HEADROOM marker); refusing to use it",
        home.display()
    );
    let o = run(&["series", "--data-dir", home.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("another headroom process"),
        "{}",
        stderr(&o)
    );
    assert_eq!(files_of(&home), before, "series changed the directory");
    let o = run(&[
        "place",
        "--cluster",
        repo("examples/cluster.yaml").to_str().unwrap(),
        "--pod",
        repo("examples/pod.yaml").to_str().unwrap(),
        "--data-dir",
        home.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert_eq!(files_of(&home), before, "place changed the directory");
}

/// Copies the files of a store directory (one level of subdirectories: sled's blobs).
fn copy_store(src: &std::path::Path, dst: &std::path::Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_store(&e.path(), &dst.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn damaged_store_exits_2_without_a_panic() {
    // Whether some cut reaches sled's own panic depends on where its background flushes put
    // the pages; a store in which none does is built again (the checks on every cut hold
    // for each store; this only makes sure the panic path is covered).
    for attempt in 0..4 {
        use headroom_storage::{Labels, Store, StoreConfig};
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("store");
        {
            // Written and trimmed for a while, so sled reuses segments and live pages are
            // spread over the whole file (the state in which a truncated file made sled panic).
            let config = StoreConfig {
                raw_retention: std::time::Duration::from_secs(3600),
                rollup_retention: std::time::Duration::from_secs(7200),
                wal_checkpoint_flushes: 2,
                ..StoreConfig::default()
            };
            let s = Store::open(&src, config).unwrap();
            let t0 = 1_700_000_000_000;
            for round in 0..20 {
                for n in 0..200 {
                    let l = Labels::new([("node", format!("build-{n}"))]).unwrap();
                    for i in round * 60..round * 60 + 60 {
                        let v = ((i * 7919 + n * 104_729) % 1_000_003) as f64;
                        s.append("node_cpu_usage_cores", &l, t0 + i * 15_000, v)
                            .unwrap();
                    }
                }
                s.flush().unwrap();
                s.maintain(t0 + (round * 60 + 60) * 15_000).unwrap();
            }
        }
        // Reopened once (sled writes its snapshot), as any store that has been restarted.
        drop(Store::open_existing(&src, StoreConfig::default()).unwrap());
        let len = std::fs::metadata(src.join("db")).unwrap().len();
        let commands = |data: &str| {
            let place = run(&[
                "place",
                "--cluster",
                repo("examples/cluster.yaml").to_str().unwrap(),
                "--pod",
                repo("examples/pod.yaml").to_str().unwrap(),
                "--output",
                "json",
                "--data-dir",
                data,
            ]);
            let series = run(&["series", "--output", "json", "--data-dir", data]);
            [("place", place), ("series", series)]
        };
        // What the intact store gives (ages depend on the clock, so they are left out).
        let comparable = |o: &std::process::Output| {
            stdout(o)
                .lines()
                .filter(|l| !l.contains("age_ms"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let intact = commands(src.to_str().unwrap()).map(|(what, o)| {
            assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
            comparable(&o)
        });
        let mut sled_panics = 0;
        // Thirty-sixths of the file, and exactly half. (Ninths alone sometimes missed every
        // cut at which sled panics: where its pages land depends on its background flushes.)
        for (k, cut) in (0..36).map(|k| len * k / 36).chain([len / 2]).enumerate() {
            let store = dir.path().join(format!("cut-{k}"));
            copy_store(&src, &store);
            std::fs::OpenOptions::new()
                .write(true)
                .open(store.join("db"))
                .unwrap()
                .set_len(cut)
                .unwrap();
            for (i, (what, o)) in commands(store.to_str().unwrap()).into_iter().enumerate() {
                let err = stderr(&o);
                // No Rust panic report (sled's panic is caught and named in the error).
                for scary in ["panicked at", "stack backtrace", "RUST_BACKTRACE"] {
                    assert!(!err.contains(scary), "{what} cut {cut}: {err}");
                }
                assert!(
                    !err.contains("another headroom process"),
                    "{what} cut {cut}: {err}"
                );
                // Either a clean exit 2 naming the damage, or (when the cut spared everything
                // the command reads) exactly the intact store's output.
                match o.status.code() {
                    Some(2) => assert!(err.contains("damaged"), "{what} cut {cut}: {err}"),
                    Some(0) => assert_eq!(comparable(&o), intact[i], "{what} cut {cut}/{len}"),
                    other => panic!("{what} cut {cut}/{len}: exit {other:?}: {err}"),
                }
                if cut == 0 {
                    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
                    assert!(err.contains("db is empty (0 bytes)"), "{what}: {err}");
                }
                if err.contains("sled could not recover its database (it panicked") {
                    sled_panics += 1;
                }
            }
        }
        if sled_panics > 0 {
            return;
        }
        eprintln!("store {attempt}: no cut reached sled's panic; another store");
    }
    panic!("no cut reached sled's panic in four stores");
}

#[test]
fn check_config_rejects_storage_values_sled_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        (
            "storage: {cacheCapacityBytes: 0}\n",
            "storage.cacheCapacityBytes: must be at least 256 (bytes)",
        ),
        (
            "storage: {maxSeries: 0}\n",
            "storage.maxSeries: must be at least 1",
        ),
        (
            "storage: {flushInterval: 0s}\n",
            "storage.flushInterval: must be greater than 0",
        ),
        (
            "storage: {maintenanceBackoffMin: 10m, maintenanceBackoffMax: 1m}\n",
            "storage.maintenanceBackoffMin: must not exceed maintenanceBackoffMax",
        ),
    ] {
        let path = write(&dir, "storage.yaml", text);
        let o = run(&["check-config", &path]);
        assert_eq!(o.status.code(), Some(2), "{text}");
        assert!(stderr(&o).contains(want), "{text}: {}", stderr(&o));
    }
}

/// `serve`'s flags win over the file before it is validated: `serve.security.mode: none`
/// is refused on the default (all-interfaces) listeners, accepted with `--listen` and
/// `--api-listen` on loopback (found on the kit: the failover script could not start).
#[test]
fn serve_flags_apply_before_validation() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(&dir, "none.yaml", "serve: {security: {mode: none}}\n");
    let kubeconfig = dir.path().join("missing.kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let o = run(&["serve", "--config", &cfg, "--kubeconfig", kubeconfig]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("serve.security.mode: none serves without authentication")
            && stderr(&o).contains("serve.listen is 0.0.0.0:10260")
            && stderr(&o).contains("none.yaml"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "serve",
        "--config",
        &cfg,
        "--kubeconfig",
        kubeconfig,
        "--listen",
        "127.0.0.1:0",
        "--api-listen",
        "127.0.0.1:0",
    ]);
    // Past validation: it stops at the missing kubeconfig instead.
    assert!(!stderr(&o).contains("loopback"), "{}", stderr(&o));
    assert!(stderr(&o).contains("missing.kubeconfig"), "{}", stderr(&o));
    assert_ne!(o.status.code(), Some(0));
}

/// `place` with preemption, text and JSON: the victims leave the what-if cluster and the pod
/// is placed (exit 0) on the nominated node; a PodDisruptionBudget in the cluster file
/// steers the choice; `preemptionPolicy: Never` nominates nothing (exit 3).
#[test]
fn place_preempts_lower_priority_pods() {
    let dir = tempfile::tempdir().unwrap();
    let running = |name: &str, node: &str, start: &str| {
        format!(
            r#"{{"kind": "Pod", "metadata": {{"name": "{name}", "namespace": "default", "labels": {{"app": "{name}"}}}},
               "spec": {{"nodeName": "{node}", "priority": 100, "containers": [{{"name": "c",
                 "resources": {{"requests": {{"cpu": "3"}}}}}}]}},
               "status": {{"phase": "Running", "startTime": "{start}"}}}}"#
        )
    };
    let node = |name: &str| {
        format!(
            r#"{{"kind": "Node", "metadata": {{"name": "{name}"}},
               "status": {{"allocatable": {{"cpu": "4", "memory": "8Gi", "pods": "110"}}}}}}"#
        )
    };
    let pdb = r#"{"kind": "PodDisruptionBudget", "apiVersion": "policy/v1",
        "metadata": {"name": "low-b", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "low-b"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}"#;
    let cluster = |with_pdb: bool| {
        let mut items = vec![
            node("node-a"),
            node("node-b"),
            running("low-a", "node-a", "2024-01-01T00:00:01Z"),
            running("low-b", "node-b", "2024-01-01T00:00:09Z"),
        ];
        if with_pdb {
            items.push(pdb.to_string());
        }
        format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","))
    };
    let pod = |never: bool| {
        format!(
            r#"{{"kind": "Pod", "metadata": {{"name": "urgent", "namespace": "default"}},
               "spec": {{"priority": 100000, {}"containers": [{{"name": "c",
                 "resources": {{"requests": {{"cpu": "2"}}}}}}]}}}}"#,
            if never {
                r#""preemptionPolicy": "Never", "#
            } else {
                ""
            }
        )
    };
    let plain = write(&dir, "plain.json", cluster(false));
    let guarded = write(&dir, "guarded.json", cluster(true));
    let urgent = write(&dir, "urgent.json", pod(false));
    let polite = write(&dir, "polite.json", pod(true));
    let json_of = |cluster: &str, pod: &str| {
        let o = run(&[
            "place",
            "--cluster",
            cluster,
            "--pod",
            pod,
            "--output",
            "json",
        ]);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        (o.status.code(), v[0].clone())
    };
    // Latest start wins without a budget: low-b goes.
    let (code, r) = json_of(&plain, &urgent);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["node"], "node-b", "{r}");
    assert_eq!(r["nominatedNode"], "node-b", "{r}");
    assert_eq!(r["victims"], serde_json::json!(["default/low-b"]), "{r}");
    // The budget protects low-b: low-a goes.
    let (code, r) = json_of(&guarded, &urgent);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["node"], "node-a", "{r}");
    assert_eq!(r["victims"], serde_json::json!(["default/low-a"]), "{r}");
    // Never: nothing nominated, upstream's tail.
    let (code, r) = json_of(&plain, &polite);
    assert_eq!(code, Some(3), "{r}");
    assert!(r["nominatedNode"].is_null(), "{r}");
    assert_eq!(r["victims"], serde_json::json!([]), "{r}");
    assert_eq!(
        r["message"],
        "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    );
    // Text output names the nominated node and the victims.
    let o = run(&["place", "--cluster", &guarded, "--pod", &urgent]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("placed on node-a"), "{text}");
    assert!(
        text.contains("preemption: nominated node node-a, victims: default/low-a"),
        "{text}"
    );
    assert!(
        text.contains(
            "first attempt (before preemption): 0/2 nodes are available: 2 Insufficient cpu."
        ),
        "{text}"
    );
}

/// `headroom … | head`: a reader that closes the pipe before headroom writes is not an
/// error — no panic (exit 101), no message; the command ends as it would have.
#[test]
fn a_closed_output_pipe_is_not_a_panic() {
    use std::process::Stdio;
    let out = tempfile::tempdir().unwrap();
    let mut child = super::headroom()
        .args([
            "sweep",
            repo("examples/families/alibaba-trace.yaml")
                .to_str()
                .unwrap(),
            "--write-farms",
            out.path().to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run headroom");
    // Close the read end at once: the farms are generated and written before the first
    // line goes out, so headroom writes into a closed pipe.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 20);
}

/// `check-config --policy` prints a peer's profile as `simulate` runs it, ready for `serve`
/// (the kit's replay runs the peers so): the peer's plugin on with the args its users
/// install it with, headroom's own off, the file's other sections kept; the output is a
/// configuration `check-config` accepts again. A tuned peer needs its tuned args.
#[test]
fn check_config_prints_a_peers_profile_for_serve() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(
        &dir,
        "base.yaml",
        "serve: {listen: 127.0.0.1:10660, apiListen: 127.0.0.1:10661, security: {mode: none}}\ncollectors: {kubelet: {nodes: [n1]}}\n",
    );
    let o = run(&["check-config", &base, "--policy", "koordinator"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("# as policy koordinator runs it"), "{out}");
    let yaml: String = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let v: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
    let p = &v["profiles"][0];
    assert_eq!(
        p["plugins"]["LoadAwareScheduling"]["enabled"], true,
        "{yaml}"
    );
    assert_eq!(p["plugins"]["RealMemoryFit"]["enabled"], false, "{yaml}");
    assert_eq!(p["plugins"]["History"]["enabled"], false, "{yaml}");
    // The Helm chart's args, not the plugin's defaults.
    assert_eq!(
        p["pluginArgs"]["loadAwareScheduling"]["filterExpiredNodeMetrics"], false,
        "{yaml}"
    );
    assert_eq!(v["collectors"]["kubelet"]["nodes"][0], "n1", "{yaml}");
    let again = write(&dir, "koordinator.yaml", &yaml);
    let o = run(&["check-config", &again]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // Without a policy nothing changes; a tuned peer without its args is refused.
    let o = run(&["check-config", &base]);
    assert!(
        !stdout(&o).contains("LoadAwareScheduling"),
        "{}",
        stdout(&o)
    );
    let o = run(&["check-config", &base, "--policy", "crane@tuned"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("crane@tuned: no tuned args"),
        "{}",
        stderr(&o)
    );
    let o = run(&["check-config", &base, "--tuned", &base]);
    assert_eq!(o.status.code(), Some(2), "--tuned needs --policy");
}
