#!/usr/bin/env bash
# Prometheus and promtool for the e2e suite operator_incluster (a real
# Prometheus scrapes the operator through the chart's monitors; promtool
# checks a live scrape, the rules and the generated configuration).
#
# They come from Debian bookworm's `prometheus` package (upstream 2.42.0),
# unpacked, never installed: no maintainer script runs, no user is added, no
# service starts. Why not from the Go modules like the control plane: see
# docs/guide/monitoring.md, "Shown with a real Prometheus". The binaries live outside
# the repo and are reused when present:
#   $VALKEY_RS_CACHE (default ~/.cache/valkey-rs)/bin/prometheus-<version>/{prometheus,promtool}
# (`.deb-version` there names the Debian revision unpacked).
set -euo pipefail

cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
# The upstream release. A Debian security update keeps it within bookworm and
# changes only the revision, so the revision is not pinned.
version=2.42.0
out=$cache/bin/prometheus-$version
if [[ -x $out/prometheus && -x $out/promtool ]]; then
  echo "prometheus $version: cached in $out"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt downloads as its sandbox user when it can write the folder.
if id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
cd "$tmp"
echo "prometheus $version: unpacking Debian's package into $out"
if ! apt-get download -qq prometheus 2>/dev/null; then
  apt-get update -qq
  apt-get download -qq prometheus
fi
deb=$(ls prometheus_*.deb)
got=$(dpkg-deb -f "$deb" Version)
if [[ $got != "$version+"* ]]; then
  echo "prometheus: the package is $got, not upstream $version (update version= here and" \
    "PROMETHEUS_VERSION in tests/e2e/src/prometheus/mod.rs together)" >&2
  exit 1
fi
dpkg-deb -x "$deb" root
mkdir -p "$out.partial"
cp root/usr/bin/prometheus root/usr/bin/promtool "$out.partial/"
echo "$got" > "$out.partial/.deb-version"
rm -rf "$out"
mv "$out.partial" "$out"
"$out/prometheus" --version | head -1
