#!/usr/bin/env bash
# `headroom serve` end to end on the real control plane of ../shared/kit (kube-apiserver and
# kube-scheduler v1.36.2, etcd), with Debian's Prometheus scraping Debian's node-exporter as
# the usage source. Needs the kit built once (../shared/kit/README.md) and prometheus +
# prometheus-node-exporter installed. Not part of CI (CI cannot build the kit).
#
#   bash scripts/kit-serve-e2e.sh [target/release/headroom]
#
# 1. scheduler mode, `usage.defaults.memoryReservePercent: 50`: one Node object named after
#    this machine, its memory capacity set to 1.5x what the machine really uses; a pod for
#    headroom stays Pending with RealMemoryFit's reason, while the default reserve binds it;
# 2. kill -9 mid-collection, restart on the same --data-dir: the store reopens with the
#    node's series up to within flushInterval of the kill;
# 3. extender mode: the real kube-scheduler with deploy/extender/kube-scheduler-config.yaml
#    (pointed at this headroom, over HTTPS with a client certificate the kit's CA signed for
#    system:kube-scheduler, authorised by deploy/rbac.yaml's headroom-extender-client role)
#    schedules a default-scheduler pod; headroom's filter rejects the node under the 50 %
#    reserve, so kube-scheduler reports the extender's reason.
#
# headroom's listeners run with the default security (TLS, TokenReview and
# SubjectAccessReview against the kit's API server); curl asks with the kit's admin token.
set -u
HR=$(realpath "${1:-target/release/headroom}")
W_NAME=e2e; source "$(dirname "$0")/kit-common.sh"
NODE=$(hostname)

log "usage source: node-exporter :19100, prometheus :19090 (1 s scrapes)"
prometheus-node-exporter --web.listen-address=127.0.0.1:19100 --collector.disable-defaults \
  --collector.meminfo --collector.filesystem --collector.cpu --collector.uname >"$W/ne.log" 2>&1 &
echo $! >"$W/ne.pid"
cat >"$W/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs: [{job_name: node, static_configs: [{targets: ['127.0.0.1:19100']}]}]
EOF
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/prom" \
  --web.listen-address=127.0.0.1:19090 --log.level=warn >"$W/prom.log" 2>&1 &
echo $! >"$W/prom.pid"

log "control plane (no kube-scheduler yet)"
NOSCHED=1 bash "$KIT/cluster.sh" start
$HR crd | $K apply -f - >/dev/null
used=$(awk '/MemTotal/{t=$2} /MemAvailable/{a=$2} END{print (t-a)*1024}' /proc/meminfo)
cap=$(python3 -c "print(int($used*1.5))")
kit_node "$NODE" 8 "$cap"
echo "node $NODE: capacity $cap bytes, really used $used (free $(python3 -c "print(round(100-100*$used/$cap))") %)"

prom_config() { # reserve
  cat <<EOF
serve: {security: {clientCAFile: $EXT/pki/ca.crt}}
storage: {flushInterval: 2s}
analytics: {refreshInterval: 2s}
# maxWait: the pod waits for real room (the default 0s places it at once on the node with
# the most real free memory when no node has the reserve).
usage: {maxWait: 10m, defaults: {memoryReservePercent: $1}}
collectors:
  prometheus:
    url: http://127.0.0.1:19090
    rateWindow: 5s
    schedule: {interval: 1s}
    instanceMap: {query: node_uname_info}
    queries: {container_cpu_usage_cores: '', container_memory_working_set_bytes: '', pod_ephemeral_storage_used_bytes: '', node_imagefs_available_bytes: '', node_imagefs_capacity_bytes: ''}
EOF
}
prom_config 50 >"$W/reserve50.yaml"
prom_config 10 >"$W/reserve10.yaml"
serve() { # name config extender-port extra-args...
  local name=$1 cfg=$2 port=$3; shift 3
  $HR serve --config "$cfg" --kubeconfig "$EXT/run/admin.kubeconfig" --data-dir "$W/data" \
    --no-leader-election --listen 127.0.0.1:$port --api-listen 127.0.0.1:$((port + 100)) \
    "$@" >>"$W/$name.log" 2>&1 &
  echo $! >"$W/$name.pid"
}
api() { curl -sk -H "Authorization: Bearer admintoken" "https://127.0.0.1:$1$2"; }
until curl -sf 'http://127.0.0.1:19090/api/v1/query?query=node_uname_info' | grep -q nodename; do sleep 1; done

