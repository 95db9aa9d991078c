#!/usr/bin/env bash
# The extender's ceiling on the real control plane of ../shared/kit: kube-scheduler with a
# null extender — every candidate passes, every candidate scores 0, answered by Go's standard
# library as fast as it goes — next to kube-scheduler alone and kube-scheduler with
# `headroom serve --extender-only`. What kube-scheduler pays for the extender protocol itself
# (encoding the pod and the names, decoding the answers, two round trips in its serial
# cycle) shows as `ksnull` against `ks`; headroom's own price as `ksext` against `ksnull`.
# Needs the kit built once (../shared/kit/README.md) and Go (the kit's build needs it too).
# Not part of CI (CI cannot build the kit).
#
#   bash scripts/kit-nullext.sh [target/release/headroom] [NODES PODS]
set -euo pipefail
HR=$(realpath "${1:-target/release/headroom}"); N=${2:-5000}; P=${3:-10000}
KIT=$(cd "$(dirname "$0")/../../shared/kit" && pwd)
OUT=${TMPDIR:-/tmp}/headroom-nullext; mkdir -p "$OUT"
(cd "$(dirname "$0")/kit-nullext" && GOFLAGS=-mod=mod GOPROXY=off go build -o "$OUT/nullext" .)
# ksext.sh starts "$HR serve ..."; this stand-in ignores the arguments and runs the null
# extender on the same address.
printf '#!/bin/sh\nexec %s\n' "$OUT/nullext" > "$OUT/hr"; chmod +x "$OUT/hr"
bash "$KIT/compare.sh" "$HR" "$N" "$P" ks
bash "$KIT/compare.sh" "$OUT/hr" "$N" "$P" ksext | sed 's/^ksext/ksnull/'
bash "$KIT/compare.sh" "$HR" "$N" "$P" ksext
