#!/usr/bin/env bash
# Points the checkout's `target` at a cargo target directory under the build
# cache, ~/.cache/valkey-rs/target-<toolchain key>, so that a fresh clone on a
# machine that built the project before (CI's clean clone, a second worktree)
# compiles only what changed: every crates.io dependency, the previous
# release's build (target/prev-release) and the images stay there.
#
# The key is a hash of `rustc -vV`: another toolchain gets a directory of its
# own and never reads artifacts of this one. A changed Cargo.lock needs no key
# of its own: cargo names each compiled unit by a hash of its package,
# version, source, features and flags (workspace crates by their path inside
# the workspace, not the checkout's), so a dependency at another version is
# another unit and the stale one is never used; cargo's fingerprints (source
# mtimes, the unit's inputs) decide the rest, as in any target directory.
#
# A checkout whose `target` is already a real directory keeps it (a developer
# who ran cargo before make): nothing is moved or deleted. Prints the path
# `target` resolves to.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
key=$(rustc -vV | sha256sum | cut -c1-12)
dir=$cache/target-$key
mkdir -p "$dir"
link=$root/target
if [[ -L $link || ! -e $link ]]; then
  [[ $(readlink "$link" 2>/dev/null) == "$dir" ]] || ln -sfn "$dir" "$link"
fi
realpath "$link"
