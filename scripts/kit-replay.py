#!/usr/bin/env python3
"""Replays a scenario's builds on real nodes (issue #72): real kubelets v1.36.2 with
containerd and runc (scripts/kit-nodes.sh), the kit's real kube-apiserver, and one scheduler
per fresh cluster: the real kube-scheduler, `headroom serve`, or `headroom serve` running a
peer's profile. The kernel is the judge: a build whose node's cgroup runs out of memory is
OOM-killed, and its Job makes a new pod after a backoff, as `simulate` models it.

    python3 scripts/kit-replay.py target/release/headroom [--scenario examples/real-nodes.yaml]
        [--seeds 1,2,3] [--schedulers ks,hr,trimaran-tlp,trimaran-lvrb,koordinator,crane]
        [--nodes 8] [--memory-mi 1536] [--drain-s 600] [--usage kubelet|prometheus|both]
        [--config examples/real-nodes-config.yaml] [--out results.json]

What a build will use is never in its pod: the driver serves each build's profile (from
`headroom simulate --replay-plan`: memory, CPU, cold and warm run times) on 0.0.0.0:18099,
and the build (`headroom-workload`, in the image kit-nodes.sh builds) fetches it by its own
name from its pod network's gateway when it starts. The scheduler learns usage as in
production: headroom from the kubelets' /stats/summary (read-only ports) or from a real
Prometheus scraping their /metrics/cadvisor (`--usage`; Prometheus runs in every run, whichever
scheduler), and from its own history. A build's cache is a
hostPath directory per node: found filled (warm) when its builder ran on that node before.

Measured, per scheduler and seed, from the API server, the kubelets and the cgroups only:
OOM kills (pods ended `OOMKilled` with exit code 137, and the kernel's own count,
/proc/vmstat oom_kill), builds completed / failed (backoff exhausted) / unfinished, pods
pending at the end, time to schedule p50/p99 (pod created to bound, as the watch sees it),
turnaround (first arrival to completion), node-seconds above 90 % of the node's memory
(working set of /nodeI: usage less inactive file pages, sampled every second), the memory
spread across nodes (p95 − p50), warm and cold starts (as the builds found their cache).
Beside it, `headroom simulate` of the same scenario and seed with the same policies.

Not part of CI (CI cannot build the kit). Needs root, the kit (../shared/kit/build.sh) and
`prometheus` (Debian).
"""
import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitlib  # noqa: E402
from kitlib import call, try_call  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KIT = os.path.join(HERE, "..", "..", "shared", "kit")
ROOT = os.path.join(HERE, "..")
DRIVER_PORT = 18099
PROM_PORT = 19090
HR_API = 10661
READ_ONLY_PORT = 10300  # + node number (scripts/kit-nodes.sh)
NODES_BASE = os.environ.get("KIT_NODES", "/tmp/headroom-kit-nodes")
PEERS = ("trimaran-tlp", "trimaran-lvrb", "koordinator", "crane")
# simulate's policy for each scheduler of the replay
SIM_POLICY = {"ks": "requests", "hr": "headroom"}


def sh(*cmd, env=None, check=True):
    return subprocess.run(cmd, check=check, env=env, stdout=subprocess.PIPE, text=True).stdout


