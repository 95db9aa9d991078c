#!/usr/bin/env python3
"""Compare headroom's per-plugin weighted scores with kube-scheduler's on the recorded cases.

usage: compare-scores.py HEADROOM_BINARY CASES_DIR [CASE ...]
Prints every (case, node, plugin) whose weighted score differs.
"""
import json, os, subprocess, sys

hr, cases = sys.argv[1], sys.argv[2]
names = sys.argv[3:] or sorted(n for n in os.listdir(cases) if os.path.isdir(os.path.join(cases, n)))
bad = 0
for name in names:
    d = os.path.join(cases, name)
    exp = json.load(open(os.path.join(d, "expect.json")))
    want = exp.get("plugin_scores") or {}
    if not want:
        continue
    r = subprocess.run([hr, "place", "--cluster", f"{d}/cluster.yaml", "--pod", f"{d}/pod.yaml", "--output", "json"],
                       capture_output=True, text=True)
    got = {}
    for n in json.loads(r.stdout)[0]["nodes"]:
        if n.get("feasible"):
            got[n["name"]] = {s["plugin"]: s["weighted"] for s in n.get("scores", [])}
    for node, plugins in want.items():
        for p, v in plugins.items():
            if p == "DynamicResources":
                continue
            g = got.get(node, {}).get(p)
            if g != v:
                bad += 1
                print(f"{name} {node} {p}: headroom {g} kube-scheduler {v}")
    for node in got:
        if node not in want:
            print(f"{name} {node}: feasible for headroom only")
print(f"{bad} differing scores")
