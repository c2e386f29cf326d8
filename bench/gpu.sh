#!/usr/bin/env bash
# The CUDA test suite and the GPU benchmark of issue #4, in one device call.
#
#   bench/gpu.sh build   # here: builds the CUDA test and bench binaries into target/gpu-bundle
#   bench/gpu.sh run     # on the GPU machine (no Rust there): runs them, then PyTorch's
#                        # twin of the benchmark, and prints a table (ratio = PyTorch / ours);
#                        # GPU_TESTS="devices nccl" runs only those test binaries, GPU_BENCH=0
#                        # skips the benchmark
#
# With the `device` tool: build here, then run `bench/gpu.sh run` carrying target/gpu-bundle.
# The binaries load libcuda, libnvrtc and libcublas at run time; `run` puts the CUDA
# toolkit's and PyTorch's NVIDIA wheels' library folders on LD_LIBRARY_PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/target/gpu-bundle"

build() {
    rm -rf "$bundle" && mkdir -p "$bundle"
    cd "$root"
    # Test binaries that run in the carried checkout: the device suites, amp, the
    # optimizers (fixtures embedded), NCCL at world size 1, ONNX import (its fixtures
    # travel with the tree), and the runtime and kernel unit tests (allocator, NVRTC
    # compilation, launch geometry).
    cargo test --release --features cuda,nccl --no-run --message-format=json \
        -p ferrograd-kernels -p ferrograd-runtime --lib \
        --test devices --test errors --test cuda_native --test amp --test optim --test nccl \
        --test onnx_import \
        -p ferrograd 2>/dev/null |
        python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["profile"]["test"]:
        name = m["target"]["name"]
        shutil.copy(exe, os.path.join(sys.argv[1], "test-" + name))
' "$bundle"
    cargo build --release -p ferrograd-benches --features cuda,nccl --bench gpu --message-format=json 2>/dev/null |
        python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu":
        shutil.copy(m["executable"], os.path.join(sys.argv[1], "bench-gpu"))
' "$bundle"
    strip "$bundle"/* 2>/dev/null || true
    ls -la "$bundle"
    du -sh "$bundle"
}

run() {
    cd "$root"
    local libs
    libs="$(python3 -c 'import glob, os, site
dirs = set()
for base in site.getsitepackages():
    for lib in glob.glob(os.path.join(base, "nvidia", "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))' 2>/dev/null || true)"
    # PyPI's NCCL wheel ships libnccl.so.2 only; the loader asks for libnccl.so.
    local links
    links="$(mktemp -d)"
    for dir in ${libs//:/ }; do
        if [ -e "$dir/libnccl.so.2" ]; then ln -sf "$dir/libnccl.so.2" "$links/libnccl.so"; fi
    done
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${links}:${libs}:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    local failed=0
    local log
    log="$(mktemp)"
    for t in "$bundle"/test-*; do
        # GPU_TESTS="devices nccl" runs only those binaries (a rerun after a fix).
        if [ -n "${GPU_TESTS:-}" ] && [[ " $GPU_TESTS " != *" ${t##*/test-} "* ]]; then
            continue
        fi
        echo "== $(basename "$t")"
        # A hung binary must not take the whole device call with it.
        if ! timeout "${GPU_TEST_TIMEOUT:-300}" "$t" --test-threads=4 --nocapture >"$log" 2>&1; then
            failed=1
            tail -n 30 "$log"
        fi
        grep -E "^test |skipped|panicked|FAILED|test result" "$log" | tail -n 80
    done
    if [ "${GPU_BENCH:-1}" = 0 ]; then
        return $failed
    fi
    echo "== benchmark"
    local ours torch
    ours="$(timeout "${GPU_BENCH_TIMEOUT:-300}" "$bundle/bench-gpu")"
    torch="$(python3 bench/pytorch_gpu_workloads.py)"
    python3 - "$ours" "$torch" <<'EOF'
import json, sys
ours, torch = json.loads(sys.argv[1]), json.loads(sys.argv[2])
flops = {"matmul_bf16_8192": 2 * 8192 ** 3, "matmul_f32_8192": 2 * 8192 ** 3, "matmul_tf32_8192": 2 * 8192 ** 3}
print(f"ferrograd vs PyTorch {torch['torch']} on {torch['device']} (ratio = PyTorch time / ferrograd time)")
print(f"{'workload':<28}{'ferrograd':>14}{'pytorch':>14}{'ratio':>8}")
for name, t in torch["results"].items():
    o = ours.get(name)
    fmt = lambda s: f"{s * 1e3:10.3f} ms"
    if o is None:
        print(f"{name:<28}{'missing':>14}{fmt(t):>14}")
        continue
    extra = f"   ({flops[name] / o / 1e12:.0f} vs {flops[name] / t / 1e12:.0f} TFLOP/s)" if name in flops else ""
    print(f"{name:<28}{fmt(o):>14}{fmt(t):>14}{t / o:8.2f}{extra}")
EOF
    return $failed
}

case "${1:-}" in
    build) build ;;
    run) run ;;
    *) echo "usage: bench/gpu.sh build|run" >&2; exit 2 ;;
esac
