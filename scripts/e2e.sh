#!/usr/bin/env bash
# Runs the e2e suites (package `e2e`) on a testbed of their own.
# The testbed suite brings up and tears down testbeds itself; the operator
# suites share the one brought up here, and each starts its own operator (on
# the host; operator_incluster installs the image `make image` wrote with the
# Helm chart and runs it in-cluster, then uninstalls it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${1:-$root/.testbed-e2e}")
tb=$root/target/release/testbed
export TESTBED_BIN=$tb
export OPERATOR_BIN=$root/target/release/valkey-operator
export VALKEY_RS_ROOT=$root

cleanup() { "$tb" down --dir "$dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$tb" down --dir "$dir" >/dev/null 2>&1 || true
"$tb" up --dir "$dir"
# The operator's image, as `make image` wrote it: member pods run it as their
# exporter sidecar (spec.exporter, on by default), and operator_incluster
# installs it. Without it the sidecar cannot start and no member pod is Ready.
version=$("$OPERATOR_BIN" --version | awk '{print $2}')
"$tb" image load --dir "$dir" "$root/target/image/valkey-operator-$version.oci.tar"
export TESTBED_DIR=$dir
export KUBECONFIG=$dir/kubeconfig
cd "$root"
# E2E_TEST picks one suite; E2E_IGNORED=1 runs the suites not yet in `make test`.
cargo test --release -p e2e ${E2E_TEST:+--test "$E2E_TEST"} -- --test-threads=1 --nocapture ${E2E_IGNORED:+--ignored}
