//! `deploy/`: every manifest parses as the Kubernetes kind it claims (k8s-openapi types,
//! with no field dropped on the way, so a typo fails), the RBAC grants exactly the API
//! calls the code makes, the CRD is the generated one, and the config map holds a valid
//! configuration.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Pod, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;
use serde_json::Value;

fn manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            manifests(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every key of `orig` is in `back` (what the typed parse kept), recursively.
fn assert_nothing_dropped(orig: &Value, back: &Value, at: &str, file: &str) {
    match (orig, back) {
        (Value::Object(o), Value::Object(b)) => {
            for (k, v) in o {
                let Some(bv) = b.get(k) else {
                    panic!(
                        "{file}: {at}.{k} is not a field of the kind (dropped by the typed parse)"
                    );
                };
                assert_nothing_dropped(v, bv, &format!("{at}.{k}"), file);
            }
        }
        (Value::Array(o), Value::Array(b)) => {
            assert_eq!(o.len(), b.len(), "{file}: {at}");
            for (i, (x, y)) in o.iter().zip(b).enumerate() {
                assert_nothing_dropped(x, y, &format!("{at}[{i}]"), file);
            }
        }
        _ => {}
    }
}

fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value, file: &str) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
    let back = serde_json::to_value(&t).unwrap();
    assert_nothing_dropped(doc, &back, "", file);
    t
}

#[test]
fn kube_deploy_manifests_parse_as_their_kinds() {
    let root = crate::repo("deploy");
    let mut files = Vec::new();
    manifests(&root, &mut files);
    files.sort();
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for f in &files {
        let name = f.strip_prefix(&root).unwrap().display().to_string();
        for doc in docs(f) {
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no kind"))
                .to_string();
            *kinds.entry(kind.clone()).or_default() += 1;
            match kind.as_str() {
                "Namespace" => drop(typed::<Namespace>(&doc, &name)),
                "ServiceAccount" => drop(typed::<ServiceAccount>(&doc, &name)),
                "ClusterRole" => drop(typed::<ClusterRole>(&doc, &name)),
                "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(&doc, &name)),
                "Role" => drop(typed::<Role>(&doc, &name)),
                "RoleBinding" => drop(typed::<RoleBinding>(&doc, &name)),
                "Service" => drop(typed::<Service>(&doc, &name)),
                "PersistentVolumeClaim" => drop(typed::<PersistentVolumeClaim>(&doc, &name)),
                "Pod" => {
                    let p: Pod = typed(&doc, &name);
                    assert_eq!(p.spec.unwrap().scheduler_name.as_deref(), Some("headroom"));
                }
                "CustomResourceDefinition" => drop(typed::<CustomResourceDefinition>(&doc, &name)),
                "ConfigMap" => {
                    let cm: ConfigMap = typed(&doc, &name);
                    let text = &cm.data.unwrap()["config.yaml"];
                    let c = headroom::config::config_from_yaml(text, &name)
                        .unwrap_or_else(|e| panic!("{e}"));
                    assert!(c.serve.leader_election.enabled);
                    // Nothing unauthenticated: TLS with delegated authn/z, the cluster CA
                    // for kube-scheduler's client certificate.
                    assert_eq!(
                        c.serve.security.mode,
                        headroom::config::serve::SecurityMode::Delegated
                    );
                    assert!(c.serve.security.client_ca_file.is_some());
                }
                "Deployment" => {
                    let d: Deployment = typed(&doc, &name);
                    let spec = d.spec.unwrap();
                    assert_eq!(spec.replicas, Some(2));
                    let pod = spec.template.spec.unwrap();
                    assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
                    let c = &pod.containers[0];
                    let sc = c.security_context.clone().unwrap();
                    assert_eq!(sc.read_only_root_filesystem, Some(true));
                    assert_eq!(
                        c.liveness_probe
                            .as_ref()
                            .unwrap()
                            .http_get
                            .as_ref()
                            .unwrap()
                            .path
                            .as_deref(),
                        Some("/healthz")
                    );
                    assert_eq!(
                        c.readiness_probe
                            .as_ref()
                            .unwrap()
                            .http_get
                            .as_ref()
                            .unwrap()
                            .path
                            .as_deref(),
                        Some("/readyz")
                    );
                    assert!(c.resources.as_ref().unwrap().requests.is_some());
                    assert_eq!(c.args.as_ref().unwrap()[0], "serve");
                }
                "NetworkPolicy" => {
                    let np: k8s_openapi::api::networking::v1::NetworkPolicy = typed(&doc, &name);
                    let ports: Vec<String> = np
                        .spec
                        .unwrap()
                        .ingress
                        .unwrap_or_default()
                        .iter()
                        .flat_map(|r| r.ports.clone().unwrap_or_default())
                        .filter_map(|p| p.port.map(|p| format!("{p:?}")))
                        .collect();
                    // The extender, the API and the read-only viewer: each admitted from its callers only.
                    assert_eq!(ports.len(), 3, "{name}: {ports:?}");
                }
                "Reservation" => {
                    let r: headroom::kube::crd::ReservationResource = typed(&doc, &name);
                    headroom::kube::crd::to_hold(&r, true).unwrap();
                }
                "Kustomization" => {
                    for r in doc["resources"].as_array().unwrap() {
                        assert!(
                            root.join(r.as_str().unwrap()).exists(),
                            "{name}: {r} missing"
                        );
                    }
                }
                "KubeSchedulerConfiguration" => {
                    let e = &doc["extenders"][0];
                    assert!(e["urlPrefix"].as_str().unwrap().ends_with("/extender"));
                    assert_eq!(
                        (
                            e["filterVerb"].as_str(),
                            e["prioritizeVerb"].as_str(),
                            e["bindVerb"].as_str()
                        ),
                        (Some("filter"), Some("prioritize"), Some("bind"))
                    );
                    for k in ["weight", "nodeCacheCapable", "ignorable", "httpTimeout"] {
                        assert!(!e[k].is_null(), "{name}: extender stanza lacks {k}");
                    }
                    // The extender listener is TLS with client certificates.
                    assert!(e["urlPrefix"].as_str().unwrap().starts_with("https://"));
                    assert_eq!(e["enableHTTPS"], true);
                    assert!(e["tlsConfig"]["certFile"].is_string());
                }
                other => panic!("{name}: no check for kind {other}"),
            }
        }
    }
    for k in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "CustomResourceDefinition",
        "Pod",
        "KubeSchedulerConfiguration",
        "Kustomization",
        "NetworkPolicy",
    ] {
        assert!(kinds.contains_key(k), "deploy/ has no {k}");
    }
}

