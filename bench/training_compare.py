#!/usr/bin/env python3
"""The training loops of benches/training.rs in PyTorch, on the same machine, threads,
batch size and data, and the ratios (PyTorch time / ferrograd time: >1 means ferrograd is
faster).

The headline is PyTorch's fastest way of doing the same job: batches cut from a tensor
shuffled once per epoch (no DataLoader), and for the optimizers the fastest of the
for-loop, `foreach` and `fused` implementations. PyTorch through its DataLoader (Python
collation per sample) is printed second, against ferrograd through its DataLoader.

- `train_epoch`: MLP 784-128-10 over the 60,000 MNIST training images and LeNet-5 over
  the first 10,000, batch 64, SGD (lr 0.01; LeNet with momentum 0.9) and AdamW.
- `train_step`: a pre-LN transformer block (d 128, 4 heads, T 64, batch 16, MLP 512),
  forward + backward, against PyTorch's block written with explicit attention, the same
  block with `F.scaled_dot_product_attention`, and `nn.TransformerEncoderLayer`; an LSTM
  and a GRU character language model (embedding 128, hidden 256, T 64, batch 32, 65
  symbols, cross-entropy, AdamW), one step each.

Each workload runs in ferrograd (criterion) and right after in PyTorch, the whole list
`--rounds` times (default 2), and every round prints its own ratios: on a shared machine
whose load moves within minutes, a ratio compares times taken in the same minutes.

    python3 bench/training_compare.py --python /path/to/torch/venv/bin/python \
        [--rounds N] [--only lenet_10k_b64_sgd,blocks,...] [--skip-cargo]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

from machine import cpu_model, isa, record

root = pathlib.Path(__file__).resolve().parent.parent

TORCH_SIDE = r'''
import gzip, json, os, statistics, sys, time
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
from torch_blocks import Explicit

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
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()

def epoch_slices(model, opt, xs, ys):
    perm = torch.randperm(xs.shape[0])
    xs, ys = xs[perm], ys[perm]
    for s in range(0, xs.shape[0], 64):
        opt.zero_grad()
        loss = F.cross_entropy(model(xs[s:s + 64]), ys[s:s + 64])
        loss.backward()
        opt.step()

def median(f, reps):
    f()  # warm-up
    times = []
    for _ in range(reps):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return statistics.median(times)

IMPLS = [("for-loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})]

def optimizers(make_opt):
    """The optimizer built each way PyTorch offers on the CPU (skipping unsupported ones)."""
    out = []
    for name, kw in IMPLS:
        try:
            make_opt(**kw)
        except (RuntimeError, ValueError, TypeError):
            continue
        out.append((name, kw))
    return out

res = {"train_epoch": {}, "train_step": {}}
# BENCH_ONLY: the comma-separated units to run (all when empty), so that the driver can
# take each workload's PyTorch time right after ferrograd's.
only = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
want = lambda unit: not only or unit in only
torch.manual_seed(0)
adamw = lambda m, **kw: torch.optim.AdamW(m.parameters(), lr=1e-3, **kw)
epochs = [
    ("mlp_60k_b64_sgd", mlp, 60000, lambda m, **kw: torch.optim.SGD(m.parameters(), lr=0.01, **kw)),
    ("mlp_60k_b64", mlp, 60000, adamw),
    ("lenet_10k_b64_sgd", lenet, 10000,
     lambda m, **kw: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, **kw)),
    ("lenet_10k_b64", lenet, 10000, adamw),
]
for name, make, n, optim in epochs:
    if not want(name):
        continue
    xs, ys = x[:n], y[:n]
    model = make()
    variants = {}
    for impl, kw in optimizers(lambda **kw: optim(model, **kw)):
        opt = optim(model, **kw)
        variants[impl] = median(lambda: epoch_slices(model, opt, xs, ys), 5)
    opt = optim(model)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=64, shuffle=True)
    res["train_epoch"][name] = {"slices": variants, "loader": median(lambda: epoch_loader(model, opt, loader), 3)}

def fwd_bwd(m, x):
    def f():
        m.zero_grad(); x.grad = None
        m(x).sum().backward()
    return f

def steps(f, reps=30):
    return median(f, reps)

x = torch.randn(16, 64, 128, requires_grad=True)
blocks = {
    "explicit attention": Explicit(),
    "F.scaled_dot_product_attention": Explicit(fused=True),
    "nn.TransformerEncoderLayer": nn.TransformerEncoderLayer(
        128, 4, 512, dropout=0.0, batch_first=True, norm_first=True),
}
if want("blocks"):
    block_times = {k: steps(fwd_bwd(m, x)) for k, m in blocks.items()}
    for name in ("transformer_block_explicit", "transformer_block_sdpa", "transformer_encoder_layer"):
        res["train_step"][name] = block_times

class CharLm(nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(65, 128), rnn(128, 256), nn.Linear(256, 65)
    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])

tokens = torch.randint(0, 65, (65, 32))
inputs, targets = tokens[:64], tokens[1:].reshape(-1)
for name, rnn in (("lstm_lm", nn.LSTM), ("gru_lm", nn.GRU)):
    if not want(name):
        continue
    lm = CharLm(rnn)
    variants = {}
    for impl, kw in optimizers(lambda **kw: adamw(lm, **kw)):
        opt = adamw(lm, **kw)
        def step():
            opt.zero_grad()
            loss = F.cross_entropy(lm(inputs).reshape(-1, 65), targets)
            loss.backward()
            opt.step()
        variants["AdamW " + impl] = steps(step, 20)
    res["train_step"][name] = variants
print(json.dumps({"torch": torch.__version__, "threads": threads, "results": res}))
'''


# Each unit of the PyTorch side and the criterion benchmarks it is compared with.
UNITS = {
    "mlp_60k_b64_sgd": ["train_epoch/mlp_60k_b64_sgd_slices"],
    "mlp_60k_b64": ["train_epoch/mlp_60k_b64_slices", "train_epoch/mlp_60k_b64"],
    "lenet_10k_b64_sgd": ["train_epoch/lenet_10k_b64_sgd_slices", "train_epoch/lenet_10k_b64_sgd"],
    "lenet_10k_b64": ["train_epoch/lenet_10k_b64_slices", "train_epoch/lenet_10k_b64"],
    "blocks": ["train_step/transformer_block_explicit", "train_step/transformer_block_sdpa",
               "train_step/transformer_encoder_layer"],
    "lstm_lm": ["train_step/lstm_lm"],
    "gru_lm": ["train_step/gru_lm"],
}


def criterion_median(bench):
    """The median of the last criterion run of `group/name`, in seconds (None if absent)."""
    est = root / "target/criterion" / bench / "new/estimates.json"
    if not est.exists():
        return None
    return json.loads(est.read_text())["median"]["point_estimate"] / 1e9


def torch_side(units, env):
    out = subprocess.run([args.python, "-c", TORCH_SIDE, str(root)],
                         env=dict(env, BENCH_ONLY=",".join(units)), check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def merge(into, part):
    for group, entries in part.items():
        into.setdefault(group, {}).update(entries)


def section(title, header, rows):
    """Prints one table: its title and header, then `rows`; nothing when it has none
    (a run with `--only` that left the section's workloads out)."""
    if rows:
        print(f"\n{title}\n{header}")
        print("\n".join(rows))


def report(results, mine, recorded):
    """Prints the three tables of one round: `results` PyTorch's times, `mine` ours;
    adds `(workload, ours, PyTorch's)` rows to `recorded`."""
    epochs = results.get("train_epoch", {})
    rows = []
    for name, t in epochs.items():
        ours_t = mine.get(f"train_epoch/{name}_slices")
        if ours_t is not None:
            impl, best = min(t["slices"].items(), key=lambda kv: kv[1])
            rows.append(f"{name:<20}{ours_t * 1e3:9.0f}ms{best * 1e3:9.0f}ms  {impl:<12}{best / ours_t:6.2f}")
            recorded.append((f"epoch {name}, sliced batches (PyTorch {impl})", ours_t, best))
    section("One epoch, batches sliced from a shuffled tensor; PyTorch's fastest optimizer implementation",
            f"{'workload':<20}{'ferrograd':>11}{'PyTorch':>11}  {'(optimizer)':<12}{'ratio':>6}", rows)

    rows = []
    for name, t in epochs.items():
        ours_t = mine.get(f"train_epoch/{name}")
        if ours_t is not None:
            rows.append(f"{name:<20}{ours_t * 1e3:9.0f}ms{t['loader'] * 1e3:9.0f}ms{t['loader'] / ours_t:8.2f}")
            recorded.append((f"epoch {name}, DataLoader", ours_t, t["loader"]))
    section("One epoch through each framework's DataLoader (shuffled, batch 64)",
            f"{'workload':<20}{'ferrograd':>11}{'PyTorch':>11}{'ratio':>8}", rows)

    rows = []
    for name, variants in results.get("train_step", {}).items():
        ours_t = mine.get(f"train_step/{name}")
        if ours_t is not None:
            for variant, t in sorted(variants.items(), key=lambda kv: kv[1]):
                rows.append(f"{name:<28}{ours_t * 1e3:9.2f}ms  {variant:<32}{t * 1e3:8.2f}ms{t / ours_t:7.2f}")
                recorded.append((f"step {name} (PyTorch {variant})", ours_t, t))
    section("One training step (forward + backward)",
            f"{'workload':<28}{'ferrograd':>11}  {'PyTorch variant':<32}{'PyTorch':>10}{'ratio':>7}", rows)


parser = argparse.ArgumentParser()
parser.add_argument("--python", default=os.environ.get("TORCH_PYTHON", sys.executable))
parser.add_argument("--skip-cargo", action="store_true",
                    help="reuse the last criterion results (one round, PyTorch's side only)")
parser.add_argument("--rounds", type=int, default=2,
                    help="rounds of every workload, each framework in turn (default 2)")
parser.add_argument("--only", default="", help="comma-separated units: " + ", ".join(UNITS))
parser.add_argument("--no-record", action="store_true",
                    help="do not write bench/results/<cpu>/training_compare.json")
args = parser.parse_args()

units = [u for u in args.only.split(",") if u] or list(UNITS)
unknown = [u for u in units if u not in UNITS]
if unknown:
    sys.exit(f"unknown units {unknown}; known: {', '.join(UNITS)}")
threads = os.cpu_count()
env = dict(os.environ, RAYON_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))
if not args.skip_cargo:
    subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--bench", "training", "--no-run"], cwd=root, env=env, check=True)

