#!/usr/bin/env python3
"""An hour of `headroom serve` with churn on the real control plane of ../shared/kit: does it
stay flat? (issue 75). Not part of CI (CI cannot build the kit).

    python3 scripts/kit-soak.py target/release/headroom [--nodes 1000] [--minutes 60] [--rate 6]

Needs the kit built (../shared/kit/README.md) and Debian's `prometheus`. The script starts the
control plane without kube-scheduler, NODES fake Ready nodes (32 CPU, 128 GiB, three zones), a
usage exporter (scripts/kitlib.py: every node's and every bound pod's memory and CPU, changing
over time) scraped by a real Prometheus every 5 s, and `headroom serve` (leader election on,
usage from that Prometheus). Then, for MINUTES:
- pods arrive at RATE a second (Poisson; 100m-2 CPU, 128 MiB-4 GiB, twelve builders' labels);
- each bound pod completes after 1-10 minutes and is deleted, as its Job's controller would;
- every 60 s a node joins and another leaves (its pods deleted with it); every 10 s a node's
  label changes;
- every 30 s: headroom's RSS, open file descriptors and threads, the store's size on disk, its
  decision log (records in memory and in the store), pods pending and bound.

The store keeps 5 minutes of raw samples, 10 of rollups and 10 of decisions here
(`storage.rawRetention`, `rollupRetention`, `decisionLogMaxAge`), so retention, downsampling
and the removal of gone pods' series run many times within the hour (a pod's series go
about 15 minutes after the pod); the in-memory decision log keeps its default
bound (10,000 decisions, 32 MiB), reached in about 28 minutes at 6 pods a second.

At the end: pods created and never bound nor pending (lost), pods with two Scheduled events
(double binds), nodes whose bound pods' requests exceed their allocatable (overcommitted),
panics in the log, and how each figure moved after warm-up (the first quarter). Writes
soak.csv and soak.png (matplotlib when importable) into the work folder and prints a table.
Exit 0 when lost, double binds, overcommitted and panics are all 0.
"""
import argparse
import collections
import csv
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitlib  # noqa: E402
from kitlib import call, try_call  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("headroom")
ap.add_argument("--nodes", type=int, default=1000)
ap.add_argument("--minutes", type=float, default=60)
ap.add_argument("--rate", type=float, default=6.0, help="pod arrivals a second")
ap.add_argument("--work", default="/tmp/headroom-kit-soak")
args = ap.parse_args()
HR = os.path.realpath(args.headroom)
KIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "kit")
W = args.work
subprocess.run(["rm", "-rf", W], check=True)
os.makedirs(W)
EXPORTER, PROM, API = 19400, 19401, 10461
procs = []


