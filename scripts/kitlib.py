"""Shared by the Python kit scripts (scripts/kit-*.py): calls to the kit's API server with the
admin token, a thread pool, fake Ready nodes and pods, a list+watch of pods and nodes kept in
memory, and a usage exporter: a Prometheus text endpoint with real-looking, changing usage for
every node and every bound pod, which a real Prometheus scrapes and `headroom serve` reads
through its Prometheus collector, as in production.

Not part of CI (CI cannot build the kit; ../shared/kit/README.md).
"""
import http.client
import http.server
import json
import math
import os
import socketserver
import ssl
import threading
import time
import zlib

EXT = os.environ.get("EXT") or os.path.expanduser("~/.cache/headroom-kit")
TOKEN = os.environ.get("KIT_TOKEN", "admintoken")
_ctx = ssl.create_default_context(cafile=os.path.join(EXT, "pki", "ca.crt"))
_local = threading.local()
GI = 1024 ** 3
MI = 1024 ** 2


class ApiError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, status, text):
        super().__init__(text)
        self.status = status


def call(method, path, body=None, ctype="application/json", timeout=60):
    """One API call on this thread's keep-alive connection; reconnects once if it broke."""
    for attempt in (0, 1):
        if getattr(_local, "c", None) is None:
            _local.c = http.client.HTTPSConnection("127.0.0.1", 6443, context=_ctx, timeout=timeout)
        hdr = {"Authorization": f"Bearer {TOKEN}", "Content-Type": ctype}
        try:
            _local.c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdr)
            r = _local.c.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            _local.c = None
            if attempt:
                raise
            continue
        if r.status >= 300:
            raise ApiError(r.status, f"{method} {path}: {r.status} {data[:200]!r}")
        return json.loads(data) if data else None


def try_call(*a, **kw):
    """`call`, None on any failure (the API server may be down on purpose)."""
    try:
        return call(*a, **kw)
    except (ApiError, OSError, http.client.HTTPException, ValueError):
        return None


def parallel(fn, items, workers=16):
    """Runs fn over items on `workers` threads."""
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


def make_node(name, cpu="32", memory="128Gi", pods="110", labels=None):
    """A Ready Node object, as a kubelet registers one (the kit runs no kubelet)."""
    meta_labels = {"kubernetes.io/hostname": name}
    meta_labels.update(labels or {})
    call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                   "metadata": {"name": name, "labels": meta_labels}})
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
    call("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
        "capacity": alloc, "allocatable": alloc,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                        "lastHeartbeatTime": "2026-12-06T00:00:00Z",
                        "lastTransitionTime": "2026-12-06T00:00:00Z"}]}},
         ctype="application/merge-patch+json")


