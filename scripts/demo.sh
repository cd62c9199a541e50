#!/usr/bin/env bash
# `make demo`: testbed up, operator running, a spread 3-shard x 2-replica cluster
# applied, its topology shown. Leaves everything running; `make demo-down` stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${1:-$root/.testbed}")
tb=$root/target/release/testbed
op=$root/target/release/valkey-operator

"$tb" up --dir "$dir" | tail -n 1 > "$dir.env" || { echo "testbed up failed; logs in $dir/logs" >&2; exit 1; }
# shellcheck disable=SC1090
source "$dir.env"
kubectl=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}/bin/kube-v1.36.3/kubectl

"$kubectl" apply --server-side --force-conflicts -f "$root/deploy/crd/valkeycluster.yaml" >/dev/null
"$kubectl" wait --for=condition=Established crd/valkeyclusters.valkey.rs --timeout=60s >/dev/null

pidfile=$dir/pids/operator.pid
if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "operator already running (pid $(cat "$pidfile"))"
else
  mkdir -p "$dir/pids" "$dir/logs"
  setsid "$op" run >"$dir/logs/operator.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  echo "operator started (pid $!, log $dir/logs/operator.log)"
fi

"$kubectl" apply -n default -f "$root/examples/cluster.yaml"
echo "waiting for valkeycluster/demo to become Ready..."
"$kubectl" wait -n default --for=condition=Ready valkeycluster/demo --timeout=300s
"$op" topology --cluster demo --namespace default
echo
"$kubectl" get valkeyclusters,pods -o wide
echo
echo "The testbed keeps running: source $dir.env to use kubectl; make demo-down stops it."