def pct(values, q):
    """The q-quantile with linear interpolation (as `simulate`'s report computes it)."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# --- the profile server --------------------------------------------------------------------


class Profiles:
    """The builds' profiles by pod name (a retry `<name>-r<k>` gets its build's), and what the
    builds report: when each started, warm or cold, and finished its run."""

    def __init__(self, plan):
        self.by_name = {p["name"]: p for p in plan["pods"]}
        self.started, self.done, self.lock = {}, set(), threading.Lock()

    @staticmethod
    def build_of(pod):
        base, sep, k = pod.rpartition("-r")
        return base if sep and k.isdigit() else pod

    def text(self, pod):
        p = self.by_name.get(self.build_of(pod))
        if p is None:
            return None
        return (f"builder {p['builder']}\nmemory_bytes {int(p['memoryBytes'])}\nramp_ms {p['rampMs']}\n"
                f"cpu_cores {p['cpuCores']:.4f}\ncold_ms {p['coldMs']}\nwarm_ms {p['warmMs']}\n"
                f"cache_bytes 1048576\n")

    def serve(self):
        prof = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path, _, query = self.path.partition("?")
                parts = path.strip("/").split("/")
                body, status = b"not found\n", 404
                if len(parts) == 3:
                    what, _ns, pod = parts
                    if what == "profile":
                        t = prof.text(pod)
                        if t is not None:
                            body, status = t.encode(), 200
                    elif what in ("started", "done"):
                        with prof.lock:
                            if what == "started":
                                prof.started[pod] = "warm=1" in query
                            else:
                                prof.done.add(pod)
                        body, status = b"ok\n", 200
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("0.0.0.0", DRIVER_PORT), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# --- node memory, from the cgroups ------------------------------------------------------------


class NodeMemory(threading.Thread):
    """Every second, each node's working set (usage less inactive file pages of /nodeI) against
    its wall (memory.limit_in_bytes): seconds above 90 %, and the spread across nodes."""

    def __init__(self, nodes):
        super().__init__(daemon=True)
        self.nodes, self.stop = nodes, False
        self.hot_s = {n: 0.0 for n in nodes}
        self.utils, self.spreads, self.series, self.times = [], [], [], []

    def read(self, n):
        d = f"/sys/fs/cgroup/memory/{n}"
        try:
            usage = int(open(f"{d}/memory.usage_in_bytes").read())
            limit = int(open(f"{d}/memory.limit_in_bytes").read())
            inactive = 0
            for line in open(f"{d}/memory.stat"):
                k, v = line.split()
                if k == "total_inactive_file":
                    inactive = int(v)
            return max(0, usage - inactive) / limit
        except (OSError, ValueError, ZeroDivisionError):
            return None

    def run(self):
        last = time.time()
        while not self.stop:
            time.sleep(1)
            now = time.time()
            dt, last = now - last, now
            us = []
            for n in self.nodes:
                u = self.read(n)
                if u is None:
                    continue
                us.append(u)
                if u > 0.9:
                    self.hot_s[n] += dt
            if us:
                self.series.append([round(u, 4) for u in us])
                self.times.append(round(now, 1))
                self.utils.extend(us)
                self.spreads.append(pct(us, 0.95) - pct(us, 0.5))


def vmstat_oom_kills():
    for line in open("/proc/vmstat"):
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


# --- the pods ------------------------------------------------------------------------------------


class Pods(threading.Thread):
    """A watch of the replay's pods: when each was first seen bound and ended, and how."""

    def __init__(self, namespace):
        super().__init__(daemon=True)
        self.ns, self.lock = namespace, threading.Lock()
        self.bound_at, self.node, self.ended = {}, {}, {}
        self.on_end = None
        self.mirror = kitlib.Mirror(f"/api/v1/namespaces/{namespace}/pods", on_change=self.change)

    def change(self, _kind, o):
        name, now = o["metadata"]["name"], time.time()
        node = o.get("spec", {}).get("nodeName")
        phase = o.get("status", {}).get("phase")
        with self.lock:
            if node and name not in self.bound_at:
                self.bound_at[name], self.node[name] = now, node
            if phase in ("Succeeded", "Failed") and name not in self.ended:
                term = {}
                for cs in o.get("status", {}).get("containerStatuses", []):
                    term = cs.get("state", {}).get("terminated") or term
                self.ended[name] = (now, phase, term.get("exitCode"), term.get("reason"))
                ended = True
            else:
                ended = False
        if ended and self.on_end:
            self.on_end(name)

    def start(self):
        self.mirror.start()
        self.mirror.synced.wait(60)


def pod_body(p, name, scheduler_name):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": p["namespace"], "labels": p["labels"]},
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "dnsPolicy": "Default",
            "containers": [{
                "name": "build", "image": "localhost/headroom-workload:1", "imagePullPolicy": "Never",
                "resources": {"requests": {"cpu": f"{round(p['requestCpu'] * 1000)}m",
                                           "memory": str(int(p["requestMemory"]))}},
                "env": [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": f}}} for k, f in
                        (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
                         ("NODE_NAME", "spec.nodeName"))],
                # the node's own cache: all kubelets share this machine's filesystem
                "volumeMounts": [{"name": "cache", "mountPath": "/cache", "subPathExpr": "$(NODE_NAME)"}],
            }],
            "volumes": [{"name": "cache", "hostPath": {"path": f"{NODES_BASE}/cache",
                                                        "type": "DirectoryOrCreate"}}],
        },
    }


# --- one replay ------------------------------------------------------------------------------------


