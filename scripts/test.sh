#!/usr/bin/env bash
# `make test`: every check, one step after another, each timed; a table of
# the steps (and of every e2e suite) with their wall times closes the run,
# whether it passed or not. The budget the table is read against is in
# docs/testing.md.
#
# Build once: `build` compiles the binaries and every test binary of the
# workspace in one cargo invocation; `unit` and `e2e` then only run them.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
logs=$root/.test-logs
rm -rf "$logs"
mkdir -p "$logs"
table=$logs/steps.tsv
: > "$table"
started=$(date +%s)
MAKE=${MAKE:-make}

print_table() {
  local total=$(($(date +%s) - started)) step secs rc s i
  printf '\n%-34s %8s  %s\n' "step" "seconds" "result"
  while IFS=$'\t' read -r step secs rc; do
    printf '%-34s %8s  %s\n' "$step" "$secs" "$([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)")"
  done < "$table"
  if [[ -f $root/.testbed-e2e-logs/times.tsv ]]; then
    sort -t$'\t' -k3,3nr "$root/.testbed-e2e-logs/times.tsv" | while IFS=$'\t' read -r s rc secs i; do
      printf '  %-32s %8s  %s\n' "e2e $s (testbed $i)" "$secs" "$([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)")"
    done
  fi
  printf '%-34s %8s\n' "total" "$total"
  # One line a test runner's reader understands: every cargo test result of
  # the run, unit and e2e, added up.
  cat "$logs"/*.out "$root"/.testbed-e2e-logs/*.log 2>/dev/null |
    awk '/^test result: / {p += $4; f += $6} END {printf "tests: %d passed, %d failed\n", p, f}'
}

# step NAME CMD...: runs CMD with its output on the console and in
# .test-logs/NAME.out; stops the run at the first step that fails.
step() {
  local name=$1 t0 rc
  shift
  echo "==================== $name: $*"
  t0=$(date +%s)
  "$@" 2>&1 | tee "$logs/$name.out"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - t0))" "$rc" >> "$table"
  if ((rc != 0)); then
    echo "==================== $name failed ($rc)"
    local failed=$rc
    print_table
    exit "$failed"
  fi
}

step setup bash scripts/setup.sh
# Binaries and every test binary (the e2e suites' included), once.
step build bash -c 'cargo build --release --workspace --bins && cargo test --release --workspace --no-run'
step lint "$MAKE" -s lint
step checks "$MAKE" -s crd-check docs-check manifests-check version-check chart-check
step image-check "$MAKE" -s image-check
step unit cargo test --release --workspace --exclude e2e
step e2e bash scripts/e2e.sh "$root/.testbed-e2e"
print_table
