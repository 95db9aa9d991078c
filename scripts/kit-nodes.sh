#!/usr/bin/env bash
# Real nodes on the kit (issue #72; ../shared/kit/REAL-NODES.md): N real kubelets v1.36.2,
# each with its own containerd, ports, cgroup root (/nodeI) and CNI bridge network, joined
# to the kit's kube-apiserver (start it first: ../shared/kit/cluster.sh start).
#
#   bash scripts/kit-nodes.sh start N [MEMORY_MI]   # node1..nodeN, MEMORY_MI each (default 1536)
#   bash scripts/kit-nodes.sh stop                  # every kubelet, containerd, pod, cgroup, bridge
#   bash scripts/kit-nodes.sh image                 # (re)build the images only
#
# Each node looks like a machine of its own to its kubelet: containerd and the kubelet run in
# the node's cgroup namespace (/nodeI is their "/", so node stats are the node's) with
# /proc/meminfo cut to MEMORY_MI, so capacity is MEMORY_MI and allocatable MEMORY_MI less a
# 1 Mi evictionHard. MEMORY_MI is also a hard wall: memory.limit_in_bytes on /nodeI, which
# holds the pods and the node's own daemons (kubelet, containerd, shims in /nodeI/system), so
# the kernel's OOM killer acts inside that node only (REAL-NODES.md: the victim's container
# ends `terminated: {exitCode: 137, reason: OOMKilled}`; no node event, no eviction). CPU is
# not walled: every node reports this machine's 2 cores.
#
# Ports, node I: kubelet 11250+I, healthz 11270+I, read-only (/stats/summary,
# /metrics/cadvisor, no auth) 10300+I. Pod network 10.77.I.0/24 on bridge
# hrkI, gateway 10.77.I.1 (the host: where scripts/kit-replay.py's profile server answers).
# The images (no registry): localhost/pause:1 (busybox, the sandbox) and
# localhost/headroom-workload:1 (the static headroom-workload binary, workload/).
#
# Not part of CI (CI cannot build the kit); needs root, cgroup v1 controllers, and what
# ../shared/kit/build.sh installs (kubelet, containerd, runc, CNI plugins, busybox, umoci).
set -euo pipefail
cd "$(dirname "$0")/.."
EXT=${EXT:-$HOME/.cache/headroom-kit}
BASE=${KIT_NODES:-/tmp/headroom-kit-nodes}
CONTROLLERS="cpu cpuacct cpuset memory pids blkio devices freezer hugetlb systemd"

