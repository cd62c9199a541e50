#!/usr/bin/env bash
# Runs the e2e suites: the one test binary `suites` of package e2e, whose
# modules are the suites (tests/e2e/tests/suites/<suite>.rs).
#
# The suites mostly wait (failovers, node timeouts, pods starting), so they run
# E2E_JOBS at a time (default 2), each worker on a testbed of its own
# (<dir>-1, <dir>-2, ...), taking the next suite from one queue, longest
# first. The suites of one worker run one after another on its testbed, as
# they all did on one testbed before. Each suite's output goes to
# <dir>-logs/<suite>.log and is printed whole when the suite ends; a table of
# every suite's wall time and result closes the run (also written to
# <dir>-logs/times.tsv for `make test`'s own table) and the wall times are kept
# in the build cache to order the next run.
#
#   E2E_TEST="tls backup"   only these suites (names of modules)
#   E2E_JOBS=1              one testbed, every suite in turn
#   E2E_IGNORED=1           the ignored tests (not in `make test`) instead
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=$(realpath -m "${1:-$root/.testbed-e2e}")
jobs=${E2E_JOBS:-2}
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
tb=$root/target/release/testbed
export TESTBED_BIN=$tb
export OPERATOR_BIN=$root/target/release/valkey-operator
export VALKEY_RS_ROOT=$root
logs=$base-logs
rm -rf "$logs"
mkdir -p "$logs"

# The test binary (compiles nothing after `make build`: the whole workspace
# is named, as the build step names it, so every dependency has the same
# features; `-p e2e` alone would unify them differently and compile again).
bin=$(cd "$root" && cargo test --release --workspace --no-run --message-format=json 2>"$logs/build.log" |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "suites":
        print(m["executable"])') || { cat "$logs/build.log" >&2; exit 1; }
[[ -x $bin ]] || { echo "e2e: no test binary built" >&2; cat "$logs/build.log" >&2; exit 1; }

# Suites and their tests: `<suite>::<test>: test` lines of --list.
"$bin" --list --format terse ${E2E_IGNORED:+--ignored} | sed -n 's/: test$//p' > "$logs/tests.txt"
suites=$(cut -d: -f1 "$logs/tests.txt" | sort -u)
if [[ -n ${E2E_TEST:-} ]]; then
  for s in ${E2E_TEST//,/ }; do
    grep -qx "$s" <<<"$suites" || { echo "e2e: no suite named $s (suites: $(echo $suites))" >&2; exit 2; }
  done
  suites=$(tr ', ' '\n\n' <<<"$E2E_TEST" | sed '/^$/d')
fi
[[ -n $suites ]] || { echo "e2e: no suite to run" >&2; exit 2; }

# Longest first (the last run's times, else the figures below), so the long
# ones start at once and the short ones fill in behind them.
times=$cache/e2e-times.tsv
default_seconds() {
  case $1 in
    # Measured on 2 cores, 2 testbeds (docs/testing.md).
    backup) echo 330 ;; topology_chaos) echo 240 ;; tls) echo 190 ;;
    topology_live) echo 165 ;; security_reversals) echo 150 ;; external_access) echo 125 ;;
    operator_scale) echo 105 ;; *) echo 60 ;;
  esac
}
queue=$logs/queue
for s in $suites; do
  t=$(awk -F'\t' -v s="$s" '$1 == s {t = $2} END {print t}' "$times" 2>/dev/null || true)
  printf '%s\t%s\n' "${t:-$(default_seconds "$s")}" "$s"
done | sort -t$'\t' -k1,1nr | cut -f2 > "$queue"
n=$(wc -l < "$queue")
((jobs > n)) && jobs=$n
echo "e2e: $n suites on $jobs testbeds: $(tr '\n' ' ' < "$queue")"

next_suite() { flock "$queue.lock" sh -c 'head -n 1 "$1"; sed -i 1d "$1"' _ "$queue"; }
results=$logs/results.tsv
: > "$results"

version=$("$OPERATOR_BIN" --version | awk '{print $2}')
image=$root/target/image/valkey-operator-$version.oci.tar

worker() {
  local i=$1 dir=$base-$i
  "$tb" down --dir "$dir" >/dev/null 2>&1 || true
  if ! "$tb" up --dir "$dir" >"$logs/testbed-$i.log" 2>&1 ||
    ! "$tb" image load --dir "$dir" "$image" >>"$logs/testbed-$i.log" 2>&1; then
    # The operator's image: member pods run it as their exporter sidecar.
    echo "e2e: testbed $i did not come up:" >&2
    tail -n 40 "$logs/testbed-$i.log" >&2
    printf 'testbed-%s\t1\t0\t%s\n' "$i" "$i" >> "$results"
    return
  fi
  local s start rc
  while s=$(next_suite) && [[ -n $s ]]; do
    start=$(date +%s)
    mapfile -t names < <(grep "^$s::" "$logs/tests.txt")
    rc=0
    (cd "$root/tests/e2e" && TESTBED_DIR=$dir KUBECONFIG=$dir/kubeconfig \
      "$bin" --exact --test-threads=1 --nocapture ${E2E_IGNORED:+--ignored} "${names[@]}") \
      >"$logs/$s.log" 2>&1 || rc=$?
    printf '%s\t%s\t%s\t%s\n' "$s" "$rc" "$(($(date +%s) - start))" "$i" >> "$results"
    {
      flock 9
      echo "==================== e2e suite $s (testbed $i): $([[ $rc == 0 ]] && echo passed || echo "FAILED ($rc)") in $(($(date +%s) - start)) s"
      cat "$logs/$s.log"
    } 9>"$logs/print.lock"
  done
  "$tb" down --dir "$dir" >/dev/null 2>&1 || true
}

cleanup() {
  for ((i = 1; i <= jobs; i++)); do "$tb" down --dir "$base-$i" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
started=$(date +%s)
pids=()
for ((i = 1; i <= jobs; i++)); do
  worker "$i" &
  pids+=($!)
  # Testbeds come up one after another: both at once compete for the two
  # cores while etcd and the apiserver start.
  sleep 5
done
wait "${pids[@]}"
wall=$(($(date +%s) - started))

# Every suite ran once and passed, or the run fails.
failed=0
printf '\n%-26s %8s %8s  %s\n' "e2e suite" "testbed" "seconds" "result"
sort -t$'\t' -k3,3nr "$results" | while IFS=$'\t' read -r s rc secs i; do
  printf '%-26s %8s %8s  %s\n' "$s" "$i" "$secs" "$([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)")"
done
printf '%-26s %8s %8s\n' "e2e (wall, $jobs testbeds)" "" "$wall"
cp "$results" "$logs/times.tsv"
while read -r s; do
  awk -F'\t' -v s="$s" '$1 == s && $2 == 0 {ok = 1} END {exit !ok}' "$results" || { echo "e2e: suite $s did not pass (log: $logs/$s.log)" >&2; failed=1; }
done < <(tr ' ' '\n' <<<"$suites" | sed '/^$/d')
grep -q '^testbed-' "$results" && failed=1

# Remember the times for the next run's order (passed suites only).
if [[ -z ${E2E_IGNORED:-} ]]; then
  mkdir -p "$cache"
  # No times file yet (a fresh machine) is not a failure: cat's status
  # would fail the pipeline and the file would never be written.
  { awk -F'\t' '$2 == 0 {print $1 "\t" $3}' "$results"; cat "$times" 2>/dev/null || true; } |
    awk -F'\t' '!seen[$1]++' > "$times.new" && mv "$times.new" "$times"
fi
exit $failed