def pod_body(name, scheduler="headroom", cpu="100m", memory="100Mi", labels=None):
    """A pending pod for `scheduler`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": "kit"}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}


class Mirror(threading.Thread):
    """A list+watch of one resource (`/api/v1/pods`, `/api/v1/nodes`) kept in memory, which
    survives the API server going away (it re-lists when it comes back). `items` maps
    namespace/name to the object; `on_change(kind, obj)` is called for each change."""

    def __init__(self, path, reduce=lambda o: o, on_change=None):
        super().__init__(daemon=True)
        self.path, self.reduce, self.on_change = path, reduce, on_change
        self.items, self.lock, self.synced = {}, threading.Lock(), threading.Event()
        self.stop = False

    @staticmethod
    def key(o):
        m = o["metadata"]
        return f"{m.get('namespace', '')}/{m['name']}"

    def run(self):
        while not self.stop:
            try:
                self.list_watch()
            except Exception:  # the API server went away: list again once it is back
                time.sleep(1)

    def list_watch(self):
        items, cont = {}, ""
        while True:
            page = call("GET", f"{self.path}?limit=2000{cont}")
            for o in page["items"]:
                items[self.key(o)] = self.reduce(o)
            rv = page["metadata"]["resourceVersion"]
            nxt = page["metadata"].get("continue")
            if not nxt:
                break
            cont = f"&continue={nxt}"
        with self.lock:
            self.items = items
        self.synced.set()
        c = http.client.HTTPSConnection("127.0.0.1", 6443, context=_ctx, timeout=600)
        c.request("GET", f"{self.path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true",
                  headers={"Authorization": f"Bearer {TOKEN}"})
        r = c.getresponse()
        if r.status >= 300:
            raise ApiError(r.status, r.read()[:200])
        while not self.stop:
            line = r.readline()
            if not line:
                return
            ev = json.loads(line)
            t, o = ev["type"], ev["object"]
            if t == "ERROR":
                return
            if t == "BOOKMARK":
                continue
            k = self.key(o)
            with self.lock:
                if t == "DELETED":
                    self.items.pop(k, None)
                else:
                    self.items[k] = self.reduce(o)
            if self.on_change:
                self.on_change(t, o)

    def snapshot(self):
        with self.lock:
            return dict(self.items)


def pod_summary(p):
    """What the exporter and the checks need of a pod."""
    s = p.get("spec", {})
    req = s.get("containers", [{}])[0].get("resources", {}).get("requests", {})
    return {"uid": p["metadata"].get("uid", ""), "node": s.get("nodeName"), "ns": p["metadata"]["namespace"],
            "name": p["metadata"]["name"], "cpu": req.get("cpu", "0"), "memory": req.get("memory", "0"),
            "phase": p.get("status", {}).get("phase")}


def node_summary(n):
    a = n.get("status", {}).get("allocatable", {})
    return {"name": n["metadata"]["name"], "cpu": a.get("cpu", "0"), "memory": a.get("memory", "0"),
            "pods": a.get("pods", "110"), "labels": n["metadata"].get("labels", {})}


def quantity(q):
    """A Kubernetes quantity as a float (bytes, cores)."""
    q = str(q)
    for suf, mul in (("Ki", 1024), ("Mi", MI), ("Gi", GI), ("Ti", GI * 1024), ("m", 1e-3),
                     ("k", 1e3), ("M", 1e6), ("G", 1e9)):
        if q.endswith(suf):
            return float(q[:-len(suf)]) * mul
    return float(q)


def _phase(key, period):
    """A stable pseudo-random phase in [0, 1) for `key`."""
    return (zlib.crc32(key.encode()) % 10_000) / 10_000 * period


class UsageExporter:
    """`/metrics` in the Prometheus text format with usage that changes over time: per node
    `node_memory_MemTotal_bytes`, `node_memory_MemAvailable_bytes` and
    `node_cpu_seconds_total{mode}`; per bound pod `container_memory_working_set_bytes` and
    `container_cpu_usage_seconds_total` (with `node`, `namespace`, `pod`, `container` and an
    `image`, as cAdvisor's). A pod uses 40-160 % of its memory request over a 10-minute cycle
    and up to its CPU request; a node uses 2 GiB plus its pods. Read by a real Prometheus,
    which headroom's collector queries."""

    def __init__(self, pods, nodes, port):
        self.pods, self.nodes, self.port = pods, nodes, port
        self.t0 = time.time()
        self.cpu_total = {}  # uid -> cumulative CPU seconds
        self.node_cpu = {}
        self.last = time.time()
        self.series = 0
        self.lock = threading.Lock()

    def render(self):
        now = time.time()
        with self.lock:
            dt, self.last = max(0.0, now - self.last), now
            pods, nodes = self.pods.snapshot(), self.nodes.snapshot()
            per_node_mem, per_node_cpu = {}, {}
            out = []
            for p in pods.values():
                node = p.get("node")
                if not node or p.get("phase") in ("Succeeded", "Failed"):
                    continue
                key = p["uid"] or f"{p['ns']}/{p['name']}"
                f = 1.0 + 0.6 * math.sin(2 * math.pi * (now + _phase(key, 600)) / 600)
                mem = max(16 * MI, quantity(p["memory"]) * f)
                cores = max(0.005, quantity(p["cpu"]) * (0.5 + 0.5 * f / 1.6))
                total = self.cpu_total.get(key, 0.0) + cores * dt
                self.cpu_total[key] = total
                per_node_mem[node] = per_node_mem.get(node, 0.0) + mem
                per_node_cpu[node] = per_node_cpu.get(node, 0.0) + cores
                lab = f'namespace="{p["ns"]}",pod="{p["name"]}",container="c",node="{node}",image="pause"'
                out.append(f"container_memory_working_set_bytes{{{lab}}} {mem:.0f}")
                out.append(f"container_cpu_usage_seconds_total{{{lab}}} {total:.3f}")
            live = {p["uid"] or f"{p['ns']}/{p['name']}" for p in pods.values()}
            for k in [k for k in self.cpu_total if k not in live]:
                del self.cpu_total[k]
            for n in nodes.values():
                name = n["name"]
                cap = quantity(n["memory"])
                used = min(cap, 2 * GI + per_node_mem.get(name, 0.0))
                busy = min(quantity(n["cpu"]), 0.3 + per_node_cpu.get(name, 0.0))
                t = self.node_cpu.get(name, 0.0) + busy * dt
                self.node_cpu[name] = t
                out.append(f'node_memory_MemTotal_bytes{{node="{name}"}} {cap:.0f}')
                out.append(f'node_memory_MemAvailable_bytes{{node="{name}"}} {cap - used:.0f}')
                out.append(f'node_cpu_seconds_total{{node="{name}",cpu="0",mode="user"}} {t:.3f}')
            self.series = len(out)
        return ("\n".join(out) + "\n").encode()

    def serve(self):
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.render()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        srv = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.server = srv
        return srv

    def stop(self):
        """Stops serving and frees the port (and the mirrors' watches), so the next run in
        the same process can serve on it."""
        srv = getattr(self, "server", None)
        if srv is not None:
            srv.shutdown()
            srv.server_close()
            self.server = None
        self.pods.stop = self.nodes.stop = True


def prometheus_config(path, exporter_port, interval="5s"):
    """A Prometheus configuration scraping the exporter."""
    with open(path, "w") as f:
        f.write(f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}}}\n"
                f"scrape_configs: [{{job_name: usage, honor_labels: true, "
                f"static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]}}]\n")


