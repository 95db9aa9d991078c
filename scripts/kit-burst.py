#!/usr/bin/env python3
"""1,000 pods created at once against a running `headroom serve`, on the real control plane of
../shared/kit (issue "Hardening": concurrency). Not part of CI (CI cannot build the kit; the
same check runs on the fake API server in tests/integration/kube/engine.rs).

    bash ../shared/kit/cluster.sh start  # with NOSCHED=1
    python3 scripts/kit-burst.py target/release/headroom [NODES PODS]

30 nodes of 32 CPU and 1,000 pods of 1 CPU by default: 960 fit. headroom starts first; then
16 threads create every pod as fast as the API server takes them. Once binding has settled,
checks that no node's requested CPU or pod count exceeds its allocatable, that no pod got
two Scheduled events (nothing bound twice), and that exactly min(PODS, capacity) are bound.
Prints one line of figures; exit 0 when every check holds.
"""
import os, subprocess, sys, time, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitlib  # noqa: E402
from kitlib import EXT, call, parallel  # noqa: E402

HR = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "target/release/headroom")
NODES = int(sys.argv[2]) if len(sys.argv) > 2 else 30
PODS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
CPU = 32


def node(i):
    kitlib.make_node(f"burst-node-{i}", cpu=str(CPU), memory="256Gi")


def pod(i):
    call("POST", "/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"burst-{i}"}, "spec": {"schedulerName": "headroom", "containers": [{
            "name": "c", "image": "pause", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}})


subprocess.run(f"{HR} crd | kubectl --kubeconfig {EXT}/run/admin.kubeconfig apply -f - >/dev/null",
               shell=True, check=True)
parallel(node, range(NODES))
work = tempfile.mkdtemp(prefix="headroom-burst-")
log = open(os.path.join(work, "serve.log"), "w")
serve = subprocess.Popen([HR, "serve", "--kubeconfig", f"{EXT}/run/admin.kubeconfig",
                          "--prometheus", "http://127.0.0.1:1", "--data-dir", os.path.join(work, "data"),
                          "--no-leader-election", "--listen", "127.0.0.1:10264",
                          "--api-listen", "127.0.0.1:10265"], stdout=log, stderr=log)
try:
    time.sleep(3)
    t0 = time.time()
    parallel(pod, range(PODS))
    created = time.time() - t0
    expect = min(PODS, NODES * CPU)
    last, stable_since = -1, time.time()
    while time.time() - stable_since < 10 and time.time() - t0 < 300:
        pods = call("GET", "/api/v1/namespaces/default/pods?limit=5000")["items"]
        bound = sum(1 for p in pods if p["spec"].get("nodeName"))
        if bound != last:
            last, stable_since = bound, time.time()
        time.sleep(1)
    settled = time.time() - t0
    pods = kitlib.all_pods()
    per_node = {}
    for p in pods:
        if p["spec"].get("nodeName"):
            per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    over = kitlib.overcommitted(pods)
    twice = [n for n, es in kitlib.scheduled_events().items() if len(es) > 1]
    bound = sum(per_node.values())
    print(f"nodes {NODES} x {CPU} cpu, pods {PODS} x 1 cpu created in {created:.1f} s; "
          f"bound {bound} (expected {expect}), settled {settled - 10:.1f} s after the first create; nodes over allocatable: {len(over)}; "
          f"pods with two Scheduled events: {len(twice)}; busiest node {max(per_node.values(), default=0)} pods")
    ok = bound == expect and not over and not twice
    sys.exit(0 if ok else 1)
finally:
    serve.terminate()
    serve.wait(timeout=60)
