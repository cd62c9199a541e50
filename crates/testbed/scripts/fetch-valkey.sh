#!/usr/bin/env bash
# Puts valkey-server and valkey-cli 9.1.2 built with TLS (BUILD_TLS=yes) at
# $VALKEY_RS_CACHE/bin/valkey-9.1.2/ (default cache ~/.cache/valkey-rs), from
# Debian's source package valkey 9.1.2-1 (sid, fetched through a deb-src line
# on the mirror this machine already uses) built against this system's
# libssl-dev, with the release's bundled jemalloc and Lua. Every pod of the
# testbed runs this server; valkey-cli is the probes' client. Reused when
# present: the file BUILD beside them records how they were built.
set -euo pipefail

version=9.1.2
debian_version=9.1.2-1
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
out=$cache/bin/valkey-$version
stamp="debian source package valkey $debian_version, make BUILD_TLS=yes"
log() { printf '[valkey] %s\n' "$*"; }

if [[ -x $out/valkey-server && -x $out/valkey-cli && ! -L $out/valkey-cli ]] &&
  [[ "$(cat "$out/BUILD" 2>/dev/null)" == "$stamp" ]]; then
  log "valkey $version with TLS: cached in $out"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
need=()
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v make >/dev/null || need+=(make)
command -v gcc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkgconf)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)

# The source package lives in sid; only a deb-src line is added, so binary
# packages keep coming from the system's own release.
list=/etc/apt/sources.list.d/valkey-rs-src.sources
if [[ ! -f $list ]]; then
  uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  if [[ -z $uri ]]; then
    uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  fi
  if [[ -z $uri ]]; then
    echo "no Debian mirror found in /etc/apt/sources.list(.d): cannot fetch the valkey source package" >&2
    exit 1
  fi
  cat >"$list" <<EOF
Types: deb-src
URIs: $uri
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  log "added a deb-src line for sid ($list)"
fi
if ! apt-cache showsrc "valkey=$debian_version" >/dev/null 2>&1 || ((${#need[@]})); then
  apt-get update -qq
fi
if ((${#need[@]})); then
  log "installing build tools: ${need[*]}"
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
log "fetching the source package valkey $debian_version"
apt-get source -qq --download-only "valkey=$debian_version" 2>&1 | grep -v "unsandboxed" || true
dpkg-source -x "valkey_$debian_version.dsc" src >/dev/null
log "building valkey-server and valkey-cli with BUILD_TLS=yes (cold: 3-6 min on 2 cores)"
if ! make -C src -j"$(nproc)" BUILD_TLS=yes >build.log 2>&1; then
  tail -n 40 build.log >&2
  exit 1
fi
mkdir -p "$out"
for bin in valkey-server valkey-cli; do
  strip -o "$out/$bin.tmp" "src/src/$bin"
  chmod 0755 "$out/$bin.tmp"
  rm -f "$out/$bin"
  mv -f "$out/$bin.tmp" "$out/$bin"
done
"$out/valkey-server" --version
# TLS built in (not as a module) links libssl.
if ! ldd "$out/valkey-server" | grep -q libssl; then
  echo "$out/valkey-server was built without TLS" >&2
  exit 1
fi
echo "$stamp" >"$out/BUILD"
log "done: $out"
