#!/usr/bin/env bash
# `kubectl headroom` and `/ui` on the real control plane of ../shared/kit (kube-apiserver
# v1.36.2 with RBAC and token authentication, etcd), through the API server's service proxy
# as a user reaches them. Needs the kit built once (../shared/kit/README.md) and Debian's
# `chromium` for the screenshots. Not part of CI (CI cannot build the kit; CI runs the same
# paths against the in-process fake API server: tests/integration/kubectl.rs, ui.rs).
#
#   bash scripts/kit-kubectl-ui.sh [target/release/headroom]
#
# 1. deploy/crd.yaml, namespace.yaml, rbac.yaml, viewer-rbac.yaml and service.yaml applied as
#    a user would; the Service's endpoints written by hand (the kit runs no controller-manager)
#    to this machine's non-loopback address (the API server refuses to proxy to loopback);
# 2. `headroom serve` schedules a few pods on three Node objects, `serve.viewerListen` open;
# 3. `kubectl headroom` (the binary linked as kubectl-headroom on $PATH) with the admin's
#    kubeconfig; with kube-scheduler's kubeconfig (a user without `get services/proxy`),
#    which must be refused with the RBAC hint; then again once that user is bound to
#    headroom-kubectl-viewer;
# 4. `kubectl proxy` and headless Chromium on every /ui page through the service proxy.
set -u
HR=$(realpath "${1:-target/release/headroom}")
W_NAME=kubectl; source "$(dirname "$0")/kit-common.sh"
mkdir -p "$W/bin"
ADMIN=$EXT/run/admin.kubeconfig; OTHER=$EXT/run/scheduler.kubeconfig
IP=$(hostname -I | tr ' ' '\n' | grep -m1 -E '^[0-9]+\.')

log "control plane (no kube-scheduler), headroom's manifests"
NOSCHED=1 bash "$KIT/cluster.sh" start
for f in crd namespace rbac viewer-rbac service; do $K apply -f "deploy/$f.yaml" >/dev/null; done
# The API server proxies a Service with a selector only to endpoints that name a Pod
# holding that address (pkg/registry/core/service/storage: "Address has no target ref"),
# so headroom's Pod object stands for the process running on this machine.
$K -n headroom-system create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: headroom-0, namespace: headroom-system, labels: {app.kubernetes.io/name: headroom}}
spec: {nodeName: node-1, containers: [{name: headroom, image: headroom, ports: [{name: viewer, containerPort: 10262}, {name: api, containerPort: 10261}]}]}
EOF
$K -n headroom-system patch pod headroom-0 --subresource=status --type=merge \
  -p "{\"status\":{\"podIP\":\"$IP\",\"podIPs\":[{\"ip\":\"$IP\"}]}}" >/dev/null
$K -n headroom-system create -f - >/dev/null <<EOF
apiVersion: v1
kind: Endpoints
metadata: {name: headroom, namespace: headroom-system}
subsets: [{addresses: [{ip: $IP, targetRef: {kind: Pod, name: headroom-0, namespace: headroom-system}}], ports: [{name: viewer, port: 10262}, {name: api, port: 10261}]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: headroom-manual
  namespace: headroom-system
  labels: {kubernetes.io/service-name: headroom, endpointslice.kubernetes.io/managed-by: kit}
addressType: IPv4
endpoints: [{addresses: [$IP], conditions: {ready: true}, targetRef: {kind: Pod, name: headroom-0, namespace: headroom-system}}]
ports: [{name: viewer, port: 10262, protocol: TCP}, {name: api, port: 10261, protocol: TCP}]
EOF
for n in 1 2 3; do
  kit_node "node-$n" "$((4 * n))" "$((16 * n))Gi"
done

log "headroom serve, viewer on $IP:10262"
cat >"$W/config.yaml" <<EOF
serve: {viewerListen: "$IP:10262", security: {clientCAFile: $EXT/pki/ca.crt}}
EOF
$HR serve --config "$W/config.yaml" --kubeconfig "$ADMIN" --data-dir "$W/data" \
  --no-leader-election --listen 127.0.0.1:10260 --api-listen "$IP:10261" >"$W/serve.log" 2>&1 &
echo $! >"$W/serve.pid"
for i in 1 2 3 4; do
  $K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: build-$i, namespace: default, labels: {headroom.io/builder: ci-build}}
spec: {schedulerName: headroom, containers: [{name: c, image: pause, resources: {requests: {cpu: "1", memory: 2Gi}}}]}
EOF
done
$K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: default}
spec: {schedulerName: headroom, containers: [{name: c, image: pause, resources: {requests: {cpu: "64"}}}]}
EOF
for i in $(seq 30); do
  [ "$($K get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{" "}{end}' | wc -w)" -ge 4 ] && break; sleep 1
