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
import http.client, json, os, ssl, subprocess, sys, threading, time, collections, tempfile

EXT = os.environ.get("EXT") or os.path.expanduser("~/.cache/headroom-kit")
HR = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "target/release/headroom")
NODES = int(sys.argv[2]) if len(sys.argv) > 2 else 30
PODS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
CPU = 32
ctx = ssl.create_default_context(cafile=os.path.join(EXT, "pki", "ca.crt"))
local = threading.local()


def call(method, path, body=None, ctype="application/json"):
    if not hasattr(local, "c"):
        local.c = http.client.HTTPSConnection("127.0.0.1", 6443, context=ctx, timeout=60)
    hdr = {"Authorization": "Bearer admintoken", "Content-Type": ctype}
    local.c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdr)
    r = local.c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:200]}")
    return json.loads(data) if data else None


def parallel(fn, items, workers=16):
    it, lock = iter(items), threading.Lock()

    def work():
        while True:
            with lock:
                x = next(it, None)
            if x is None:
                return
            fn(x)
    ts = [threading.Thread(target=work) for _ in range(workers)]
    [t.start() for t in ts]
    [t.join() for t in ts]


def node(i):
    name = f"burst-node-{i}"
    call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name}}})
    alloc = {"cpu": str(CPU), "memory": "256Gi", "pods": "110"}
    call("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
        "capacity": alloc, "allocatable": alloc,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                        "lastHeartbeatTime": "2026-11-24T00:00:00Z",
                        "lastTransitionTime": "2026-11-24T00:00:00Z"}]}},
         ctype="application/merge-patch+json")


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
    pods = call("GET", "/api/v1/namespaces/default/pods?limit=5000")["items"]
    per_node = collections.Counter(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
    over = {n: c for n, c in per_node.items() if c > CPU}
    events = call("GET", "/api/v1/namespaces/default/events?limit=20000")["items"]
    scheduled = collections.Counter(e["involvedObject"]["name"] for e in events if e.get("reason") == "Scheduled")
    twice = [n for n, c in scheduled.items() if c > 1]
    bound = sum(per_node.values())
    print(f"nodes {NODES} x {CPU} cpu, pods {PODS} x 1 cpu created in {created:.1f} s; "
          f"bound {bound} (expected {expect}), settled {settled - 10:.1f} s after the first create; nodes over allocatable: {len(over)}; "
          f"pods with two Scheduled events: {len(twice)}; busiest node {max(per_node.values(), default=0)} pods")
    ok = bound == expect and not over and not twice
    sys.exit(0 if ok else 1)
finally:
    serve.terminate()
    serve.wait(timeout=60)