# On a shared machine the load moves within minutes: each workload runs in ferrograd and
# then at once in PyTorch, so that each ratio compares times taken in the same minutes, and
# the whole list again in the next round.
rounds = []
version = None
for r in range(1 if args.skip_cargo else args.rounds):
    results, mine = {}, {}
    for unit in units:
        if not args.skip_cargo:
            pattern = "^(" + "|".join(UNITS[unit]) + ")$"
            subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "-q", "--bench", "training", "--", "--noplot", pattern],
                           cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
        for bench in UNITS[unit]:
            t = criterion_median(bench)
            if t is not None:
                mine[bench] = t
        part = torch_side([unit], env)
        version = part["torch"]
        merge(results, part["results"])
    rounds.append((results, mine))

print(f"\nferrograd vs PyTorch {version} on {cpu_model()} ({isa()}), {threads} threads "
      "(ratio = PyTorch time / ferrograd time; > 1: ferrograd is faster)")
recorded = []
for r, (results, mine) in enumerate(rounds):
    if len(rounds) > 1:
        print(f"\n=== round {r + 1} of {len(rounds)} (each workload: ferrograd, then PyTorch at once)")
    report(results, mine, recorded)
if not args.no_record and not args.only and not args.skip_cargo:
    record("training_compare", f"PyTorch {version}", recorded,
           f"cargo bench -p ferrograd-benches --bench training against PyTorch's fastest variant "
           f"of each workload, {threads} threads, {len(rounds)} round(s)")