def spawn(name, cmd, **kw):
    log = open(os.path.join(W, f"{name}.log"), "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **kw)
    procs.append(p)
    return p


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
    subprocess.run(["bash", os.path.join(KIT, "cluster.sh"), "stop"], stdout=subprocess.DEVNULL)


def metric(text, name):
    total = None
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def main():
    env = dict(os.environ, NOSCHED="1")
    subprocess.run(["bash", os.path.join(KIT, "cluster.sh"), "start"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(f"{HR} crd | kubectl --kubeconfig {kitlib.EXT}/run/admin.kubeconfig apply -f - >/dev/null",
                   shell=True, check=True)
    print(f"== {args.nodes} nodes", flush=True)
    kitlib.farm("soak", args.nodes)
    pods, nodes, exporter, prom_cmd = kitlib.usage_source(W, EXPORTER, PROM)
    spawn("prometheus", prom_cmd)
    with open(os.path.join(W, "config.yaml"), "w") as f:
        f.write("serve: {security: {mode: none}}\n"
                "storage: {rawRetention: 5m, rollupRetention: 10m, decisionLogMaxAge: 10m, builderMaxAge: 10m, maintenanceInterval: 1m}\n"
                + kitlib.headroom_usage_config(PROM))
    serve = spawn("serve", [HR, "serve", "--config", f"{W}/config.yaml", "--kubeconfig",
                            f"{kitlib.EXT}/run/admin.kubeconfig", "--data-dir", f"{W}/data",
                            "--listen", "127.0.0.1:10460", "--api-listen", f"127.0.0.1:{API}",
                            "--log-format", "json"])
    time.sleep(5)
    stop = threading.Event()
    created = collections.OrderedDict()  # name -> creation time
    lock = threading.Lock()
    rnd = random.Random(75)

    def arrivals():
        i = 0
        while not stop.is_set():
            time.sleep(rnd.expovariate(args.rate))
            name = f"soak-pod-{i}"
            cpu = rnd.choice(["100m", "250m", "500m", "1", "2"])
            mem = rnd.choice(["128Mi", "512Mi", "1Gi", "2Gi", "4Gi"])
            body = kitlib.pod_body(name, cpu=cpu, memory=mem,
                                   labels={"app": f"builder-{rnd.randrange(12)}"})
            if try_call("POST", "/api/v1/namespaces/default/pods", body) is not None:
                with lock:
                    created[name] = time.time()
            i += 1

    lifetimes = {}

    def completions():
        while not stop.is_set():
            time.sleep(2)
            now = time.time()
            for k, p in pods.snapshot().items():
                if not p["node"]:
                    continue
                end = lifetimes.setdefault(p["name"], now + rnd.uniform(60, 600))
                if now >= end:
                    try_call("DELETE", f"/api/v1/namespaces/default/pods/{p['name']}")

    def node_churn():
        k = args.nodes
        while not stop.wait(10):
            names = [n for n in nodes.snapshot() if n.startswith("/soak-")]
            if not names:
                continue
            n = rnd.choice(names)[1:]
            try_call("PATCH", f"/api/v1/nodes/{n}", {"metadata": {"labels": {"soak/tick": str(int(time.time()))}}},
                     ctype="application/merge-patch+json")
            if int(time.time()) % 60 < 10:
                try:
                    kitlib.make_node(f"soak-{k}", labels={"topology.kubernetes.io/zone": f"zone-{k % 3}"})
                    k += 1
                except Exception:
                    pass
                gone = rnd.choice(names)[1:]
                for p in pods.snapshot().values():
                    if p["node"] == gone:
                        try_call("DELETE", f"/api/v1/namespaces/default/pods/{p['name']}")
                try_call("DELETE", f"/api/v1/nodes/{gone}")

    threads = [threading.Thread(target=f, daemon=True) for f in (arrivals, completions, node_churn)]
    [t.start() for t in threads]
    rows = []
    t0 = time.time()
    end = t0 + args.minutes * 60
    print(f"== soak for {args.minutes} min: arrivals {args.rate}/s", flush=True)
    while time.time() < end and serve.poll() is None:
        time.sleep(30)
        fig = kitlib.process_figures(serve.pid) or {}
        try:
            text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{API}/metrics"], capture_output=True,
                                  text=True, timeout=20).stdout
        except subprocess.TimeoutExpired:
            text = ""
        snap = pods.snapshot().values()
        row = {
            "t_s": round(time.time() - t0),
            "rss_mb": round(fig.get("rss_mb", 0), 1),
            "fds": fig.get("fds"),
            "threads": fig.get("threads"),
            "store_mb": round(kitlib.dir_mb(f"{W}/data"), 1),
            "decisions_in_memory": metric(text, "headroom_api_decision_log_entries"),
            "decisions_in_store": metric(text, "headroom_store_decisions"),
            "series": metric(text, "headroom_store_series"),
            "compactions": metric(text, "headroom_store_compactions_total"),
            "pending": sum(1 for p in snap if not p["node"]),
            "bound": sum(1 for p in snap if p["node"]),
            "exporter_series": exporter.series,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    stop.set()
    time.sleep(10)
    return rows


def report(rows):
    with open(os.path.join(W, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    keys = ["rss_mb", "fds", "threads", "store_mb", "decisions_in_memory", "decisions_in_store", "series"]
    warm = rows[len(rows) // 4:]
    print("\n| figure | after warm-up (min / max) | at the end | trend over the last three quarters (per 10 min) |")
    print("|---|---|---|---|")
    for k in keys:
        vals = [(r["t_s"], r[k]) for r in warm if r[k] is not None]
        if len(vals) < 2:
            continue
        xs, ys = [v[0] for v in vals], [v[1] for v in vals]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in vals) / max(1e-9, sum((x - mx) ** 2 for x in xs))
        print(f"| {k} | {min(ys):g} / {max(ys):g} | {ys[-1]:g} | {slope * 600:+.2f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2 * len(keys)), sharex=True)
        for ax, k in zip(axes, keys):
            ax.plot([r["t_s"] / 60 for r in rows], [r[k] if r[k] is not None else float("nan") for r in rows])
            ax.set_ylabel(k, fontsize=8)
        axes[-1].set_xlabel("minutes")
        fig.tight_layout()
        fig.savefig(os.path.join(W, "soak.png"), dpi=80)
        print(f"plot: {W}/soak.png")
    except ImportError:
        print("(no matplotlib: no plot; the figures are in soak.csv)")


def checks():
    pods = kitlib.all_pods()
    over = kitlib.overcommitted(pods)
    twice = [n for n, es in kitlib.scheduled_events().items() if len(es) > 1]
    pending_unexplained = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")
                           and not any(c.get("type") == "PodScheduled" for c in p.get("status", {}).get("conditions", []))
                           and time.time() - time.mktime(time.strptime(p["metadata"]["creationTimestamp"],
                                                                         "%Y-%m-%dT%H:%M:%SZ")) > 120]
    log = open(os.path.join(W, "serve.log")).read()
    panics = log.count("panicked")
    print(f"\nlost (pending > 2 min with no PodScheduled condition): {len(pending_unexplained)}; "
          f"double binds (two Scheduled events): {len(twice)}; overcommitted nodes: {len(over)}; "
          f"panics: {panics}; still pending: {sum(1 for p in pods if not p['spec'].get('nodeName'))}")
    return not pending_unexplained and not twice and not over and not panics


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    ok = False
    try:
        rows = main()
        if rows:
            report(rows)
        ok = checks()
    finally:
        cleanup()
    sys.exit(0 if ok else 1)
