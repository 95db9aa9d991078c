#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time and prints, per target, the
# executions and whether it crashed. Idempotent: installs cargo-fuzz if missing, seeds each
# corpus from the repository's real inputs (examples, recorded captures) every run, and
# keeps what libFuzzer found in fuzz/corpus/ (ignored by git) for the next run.
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   scripts/fuzz.sh --seconds 20         # what CI runs
#   scripts/fuzz.sh --seconds 300 objects scenario
#
# Exit 0 when no target crashed; 1 when one did (the input is in fuzz/artifacts/TARGET/,
# replay it with `cargo fuzz run -s none TARGET fuzz/artifacts/TARGET/crash-...`); 2 on
# bad arguments or a failed build.
#
# cargo-fuzz needs nightly rustc flags; on a stable toolchain RUSTC_BOOTSTRAP=1 enables
# them. Targets are built without a sanitizer (`-s none`): the code under test forbids
# `unsafe`, so AddressSanitizer would only slow the search; panics, overflows (debug
# assertions are on) and aborts are what the targets look for.
set -euo pipefail

seconds=60
targets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
        --seconds=*) seconds="${1#*=}"; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "--seconds must be a whole number" >&2; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
fuzz="$root/fuzz"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

all=(quantity objects usage_file scenario config kubelet_summary prometheus_response exposition extender_args store_open)
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")

# Seeds: real inputs of each parser (copied every run; libFuzzer dedups by coverage).
seed() {
    local target="$1"; shift
    mkdir -p "$fuzz/corpus/$target"
    for f in "$@"; do
        [[ -f "$f" ]] && cp -f "$f" "$fuzz/corpus/$target/seed-$(basename "$(dirname "$f")")-$(basename "$f")"
    done
    return 0
}
# A body with a leading selector byte (status or kind) for the targets that read one.
seed_prefixed() {
    local target="$1" byte="$2"; shift 2
    mkdir -p "$fuzz/corpus/$target"
    for f in "$@"; do
        [[ -f "$f" ]] || continue
        { printf "$byte"; cat "$f"; } >"$fuzz/corpus/$target/seed-$(basename "$f")"
    done
    return 0
}
cases=("$root"/tests/fixtures/kube-scheduler-cases/0[0-4]?/cluster.yaml)
seed quantity /dev/null
printf '100m' >"$fuzz/corpus/quantity/seed-100m"
printf '0.1Ki' >"$fuzz/corpus/quantity/seed-0.1Ki"
printf -- '-1.5e3' >"$fuzz/corpus/quantity/seed-exp"
seed objects "$root"/examples/cluster.yaml "$root"/examples/pods.yaml "$root"/examples/seed-00*/cluster.yaml "${cases[@]}"
seed usage_file "$root"/examples/seed-00*/usage.yaml
seed scenario "$root"/examples/ci-farm*.yaml "$root"/examples/databases.yaml "$root"/examples/reservations.yaml
printf 'duration: 2m\nstep: 15s\nnodes: [{count: 2}]\nworkloads: [{name: b, requests: {cpu: "1", memory: 1Gi}, arrivalsPerHour: 300}]\nevents: [{at: 1m, burst: {workload: b, count: 3}}]\n' \
    >"$fuzz/corpus/scenario/seed-small.yaml"
seed config "$root"/examples/config.yaml
seed kubelet_summary "$root"/collectors/tests/fixtures/*.json "$root"/collectors/tests/fixtures/real/*.json
seed_prefixed exposition '\000' "$root"/collectors/tests/fixtures/real/kubelet-1.21-datadog.txt
mkdir -p "$fuzz/corpus/prometheus_response"
printf '\000{"status":"success","data":{"resultType":"vector","result":[{"metric":{"node":"n1"},"value":[1767225600.5,"0.25"]}]}}' \
    >"$fuzz/corpus/prometheus_response/seed-vector.json"
printf '\000{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"p"},"values":[[1767225600,"1"],[1767225615,"NaN"]]}]},"warnings":["w"]}' \
    >"$fuzz/corpus/prometheus_response/seed-matrix.json"
printf '\001{"status":"error","errorType":"bad_data","error":"parse error"}' \
    >"$fuzz/corpus/prometheus_response/seed-error.json"
mkdir -p "$fuzz/corpus/extender_args"
for f in "$root"/tests/fixtures/kube-captures/kube-scheduler-extender/*.json; do
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["request"]))' "$f" \
        >"$fuzz/corpus/extender_args/seed-$(basename "$f")"
done
mkdir -p "$fuzz/corpus/store_open"

cd "$fuzz"
echo "building ${#targets[@]} fuzz target(s)" >&2
for t in "${targets[@]}"; do
    cargo fuzz build -s none "$t" >&2 || { echo "build of $t failed" >&2; exit 2; }
done

crashed=0
summary=()
for t in "${targets[@]}"; do
    log="$fuzz/artifacts/$t.log"
    mkdir -p "$fuzz/artifacts/$t"
    echo "fuzzing $t for ${seconds}s" >&2
    set +e
    cargo fuzz run -s none "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -timeout=30 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    if [[ $rc -ne 0 ]]; then
        crashed=1
        summary+=("$(printf '%-20s %10s execs  CRASH (rc %s, see %s)' "$t" "${execs:-?}" "$rc" "$log")")
        grep -m3 -E 'panicked|ERROR: libFuzzer|Test unit written' "$log" >&2 || true
    else
        summary+=("$(printf '%-20s %10s execs  ok' "$t" "${execs:-?}")")
    fi
done
printf '%s\n' "fuzz summary (${seconds}s per target):" "${summary[@]}"
exit "$crashed"
