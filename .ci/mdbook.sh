#!/usr/bin/env bash
# Prints the path of an mdbook binary, building it from crates.io once (no server or
# file watcher: only `mdbook build` is needed) into a cache that later runs reuse.
set -euo pipefail
version="${FERROGRAD_MDBOOK_VERSION:-0.5.4}"
cache="${FERROGRAD_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrograd-ci}/mdbook-$version"
if [ ! -x "$cache/bin/mdbook" ]; then
    # Its own target folder, so the project's build is not disturbed.
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    CARGO_TARGET_DIR="$tmp/target" cargo install --quiet --locked mdbook \
        --version "$version" --no-default-features --features search \
        --root "$cache.partial" >&2
    rm -rf "$cache"
    mv "$cache.partial" "$cache"
fi
echo "$cache/bin/mdbook"
