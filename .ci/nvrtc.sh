#!/usr/bin/env bash
# Prints the directory holding libnvrtc.so, fetching NVIDIA's NVRTC wheel from PyPI once
# (about 58 MB) into a cache that later runs reuse. NVRTC is all the CUDA kernel-compile
# tests need: they compile every .cu to CUBIN without a GPU or a CUDA install.
set -euo pipefail
version="${FERROGRAD_NVRTC_VERSION:-13.5.37}"
cache="${FERROGRAD_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrograd-ci}/nvrtc-$version"
lib="$cache/nvidia/cu13/lib"
if [ ! -e "$lib/libnvrtc.so.13" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$tmp" "nvidia-cuda-nvrtc==$version" >&2
    mkdir -p "$cache.partial"
    python3 -m zipfile -e "$tmp"/nvidia_cuda_nvrtc-*.whl "$cache.partial" >&2
    rm -rf "$cache"
    mv "$cache.partial" "$cache"
fi
# cudarc looks for libnvrtc.so as well as the versioned name.
[ -e "$lib/libnvrtc.so" ] || ln -s libnvrtc.so.13 "$lib/libnvrtc.so"
echo "$lib"