images() {
  local img=$BASE/images
  rm -rf "$img"; mkdir -p "$img"
  echo "==> headroom-workload, static"
  CARGO_TARGET_DIR=target/workload-static RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build -q --release -p headroom-workload --target x86_64-unknown-linux-gnu
  local wl=target/workload-static/x86_64-unknown-linux-gnu/release/headroom-workload
  # one OCI layout per image: NAME TAG FILES-INTO-/bin... -- CMD...
  mk() {
    local name=$1 bin=$2; shift 2
    local lay=$img/$name
    umoci init --layout "$lay" >/dev/null
    umoci new --image "$lay:1" >/dev/null
    umoci unpack --image "$lay:1" "$lay.bundle" >/dev/null
    mkdir -p "$lay.bundle/rootfs/bin"
    install -m 0755 "$bin" "$lay.bundle/rootfs/bin/"
    if [ "$name" = pause ]; then
      for a in sh sleep; do ln -sf busybox "$lay.bundle/rootfs/bin/$a"; done
    fi
    umoci repack --image "$lay:1" "$lay.bundle" >/dev/null
    umoci config --image "$lay:1" "$@" >/dev/null
    rm -rf "$lay.bundle"
    # containerd names an imported image by this annotation.
    python3 - "$lay/index.json" "localhost/$name:1" <<'PY'
import json, sys
p, ref = sys.argv[1], sys.argv[2]
idx = json.load(open(p))
for m in idx["manifests"]:
    m.setdefault("annotations", {})["io.containerd.image.name"] = ref
json.dump(idx, open(p, "w"))
PY
    tar -C "$lay" -cf "$img/$name.tar" .
  }
  mk pause /bin/busybox --config.cmd /bin/sleep --config.cmd 2147483647
  mk headroom-workload "$wl" --config.entrypoint /bin/headroom-workload
  ls -la "$img"/*.tar
}

node_up() {
  local i=$1 mem_mi=$2
  local n=node$i d=$BASE/node$i
  mkdir -p "$d"/{containerd,state,cni,kubelet,logs,pods}
  # A bridge network of its own.
  cat >"$d/cni/10-hrk.conflist" <<J
{"cniVersion": "0.4.0", "name": "hrk$i", "plugins": [
  {"type": "bridge", "bridge": "hrk$i", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.$i.0/24", "gateway": "10.77.$i.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$d/cni/ipam"}},
  {"type": "loopback"}]}
J
  cat >"$d/containerd.toml" <<T
version = 2
root = "$d/containerd"
state = "$d/state"
[grpc]
  address = "$d/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:1"
  # root here lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj (REAL-NODES.md)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = "$d/runc"
T
  # The node's memory as its kubelet sees the machine: /proc/meminfo with MemTotal (and
  # what is free) cut to the node's size.
  awk -v kb=$((mem_mi * 1024)) '/^(MemTotal|MemFree|MemAvailable):/ {printf "%-16s%8d kB\n", $1, kb; next} {print}' \
    /proc/meminfo >"$d/meminfo"
  cat >"$d/kubelet.yaml" <<Y
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
port: $((11250 + i))
healthzPort: $((11270 + i))
readOnlyPort: $((10300 + i))
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$d/containerd.sock
podLogsDir: $d/pods
# Nothing reserved: allocatable is the node's memory (less 1 Mi), as simulate models it; the
# daemons' own use (kubelet, containerd, shims: /system) counts against the wall.
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
Y
  # The node's cgroup in every controller, its memory limit the wall.
  for c in $CONTROLLERS; do
    [ -d /sys/fs/cgroup/$c ] && mkdir -p /sys/fs/cgroup/$c/$n
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$n/cpuset.cpus
  cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$n/cpuset.mems
  echo $((mem_mi * 1024 * 1024)) >/sys/fs/cgroup/memory/$n/memory.limit_in_bytes
  # containerd and the kubelet in the node's cgroup namespace and a mount namespace of their
  # own, where the cgroup hierarchies are mounted again: /nodeI is their "/" (the kubelet's
  # node stats, /stats/summary and /metrics/cadvisor id="/", are the node's, as on a machine
  # of its own) and their pods go to /nodeI/kubepods. Themselves in /nodeI/system.
  N=$n D=$d EXT=$EXT CONTROLLERS=$CONTROLLERS I=$i setsid bash -c '
    for c in $CONTROLLERS; do
      [ -d /sys/fs/cgroup/$c/$N ] && echo $$ >/sys/fs/cgroup/$c/$N/cgroup.procs
    done
    exec unshare --cgroup --mount bash -c "
      set -e
      for c in \$CONTROLLERS; do
        [ -d /sys/fs/cgroup/\$c ] || continue
        umount /sys/fs/cgroup/\$c
        if [ \$c = systemd ]; then mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/\$c
        else mount -t cgroup -o \$c cgroup /sys/fs/cgroup/\$c; fi
        mkdir -p /sys/fs/cgroup/\$c/system
        if [ \$c = cpuset ]; then
          cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/system/cpuset.cpus
          cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/system/cpuset.mems
        fi
        echo \$\$ >/sys/fs/cgroup/\$c/system/cgroup.procs
      done
      if [ -d /sys/fs/cgroup/unified ]; then umount /sys/fs/cgroup/unified; mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified; fi
      mount --bind \$D/meminfo /proc/meminfo
      # fixed kubelet paths (device plugins, pod resources, plugin registry), per node
      mkdir -p \$D/varlib /var/lib/kubelet
      mount --bind \$D/varlib /var/lib/kubelet
      containerd --config \$D/containerd.toml >\$D/logs/containerd.log 2>&1 &
      echo \$! >\$D/containerd.pid
      for _ in \$(seq 50); do [ -S \$D/containerd.sock ] && break; sleep 0.2; done
      for t in \$D/../images/*.tar; do
        ctr -a \$D/containerd.sock -n k8s.io images import --all-platforms \$t >/dev/null
      done
      \$EXT/bin/kubelet --config \$D/kubelet.yaml --kubeconfig \$EXT/run/admin.kubeconfig \
        --hostname-override=\$N --root-dir=\$D/kubelet >\$D/logs/kubelet.log 2>&1 &
      echo \$! >\$D/kubelet.pid
      wait
    "
  ' >"$d/logs/node.log" 2>&1 &
  echo $! >"$d/node.pid"
}

start() {
  local count=${1:?usage: kit-nodes.sh start N [MEMORY_MI]} mem_mi=${2:-1536}
  [ -x "$EXT/bin/kubelet" ] || { echo "no $EXT/bin/kubelet: run ../shared/kit/build.sh" >&2; exit 2; }
  [ -f "$BASE/images/pause.tar" ] && [ -f "$BASE/images/headroom-workload.tar" ] || images
  for i in $(seq 1 "$count"); do node_up "$i" "$mem_mi"; done
  local K="kubectl --kubeconfig $EXT/run/admin.kubeconfig"
  for _ in $(seq 120); do
    ready=$($K get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l)
    [ "$ready" -ge "$count" ] && break
    sleep 1
  done
  $K get nodes -o custom-columns=NAME:.metadata.name,READY:.status.conditions[-1].type,MEM:.status.allocatable.memory,CPU:.status.allocatable.cpu
  [ "$ready" -ge "$count" ] || { echo "only $ready of $count nodes Ready (logs: $BASE/node*/logs)" >&2; exit 1; }
}

stop() {
  local K="kubectl --kubeconfig $EXT/run/admin.kubeconfig"
  for pidf in "$BASE"/node*/kubelet.pid "$BASE"/node*/containerd.pid "$BASE"/node*/node.pid; do
    [ -f "$pidf" ] && kill "$(cat "$pidf")" 2>/dev/null || true
  done
  sleep 1
  # The shims outlive containerd; then whatever still runs in a node's cgroup.
  pkill -9 -f "containerd-shim.*$BASE" 2>/dev/null || true
  for cg in /sys/fs/cgroup/memory/node[0-9]*; do
    [ -d "$cg" ] || continue
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  sleep 0.5
  grep -o " $BASE[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  for c in $CONTROLLERS; do
    for cg in /sys/fs/cgroup/$c/node[0-9]*; do
      [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
  done
  for l in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep '^hrk'); do ip link del "$l" 2>/dev/null || true; done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-'); do ip netns del "$ns" 2>/dev/null || true; done
  local imgs=$BASE/images.keep
  [ -d "$BASE/images" ] && mv "$BASE/images" "$imgs"
  rm -rf "$BASE"/node*
  [ -d "$imgs" ] && mv "$imgs" "$BASE/images"
  $K delete nodes -l kubernetes.io/hostname --ignore-not-found --wait=false >/dev/null 2>&1 || true
  echo stopped
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  image) images ;;
  *) echo "usage: $0 start N [MEMORY_MI] | stop | image" >&2; exit 2 ;;
esac
