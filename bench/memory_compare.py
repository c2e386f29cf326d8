#!/usr/bin/env python3
"""The workloads of benches/memory.rs in ferrograd and in PyTorch, each in its own
process, with the process's wall time, user and system CPU time, minor page faults and
peak RSS (from wait4's rusage, as `/usr/bin/time -v` reports them), and the ratios.

    python3 bench/memory_compare.py --python /path/to/torch/venv/bin/python [--binary B] [--skip-torch]

`--binary` runs an already-built `memory` bench binary (to compare two builds); otherwise
it is built with `cargo bench -p ferrograd-benches --bench memory --no-run`. PyTorch's numbers include its
import (as a user's process does); ferrograd's include model construction.
"""
import argparse
import glob
import json
import os
import pathlib
import subprocess
import sys
import time

root = pathlib.Path(__file__).resolve().parent.parent
WORKLOADS = ["mobilenet", "lenet_infer", "lenet_epoch", "mlp_epoch", "mlp_rss"]

TORCH_SIDE = r'''
import os, sys, time
import torch
from torch import nn
import torch.nn.functional as F
torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
torch.manual_seed(0)
workload = sys.argv[1]

def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

def images(n):
    return torch.rand(n, 1, 28, 28), (torch.rand(n) * 9.99).long()

def train_epoch(model, n):
    x, y = images(n)
    opt = torch.optim.AdamW(model.parameters())
    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True, generator=g)
    for xb, yb in loader:
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

start = time.perf_counter()
extra = {}
if workload == "mobilenet":
    import torchvision
    model = torchvision.models.mobilenet_v2().eval()
    with torch.no_grad():
        for b in [20, 20, 20, 20, 20, 1, 1]:
            model(torch.randn(b, 3, 224, 224)).sum().item()
elif workload == "lenet_infer":
    model = lenet().eval()
    x, _ = images(70000)
    with torch.no_grad():
        for c in range(35):
            model(x[c * 2000:(c + 1) * 2000]).argmax(1).sum().item()
elif workload == "lenet_epoch":
    train_epoch(lenet(), 10000)
elif workload == "mlp_epoch":
    train_epoch(mlp(), 60000)
elif workload == "mlp_rss":
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    x, y = images(640)
    samples = []
    for step in range(1, 10001):
        i = (step % 10) * 64
        opt.zero_grad()
        F.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
        opt.step()
        if step in (100, 1000, 2500, 5000, 7500, 10000):
            samples.append([step, rss()])
    extra["rss_by_step"] = samples
print("WALL", time.perf_counter() - start)
import json
print("EXTRA", json.dumps(extra))
'''


def run(cmd, env):
    """Runs `cmd`, returning its stdout and rusage (wait4) plus the wall time."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        sys.exit(f"{cmd} failed ({status}):\n{out}")
    return out, {
        "process_wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "minflt": usage.ru_minflt,
        "maxrss_kb": usage.ru_maxrss,
    }


def build():
    subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--bench", "memory", "--no-run"], cwd=root, check=True)
    bins = [p for p in glob.glob(str(root / "target/release/deps/memory-*")) if os.access(p, os.X_OK) and not p.endswith(".d")]
    return max(bins, key=os.path.getmtime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--binary")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--threads", default="2")
    ap.add_argument("workloads", nargs="*", default=WORKLOADS)
    args = ap.parse_args()
    env = dict(os.environ, BENCH_THREADS=args.threads, OMP_NUM_THREADS=args.threads)
    binary = args.binary or build()
    for w in args.workloads:
        out, ours = run([binary, w], env)
        line = json.loads(out.strip().splitlines()[-1])
        ours["wall_s"] = line["wall_s"]
        extra = {k: v for k, v in line.items() if k.startswith("rss") or k in ("parameter_bytes", "memory_allocated")}
        print(f"== {w}")
        print(f"  ferrograd: wall {ours['wall_s']:.3f} s (process {ours['process_wall_s']:.3f}), user {ours['user_s']:.2f} s, "
              f"sys {ours['sys_s']:.2f} s (sys/user {ours['sys_s'] / max(ours['user_s'], 1e-9):.1%}), "
              f"minor faults {ours['minflt']:,}, peak RSS {ours['maxrss_kb'] / 1024:.0f} MiB")
        if extra:
            print(f"  ferrograd extra: {json.dumps(extra)}")
        if args.skip_torch:
            continue
        out, theirs = run([args.python, "-c", TORCH_SIDE, w], env)
        lines = out.strip().splitlines()
        theirs["wall_s"] = float(next(l for l in lines if l.startswith("WALL")).split()[1])
        textra = json.loads(next(l for l in lines if l.startswith("EXTRA"))[6:])
        print(f"  pytorch:   wall {theirs['wall_s']:.3f} s (process {theirs['process_wall_s']:.3f}), user {theirs['user_s']:.2f} s, "
              f"sys {theirs['sys_s']:.2f} s, minor faults {theirs['minflt']:,}, peak RSS {theirs['maxrss_kb'] / 1024:.0f} MiB")
        if textra:
            print(f"  pytorch extra: {json.dumps(textra)}")
        print(f"  ratio (PyTorch wall / ferrograd wall, >1 = ferrograd faster): {theirs['wall_s'] / ours['wall_s']:.2f}; "
              f"process-level: {theirs['process_wall_s'] / ours['process_wall_s']:.2f}")


if __name__ == "__main__":
    main()