def headroom_usage_config(prom_port, interval="5s"):
    """The `collectors` and related sections of a headroom configuration reading the
    exporter through Prometheus (series carry a `node` label: no instance map)."""
    return (f"collectors:\n  prometheus:\n    url: http://127.0.0.1:{prom_port}\n"
            f"    rateWindow: 30s\n    schedule: {{interval: {interval}}}\n"
            f"    queries: {{node_fs_available_bytes: '', node_fs_capacity_bytes: '',"
            f" pod_ephemeral_storage_used_bytes: '', node_imagefs_available_bytes: '',"
            f" node_imagefs_capacity_bytes: ''}}\n")


def rss_kb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def process_figures(pid):
    """RSS (MB), open file descriptors and threads of `pid` (None when it is gone)."""
    kb = rss_kb(pid)
    if kb is None:
        return None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None
    return {"rss_mb": kb / 1024, "fds": fds, "threads": threads}


def dir_mb(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total / MI


def all_pods(namespace="default"):
    return call("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1000000")["items"]


def overcommitted(pods):
    """Names of the nodes whose bound pods (of `pods`) request more CPU, memory or pods than
    the node's allocatable."""
    nodes = {n["metadata"]["name"]: node_summary(n) for n in call("GET", "/api/v1/nodes")["items"]}
    used = {}
    for p in pods:
        s = pod_summary(p)
        if s["node"]:
            u = used.setdefault(s["node"], [0.0, 0.0, 0])
            u[0] += quantity(s["cpu"])
            u[1] += quantity(s["memory"])
            u[2] += 1
    return [n for n, u in used.items() if n in nodes and (
        u[0] > quantity(nodes[n]["cpu"]) + 1e-9 or u[1] > quantity(nodes[n]["memory"])
        or u[2] > int(nodes[n]["pods"]))]


def scheduled_events(namespace="default"):
    """The `Scheduled` events (events.k8s.io/v1) per pod name."""
    out = {}
    events = call("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events?limit=1000000")["items"]
    for e in events:
        if e.get("reason") == "Scheduled":
            out.setdefault(e["regarding"]["name"], []).append(e)
    return out


def farm(prefix, count):
    """`count` Ready nodes of 32 CPU and 128 GiB named `prefix-N`, in three zones."""
    t = time.time()
    parallel(lambda i: make_node(f"{prefix}-{i}", labels={"topology.kubernetes.io/zone": f"zone-{i % 3}"}),
             range(count))
    print(f"   {count} nodes made in {time.time() - t:.0f} s", flush=True)


def usage_source(workdir, exporter_port, prom_port):
    """Pods and nodes mirrored from the API server, the usage exporter over them, and the
    command line of a Prometheus scraping it every 5 s (not started: the caller starts it,
    and may stop and start it again). Returns (pods, nodes, exporter, prometheus command)."""
    pods = Mirror("/api/v1/pods", pod_summary)
    nodes = Mirror("/api/v1/nodes", node_summary)
    pods.start()
    nodes.start()
    pods.synced.wait(120)
    nodes.synced.wait(120)
    exporter = UsageExporter(pods, nodes, exporter_port)
    exporter.serve()
    prometheus_config(os.path.join(workdir, "prometheus.yml"), exporter_port)
    cmd = ["prometheus", f"--config.file={workdir}/prometheus.yml", f"--storage.tsdb.path={workdir}/prom",
           f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"]
    return pods, nodes, exporter, cmd


def all_pods_everywhere():
    return call("GET", "/api/v1/pods?limit=1000000")["items"]


class BindWatch(threading.Thread):
    """Follows the pods of `namespace` from resourceVersion `rv` and notes when each first
    has a node: `times` (wall clock), `last` (the newest)."""

    def __init__(self, namespace, rv):
        super().__init__(daemon=True)
        self.namespace, self.rv = namespace, rv
        self.bound, self.times, self.last = set(), [], time.time()

    def run(self):
        while True:
            try:
                c = http.client.HTTPSConnection("127.0.0.1", 6443, context=_ctx, timeout=3600)
                c.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?watch=1&resourceVersion={self.rv}",
                          headers={"Authorization": f"Bearer {TOKEN}"})
                r = c.getresponse()
                while True:
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    o = ev["object"]
                    if ev["type"] == "ERROR":
                        break
                    self.rv = o["metadata"].get("resourceVersion", self.rv)
                    name = o["metadata"]["name"]
                    if o.get("spec", {}).get("nodeName") and name not in self.bound:
                        self.bound.add(name)
                        self.last = time.time()
                        self.times.append(self.last)
            except Exception:
                time.sleep(0.5)