class Replay:
    def __init__(self, args, plan, scheduler, seed, work):
        self.args, self.plan, self.scheduler, self.seed, self.work = args, plan, scheduler, seed, work
        self.procs = []
        self.ns = sorted({p["namespace"] for p in plan["pods"]})

    # the control plane, nodes, monitoring and the scheduler

    def up(self):
        clean()
        env = dict(os.environ, NOSCHED="0" if self.scheduler == "ks" else "1")
        sh("bash", f"{KIT}/cluster.sh", "start", env=env)
        for ns in self.ns:
            try_call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        subprocess.run(["rm", "-rf", f"{NODES_BASE}/cache"], check=False)
        sh("bash", f"{ROOT}/scripts/kit-nodes.sh", "start", str(self.args.nodes), str(self.args.memory_mi))
        self.node_names = [f"node{i}" for i in range(1, self.args.nodes + 1)]
        self.prometheus()
        if self.scheduler != "ks":
            self.headroom()

    def prometheus(self):
        targets = ", ".join(f"{{targets: ['127.0.0.1:{READ_ONLY_PORT + i}'], labels: {{node: node{i}}}}}"
                            for i in range(1, self.args.nodes + 1))
        cfg = os.path.join(self.work, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global: {scrape_interval: 15s, evaluation_interval: 15s}\n"
                    "scrape_configs: [{job_name: cadvisor, metrics_path: /metrics/cadvisor, "
                    f"static_configs: [{targets}]}}]\n")
        log = open(os.path.join(self.work, "prometheus.log"), "w")
        self.procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={self.work}/prom",
             f"--web.listen-address=127.0.0.1:{PROM_PORT}", "--log.level=warn"], stdout=log, stderr=log))

    def headroom_config(self):
        """serve's configuration as an operator of these nodes would write it (`--usage`):
        the kubelets' read-only ports, and/or Prometheus with the node's figures from
        cAdvisor's root cgroup (these nodes have no node-exporter); for a peer, the profile
        `check-config --policy` prints, which is how `simulate` runs it. Both sources write
        the same series, and the store refuses the older of two samples arriving out of
        order: `both` (the first run's setting) loses some of the kubelet's batches."""
        nodes = ", ".join(f"{{name: node{i}, address: '127.0.0.1:{READ_ONLY_PORT + i}'}}"
                          for i in range(1, self.args.nodes + 1))
        kubelet = (f"  kubelet:\n    nodes: [{nodes}]\n"
                   "    endpoint: {kind: template, url: 'http://{address}/stats/summary'}\n")
        prometheus = (
            f"  prometheus:\n    url: http://127.0.0.1:{PROM_PORT}\n"
            "    queries:\n"
            "      node_cpu_usage_cores: 'sum by (node) (rate(container_cpu_usage_seconds_total{id=\"/\"}[{window}]))'\n"
            "      node_memory_working_set_bytes: 'max by (node) (container_memory_working_set_bytes{id=\"/\"})'\n"
            "      node_memory_available_bytes: ''\n"
            "      node_fs_available_bytes: ''\n"
            "      node_fs_capacity_bytes: ''\n")
        sources = {"kubelet": kubelet, "prometheus": prometheus, "both": kubelet + prometheus}
        base = os.path.join(self.work, "base.yaml")
        with open(base, "w") as f:
            f.write(
                f"serve: {{listen: '127.0.0.1:10660', apiListen: '127.0.0.1:{HR_API}', security: {{mode: none}}}}\n"
                "collectors:\n" + sources[self.args.usage])
            if self.args.config:
                # The operator's own settings (top-level sections other than serve and
                # collectors), as `simulate --config` takes them for the comparison.
                with open(self.args.config) as extra:
                    f.write(extra.read())
        if self.scheduler == "hr":
            return base
        cmd = [self.args.headroom, "check-config", base, "--policy", self.scheduler]
        if self.args.tuned:
            cmd += ["--tuned", self.args.tuned]
        text = sh(*cmd)
        cfg = os.path.join(self.work, "headroom.yaml")
        with open(cfg, "w") as f:
            f.write("".join(line + "\n" for line in text.splitlines() if not line.startswith("#")))
        return cfg

    def headroom(self):
        cfg = self.headroom_config()
        log = open(os.path.join(self.work, "headroom.log"), "w")
        self.hr = subprocess.Popen(
            [self.args.headroom, "serve", "--config", cfg, "--kubeconfig", f"{kitlib.EXT}/run/admin.kubeconfig",
             "--data-dir", os.path.join(self.work, "data"), "--no-leader-election"], stdout=log, stderr=log)
        self.procs.append(self.hr)
        for _ in range(60):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{HR_API}/readyz", timeout=2)
                return
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"headroom serve did not get ready; see {self.work}/headroom.log")

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
        clean()

    # the replay itself

    def run(self):
        plan, a = self.plan, self.args
        sched_name = "default-scheduler" if self.scheduler == "ks" else "headroom"
        profiles = Profiles(plan)
        profiles.serve()
        watch = Pods(self.ns[0])
        watch.start()
        mem = NodeMemory(self.node_names)
        mem.start()
        oom0 = vmstat_oom_kills()
        created, retries, lock = {}, [], threading.Lock()
        # per build: its attempts (pod names), and whether it failed for good
        attempts = {p["name"]: [] for p in plan["pods"]}
        given_up = set()

        def on_end(name):
            _, phase, code, reason = watch.ended[name]
            if phase != "Failed":
                return
            build = profiles.build_of(name)
            k = len(attempts[build])
            if k > plan["backoffLimit"]:
                given_up.add(build)
                return
            delay = min(plan["retryDelayMs"] * (2 ** (k - 1)), plan["maxRetryDelayMs"]) / 1000
            with lock:
                retries.append((time.time() + delay, build))

        watch.on_end = on_end

        def create(build, name):
            p = profiles.by_name[build]
            t = time.time()
            call("POST", f"/api/v1/namespaces/{p['namespace']}/pods", pod_body(p, name, sched_name))
            with lock:
                created[name] = t
                attempts[build].append(name)

        t0 = time.time()
        pods = plan["pods"][: a.limit] if a.limit else plan["pods"]
        end_arrivals = t0 + (pods[-1]["atMs"] if a.limit else plan["durationMs"]) / 1000
        i, next_progress = 0, t0 + 60
        print(f"   {len(pods)} builds over {plan['durationMs'] / 60000:.0f} min", flush=True)
        while True:
            now = time.time()
            while i < len(pods) and t0 + pods[i]["atMs"] / 1000 <= now:
                create(pods[i]["name"], pods[i]["name"])
                i += 1
            with lock:
                due = [r for r in retries if r[0] <= now]
                retries[:] = [r for r in retries if r[0] > now]
            for _, build in due:
                create(build, f"{build}-r{len(attempts[build])}")
            if now >= end_arrivals + a.drain_s:
                break
            if now >= end_arrivals and not retries and self.settled(watch, created):
                break
            if now >= next_progress:
                next_progress += 60
                self.progress(now - t0, watch, created)
            time.sleep(0.2)
        mem.stop = True
        time.sleep(1.5)
        result = self.measure(pods, watch, created, attempts, given_up, profiles, mem, vmstat_oom_kills() - oom0, t0)
        if self.scheduler != "ks":
            result["explain"] = self.explain(watch)
            result["decisions"] = self.decisions(watch)
            result["headroomSeries"] = self.series()
        profiles.stop()
        return result

    def settled(self, watch, created):
        with watch.lock:
            return all(n in watch.ended for n in created)

    def progress(self, t, watch, created):
        with watch.lock:
            ended = len(watch.ended)
            bound = len(watch.bound_at)
            ooms = sum(1 for e in watch.ended.values() if e[2] == 137 and e[3] == "OOMKilled")
        print(f"   {t:5.0f} s: {len(created)} pods made, {bound} bound, {ended} ended, {ooms} OOMKilled",
              flush=True)

    def measure(self, pods, watch, created, attempts, given_up, profiles, mem, kernel_ooms, t0):
        with watch.lock:
            ended, bound_at, node = dict(watch.ended), dict(watch.bound_at), dict(watch.node)
        # Exit code 137 with the reason: on cgroup v1, containerd also marks a pod OOMKilled
        # that merely shared the node's cgroup with a victim (REAL-NODES.md), exit code 0.
        oom = [n for n, e in ended.items() if e[1] == "Failed" and e[2] == 137 and e[3] == "OOMKilled"]
        reason_only = [n for n, e in ended.items() if e[3] == "OOMKilled" and n not in oom]
        other_failed = [n for n, e in ended.items() if e[1] == "Failed" and n not in oom]
        tts = [bound_at[n] - created[n] for n in created if n in bound_at]
        completed, in_duration, turnaround, unfinished, pending = 0, 0, [], 0, 0
        end = t0 + self.plan["durationMs"] / 1000
        for p in pods:
            names = attempts[p["name"]]
            ok = [n for n in names if ended.get(n, (0, ""))[1] == "Succeeded"]
            if ok:
                completed += 1
                in_duration += ended[ok[0]][0] <= end
                turnaround.append(ended[ok[0]][0] - (t0 + p["atMs"] / 1000))
            elif p["name"] not in given_up:
                unfinished += 1
            pending += sum(1 for n in names if n not in bound_at)
        warm = sum(1 for v in profiles.started.values() if v)
        hot_s = sum(mem.hot_s.values())
        return {
            "scheduler": self.scheduler, "seed": self.seed,
            "builds": len(pods), "pods": len(created),
            "completed": completed, "completedInDuration": in_duration,
            "failed": len(given_up), "unfinished": unfinished,
            "pendingEnd": pending,
            "oomKilled": len(oom), "kernelOomKills": kernel_ooms, "otherFailed": len(other_failed),
            "oomReasonWithoutKill": len(reason_only),
            "timeToScheduleP50S": pct(tts, 0.5), "timeToScheduleP99S": pct(tts, 0.99),
            "turnaroundP50S": pct(turnaround, 0.5), "turnaroundP95S": pct(turnaround, 0.95),
            "nodeSecondsMemoryAbove90": hot_s, "nodeHoursMemoryAbove90": hot_s / 3600,
            "memoryUtilMean": statistics.mean(mem.utils) if mem.utils else None,
            "memoryUtilP95": pct(mem.utils, 0.95),
            # as simulate: the mean over time of each sample's p95 − p50 across nodes
            "memorySpreadP95MinusP50": statistics.mean(mem.spreads) if mem.spreads else None,
            "nodeUtilSeries": mem.series,
            "nodeUtilTimes": mem.times,
            # every pod: created, bound, node, ended, phase, exit code, reason (wall seconds)
            "podTimeline": {n: [created[n], bound_at.get(n), node.get(n), *(ended.get(n) or (None,) * 4)]
                            for n in created},
            "warmStarts": warm, "coldStarts": len(profiles.started) - warm,
            "podsPerNode": {n: sum(1 for v in node.values() if v == n) for n in self.node_names},
        }

    def explain(self, watch):
        """What /explain says of the last bound build: the measured usage behind its decision."""
        with watch.lock:
            names = sorted(watch.bound_at, key=watch.bound_at.get)
        for name in reversed(names[-20:]):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{HR_API}/explain/{self.ns[0]}/{name}", timeout=5) as r:
                    return json.load(r)
            except OSError:
                continue
        return None

    def decisions(self, watch):
        """Every bound pod's decision as /explain keeps it, cut to what a post-mortem of an
        OOM kill needs: when, where, the fallback, and what the scheduler believed of the
        chosen node (its usage, the recent placements it counted) and why others lost."""
        with watch.lock:
            names = sorted(watch.bound_at, key=watch.bound_at.get)
        out = {}
        for name in names:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{HR_API}/explain/{self.ns[0]}/{name}", timeout=5) as r:
                    d = json.load(r)
            except (OSError, ValueError):
                continue
            chosen = (d.get("inputs") or {}).get("chosenNode") or {}
            out[name] = {
                "decidedAtMs": d.get("decidedAtMs"), "node": d.get("node"),
                "fallback": d.get("fallback"), "feasibleNodes": d.get("feasibleNodes"),
                "predictedMemory": (((d.get("inputs") or {}).get("profile") or {}).get("memory") or {}).get("p95"),
                "usage": (chosen.get("usage") or {}).get("memory_working_set_bytes"),
                "ageSeconds": chosen.get("ageSeconds"),
                "headroom": chosen.get("headroom"),
                "recent": chosen.get("recent"),
                "rejected": {n["name"]: n.get("plugin") for n in d.get("nodes", []) if not n.get("feasible")},
            }
        return out

    def series(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{HR_API}/metrics", timeout=5) as r:
                return [line for line in r.read().decode().splitlines()
                        if line.startswith("headroom_collector") and "_total" in line][:40]
        except OSError:
            return None


def clean():
    """No node, control plane or Prometheus left from an earlier run (a stale API server on
    a fresh etcd answers every request with a timeout)."""
    subprocess.run(["bash", f"{ROOT}/scripts/kit-nodes.sh", "stop"], stdout=subprocess.DEVNULL, check=False)
    sh("bash", f"{KIT}/cluster.sh", "stop")
    for pattern in (f"{kitlib.EXT}/bin/kube-", "^etcd ", "^prometheus .*headroom-kit-replay"):
        subprocess.run(["pkill", "-f", pattern], check=False)
    time.sleep(1)


def simulate(args, seed, schedulers):
    policies = [SIM_POLICY.get(s, s) for s in schedulers]
    cmd = [args.headroom, "simulate", args.scenario, "--seed", str(seed), "--policy", ",".join(policies),
           "--output", "json"]
    if args.tuned:
        cmd += ["--tuned", args.tuned]
    if args.config:
        cmd += ["--config", args.config]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True).stdout
    return {p["policy"]: p for p in json.loads(out)["policies"]}


