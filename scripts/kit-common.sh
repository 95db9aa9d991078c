# Shared by the scripts/kit-*.sh scripts (sourced, not run): where the kit is, a work
# folder emptied per run, kubectl as the kit's admin, a log heading, and a cleanup on exit
# that stops every process the script recorded in $W/*.pid and the control plane.
#
#   W_NAME=failover; source "$(dirname "$0")/kit-common.sh"
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../shared/kit" && pwd)
EXT=${EXT:-$HOME/.cache/headroom-kit}; RUN=${RUN:-/tmp/headroom-kit}; export EXT RUN
W=${W:-/tmp/headroom-kit-$W_NAME}; rm -rf "$W"; mkdir -p "$W"
K="kubectl --kubeconfig $EXT/run/admin.kubeconfig"
log() { printf '\n== %s\n' "$*"; }
cleanup() {
  for p in "$W"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  bash "$KIT/cluster.sh" stop >/dev/null
}
trap cleanup EXIT

# kit_node NAME CPU MEMORY [PODS]: a Ready Node object with that capacity (and
# allocatable), as a kubelet would register it; the kit runs no kubelet.
kit_node() {
  local name=$1 cpu=$2 mem=$3 pods=${4:-110}
  $K create -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata: {name: $name, labels: {kubernetes.io/hostname: $name}}
NODE
  local res="{\"cpu\":\"$cpu\",\"memory\":\"$mem\",\"pods\":\"$pods\"}"
  $K patch node "$name" --subresource=status --type=merge -p "{\"status\":{\"capacity\":$res,\"allocatable\":$res,\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"ok\",\"lastHeartbeatTime\":\"2026-11-23T00:00:00Z\",\"lastTransitionTime\":\"2026-11-23T00:00:00Z\"}]}}" >/dev/null
}
