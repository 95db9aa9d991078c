//! Volume scheduling under `serve` on the fake API server: VolumeBinding's PreBind writes
//! the chosen PV's `claimRef` and waits for the claim to be bound (the test plays the PV
//! controller), then the pod is bound to a node in the PV's node affinity; a pod whose
//! claim is bound to a PV pinned to a node lands on that node.

use std::time::Duration;

use serde_json::{Value, json};

use super::fake::Fake;
use super::{BASE, assert_calls_allowed, namespace, node, serve};

fn pinned(host: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}})
}

fn pv(name: &str, host: &str, claim: Option<&str>) -> Value {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "local-wffc",
                 "volumeMode": "Filesystem", "local": {"path": "/mnt/disks/vol1"},
                 "nodeAffinity": pinned(host)},
        "status": {"phase": "Available"}});
    if let Some(c) = claim {
        v["spec"]["claimRef"] =
            json!({"kind": "PersistentVolumeClaim", "namespace": "default", "name": c});
        v["status"]["phase"] = json!("Bound");
    }
    v
}

fn pvc(name: &str, volume: Option<&str>) -> Value {
    let mut v = json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-wffc",
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}});
    if let Some(pv) = volume {
        v["spec"]["volumeName"] = json!(pv);
        v["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
        v["status"]["phase"] = json!("Bound");
    }
    v
}

/// The local WaitForFirstConsumer StorageClass the claims name (no provisioner; the API
/// server defaults `reclaimPolicy` to Delete).
fn local_wffc() -> Value {
    json!({"metadata": {"name": "local-wffc"}, "provisioner": "kubernetes.io/no-provisioner",
           "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"})
}

