#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), the cluster DNS (CoreDNS with a minimal plugin set)
# and the object store (SeaweedFS's `weed`) from the Go wrapper modules beside
# this script.
# Outputs and Go caches live outside the repo and are reused when present:
#   $VALKEY_RS_CACHE (default ~/.cache/valkey-rs)/bin/{etcd,kube,coredns,seaweedfs}-<version>/
# A stamp of each wrapper's content (go.mod, go.sum; main.go for CoreDNS) decides
# whether a rebuild is needed; it does not depend on where the checkout is.
# Arguments pick what to build (etcd, kube, coredns, seaweedfs); default all four.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod}
export GOCACHE=${GOCACHE:-$cache/go/build}
export GOFLAGS=-mod=mod
export CGO_ENABLED=0

kube_version=v1.36.3
etcd_version=v3.6.16
coredns_version=v1.15.0
# SeaweedFS's own version (`weed version`) of the module pinned in go/seaweedfs.
seaweedfs_version=4.53

stamp_of() {
  local files=("$1/go.mod" "$1/go.sum")
  [[ -f $1/main.go ]] && files+=("$1/main.go")
  cat "${files[@]}" | sha256sum | cut -c1-16
}

build_kube() {
  local mod=$here/go/kube out=$cache/bin/kube-$kube_version
  local stamp; stamp=$(stamp_of "$mod")
  if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
    echo "control plane $kube_version: cached in $out"; return
  fi
  mkdir -p "$out"
  local minor=${kube_version#v1.}; minor=${minor%%.*}
  local date; date=$(date -u -d @0 +%Y-%m-%dT%H:%M:%SZ)
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  echo "building control plane $kube_version into $out (cold: 20-40 min on 2 cores)"
  (cd "$mod" && go build -trimpath -tags selinux,notest -ldflags "$ld" -o "$out/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl)
  echo "$stamp" > "$out/.stamp"
}

build_etcd() {
  local mod=$here/go/etcd out=$cache/bin/etcd-$etcd_version
  local stamp; stamp=$(stamp_of "$mod")
  if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
    echo "etcd $etcd_version: cached in $out"; return
  fi
  mkdir -p "$out"
  echo "building etcd $etcd_version into $out"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
  echo "$stamp" > "$out/.stamp"
}

build_coredns() {
  local mod=$here/go/coredns out=$cache/bin/coredns-$coredns_version
  local stamp; stamp=$(stamp_of "$mod")
  if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
    echo "coredns $coredns_version: cached in $out"; return
  fi
  mkdir -p "$out"
  echo "building coredns $coredns_version into $out"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/coredns" .)
  echo "$stamp" > "$out/.stamp"
}

# Only the `weed` command, without cgo. It links every filer store and cloud
# SDK upstream imports (no build tag leaves them out); about 9 CPU-minutes cold.
build_seaweedfs() {
  local mod=$here/go/seaweedfs out=$cache/bin/seaweedfs-$seaweedfs_version
  local stamp; stamp=$(stamp_of "$mod")
  if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
    echo "seaweedfs $seaweedfs_version: cached in $out"; return
  fi
  mkdir -p "$out"
  echo "building seaweedfs $seaweedfs_version into $out (cold: about 9 CPU-minutes)"
  (cd "$mod" && nice go build -trimpath -ldflags "-s -w" -o "$out/weed" \
      github.com/seaweedfs/seaweedfs/weed)
  echo "$stamp" > "$out/.stamp"
}

targets=("$@")
((${#targets[@]})) || targets=(etcd kube coredns seaweedfs)
for what in "${targets[@]}"; do
  case $what in
    etcd) build_etcd ;;
    kube) build_kube ;;
    coredns) build_coredns ;;
    seaweedfs) build_seaweedfs ;;
    *) echo "unknown component $what (etcd, kube, coredns, seaweedfs)" >&2; exit 2 ;;
  esac
done