ROWS = [
    ("OOM kills", "oomKilled", "oomKills", "{:.0f}"),
    ("builds completed in the duration", "completedInDuration", "completed", "{:.0f}"),
    ("builds completed after the drain", "completed", None, "{:.0f}"),
    ("builds failed (backoff)", "failed", "buildsFailed", "{:.0f}"),
    ("time to schedule p50, s", "timeToScheduleP50S", "timeToScheduleP50S", "{:.2f}"),
    ("time to schedule p99, s", "timeToScheduleP99S", "timeToScheduleP99S", "{:.2f}"),
    ("turnaround p50, s", "turnaroundP50S", "turnaroundP50S", "{:.0f}"),
    ("node-hours above 90 % memory", "nodeHoursMemoryAbove90", "nodeHoursMemoryAbove90", "{:.3f}"),
    ("memory util mean", "memoryUtilMean", "memoryUtilMean", "{:.3f}"),
    ("memory spread p95 − p50", "memorySpreadP95MinusP50", "memorySpreadP95MinusP50", "{:.3f}"),
    ("warm starts", "warmStarts", "warmPlacements", "{:.0f}"),
]


def table(results):
    lines = []
    for seed in sorted({r["seed"] for r in results}):
        rs = [r for r in results if r["seed"] == seed]
        lines.append(f"\nseed {seed}: replay (simulate)")
        lines.append("| metric | " + " | ".join(r["scheduler"] for r in rs) + " |")
        lines.append("|---|" + "---|" * len(rs))
        for label, rk, sk, fmt in ROWS:
            cells = []
            for r in rs:
                v, s = r.get(rk), (r.get("simulate") or {}).get(sk) if sk else None
                f = (lambda x: fmt.format(x) if isinstance(x, (int, float)) else "–")
                cells.append(f"{f(v)} ({f(s)})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("headroom")
    ap.add_argument("--scenario", default=os.path.join(ROOT, "examples", "real-nodes.yaml"))
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--schedulers", default="ks,hr")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--memory-mi", type=int, default=1536)
    ap.add_argument("--drain-s", type=float, default=600)
    ap.add_argument("--limit", type=int, default=0, help="only the first N builds (a smoke run)")
    ap.add_argument("--tuned", help="tuned peers' args (sweep --tune-peers) for …@tuned schedulers")
    ap.add_argument("--usage", choices=("kubelet", "prometheus", "both"), default="kubelet",
                    help="headroom's usage source: the kubelets' read-only ports (default), the "
                         "real Prometheus scraping their cAdvisor, or both (the same series twice)")
    ap.add_argument("--config", help="headroom settings (YAML, not serve/collectors) for hr and the peers, "
                    "and for the simulate beside it")
    ap.add_argument("--out", default="replay.json")
    a = ap.parse_args()
    a.headroom = os.path.abspath(a.headroom)
    schedulers = a.schedulers.split(",")
    for s in schedulers:
        if s not in ("ks", "hr") and s.split("@")[0] not in PEERS:
            sys.exit(f"--schedulers: unknown {s!r} (ks, hr, {', '.join(PEERS)}, each peer also @tuned)")
    results = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        plan = json.loads(sh(a.headroom, "simulate", a.scenario, "--seed", str(seed), "--replay-plan"))
        sim = simulate(a, seed, schedulers)
        for s in schedulers:
            work = f"/tmp/headroom-kit-replay/{s}-{seed}"
            subprocess.run(["rm", "-rf", work], check=False)
            os.makedirs(work)
            print(f"== {s}, seed {seed} ({work})", flush=True)
            r = Replay(a, plan, s, seed, work)
            try:
                r.up()
                res = r.run()
            finally:
                r.down()
            res["simulate"] = sim.get(SIM_POLICY.get(s, s))
            results.append(res)
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
            print(table([res]), flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