fn expand(rules: &[PolicyRule], out: &mut BTreeSet<(String, String, String)>) {
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    assert!(
                        out.insert((g.clone(), res.clone(), v.clone())),
                        "granted twice: {g} {res} {v}"
                    );
                }
            }
        }
    }
}

#[test]
fn kube_rbac_grants_exactly_the_calls_the_code_makes() {
    let mut granted = BTreeSet::new();
    for doc in docs(&crate::repo("deploy/rbac.yaml")) {
        match doc["kind"].as_str() {
            Some("ClusterRole") => expand(
                &serde_json::from_value::<ClusterRole>(doc)
                    .unwrap()
                    .rules
                    .unwrap_or_default(),
                &mut granted,
            ),
            Some("Role") => expand(
                &serde_json::from_value::<Role>(doc)
                    .unwrap()
                    .rules
                    .unwrap_or_default(),
                &mut granted,
            ),
            _ => {}
        }
    }
    let used: BTreeSet<(String, String, String)> = headroom::kube::API_CALLS
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        granted, used,
        "deploy/rbac.yaml must grant exactly API_CALLS"
    );
}

#[test]
fn kube_crd_manifest_is_the_generated_one() {
    let file = std::fs::read_to_string(crate::repo("deploy/crd.yaml")).unwrap();
    assert_eq!(
        file,
        headroom::kube::crd::crd_yaml(),
        "regenerate with `headroom crd > deploy/crd.yaml`"
    );
    let out = crate::run(&["crd"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), file);
    let help = crate::run(&["serve", "--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    for want in [
        "--kubeconfig",
        "--prometheus",
        "extender",
        "Lease",
        "SIGTERM",
    ] {
        assert!(help.contains(want), "serve --help lacks {want}");
    }
}
