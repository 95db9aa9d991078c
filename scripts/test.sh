#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need, then checks formatting,
# lints, and runs every test of the workspace.
#
# Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# The collectors' tests run a real Prometheus, a real VictoriaMetrics and node-exporter
# (Debian packages) on loopback.
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-node-exporter >/dev/null 2>&1 || need+=(prometheus-node-exporter)
command -v victoria-metrics >/dev/null 2>&1 || need+=(victoria-metrics)
# The OCI image is assembled and inspected without a daemon or a registry (scripts/image.sh).
command -v umoci >/dev/null 2>&1 || need+=(umoci)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
command -v jq >/dev/null 2>&1 || need+=(jq)
# The /ui pages are loaded in a real headless browser (tests/integration/kube/ui.rs).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing ${need[*]} (apt-get)"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # --no-install-recommends: no services are started or needed beyond the two binaries.
  $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

# No incremental caches: a run from a fresh clone never reuses them, and they are a third of
# the test build's disk (1.5 of 4.2 GB). A CI machine once ran out of disk building the image
# after the tests. Set CARGO_INCREMENTAL=1 to keep them for repeated local runs.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
target=${CARGO_TARGET_DIR:-target}

echo "==> cargo fmt --check"
cargo fmt --all --check

echo "==> cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

# Every intra-doc link resolves to a public item (docs that point nowhere are not true).
echo "==> cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "==> tests"
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi

# The image's build needs about 1.3 GB of its own (target/image). Where the disk is short, the
# test build (target/debug, no longer needed by this run) makes room for it, rather than
# failing on "No space left on device" after every test has passed.
free_mb=$(df -Pm "$target" | awk 'NR == 2 { print $4 }')
if [ "${free_mb:-0}" -lt 6144 ]; then
  echo "==> ${free_mb} MB free: removing $target/debug before the image build"
  rm -rf "$target/debug"
fi

# The image: built from scratch with the `image` cargo profile, then started in its own
# read-only root filesystem as uid 65532 (`serve --help`, a short simulate, the plugin name).
echo "==> OCI image: scripts/image.sh build + check"
bash scripts/image.sh build
$SUDO bash scripts/image.sh check
