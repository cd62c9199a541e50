#!/usr/bin/env bash
# `make bench`: prints the figures reported in docs/benchmarks.md.
#  1. the placement planner (criterion);
#  2. the testbed: warm `up` to Ready nodes, pod bound -> Ready;
#  3. the operator on the testbed: apply -> Ready, RSS, API writes per resync;
#  4. backup and restore of 1 GiB beside the raw copy of the same bytes;
#  5. 50 clusters on a 5x10 testbed, then one big cluster (40x2) on another.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "== placement planner (criterion) =="
cargo bench -p placement --bench planner -- --noplot 2>&1 | grep -E "time:|planner summary|^  [a-z]" || true

echo
echo "== testbed and operator figures =="
cargo run --release -q -p e2e --bin e2e-bench -- "$@"