done
$K get pods -o wide --no-headers | awk '{print "pod", $1, $3, "node=" $7}'

log "3. kubectl headroom, on \$PATH as kubectl-headroom"
ln -sf "$HR" "$W/bin/kubectl-headroom"
export PATH="$W/bin:$PATH"
kubectl plugin list 2>/dev/null | grep headroom
echo "--- admin: kubectl headroom explain default/build-1"
KUBECONFIG="$ADMIN" kubectl headroom explain default/build-1; echo "exit $?"
echo "--- admin: kubectl headroom explain default/too-big"
KUBECONFIG="$ADMIN" kubectl headroom explain default/too-big | head -8; echo "exit ${PIPESTATUS[0]}"
echo "--- admin: kubectl headroom nodes"
KUBECONFIG="$ADMIN" kubectl headroom nodes; echo "exit $?"
echo "--- admin: kubectl headroom queue"
KUBECONFIG="$ADMIN" kubectl headroom queue; echo "exit $?"
echo "--- admin: kubectl headroom advice -o json | head"
KUBECONFIG="$ADMIN" kubectl headroom advice -o json | head -5; echo "exit ${PIPESTATUS[0]}"
echo "--- admin: kubectl headroom -n elsewhere nodes (headroom not installed there)"
KUBECONFIG="$ADMIN" kubectl headroom -n elsewhere nodes; echo "exit $?"
echo "--- system:kube-scheduler (no services/proxy grant): kubectl headroom nodes"
KUBECONFIG="$OTHER" kubectl headroom nodes; echo "exit $?"
$K -n headroom-system create rolebinding sched-headroom --clusterrole=headroom-kubectl-viewer \
  --user=system:kube-scheduler >/dev/null
echo "--- after binding headroom-kubectl-viewer: kubectl headroom explain default/build-2"
KUBECONFIG="$OTHER" kubectl headroom explain default/build-2 | head -4; echo "exit ${PIPESTATUS[0]}"
echo "--- that user on the api port (not granted): the proxy refuses"
kubectl --kubeconfig "$OTHER" get --raw /api/v1/namespaces/headroom-system/services/https:headroom:api/proxy/nodes 2>&1 | head -2

log "4. /ui through kubectl proxy and the service proxy, headless Chromium"
kubectl --kubeconfig "$ADMIN" proxy --port 18001 >"$W/proxy.log" 2>&1 &
echo $! >"$W/proxy.pid"
sleep 2
BASE=http://127.0.0.1:18001/api/v1/namespaces/headroom-system/services/http:headroom:viewer/proxy
for page in ui/ ui/pods/default/build-1 ui/pods/default/too-big ui/nodes ui/queue ui/advice; do
  code=$(curl -s -o "$W/page.html" -w '%{http_code}' "$BASE/$page")
  links=$(grep -o 'href="[^"]*"' "$W/page.html" | head -3 | tr '\n' ' ')
  shot="$W/$(echo "$page" | tr '/' '_').png"
  if command -v chromium >/dev/null; then
    chromium --headless --no-sandbox --disable-gpu --window-size=1280,900 \
      --screenshot="$shot" "$BASE/$page" >/dev/null 2>&1
  fi
  [ "$code" = 200 ] || head -c 300 "$W/page.html"
  echo "$page: HTTP $code, $(wc -c <"$W/page.html") bytes, screenshot $(stat -c %s "$shot" 2>/dev/null || echo none) bytes, links: $links"
done
echo "screenshots in $W"
