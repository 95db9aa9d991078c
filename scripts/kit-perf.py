#!/usr/bin/env python3
"""kube-scheduler's own benchmark workloads (`scheduler_perf`) on the real control plane of
../shared/kit, for kube-scheduler v1.36.2 and `headroom serve` side by side, one fresh cluster
per run (issue 73). Not part of CI (CI cannot build the kit).

    python3 scripts/kit-perf.py target/release/headroom --mirror MIRROR_GIT_DIR \\
        [--workloads SchedulingBasic/5000Nodes_10000Pods,...] [--schedulers ks,hr,hr-usage] \\
        [--out results.json]

MIRROR_GIT_DIR is the `openshift/microshift` snapshot the kit is built from (`fetch`); the
workloads and their templates are read from its vendored Kubernetes tree
(`deps/github.com/openshift/kubernetes/test/integration/scheduler_perf/`), as upstream defines
them: `createNodes` (with `nodeTemplatePath`, `labelNodePrepareStrategy`),
`createNamespaces`, `createPods` (`podTemplatePath`, `namespace`, `collectMetrics`) and
`churn` (`create` and `recreate` modes). What the kit needs differently from upstream's
in-process server is adapted, and said here:
- node templates get `allocatable` = `capacity` (as scheduler_perf's node preparer does);
- a pod's `spec.priority` becomes a PriorityClass of that value (`perf-priority-N`): the
  kit's API server runs the Priority admission plugin, which refuses a bare priority;
- pods get the scheduler's name (`default-scheduler`, or `headroom`).

Each run: the scheduler runs while the nodes and the unmeasured pods are created and placed;
then it is stopped, the measured pods are created (churn, if any, starts now and runs until
the end), and the scheduler is started again; the figure is the measured pods' bind rate
between 10 % and 90 % bound (as `../shared/kit/perf.py` measures SchedulingBasic), with the
first bind's time after the start, the `Scheduled` events written for the measured pods
(counted after the run, as kube-scheduler writes one per bind) and the scheduler's peak RSS.

Schedulers:
- `ks`: kube-scheduler v1.36.2, its defaults (adaptive `percentageOfNodesToScore`), client
  QPS 5000 (as `compare.sh`);
- `hr`: `headroom serve`, usage source unreachable (requests only: no usage plugin decides);
- `hr-usage`: `headroom serve` with usage live: the usage exporter (`kitlib.py`) serves every
  node's and bound pod's memory and CPU, changing over time, a real Prometheus scrapes it
  every 5 s and headroom's collector reads it every 5 s; the run reports the series headroom
  stored, the decisions placed on measured usage and the usage fallbacks.
The exporter and Prometheus run in every run, whichever scheduler it measures (the same
machine load: a cluster's monitoring runs whatever schedules its pods).
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitlib  # noqa: E402
from kitlib import call, try_call  # noqa: E402

try:
    import yaml
except ImportError:
    sys.exit("kit-perf.py needs PyYAML (pip install pyyaml)")

PERF = "deps/github.com/openshift/kubernetes/test/integration/scheduler_perf"
KIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "kit")
RUN = os.environ.get("RUN", "/tmp/headroom-kit")
DEFAULT = ("SchedulingBasic/5000Nodes_10000Pods,SchedulingPodAntiAffinity/5000Nodes_2000Pods,"
           "SchedulingPodAffinity/5000Nodes_5000Pods,SchedulingPreferredPodAffinity/5000Nodes_5000Pods,"
           "SchedulingNodeAffinity/5000Nodes_10000Pods,TopologySpreading/5000Nodes_5000Pods,"
           "PreferredTopologySpreading/5000Nodes_5000Pods,Unschedulable/5kNodes/100Init/10kPods,"
           "PreemptionBasic/1000Nodes,SchedulingWithMixedChurn/5000Nodes_10000Pods")
EXPORTER, PROM, HR_API = 19600, 19601, 10651


class Mirror:
    """Reads files of the vendored Kubernetes tree from the git directory."""

    def __init__(self, git_dir):
        self.git_dir = git_dir

    def read(self, path):
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "show", f"HEAD:{path}"],
                              capture_output=True, text=True, check=True).stdout

    def yaml(self, path):
        return yaml.safe_load(self.read(path))


def find_workload(mirror, name):
    """(test case, workload, the file's folder) for `Case/Workload`."""
    case_name, wl_name = name.split("/", 1)
    for folder in ("misc", "affinity", "topology_spreading"):
        cases = mirror.yaml(f"{PERF}/{folder}/performance-config.yaml")
        for case in cases:
            if case["name"] != case_name:
                continue
            for wl in case["workloads"]:
                if wl["name"] == wl_name:
                    return case, wl, f"{PERF}/{folder}"
    sys.exit(f"no workload {name} in scheduler_perf's performance-config.yaml files")


def resolve(folder, path):
    return os.path.normpath(os.path.join(folder, path))


def param(op, key, params):
    v = op.get(key)
    if isinstance(v, str) and v.startswith("$"):
        return params[v[1:]]
    return v


class Run:
    """One workload under one scheduler on a fresh cluster."""

    def __init__(self, args, mirror, name, scheduler):
        self.args, self.mirror, self.name, self.scheduler = args, mirror, name, scheduler
        self.case, self.wl, self.folder = find_workload(mirror, name)
        self.params = self.wl.get("params", {})
        self.work = os.path.join(args.work, f"{name.replace('/', '_')}-{scheduler}")
        subprocess.run(["rm", "-rf", self.work], check=True)
        os.makedirs(self.work)
        self.proc = None
        self.extra = []  # the usage source's processes
        self.templates = {}
        self.priority_classes = set()
        self.churn_stop = threading.Event()
        self.sched_name = "default-scheduler" if scheduler == "ks" else "headroom"

    def template(self, path):
        if path not in self.templates:
            self.templates[path] = self.mirror.yaml(resolve(self.folder, path))
        return json.loads(json.dumps(self.templates[path]))

    # --- objects -------------------------------------------------------------------------

    def node(self, i, tmpl, strategy):
        n = self.template(tmpl)
        name = f"perf-node-{i}"
        n["metadata"].pop("generateName", None)
        n["metadata"]["name"] = name
        labels = n["metadata"].setdefault("labels", {})
        labels["kubernetes.io/hostname"] = name
        if strategy:
            vals = strategy["labelValues"]
            labels[strategy["labelKey"]] = vals[i % len(vals)]
        status = n.pop("status", {})
        call("POST", "/api/v1/nodes", n)
        status["allocatable"] = dict(status.get("capacity", {}))
        status.setdefault("conditions", [{"type": "Ready", "status": "True"}])
        for c in status["conditions"]:
            c.setdefault("reason", "KubeletReady")
            c.setdefault("message", "ok")
            c.setdefault("lastHeartbeatTime", "2026-12-06T00:00:00Z")
            c.setdefault("lastTransitionTime", "2026-12-06T00:00:00Z")
        call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, ctype="application/merge-patch+json")

    def pod_body(self, tmpl, name):
        p = self.template(tmpl)
        p["metadata"].pop("generateName", None)
        p["metadata"]["name"] = name
        spec = p["spec"]
        spec["schedulerName"] = self.sched_name
        prio = spec.pop("priority", None)
        if prio is not None:
            pc = f"perf-priority-{prio}"
            if pc not in self.priority_classes:
                try_call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": pc}, "value": int(prio)})
                self.priority_classes.add(pc)
            spec["priorityClassName"] = pc
        return p

    def create_pods(self, ns, tmpl, prefix, count):
        def one(i):
            call("POST", f"/api/v1/namespaces/{ns}/pods", self.pod_body(tmpl, f"{prefix}-{i}"))
        kitlib.parallel(one, range(count), workers=32)

    def namespace(self, ns):
        try_call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # --- the scheduler -------------------------------------------------------------------

    def start_scheduler(self):
        log = open(os.path.join(self.work, "scheduler.log"), "a")
        if self.scheduler == "ks":
            cfg = os.path.join(self.work, "ks.yaml")
            with open(cfg, "w") as f:
                f.write("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                        f"clientConnection: {{kubeconfig: {kitlib.EXT}/run/admin.kubeconfig, qps: 5000, burst: 5000}}\n"
                        "leaderElection: {leaderElect: false}\n")
            cmd = [f"{kitlib.EXT}/bin/kube-scheduler", f"--config={cfg}", "--secure-port=10261"]
        else:
            cfg = os.path.join(self.work, "hr.yaml")
            with open(cfg, "w") as f:
                f.write("serve: {security: {mode: none}}\n")
                if self.scheduler == "hr-usage":
                    f.write(kitlib.headroom_usage_config(PROM))
            cmd = [self.args.headroom, "serve", "--config", cfg, "--kubeconfig", f"{kitlib.EXT}/run/admin.kubeconfig",
                   "--data-dir", os.path.join(self.work, "data"), "--no-leader-election",
                   "--listen", "127.0.0.1:10650", "--api-listen", f"127.0.0.1:{HR_API}"]
            if self.scheduler == "hr":
                cmd += ["--prometheus", "http://127.0.0.1:1"]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.started = time.time()

    def stop_scheduler(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def peak_rss_mb(self):
        try:
            for line in open(f"/proc/{self.proc.pid}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except (OSError, AttributeError):
            return None
        return None

    def metrics(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{HR_API}/metrics", timeout=10) as r:
                return r.read().decode()
        except Exception:
            return ""

    # --- churn ---------------------------------------------------------------------------

    def churn(self, op):
        mode, paths = op.get("mode", "create"), op["templatePaths"]
        interval = op.get("intervalMilliseconds", 500) / 1000
        number = op.get("number", 0)
        ns = "churn"
        self.namespace(ns)

        def loop():
            k, live = 0, []
            while not self.churn_stop.wait(interval):
                made = []
                for path in paths:
                    obj = self.template(path)
                    kind = obj["kind"]
                    name = f"churn-{k}-{kind.lower()}"
                    obj["metadata"].pop("generateName", None)
                    obj["metadata"]["name"] = name
                    if kind == "Node":
                        status = obj.pop("status", {})
                        if try_call("POST", "/api/v1/nodes", obj):
                            status["allocatable"] = dict(status.get("capacity", {}))
                            try_call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                                     ctype="application/merge-patch+json")
                            made.append(f"/api/v1/nodes/{name}")
                    elif kind == "Pod":
                        body = self.pod_body(path, name)
                        if try_call("POST", f"/api/v1/namespaces/{ns}/pods", body):
                            made.append(f"/api/v1/namespaces/{ns}/pods/{name}")
                    elif kind == "Service":
                        if try_call("POST", f"/api/v1/namespaces/{ns}/services", obj):
                            made.append(f"/api/v1/namespaces/{ns}/services/{name}")
                k += 1
                if mode == "recreate":
                    live.append(made)
                    while len(live) > max(1, number):
                        for path in live.pop(0):
                            try_call("DELETE", path)
        threading.Thread(target=loop, daemon=True).start()

    # --- the run -------------------------------------------------------------------------

    def wait_settled(self, timeout=600):
        """Until the number of bound pods stops changing for 5 s."""
        last, since, end = -1, time.time(), time.time() + timeout
        while time.time() < end:
            pods = kitlib.all_pods_everywhere()
            bound = sum(1 for p in pods if p["spec"].get("nodeName"))
            if bound != last:
                last, since = bound, time.time()
            elif time.time() - since > 5:
                return bound
            time.sleep(1)
        return last

    def execute(self):
        env = dict(os.environ, NOSCHED="1")
        subprocess.run(["bash", os.path.join(KIT, "cluster.sh"), "stop"], stdout=subprocess.DEVNULL)
        subprocess.run(["bash", os.path.join(KIT, "cluster.sh"), "start"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        if self.scheduler != "ks":
            subprocess.run(f"{self.args.headroom} crd | kubectl --kubeconfig {kitlib.EXT}/run/admin.kubeconfig "
                           "apply -f - >/dev/null", shell=True, check=True)
        # The usage source runs for every scheduler, read or not: the machine carries the
        # same exporter and Prometheus in every run, as a cluster's monitoring runs
        # whichever scheduler places its pods.
        _, _, self.exporter, prom_cmd = kitlib.usage_source(self.work, EXPORTER, PROM)
        self.extra.append(subprocess.Popen(prom_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.start_scheduler()
        ops = self.case["workloadTemplate"]
        default_tmpl = self.case.get("defaultPodTemplatePath")
        nodes = 0
        result = {"workload": self.name, "scheduler": self.scheduler}
        for i, op in enumerate(ops):
            code = op["opcode"]
            if code == "createNodes":
                count = param(op, "countParam", self.params) or op.get("count", 0)
                tmpl = op.get("nodeTemplatePath", "../templates/node-default.yaml")
                strategy = op.get("labelNodePrepareStrategy")
                base = nodes
                kitlib.parallel(lambda j: self.node(base + j, tmpl, strategy), range(count), workers=32)
                nodes += count
            elif code == "createNamespaces":
                for j in range(op["count"]):
                    self.namespace(f"{op['prefix']}-{j}")
            elif code == "churn":
                self.churn_op = op
            elif code == "createPods":
                count = param(op, "countParam", self.params) or op.get("count", 0)
                # Neither set: upstream's makeBasePod (testutils.MakePodSpec), which
                # templates/pod-default.yaml spells out.
                tmpl = op.get("podTemplatePath") or default_tmpl or "../templates/pod-default.yaml"
                ns = op.get("namespace") or f"namespace-{i}"
                self.namespace(ns)
                if op.get("collectMetrics"):
                    result.update(self.measure(ns, tmpl, count))
                else:
                    self.create_pods(ns, tmpl, f"init-{i}", count)
                    self.wait_settled()
        result["nodes"] = nodes
        return result

    def measure(self, ns, tmpl, count):
        bound_before = self.wait_settled()
        self.stop_scheduler()
        if getattr(self, "churn_op", None):
            self.churn(self.churn_op)
        t = time.time()
        self.create_pods(ns, tmpl, "measured", count)
        created_s = time.time() - t
        rv = call("GET", f"/api/v1/namespaces/{ns}/pods?limit=1")["metadata"]["resourceVersion"]
        watch = kitlib.BindWatch(ns, rv)
        watch.start()
        self.start_scheduler()
        expect = count
        end = time.time() + self.args.timeout
        while time.time() < end and len(watch.times) < expect and self.proc.poll() is None:
            time.sleep(0.5)
            if len(watch.times) and time.time() - watch.last > 30:
                break  # nothing bound for 30 s: the rest do not fit
        times = sorted(watch.times)
        out = {"measured": count, "bound": len(times), "init_bound": bound_before,
               "create_s": round(created_s, 1), "peak_rss_mb": self.peak_rss_mb()}
        if len(times) >= 10:
            lo, hi = times[int(len(times) * 0.1)], times[int(len(times) * 0.9) - 1]
            out["pods_per_s"] = round((int(len(times) * 0.9) - int(len(times) * 0.1)) / max(1e-6, hi - lo), 1)
            out["first_bind_s"] = round(times[0] - self.started, 2)
            # Every measured pod over the whole run, from the scheduler's start to the last
            # bind (upstream's SchedulingThroughput average, roughly): what a burst-shaped
            # case such as PreemptionBasic is judged by.
            out["last_bind_s"] = round(times[-1] - self.started, 2)
            out["overall_pods_per_s"] = round(len(times) / max(1e-6, times[-1] - self.started), 1)
        if self.scheduler != "ks":
            m = self.metrics()
            for name in ("headroom_store_series", "headroom_scheduler_fallback_placements_total",
                         "headroom_usage_stale_nodes", "headroom_usage_view_age_seconds",
                         "headroom_events_dropped_total"):
                v = [line.rsplit(" ", 1)[1] for line in m.splitlines() if line.startswith(name)]
                out[name] = v[0] if v else None
            if self.scheduler == "hr-usage":
                out["exporter_series"] = self.exporter.series
                out["basis_measured"] = self.basis_measured(ns, times)
        self.churn_stop.set()
        self.stop_scheduler()
        time.sleep(3)
        ev = kitlib.scheduled_events(ns)
        out["scheduled_events"] = sum(len(v) for v in ev.values())
        return out

    def basis_measured(self, ns, times):
        """Of a sample of the measured pods, how many `/explain` says were placed on measured
        usage (the chosen node's headroom basis). The sample is the last 50 bound: the
        decision log keeps the newest decisions, and a workload with many unschedulable
        attempts pushes the first pods' out; pods `/explain` did not answer for are counted
        apart, not as unmeasured."""
        bound = [p for p in kitlib.all_pods(ns) if p["spec"].get("nodeName")]
        bound.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        pods = [p["metadata"]["name"] for p in bound[-50:]]
        measured, unanswered = 0, 0
        for name in pods:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{HR_API}/explain/{ns}/{name}", timeout=10) as r:
                    measured += '"basis":"measured"' in r.read().decode().replace(" ", "")
            except Exception:
                unanswered += 1
        out = f"{measured}/{len(pods) - unanswered}"
        return out + (f" ({unanswered} not in the decision log)" if unanswered else "")

    def close(self):
        self.churn_stop.set()
        self.stop_scheduler()
        for p in self.extra:
            p.terminate()
        if getattr(self, "exporter", None) is not None:
            self.exporter.stop()
        subprocess.run(["bash", os.path.join(KIT, "cluster.sh"), "stop"], stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("headroom")
    ap.add_argument("--mirror", required=True)
    ap.add_argument("--workloads", default=DEFAULT)
    ap.add_argument("--schedulers", default="ks,hr,hr-usage")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--work", default="/tmp/headroom-kit-perf")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.headroom = os.path.realpath(args.headroom)
    mirror = Mirror(args.mirror)
    results = []
    for name in args.workloads.split(","):
        for sched in args.schedulers.split(","):
            run = Run(args, mirror, name, sched)
            try:
                r = run.execute()
            except Exception as e:  # one broken run does not stop the others
                r = {"workload": name, "scheduler": sched, "error": repr(e)}
            finally:
                run.close()
            print(json.dumps(r), flush=True)
            results.append(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
