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

all=(quantity objects usage_file scenario family config kubelet_summary prometheus_response exposition extender_args store_open watch_objects)
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")

# Seeds: real inputs of each parser, listed in fuzz/seeds.txt, plus fuzz/seeds/TARGET/
# (copied every run; libFuzzer dedups by coverage). CI's tests/integration/fuzzing.rs reads
# the same lists.
for t in "${all[@]}"; do
    mkdir -p "$fuzz/corpus/$t"
    if [[ -d "$fuzz/seeds/$t" ]]; then
        cp -f "$fuzz/seeds/$t"/* "$fuzz/corpus/$t/" 2>/dev/null || true
    fi
done
while read -r target pattern selector; do
    [[ -z "$target" || "$target" == \#* ]] && continue
    for f in $root/$pattern; do
        [[ -f "$f" ]] || continue
        out="$fuzz/corpus/$target/seed-$(basename "$(dirname "$f")")-$(basename "$f")"
        if [[ -n "${selector:-}" ]]; then
            { printf "\\$(printf '%03o' "$selector")"; cat "$f"; } >"$out"
        else
            cp -f "$f" "$out"
        fi
    done
done <"$fuzz/seeds.txt"

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
