#!/usr/bin/env python3
"""The training epochs of benches/training.rs in PyTorch, on the same machine, threads,
batch size and data, and the ratios (PyTorch time / ferrograd time: >1 means ferrograd is
faster). MLP 784-128-10 over the 60,000 MNIST training images and LeNet-5 over the first
10,000, batch 64, AdamW (and LeNet-5 with SGD, momentum 0.9), shuffled.

PyTorch is timed two ways: the same loop through `DataLoader(TensorDataset(x, y),
batch_size=64, shuffle=True)` (what ferrograd's loop does), and with the batches cut
from a pre-shuffled tensor (no DataLoader at all, PyTorch's best case).

    python3 bench/training_compare.py --python /path/to/torch/venv/bin/python [--skip-cargo]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent

TORCH_SIDE = r'''
import gzip, json, os, statistics, sys, time
import numpy as np
import torch
from torch import nn

threads = int(os.environ["BENCH_THREADS"])
torch.set_num_threads(threads)
root = os.path.join(os.environ.get("FERROGRAD_DATA", os.path.join(sys.argv[1], "../shared/data")), "mnist")

def idx(name):
    for n in (name, name + ".gz"):
        p = os.path.join(root, n)
        if os.path.exists(p):
            data = (gzip.open if n.endswith(".gz") else open)(p, "rb").read()
            ndim = data[3]
            dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(name)

x = torch.from_numpy(idx("train-images-idx3-ubyte").copy()).float().div(255).unsqueeze(1)
y = torch.from_numpy(idx("train-labels-idx1-ubyte").copy()).long()

def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

def epoch_loader(model, opt, loader):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()

def epoch_slices(model, opt, xs, ys):
    perm = torch.randperm(xs.shape[0])
    xs, ys = xs[perm], ys[perm]
    for s in range(0, xs.shape[0], 64):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xs[s:s + 64]), ys[s:s + 64])
        loss.backward()
        opt.step()

def median(f, reps):
    f()  # warm-up
    times = []
    for _ in range(reps):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return statistics.median(times)

out = {}
torch.manual_seed(0)
adamw = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)
sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
for name, make, n, reps, optim in [("mlp_60k_b64", mlp, 60000, 5, adamw), ("lenet_10k_b64", lenet, 10000, 5, adamw),
                                   ("lenet_10k_b64_sgd", lenet, 10000, 5, sgd)]:
    xs, ys = x[:n], y[:n]
    model = make(); opt = optim(model)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=64, shuffle=True)
    out[name] = {
        "loader": median(lambda: epoch_loader(model, opt, loader), reps),
        "slices": median(lambda: epoch_slices(model, opt, xs, ys), reps),
    }
print(json.dumps({"torch": torch.__version__, "threads": threads, "results": out}))
'''

parser = argparse.ArgumentParser()
parser.add_argument("--python", default=os.environ.get("TORCH_PYTHON", sys.executable))
parser.add_argument("--skip-cargo", action="store_true", help="reuse the last criterion results")
args = parser.parse_args()

threads = os.cpu_count()
env = dict(os.environ, RAYON_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))
if not args.skip_cargo:
    subprocess.run(["cargo", "bench", "--bench", "training", "--", "--noplot"], cwd=root, env=env, check=True)
torch_out = subprocess.run([args.python, "-c", TORCH_SIDE, str(root)], env=env, check=True,
                           capture_output=True, text=True).stdout
torch_results = json.loads(torch_out)
print(f"\nferrograd vs PyTorch {torch_results['torch']} on {threads} threads, one epoch "
      "(ratio = PyTorch time / ferrograd time)")
print(f"{'workload':<18}{'ferrograd':>12}{'torch+DataLoader':>18}{'ratio':>7}{'torch slices':>14}{'ratio':>7}")
for name, t in torch_results["results"].items():
    est = root / "target/criterion/train_epoch" / name / "new/estimates.json"
    ours = json.loads(est.read_text())["median"]["point_estimate"] / 1e9
    print(f"{name:<18}{ours * 1e3:10.0f}ms{t['loader'] * 1e3:16.0f}ms{t['loader'] / ours:7.2f}"
          f"{t['slices'] * 1e3:12.0f}ms{t['slices'] / ours:7.2f}")
