#!/usr/bin/env python3
"""Runs `cargo bench --bench core_ops` and the same workloads in PyTorch on this machine,
then prints ferrograd's speed relative to PyTorch (>1 means ferrograd is faster).

    python3 bench/compare_pytorch.py [--python /path/to/venv/bin/python] [--skip-cargo]

(`--skip-cargo` reuses the last criterion results; rows never run print "not run", so
`cargo bench --bench core_ops -- --noplot cnn/` then `--skip-cargo` compares one group.)

The PyTorch side needs a Python with torch; the default is this interpreter."""
import argparse
import json
import os
import pathlib
import subprocess

root = pathlib.Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser()
parser.add_argument("--python", default=os.environ.get("TORCH_PYTHON", "python3"))
parser.add_argument("--skip-cargo", action="store_true", help="reuse the last criterion results")
args = parser.parse_args()

threads = os.cpu_count()
env = dict(os.environ, RAYON_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))
if not args.skip_cargo:
    subprocess.run(["cargo", "bench", "--bench", "core_ops", "--", "--noplot"], cwd=root, env=env, check=True)
torch_out = subprocess.run([args.python, str(root / "bench/pytorch_workloads.py")], env=env, check=True,
                           capture_output=True, text=True).stdout
torch_results = json.loads(torch_out)

flops = {f"matmul_f32/{n}": 2 * n ** 3 for n in [256, 512, 1024, 2048]}
print(f"\nferrograd vs PyTorch {torch_results['torch']} on {threads} threads (ratio = PyTorch time / ferrograd time)")
print(f"{'benchmark':<22}{'ferrograd':>14}{'pytorch':>14}{'ratio':>8}")
for name, torch_s in torch_results["results"].items():
    est = root / "target/criterion" / name / "new/estimates.json"
    if not est.exists():
        # `--skip-cargo` after running a subset (`cargo bench --bench core_ops -- cnn/`).
        print(f"{name:<22}{'not run':>14}")
        continue
    ours = json.loads(est.read_text())["median"]["point_estimate"] / 1e9
    fmt = lambda s: f"{s * 1e6:10.2f} us" if s < 1e-3 else f"{s * 1e3:10.3f} ms"
    extra = ""
    if name in flops:
        extra = f"   ({flops[name] / ours / 1e9:.0f} vs {flops[name] / torch_s / 1e9:.0f} GFLOP/s)"
    print(f"{name:<22}{fmt(ours):>14}{fmt(torch_s):>14}{torch_s / ours:8.2f}{extra}")