log "1. scheduler mode, memoryReservePercent 50"
serve hr50 "$W/reserve50.yaml" 10270
for i in $(seq 60); do api 10370 "/nodes/$NODE" | grep -q '"basis":"measured"' && break; sleep 1; done
echo "no credentials: HTTP $(curl -sk -o /dev/null -w '%{http_code}' https://127.0.0.1:10370/nodes)"
api 10370 "/nodes/$NODE" | python3 -c "import json,sys; n=json.load(sys.stdin); h=n['headroom']; print('headroom:', h['basis'], 'memory free', round(100*(1-h['memoryUsed']/h['memoryTotal'])), '%')"
$K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: build-1, namespace: default}
spec: {schedulerName: headroom, containers: [{name: c, image: pause, resources: {requests: {cpu: 100m, memory: 64Mi}}}]}
EOF
sleep 5
echo "build-1 node: '$($K get pod build-1 -o jsonpath='{.spec.nodeName}')'"
echo "build-1 PodScheduled: $($K get pod build-1 -o jsonpath='{.status.conditions[0].message}')"
api 10370 /metrics | grep -E '^headroom_(collector_cycles_total|cluster_lists_total\{kind="Pod"\}|events_created_total|scheduler_schedule_attempts_total|auth_requests_total)' | head -12
log "2. kill -9 mid-collection, restart with the default reserve on the same store"
sleep 6
kill -9 "$(cat "$W/hr50.pid")"; killed=$(date +%s%3N); sleep 1
$HR series --data-dir "$W/data" --match node_memory_working_set_bytes --output json | python3 -c "
import json,sys; s=json.load(sys.stdin)[0]
print('after kill -9: newest surviving sample', $killed - s['last_ts_ms'], 'ms before the kill (flushInterval 2s, scrape 1s)')"
serve hr10 "$W/reserve10.yaml" 10271
for i in $(seq 60); do [ -n "$($K get pod build-1 -o jsonpath='{.spec.nodeName}')" ] && break; sleep 1; done
echo "build-1 after restart (reserve 10 %): node '$($K get pod build-1 -o jsonpath='{.spec.nodeName}')'"
echo "build-1 decision annotation (written with the binding): $($K get pod build-1 -o jsonpath='{.metadata.annotations.headroom\.io/decision}')"
kill "$(cat "$W/hr10.pid")"; wait "$(cat "$W/hr10.pid")" 2>/dev/null
$HR series --data-dir "$W/data" --match node_memory_working_set_bytes --output json | python3 -c "
import json,sys; s=json.load(sys.stdin)[0]; print('series after kill -9 + restart:', s['metric'], s['labels'], 'samples ok')"

log "3. extender mode: the real kube-scheduler asks headroom (reserve 50 %)"
serve ext "$W/reserve50.yaml" 10272 --extender-only
# kube-scheduler's client certificate for the extender, signed by the kit's CA.
openssl req -newkey rsa:2048 -nodes -keyout "$W/ks-client.key" -out "$W/ks-client.csr" \
  -subj "/CN=system:kube-scheduler" 2>/dev/null
# An X.509 v3 client certificate (extensions make it v3; webpki refuses v1 certificates,
# which is what `openssl x509 -req` makes without them, as kubeadm's never are).
printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$W/client.ext"
openssl x509 -req -in "$W/ks-client.csr" -CA "$EXT/pki/ca.crt" -CAkey "$EXT/pki/ca.key" \
  -CAcreateserial -out "$W/ks-client.crt" -days 1 -extfile "$W/client.ext" 2>/dev/null
$K create namespace headroom-system >/dev/null 2>&1
$K apply -f deploy/rbac.yaml >/dev/null
sed -e "s#/etc/kubernetes/scheduler.conf#$EXT/run/admin.kubeconfig#" \
    -e "s#https://headroom.headroom-system.svc:10260/extender#https://127.0.0.1:10272/extender#" \
    -e "s#/etc/kubernetes/pki/scheduler-extender-client.crt#$W/ks-client.crt#" \
    -e "s#/etc/kubernetes/pki/scheduler-extender-client.key#$W/ks-client.key#" \
    -e 's#leaderElect: true#leaderElect: false#' \
    deploy/extender/kube-scheduler-config.yaml >"$W/ks.yaml"
for i in $(seq 60); do api 10372 "/nodes/$NODE" | grep -q '"basis":"measured"' && break; sleep 1; done
echo "extender without a client certificate: HTTP $(curl -sk -o /dev/null -w '%{http_code}' -X POST -d '{}' https://127.0.0.1:10272/extender/filter)"
"$EXT/bin/kube-scheduler" --config="$W/ks.yaml" --secure-port=10263 >"$W/ks.log" 2>&1 &
echo $! >"$W/ks.pid"
$K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: default}
spec: {containers: [{name: c, image: pause, resources: {requests: {cpu: 100m, memory: 64Mi}}}]}
EOF
sleep 8
echo "web-1 node: '$($K get pod web-1 -o jsonpath='{.spec.nodeName}')'"
echo "web-1 PodScheduled: $($K get pod web-1 -o jsonpath='{.status.conditions[0].message}')"
api 10372 /metrics | grep -E '^headroom_(collector_cycles_total|cluster_lists_total\{kind="Node"\}|auth_requests_total|auth_tls_handshake_failures_total|extender_)'

