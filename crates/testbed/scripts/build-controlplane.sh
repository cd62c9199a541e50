#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl) from the Go wrapper modules beside this script.
# Outputs and Go caches live outside the repo and are reused when present:
#   $VALKEY_RS_CACHE (default ~/.cache/valkey-rs)/bin/{etcd,kube}-<version>/
# A stamp of each wrapper's go.sum decides whether a rebuild is needed.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod}
export GOCACHE=${GOCACHE:-$cache/go/build}
export GOFLAGS=-mod=mod
export CGO_ENABLED=0

kube_version=v1.36.3
etcd_version=v3.6.16

stamp_of() { sha256sum "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16; }

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

build_etcd
build_kube
