#!/usr/bin/env bash
# `make demo`: testbed up, the operator image loaded into it and installed with
# the Helm chart (release valkey-operator in namespace valkey-system, running
# in-cluster: no operator process on the host), a spread 3-shard x 2-replica
# cluster applied, its topology shown. Leaves everything running; `make
# demo-down` stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${1:-$root/.testbed}")
tb=$root/target/release/testbed
op=$root/target/release/valkey-operator
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
kubectl=$cache/bin/kube-v1.36.3/kubectl
helm=${HELM_BIN:-$cache/bin/helm-v4.3.2/helm}
release=valkey-operator
ns=valkey-system

version=$("$op" --version | awk '{print $2}')
image=$root/target/image/valkey-operator-$version.oci.tar
[[ -f $image ]] || { echo "$image is missing: make image builds it" >&2; exit 1; }

"$tb" up --dir "$dir" | tail -n 1 > "$dir.env" || { echo "testbed up failed; logs in $dir/logs" >&2; exit 1; }
# The testbed's kubectl (v1.36.3, the server's version), Helm and the
# project's own binaries (valkey-operator) first on PATH for whoever sources
# the file: the guides run them by name.
echo "export PATH=\"$root/target/release:$(dirname "$kubectl"):$(dirname "$helm"):\$PATH\"" >> "$dir.env"
# shellcheck disable=SC1090
source "$dir.env"

# An operator a previous demo ran on the host gives way to the in-cluster one.
if [[ -f $dir/pids/operator.pid ]]; then
  kill "$(cat "$dir/pids/operator.pid")" 2>/dev/null || true
  rm -f "$dir/pids/operator.pid"
fi

"$tb" image load --dir "$dir" "$image"
export HELM_CACHE_HOME=$dir/helm/cache HELM_CONFIG_HOME=$dir/helm/config HELM_DATA_HOME=$dir/helm/data
# The chart installs the CRD (crds/) and the operator Deployment with its defaults.
"$helm" upgrade --install "$release" "$root/deploy/helm/valkey-operator" \
  -n "$ns" --create-namespace --wait --timeout 5m
"$kubectl" get pods -n "$ns" -o wide
echo "operator running in-cluster: kubectl -n $ns get pods (container logs in $dir/logs/pods/)"

"$kubectl" apply -n default -f "$root/examples/cluster.yaml"
echo "waiting for valkeycluster/demo to become Ready..."
"$kubectl" wait -n default --for=condition=Ready valkeycluster/demo --timeout=300s
"$op" topology --cluster demo --namespace default
echo
"$kubectl" get valkeyclusters,pods -o wide
echo
cat <<EOF
The testbed keeps running; make demo-down stops it. To use it from a shell:

  source $dir.env      # KUBECONFIG, and PATH: the testbed's kubectl $("$kubectl" version --client -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])' 2>/dev/null), helm, valkey-operator
  kubectl get valkeyclusters
  valkey-operator topology --cluster demo --namespace default
EOF
