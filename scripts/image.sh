#!/usr/bin/env bash
# headroom's OCI image, built without a registry or a container daemon (Debian's umoci and
# skopeo), with the same layout as the Dockerfile: /usr/local/bin/headroom (and its
# kubectl-headroom link), user 65532:65532 (distroless' nonroot), CA certificates, the store
# directory /var/lib/headroom owned by that user, ENTRYPOINT [/usr/local/bin/headroom],
# CMD [serve]. The binary is the glibc one with exactly the shared libraries `ldd` lists and
# the dynamic loader beside it (musl targets are not installable here).
#
#   bash scripts/image.sh build    # -> target/oci-image/oci (OCI layout, tag VERSION) and
#                                  #    target/oci-image/headroom-VERSION.oci.tar (oci-archive)
#   bash scripts/image.sh check    # inspect it, then run it in its own root filesystem:
#                                  # read-only root, uid 65532, `serve --help`, a short simulate
#
# HEADROOM_IMAGE_BIN=path skips the cargo build and packs that binary. The cargo profile is
# `image` (Cargo.toml: release without debug info, 16 codegen units) so CI builds it in a
# fraction of `release`'s time. Needs: umoci, skopeo, ldd; `check` needs root (unshare,
# mount, chroot).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# Not target/image: that is where cargo's `image` profile puts the binary.
out=target/oci-image
layout=$out/oci
archive=$out/headroom-$version.oci.tar
uid=65532

build() {
  local bin=${HEADROOM_IMAGE_BIN:-}
  if [ -z "$bin" ]; then
    echo "==> cargo build --profile image"
    cargo build --profile image --locked --bin headroom
    bin=${CARGO_TARGET_DIR:-target}/image/headroom
  fi
  rm -rf "$out"
  mkdir -p "$out"
  local bundle=$out/bundle
  umoci init --layout "$layout"
  umoci new --image "$layout:$version"
  umoci unpack --image "$layout:$version" "$bundle"
  local root=$bundle/rootfs
  install -D -m 0755 "$bin" "$root/usr/local/bin/headroom"
  ln -s headroom "$root/usr/local/bin/kubectl-headroom"
  # The shared libraries at the paths the binary asks for, and the loader.
  ldd "$bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
    install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' \
    $uid $uid >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:%s:\n' $uid >"$root/etc/group"
  # Mount points a runtime fills, /tmp, the user's home and the store (a volume in deploy/).
  mkdir -p "$root/proc" "$root/dev" "$root/sys" "$root/tmp" "$root/home/nonroot" "$root/var/lib/headroom"
  chmod 1777 "$root/tmp"
  chown $uid:$uid "$root/home/nonroot" "$root/var/lib/headroom"
  umoci repack --image "$layout:$version" "$bundle"
  rm -rf "$bundle"
  local source
  source=$(sed -n 's/^repository = "\(.*\)"/\1/p' Cargo.toml | head -1)
  umoci config --image "$layout:$version" \
    --config.user $uid:$uid \
    --config.entrypoint /usr/local/bin/headroom --config.cmd serve \
    --config.workingdir / \
    --config.exposedports 10260/tcp --config.exposedports 10261/tcp --config.exposedports 10262/tcp \
    --config.label org.opencontainers.image.title=headroom \
    --config.label "org.opencontainers.image.description=A Kubernetes scheduler that places pods by what nodes and workloads really use" \
    --config.label org.opencontainers.image.version="$version" \
    --config.label org.opencontainers.image.source="$source" \
    --config.label org.opencontainers.image.licenses="$(sed -n 's/^license = "\(.*\)"/\1/p' Cargo.toml | head -1)"
  umoci gc --layout "$layout"
  skopeo copy --quiet "oci:$layout:$version" "oci-archive:$archive:headroom:$version"
  echo "==> $layout:$version, $archive ($(du -h "$archive" | cut -f1))"
}

check() {
  echo "==> skopeo inspect"
  local config
  config=$(skopeo inspect --config "oci:$layout:$version")
  echo "$config" | jq -e --arg v "$version" '
      .config.User == "65532:65532"
      and .config.Entrypoint == ["/usr/local/bin/headroom"]
      and .config.Cmd == ["serve"]
      and .config.Labels["org.opencontainers.image.title"] == "headroom"
      and .config.Labels["org.opencontainers.image.version"] == $v
      and (.config.Labels["org.opencontainers.image.source"] | length > 0)
      and (.config.Labels["org.opencontainers.image.licenses"] | length > 0)' >/dev/null ||
    { echo "image config is not as expected:"; echo "$config"; return 1; }
  skopeo inspect --raw "oci:$layout:$version" |
    jq -r '"layers: \(.layers | map(.size) | add) bytes compressed"'
  echo "archive: $(stat -c %s "$archive") bytes ($archive)"

  echo "==> run it in its own root filesystem (read-only, uid $uid)"
  local bundle=$out/check
  rm -rf "$bundle"
  umoci unpack --image "$layout:$version" "$bundle" >/dev/null
  echo "rootfs: $(du -sh "$bundle/rootfs" | cut -f1) unpacked"
  # A private mount namespace: the root filesystem read-only, /tmp and the store on tmpfs
  # (as deploy/deployment.yaml mounts an emptyDir), /proc and /dev from the host.
  unshare --mount --fork bash -euo pipefail -c '
    root=$1 uid=$2
    mount --bind "$root" "$root"
    mount -o remount,bind,ro "$root"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    mount -t tmpfs -o uid=$uid,gid=$uid,mode=0755 tmpfs "$root/var/lib/headroom"
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    run() { chroot --userspec=$uid:$uid "$root" /usr/local/bin/headroom "$@"; }
    run --version
    run serve --help >/dev/null
    cat >"$root/tmp/tiny.yaml" <<EOF
duration: 20m
step: 30s
seed: 1
nodes:
  - {count: 2, namePrefix: n-, cpu: "8", memory: 16Gi}
workloads:
  - name: web
    kind: builder
    namespace: ci
    builders: 2
    arrivalsPerHour: 30
    duration: 5m
    requests: {cpu: "1", memory: 1Gi}
    usage: {cpu: [0.2, 0.5], memory: [0.2, 0.5]}
EOF
    run simulate /tmp/tiny.yaml --data-dir /var/lib/headroom/store | tail -3
    # It ran as 65532 (its files say so) and wrote nowhere but its volumes.
    test -n "$(find "$root/var/lib/headroom/store" -user $uid -type f | head -1)"
    if find "$root/var/lib/headroom" "$root/tmp" ! -user $uid ! -user 0 | grep .; then
      echo "files not owned by $uid"; exit 1
    fi
    if touch "$root/usr/x" 2>/dev/null; then echo "the root filesystem is writable"; exit 1; fi
    # The kubectl plugin by its name.
    chroot --userspec=$uid:$uid "$root" /usr/local/bin/kubectl-headroom --help | grep -q "kubectl headroom"
  ' check "$bundle/rootfs" $uid
  rm -rf "$bundle"
  echo "==> image check passed"
}

case "${1:-build}" in
  build) build ;;
  check) check ;;
  *) echo "usage: $0 [build|check]" >&2; exit 2 ;;
esac
