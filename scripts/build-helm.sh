#!/usr/bin/env bash
# Builds the pinned Helm CLI from its Go module (the e2e suite `helm_chart`
# lints, renders and installs deploy/helm/valkey-operator with it). The binary
# lives outside the repo and is reused when present:
#   $VALKEY_RS_CACHE (default ~/.cache/valkey-rs)/bin/helm-<version>/helm
set -euo pipefail

cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
version=v4.3.2
out=$cache/bin/helm-$version
if [[ -x $out/helm ]]; then
  echo "helm $version: cached in $out"
  exit 0
fi
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod}
export GOCACHE=${GOCACHE:-$cache/go/build}
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
mkdir -p "$out"
echo "helm $version: building (a few minutes on a cold Go cache)"
GOBIN=$out go install -trimpath -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@$version"
"$out/helm" version --short
