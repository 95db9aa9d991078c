#!/usr/bin/env bash
# Leader failover of two `headroom serve` replicas on the real control plane of
# ../shared/kit (build it once; see its README). Not part of CI (CI cannot build the kit).
#
#   bash scripts/kit-failover.sh [target/release/headroom]
#
# Both replicas elect a leader on the Lease `headroom` (leaseDuration 15s, renewDeadline
# 10s, retryPeriod 2s: the defaults). Pods keep arriving; the leader is killed with -9; the
# script reports how long until the other replica bound the first pod created after the
# kill (target: at most leaseDuration + 2 s), and checks that no pod got two Scheduled
# events (nothing bound twice).
set -u
HR=$(realpath "${1:-target/release/headroom}")
W_NAME=failover; source "$(dirname "$0")/kit-common.sh"
now() { date +%s%3N; }

NOSCHED=1 bash "$KIT/cluster.sh" start >/dev/null
$HR crd | $K apply -f - >/dev/null
for i in 1 2 3; do
  kit_node node-$i 64 256Gi 500
done
cat >"$W/config.yaml" <<EOF
serve:
  security: {mode: none}
  leaderElection: {leaseNamespace: default}
EOF
for r in a b; do
  port=$([ $r = a ] && echo 10280 || echo 10290)
  POD_NAME=replica-$r $HR serve --config "$W/config.yaml" --kubeconfig "$EXT/run/admin.kubeconfig" \
    --data-dir "$W/data-$r" --listen 127.0.0.1:$port --api-listen 127.0.0.1:$((port + 1)) \
    >"$W/$r.log" 2>&1 &
  echo $! >"$W/$r.pid"
done
holder() { $K get lease headroom -n default -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
for i in $(seq 60); do [ -n "$(holder)" ] && break; sleep 0.5; done
leader=$(holder); echo "leader: $leader"
pod() {
  $K create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec: {schedulerName: headroom, containers: [{name: c, image: pause, resources: {requests: {cpu: 10m, memory: 16Mi}}}]}
EOF
}
bound() { [ -n "$($K get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null)" ]; }
for i in $(seq 1 20); do pod "before-$i"; done
for i in $(seq 100); do bound before-20 && break; sleep 0.2; done
echo "before the kill: $(for i in $(seq 1 20); do bound before-$i && echo x; done | wc -l)/20 bound"
victim=${leader#replica-}
kill -9 "$(cat "$W/$victim.pid")"; killed=$(now)
pod after-1
for i in $(seq 400); do bound after-1 && break; sleep 0.1; done
took=$(( $(now) - killed ))
echo "first bind after kill -9 of $leader: ${took} ms (new leader: $(holder); target <= 17000 ms)"
for i in $(seq 2 20); do pod "after-$i"; done
for i in $(seq 100); do bound after-20 && break; sleep 0.2; done
echo "after the kill: $(for i in $(seq 1 20); do bound after-$i && echo x; done | wc -l)/20 bound"
twice=$($K get events -A -o json | python3 -c "
import json,sys,collections
c=collections.Counter(e['involvedObject']['name'] for e in json.load(sys.stdin)['items'] if e.get('reason')=='Scheduled')
print(sum(1 for v in c.values() if v>1))")
echo "pods with more than one Scheduled event: $twice"
