#!/usr/bin/env python3
"""Runs the workloads of `cargo bench -p ferrograd-benches --bench core_ops` and the same ones in PyTorch on
this machine, then prints ferrograd's speed relative to PyTorch (>1 means ferrograd is
faster).

    python3 bench/compare_pytorch.py [--python /path/to/venv/bin/python] [--rounds N]
        [--only matmul_f32/256,cnn/...] [--skip-cargo]

Row by row: each workload in ferrograd (criterion, filtered to that id), then at once in
PyTorch, so that a ratio compares times taken in the same minute on a shared machine
whose speed moves within minutes; `--rounds` repeats the whole list and prints each
round's table, and a full run records its ratios in
`bench/results/<cpu>/compare_pytorch.json` for `cargo run -p xtask -- bench-tables`. `--skip-cargo` reuses the last criterion results and times PyTorch alone
(rows never run print "not run", so `cargo bench -p ferrograd-benches --bench core_ops -- --noplot cnn/` then
`--skip-cargo` compares one group).

The PyTorch side needs a Python with torch; the default is this interpreter."""
import argparse
import json
import os
import pathlib
import re
import subprocess

from machine import cpu_model, isa, record

root = pathlib.Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser()
parser.add_argument("--python", default=os.environ.get("TORCH_PYTHON", "python3"))
parser.add_argument("--skip-cargo", action="store_true", help="reuse the last criterion results")
parser.add_argument("--rounds", type=int, default=1, help="times through the whole list")
parser.add_argument("--only", help="comma-separated benchmark ids (default: all)")
parser.add_argument("--no-record", action="store_true",
                    help="do not write bench/results/<cpu>/compare_pytorch.json")
args = parser.parse_args()

threads = os.cpu_count()
env = dict(os.environ, RAYON_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))


def pytorch(only):
    out = subprocess.run([args.python, str(root / "bench/pytorch_workloads.py")], env=dict(env, BENCH_ONLY=only),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def ours(name):
    est = root / "target/criterion" / name / "new/estimates.json"
    return json.loads(est.read_text())["median"]["point_estimate"] / 1e9 if est.exists() else None


names = list(pytorch("list")["results"])
if args.only:
    names = [n for n in names if n in args.only.split(",")]
    if not names:
        parser.error(f"--only {args.only}: no such benchmark ids")
flops = {f"matmul_f32/{n}": 2 * n ** 3 for n in [256, 512, 1024, 2048]}
fmt = lambda s: f"{s * 1e6:10.2f} us" if s < 1e-3 else f"{s * 1e3:10.3f} ms"
if not args.skip_cargo:
    subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--bench", "core_ops", "--no-run"], cwd=root, env=env, check=True)
recorded = []
for r in range(1 if args.skip_cargo else args.rounds):
    rows = []
    if args.skip_cargo:
        got = pytorch(",".join(names))
        version = got["torch"]
        rows = [(name, ours(name), got["results"].get(name)) for name in names]
    else:
        for name in names:
            # `^id$`: criterion's filter is a regex over the ids.
            subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "-q", "--bench", "core_ops", "--", "--noplot", f"^{re.escape(name)}$"],
                           cwd=root, env=env, check=True, capture_output=True)
            got = pytorch(name)
            version = got["torch"]
            rows.append((name, ours(name), got["results"].get(name)))
    label = f" (round {r + 1} of {args.rounds}, each row ferrograd then PyTorch at once)" if not args.skip_cargo else ""
    print(f"\nferrograd vs PyTorch {version} on {cpu_model()} ({isa()}), {threads} threads{label}")
    print("ratio = PyTorch time / ferrograd time")
    print(f"{'benchmark':<22}{'ferrograd':>14}{'pytorch':>14}{'ratio':>8}")
    for name, mine, torch_s in rows:
        if mine is None or torch_s is None:
            print(f"{name:<22}{'not run':>14}")
            continue
        extra = ""
        if name in flops:
            extra = f"   ({flops[name] / mine / 1e9:.0f} vs {flops[name] / torch_s / 1e9:.0f} GFLOP/s)"
        print(f"{name:<22}{fmt(mine):>14}{fmt(torch_s):>14}{torch_s / mine:8.2f}{extra}", flush=True)
    recorded += rows
if not args.no_record and not args.only:
    record("compare_pytorch", f"PyTorch {version}", recorded,
           f"cargo bench -p ferrograd-benches --bench core_ops against bench/pytorch_workloads.py, "
           f"{threads} threads, {args.rounds} round(s)")
