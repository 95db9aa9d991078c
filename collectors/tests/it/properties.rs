//! Property tests over the collectors' parsers of untrusted bytes: mutations of real
//! kubelet summaries (and recorded ones), Prometheus API answers and text exposition never
//! panic, and a rejected body is an `Err` with a message. `scripts/fuzz.sh` runs the same
//! decoders under cargo-fuzz for longer.

use headroom_collectors::config::ScrapeKind;
use headroom_collectors::kubelet::decode_summary;
use headroom_collectors::prometheus::decode_response;
use headroom_collectors::scrape::decode_exposition;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::common::fixture;

/// One change to a seed body.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the n-th JSON node (pre-order, modulo the count) with the i-th value.
    Replace(usize, usize),
    /// Replace the n-th line with the i-th line token (text bodies).
    Line(usize, usize),
    /// Insert the i-th token at byte n.
    Insert(usize, usize),
    /// Overwrite the byte at n.
    Byte(usize, u8),
    /// Keep the first n bytes (modulo the length).
    Truncate(usize),
}

fn values() -> Vec<Value> {
    vec![
        json!(-1),
        json!(u64::MAX),
        json!(1e300),
        json!(-1e300),
        json!(""),
        json!("NaN"),
        json!("+Inf"),
        json!("1e400"),
        json!("2026-13-45T99:99:99Z"),
        json!("0001-01-01T00:00:00Z"),
        json!("9999-12-31T23:59:59.999999999Z"),
        json!(1e20),
        json!(-1e20),
        Value::Null,
        json!([]),
        json!({}),
        json!([1e300, "1"]),
        json!([-1e300, "NaN"]),
        json!(["x", 1]),
        json!("x".repeat(300)),
        json!(true),
    ]
}

const TOKENS: &[&str] = &[
    "\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\"",
    ":",
    "# TYPE x counter\n",
    "1e309",
    "-",
    "NaN",
    "+Inf",
    "{a=\"",
    "\\",
    "\u{0}",
    " 9223372036854775807",
    " -9223372036854775808",
];

const LINES: &[&str] = &[
    "",
    "# HELP container_cpu_usage_seconds_total x",
    "# TYPE container_cpu_usage_seconds_total counter",
    "container_cpu_usage_seconds_total{container=\"c\",namespace=\"n\",pod=\"p\"} 1e308 -9223372036854775808",
    "container_memory_working_set_bytes{container=\"c\",namespace=\"n\",pod=\"p\"} NaN 9223372036854775807",
    "node_cpu_usage_seconds_total -Inf",
    "node_filesystem_avail_bytes{mountpoint=\"/\"} +Inf 1",
    "node_memory_MemTotal_bytes 1e400",
    "pod_memory_working_set_bytes{namespace=\"\",pod=\"\"} -1",
    "metric{label=\"unterminated} 1",
    "{} 1",
];

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(m) => m.values().map(count).sum(),
        _ => 0,
    }
}

fn replace(v: &mut Value, n: &mut usize, new: &Value) -> bool {
    if *n == 0 {
        *v = new.clone();
        return true;
    }
    *n -= 1;
    match v {
        Value::Array(a) => a.iter_mut().any(|x| replace(x, n, new)),
        Value::Object(m) => m.values_mut().any(|x| replace(x, n, new)),
        _ => false,
    }
}

