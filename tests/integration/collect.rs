//! `collect --once` and `series` through the binary, against a loopback kubelet serving a
//! real `/stats/summary` capture.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;

use serde_json::Value;

use super::{repo, run};

/// The GKE capture's node name and its `node.memory.workingSetBytes`.
const NODE: &str = "gke-lenaic-pool-1-1c8b424c-wnkn";
const NODE_WORKING_SET: &str = "1447833600";

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A kubelet stand-in on 127.0.0.1:<ephemeral>: `GET /stats/summary` answers the fixture,
/// anything else 404. Serves until the test process exits.
fn kubelet() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let body = std::fs::read(repo("tests/fixtures/kubelet/summary.json")).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let body = body.clone();
            std::thread::spawn(move || serve(stream, &body));
        }
    });
    addr
}

fn serve(stream: TcpStream, body: &[u8]) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    // Skip the headers (the request has no body).
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut stream = stream;
    let (status, body): (&str, &[u8]) = if request_line.starts_with("GET /stats/summary ") {
        ("200 OK", body)
    } else {
        ("404 Not Found", b"not found")
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

/// A config polling one node at `address` (host:port) through a URL template, no retries.
fn write_config(dir: &Path, address: &str) -> String {
    let path = dir.join("headroom.yaml");
    std::fs::write(
        &path,
        format!(
            "collectors:\n  kubelet:\n    nodes: [{{name: {NODE}, address: \"{address}\"}}]\n    \
             endpoint: {{kind: template, url: \"http://{{address}}/stats/summary\"}}\n    \
             schedule: {{retries: 0, timeout: 5s}}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn collect_once_stores_kubelet_samples_and_series_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &kubelet());
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();

    let o = run(&[
        "collect",
        "--once",
        "--config",
        &config,
        "--data-dir",
        data,
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let samples = v["samples"].as_u64().unwrap();
    assert!(samples > 10, "{v}");
    assert_eq!(v["errors"], 0);
    let k = &v["sources"][0];
    assert_eq!(k["source"], "kubelet");
    assert_eq!(k["requests"], 1);
    assert_eq!(k["samples"].as_u64(), Some(samples));
    // The capture's newest observation: 2019-11-20T13:13:16Z.
    assert_eq!(k["newest_sample_ms"], 1_574_255_596_000_i64);
    assert!(k["newest_sample_age_ms"].as_i64().unwrap() > 0);

    // Text listing, restricted by the selector, carries the capture's exact value.
    let o = run(&[
        "series",
        "--data-dir",
        data,
        "--match",
        "node_memory_working_set_bytes",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].starts_with(&format!(
            "node_memory_working_set_bytes{{node=\"{NODE}\"}} {NODE_WORKING_SET} ("
        )),
        "{text}"
    );

    // JSON listing of every series: as many as the collect reported, one per metric+labels.
    let o = run(&["series", "--data-dir", data, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let all: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let all = all.as_array().unwrap();
    assert_eq!(all.len() as u64, k["series"].as_u64().unwrap());
    let ws = all
        .iter()
        .find(|s| s["metric"] == "node_memory_working_set_bytes")
        .unwrap();
    assert_eq!(ws["labels"]["node"], NODE);
    assert_eq!(
        ws["last_value"].to_string(),
        format!("{NODE_WORKING_SET}.0")
    );

    // A second cycle over the same capture is accepted (same observations, same values).
    let o = run(&["collect", "--once", "--config", &config, "--data-dir", data]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("kubelet: 1 request(s)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn collect_with_kubelet_down_exits_3_and_counts_the_error() {
    // Bind then drop: the port is closed while the config points at it.
    let address = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &address);
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();

    let o = run(&[
        "collect",
        "--once",
        "--config",
        &config,
        "--data-dir",
        data,
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["samples"], 0);
    assert_eq!(v["errors"], 1);
    let e = &v["sources"][0]["errors"][0];
    assert_eq!(e["subject"], NODE);
    assert_eq!(e["reason"], "connect");
    assert!(e["message"].as_str().unwrap().contains(&address), "{e}");

    // Text output names the error too; the store exists but holds nothing.
    let o = run(&["collect", "--once", "--config", &config, "--data-dir", data]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stdout(&o).contains(&format!("error: {NODE} [connect]")),
        "{}",
        stdout(&o)
    );
    let o = run(&["series", "--data-dir", data]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), format!("no series stored in {data}"));
}

#[test]
fn collect_rejects_bad_config_missing_sources_and_missing_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let write = |name: &str, text: &str| super::write(&dir, name, text);

    let bad = write(
        "bad.yaml",
        "collectors:\n  kubelet:\n    nodes: [a]\n    bogus: 1\n",
    );
    let o = run(&["collect", "--once", "--config", &bad, "--data-dir", data]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("collectors.kubelet"), "{}", stderr(&o));
    assert!(stderr(&o).contains("bogus"), "{}", stderr(&o));

    let zero = write(
        "zero.yaml",
        "collectors:\n  kubelet:\n    nodes: [a]\n    schedule: {interval: 0s}\n",
    );
    let o = run(&["collect", "--once", "--config", &zero, "--data-dir", data]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("collectors.kubelet.schedule.interval"),
        "{}",
        stderr(&o)
    );

    let none = write("none.yaml", "scheduler: {seed: 1}\n");
    let o = run(&["collect", "--once", "--config", &none, "--data-dir", data]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "no collector source configured: add collectors.prometheus, collectors.kubelet or collectors.scrape"
        ),
        "{}",
        stderr(&o)
    );

    let o = run(&["collect", "--config", &none, "--data-dir", data]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--once"), "{}", stderr(&o));
    assert!(stderr(&o).contains("headroom serve"), "{}", stderr(&o));

    // None of these created the store.
    assert!(!Path::new(data).exists());
}

#[test]
fn series_rejects_bad_selectors_and_does_not_create_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();

    let o = run(&["series", "--data-dir", data, "--match", "bad{"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("bad --match selector"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("bad{"), "{}", stderr(&o));

    let o = run(&["series", "--data-dir", data]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("no series stored in {data}")),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("does not exist"), "{}", stdout(&o));
    assert!(!Path::new(data).exists());

    // dataDir from the configuration.
    let config = dir.path().join("c.yaml");
    std::fs::write(&config, format!("dataDir: {data}\n")).unwrap();
    let o = run(&["series", "--config", config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(data), "{}", stdout(&o));
}

#[test]
fn collect_and_series_explain_themselves() {
    let o = run(&["collect", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for needle in [
        "--once",
        "--config",
        "--data-dir",
        "--output",
        "headroom serve",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let o = run(&["series", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for needle in ["--match", "--data-dir", "SELECTOR", "never creates"] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
}