fn pod_with(name: &str, claim: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "headroom", "containers": [
               {"name": "c", "image": "registry.invalid/pause:1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
           "status": {"phase": "Pending"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_volume_binding_writes_claim_ref_waits_for_the_claim_and_binds_in_pv_affinity() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    for n in ["node-a", "node-b", "node-c"] {
        fake.put("nodes", node(n, "4"));
    }
    fake.put("storageclasses", local_wffc());
    // An unbound WaitForFirstConsumer claim with one matching PV, on node-b.
    fake.put("persistentvolumes", pv("pv-b", "node-b", None));
    fake.put("persistentvolumeclaims", pvc("data-0", None));
    // A claim bound to a PV pinned to node-c.
    fake.put("persistentvolumes", pv("pv-c", "node-c", Some("data-1")));
    fake.put("persistentvolumeclaims", pvc("data-1", Some("pv-c")));
    fake.put("pods", pod_with("wffc", "data-0"));
    fake.put("pods", pod_with("pinned", "data-1"));
    let s = serve(&fake, BASE, "a").await;

    fake.wait_for(15, "pinned bound", |f| {
        f.node_of("default", "pinned").is_some()
    })
    .await;
    assert_eq!(fake.node_of("default", "pinned").as_deref(), Some("node-c"));

    // PreBind writes pv-b's claimRef (with the claim's uid) as upstream's binder does ...
    fake.wait_for(15, "pv-b claimRef", |f| {
        f.get("persistentvolumes", "", "pv-b").unwrap()["spec"]["claimRef"]["name"] == "data-0"
    })
    .await;
    let written = fake.get("persistentvolumes", "", "pv-b").unwrap();
    let claim_uid = fake
        .get("persistentvolumeclaims", "default", "data-0")
        .unwrap()["metadata"]["uid"]
        .clone();
    assert_eq!(written["spec"]["claimRef"]["uid"], claim_uid);
    assert_eq!(written["spec"]["claimRef"]["namespace"], "default");
    assert_eq!(
        written["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    // ... and waits: the pod is not bound while the claim is not.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        fake.node_of("default", "wffc"),
        None,
        "bound before its claim"
    );

    // The PV controller's part: the claim side of the bind.
    let mut claim = fake
        .get("persistentvolumeclaims", "default", "data-0")
        .unwrap();
    claim["spec"]["volumeName"] = json!("pv-b");
    claim["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    claim["status"]["phase"] = json!("Bound");
    fake.put("persistentvolumeclaims", claim);
    let mut volume = fake.get("persistentvolumes", "", "pv-b").unwrap();
    volume["status"]["phase"] = json!("Bound");
    fake.put("persistentvolumes", volume);

    fake.wait_for(15, "wffc bound", |f| f.node_of("default", "wffc").is_some())
        .await;
    assert_eq!(fake.node_of("default", "wffc").as_deref(), Some("node-b"));
    let metrics = reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("headroom_volume_binding_total{result=\"bound\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("volume"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    s.stop().await;
    assert_calls_allowed(&fake);
}

/// When the PV's `claimRef` is reset while PreBind waits (the PV controller gave the PV
/// up), PreBind fails: the pod is forgotten with its assumed PV, retried after its
/// backoff, binds the PV again, and is bound once the claim is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_volume_binding_retries_the_pod_when_the_claim_ref_is_reset() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    fake.put("storageclasses", local_wffc());
    fake.put("persistentvolumes", pv("pv-a", "node-a", None));
    fake.put("persistentvolumeclaims", pvc("data-0", None));
    fake.put("pods", pod_with("wffc", "data-0"));
    let s = serve(&fake, BASE, "a").await;

    let claim_ref_written = |f: &Fake| {
        f.get("persistentvolumes", "", "pv-a").unwrap()["spec"]["claimRef"]["name"] == "data-0"
    };
    fake.wait_for(15, "pv-a claimRef", claim_ref_written).await;
    // The PV controller resets the PV.
    let mut volume = fake.get("persistentvolumes", "", "pv-a").unwrap();
    volume["spec"].as_object_mut().unwrap().remove("claimRef");
    fake.put("persistentvolumes", volume);
    let updates = |f: &Fake| {
        f.calls()
            .iter()
            .filter(|c| c.1 == "persistentvolumes" && c.2 == "update")
            .count()
    };
    fake.wait_for(20, "a second claimRef write", |f| {
        updates(f) >= 2 && claim_ref_written(f)
    })
    .await;
    assert_eq!(fake.node_of("default", "wffc"), None);
    let mut claim = fake
        .get("persistentvolumeclaims", "default", "data-0")
        .unwrap();
    claim["spec"]["volumeName"] = json!("pv-a");
    claim["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    claim["status"]["phase"] = json!("Bound");
    fake.put("persistentvolumeclaims", claim);
    fake.wait_for(15, "wffc bound", |f| f.node_of("default", "wffc").is_some())
        .await;
    assert_eq!(fake.node_of("default", "wffc").as_deref(), Some("node-a"));
    let metrics = reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "headroom_volume_binding_total{result=\"api_error\"} 1",
        "headroom_volume_binding_total{result=\"bound\"} 1",
    ] {
        assert!(metrics.contains(want), "{want}");
    }
    s.stop().await;
    assert_calls_allowed(&fake);
}

/// A WaitForFirstConsumer claim of a class with a real provisioner and no matching PV is
/// provisioned: PreBind writes `volume.kubernetes.io/selected-node` on the claim (a node
/// the class's `allowedTopologies` admit) and waits until the provisioner has bound it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_volume_binding_selects_a_node_for_provisioning() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    fake.put(
        "storageclasses",
        json!({"metadata": {"name": "local-wffc"}, "provisioner": "csi.example.com",
               "volumeBindingMode": "WaitForFirstConsumer",
               "allowedTopologies": [{"matchLabelExpressions": [
                   {"key": "kubernetes.io/hostname", "values": ["node-b"]}]}]}),
    );
    fake.put("persistentvolumeclaims", pvc("data-0", None));
    fake.put("pods", pod_with("wffc", "data-0"));
    let s = serve(&fake, BASE, "a").await;

    fake.wait_for(15, "selected-node on data-0", |f| {
        f.get("persistentvolumeclaims", "default", "data-0")
            .unwrap()["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
            == "node-b"
    })
    .await;
    assert_eq!(fake.node_of("default", "wffc"), None);
    // The provisioner's part: a PV on node-b, bound to the claim.
    fake.put("persistentvolumes", pv("pvc-123", "node-b", Some("data-0")));
    let mut claim = fake
        .get("persistentvolumeclaims", "default", "data-0")
        .unwrap();
    claim["spec"]["volumeName"] = json!("pvc-123");
    claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
    claim["status"]["phase"] = json!("Bound");
    fake.put("persistentvolumeclaims", claim);
    fake.wait_for(15, "wffc bound", |f| f.node_of("default", "wffc").is_some())
        .await;
    assert_eq!(fake.node_of("default", "wffc").as_deref(), Some("node-b"));
    s.stop().await;
    assert_calls_allowed(&fake);
}

/// Scheduling waits until every kind the scheduler reads has been listed once (as
/// kube-scheduler waits for its informers): while claims cannot be listed, `/readyz` says
/// 503 and a pod with a claim is not judged against a volume state still loading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_scheduling_waits_for_the_volume_lists() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-b", "4"));
    fake.put("storageclasses", local_wffc());
    fake.put("persistentvolumes", pv("pv-c", "node-b", Some("data-1")));
    fake.put("persistentvolumeclaims", pvc("data-1", Some("pv-c")));
    fake.put("pods", pod_with("pinned", "data-1"));
    fake.forbid("persistentvolumeclaims");
    let s = serve(&fake, BASE, "a").await;
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ready = http.get(s.url("/readyz")).send().await.unwrap().status();
    assert_eq!(ready.as_u16(), 503);
    assert_eq!(
        fake.node_of("default", "pinned"),
        None,
        "scheduled before the claims were listed"
    );
    fake.allow("persistentvolumeclaims");
    fake.wait_for(20, "pinned bound once the claims are listed", |f| {
        f.node_of("default", "pinned").is_some()
    })
    .await;
    assert_eq!(fake.node_of("default", "pinned").as_deref(), Some("node-b"));
    let ready = http.get(s.url("/readyz")).send().await.unwrap().status();
    assert_eq!(ready.as_u16(), 200);
    s.stop().await;
}