fn mutate(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let vals = values();
    let mut doc: Option<Value> = serde_json::from_slice(seed).ok();
    let mut bytes: Option<Vec<u8>> = None;
    for m in mutations {
        if let (Mutation::Replace(n, i), Some(d), None) = (m, &mut doc, &bytes) {
            let mut n = n % count(d);
            replace(d, &mut n, &vals[i % vals.len()]);
            continue;
        }
        let b = bytes.get_or_insert_with(|| match &doc {
            Some(d) => serde_json::to_vec(d).unwrap_or_default(),
            None => seed.to_vec(),
        });
        match m {
            Mutation::Line(n, i) => {
                let text = String::from_utf8_lossy(b).into_owned();
                let mut lines: Vec<&str> = text.lines().collect();
                let at = n % (lines.len() + 1);
                let line = LINES[i % LINES.len()];
                if at < lines.len() && i % 2 == 0 {
                    lines[at] = line;
                } else {
                    lines.insert(at, line);
                }
                *b = lines.join("\n").into_bytes();
            }
            Mutation::Insert(n, i) => {
                let at = n % (b.len() + 1);
                b.splice(at..at, TOKENS[i % TOKENS.len()].bytes());
            }
            Mutation::Byte(n, x) if !b.is_empty() => {
                let at = n % b.len();
                b[at] = *x;
            }
            Mutation::Truncate(n) => {
                let keep = n % (b.len() + 1);
                b.truncate(keep);
            }
            _ => {}
        }
    }
    match (bytes, doc) {
        (Some(b), _) => b,
        (None, Some(d)) => serde_json::to_vec(&d).unwrap_or_default(),
        (None, None) => seed.to_vec(),
    }
}

fn mutation(json: bool) -> impl Strategy<Value = Mutation> {
    let (replace, line) = if json { (4, 0) } else { (0, 4) };
    prop_oneof![
        replace => (any::<usize>(), any::<usize>()).prop_map(|(n, i)| Mutation::Replace(n, i)),
        line => (any::<usize>(), any::<usize>()).prop_map(|(n, i)| Mutation::Line(n, i)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(n, i)| Mutation::Insert(n, i)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(n, b)| Mutation::Byte(n, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutated(seeds: Vec<Vec<u8>>, json: bool) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    (0..n, prop::collection::vec(mutation(json), 1..4))
        .prop_map(move |(i, ms)| mutate(&seeds[i], &ms))
}

fn summaries() -> Vec<Vec<u8>> {
    [
        "real/gke-2019-datadog.json",
        "real/beats.json",
        "real/windows-datadog.json",
        "real/beats-multiple-containers.json",
        "node-30-pods.json",
        "init-sidecar.json",
        "missing-fields.json",
    ]
    .iter()
    .map(|f| fixture(f))
    .collect()
}

fn prometheus_answers() -> Vec<Vec<u8>> {
    [
        json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"node": "n1", "instance": "10.0.0.1:9100"}, "value": [1767225600.123, "0.5"]},
            {"metric": {"namespace": "ci", "pod": "b-1", "container": "c"}, "value": [1767225600, "NaN"]}]}}),
        json!({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"node": "n1"}, "values": [[1767225600, "1"], [1767225615, "+Inf"], [1767225630, "2e9"]]}]},
            "warnings": ["partial response"]}),
        json!({"status": "success", "data": {"resultType": "scalar", "result": [1767225600, "3"]}}),
        json!({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}),
    ]
    .iter()
    .map(|v| serde_json::to_vec(v).unwrap())
    .collect()
}

/// The recorded kubelet exposition in pieces of 150 lines (a piece parses in a fraction of
/// the whole file's time; pieces without their `# TYPE` lines are inputs too).
fn exposition_seeds() -> Vec<Vec<u8>> {
    let text = String::from_utf8(fixture("real/kubelet-1.21-datadog.txt")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(150)
        .map(|c| c.join("\n").into_bytes())
        .collect()
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn kubelet_summaries_never_panic(body in mutated(summaries(), true)) {
        if let Err(e) = decode_summary(&body, "node-1", 1_767_225_600_000) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn prometheus_answers_never_panic(
        body in mutated(prometheus_answers(), true),
        status in prop::sample::select(vec![200u16, 400, 422, 503]),
    ) {
        if let Err(e) = decode_response("http://p/api/v1/query", status, "sig", "up", &body) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn exposition_never_panics(
        body in mutated(exposition_seeds(), false),
        node_exporter in any::<bool>(),
    ) {
        let kind = if node_exporter { ScrapeKind::NodeExporter } else { ScrapeKind::KubeletResource };
        if let Err(e) = decode_exposition(&body, kind, "node-1", "/", 1_767_225_600_000) {
            prop_assert!(!e.is_empty());
        }
    }
}
