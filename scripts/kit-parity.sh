#!/usr/bin/env bash
# Preemption and volume binding by `headroom serve` on the real control plane of
# ../shared/kit (build it once; see its README). Not part of CI (CI cannot build the kit;
# tests/integration/kube/{preemption,volumes}.rs do the same on the fake API server).
#
#   bash scripts/kit-parity.sh [target/release/headroom]
#
# The kit has no kubelet, no PV controller and no disruption controller, so the script
# plays them the way the recorded kube-scheduler cases did: pods are "running" by
# `spec.nodeName` and a hand-written status, the PDB's status is written by hand, and once
# headroom has written a PV's claimRef the script completes the claim side.
#
# 1. Preemption: two nodes of 4 CPU, each full with two 2-CPU pods of PriorityClass `low`;
#    a PDB (disruptionsAllowed 0) covers the pods on node-1. A `high` pod of 2 CPU fits
#    nowhere: headroom nominates node-2 (no PDB violation), marks one victim there with
#    DisruptionTarget and deletes it, and binds the pod to node-2.
# 2. Volumes: a WaitForFirstConsumer StorageClass, a local PV pinned to node-1, an unbound
#    claim; a pod using it: headroom writes the PV's claimRef (PreBind), the script binds the
#    claim as the PV controller would, and headroom binds the pod to node-1.
set -u
HR=$(realpath "${1:-target/release/headroom}")
W_NAME=parity; source "$(dirname "$0")/kit-common.sh"
cleanup() {
  [ -f "$W/hr.pid" ] && kill "$(cat "$W/hr.pid")" 2>/dev/null
  bash "$KIT/cluster.sh" stop >/dev/null
}
trap cleanup EXIT
wait_for() { # seconds, description, command...
  local t=$1 what=$2; shift 2
  for _ in $(seq "$t"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "timed out waiting for $what"; return 1
}

NOSCHED=1 bash "$KIT/cluster.sh" start >/dev/null
for i in 1 2; do
  kit_node node-$i 4 16Gi 110
done
$K apply -f - >/dev/null <<EOF
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 100000
EOF
n=0
for node in node-1 node-2; do
  for j in 1 2; do
    n=$((n + 1))
    $K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: low-$n, labels: {app: low-$node}}
spec:
  nodeName: $node
  priorityClassName: low
  terminationGracePeriodSeconds: 0
  containers: [{name: c, image: pause, resources: {requests: {cpu: "2"}}}]
EOF
    $K patch pod low-$n --subresource=status --type=merge -p "{\"status\":{\"phase\":\"Running\",\"startTime\":\"2026-11-24T00:00:0${n}Z\"}}" >/dev/null
  done
done
$K apply -f - >/dev/null <<EOF
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: low-node-1}
spec: {minAvailable: 2, selector: {matchLabels: {app: low-node-1}}}
EOF
$K patch pdb low-node-1 --subresource=status --type=merge -p '{"status":{"observedGeneration":1,"disruptionsAllowed":0,"currentHealthy":2,"desiredHealthy":2,"expectedPods":2}}' >/dev/null

cat >"$W/config.yaml" <<EOF
serve:
  security: {mode: none}
EOF
$HR serve --config "$W/config.yaml" --kubeconfig "$EXT/run/admin.kubeconfig" --data-dir "$W/data" \
  --prometheus http://127.0.0.1:1 --no-leader-election --listen 127.0.0.1:10281 --api-listen 127.0.0.1:10381 \
  >"$W/hr.log" 2>&1 &
echo $! >"$W/hr.pid"
wait_for 60 "headroom ready" curl -sf http://127.0.0.1:10281/readyz

log "1. preemption"
$K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: urgent}
spec:
  schedulerName: headroom
  priorityClassName: high
  containers: [{name: c, image: pause, resources: {requests: {cpu: "2"}}}]
EOF
nominated=""
for _ in $(seq 600); do
  st=$($K get pod urgent -o jsonpath='{.status.nominatedNodeName}/{.spec.nodeName}')
  [ -z "$nominated" ] && [ "${st%%/*}" != "" ] && nominated=${st%%/*}
  [ -n "${st#*/}" ] && break
  sleep 0.1
done
echo "urgent: nominatedNodeName seen '$nominated', bound to '$($K get pod urgent -o jsonpath='{.spec.nodeName}')'"
echo "pods left: $($K get pods -o jsonpath='{range .items[*]}{.metadata.name}@{.spec.nodeName} {end}')"
$K get events.events.k8s.io -o jsonpath='{range .items[*]}{.reason}: {.regarding.name}: {.note}{"\n"}{end}' | grep -E "Preempted|FailedScheduling|Scheduled" | sed 's/^/event /'

log "2. volume binding (WaitForFirstConsumer, local PV on node-1)"
$K apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local-wffc}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local-wffc
  local: {path: /mnt/disk1}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-1]}]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-0, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-wffc
  resources: {requests: {storage: 5Gi}}
EOF
$K patch pv pv-1 --subresource=status --type=merge -p '{"status":{"phase":"Available"}}' >/dev/null
$K patch pvc data-0 --subresource=status --type=merge -p '{"status":{"phase":"Pending"}}' >/dev/null
# node-1 has 2 CPU free after the preemption above? No: 4 CPU with two low pods (PDB kept
# them). The pod asks for no CPU, so only its claim decides.
$K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: db-0}
spec:
  schedulerName: headroom
  containers: [{name: c, image: pause}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data-0}}]
EOF
wait_for 60 "claimRef on pv-1" bash -c "[ -n \"\$($K get pv pv-1 -o jsonpath='{.spec.claimRef.name}')\" ]"
echo "pv-1 claimRef written by headroom: $($K get pv pv-1 -o jsonpath='{.spec.claimRef.namespace}/{.spec.claimRef.name}'); db-0 bound yet: '$($K get pod db-0 -o jsonpath='{.spec.nodeName}')'"
# The PV controller's part.
$K patch pvc data-0 --type=merge -p '{"metadata":{"annotations":{"pv.kubernetes.io/bind-completed":"yes"}},"spec":{"volumeName":"pv-1"}}' >/dev/null
$K patch pvc data-0 --subresource=status --type=merge -p '{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"10Gi"}}}' >/dev/null
$K patch pv pv-1 --subresource=status --type=merge -p '{"status":{"phase":"Bound"}}' >/dev/null
wait_for 60 "db-0 bound" bash -c "[ -n \"\$($K get pod db-0 -o jsonpath='{.spec.nodeName}')\" ]"
echo "db-0 bound to '$($K get pod db-0 -o jsonpath='{.spec.nodeName}')' (pv-1 is pinned to node-1)"
curl -s http://127.0.0.1:10381/metrics | grep -E "^headroom_(volume_binding|preemption)[a-z_]*" | sed 's/^/metric /'
