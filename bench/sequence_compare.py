#!/usr/bin/env python3
"""The workloads of benches/sequence.rs in PyTorch on the same machine and threads, and
the ratios (PyTorch time / ferrograd time: >1 means ferrograd is faster), forward +
backward each:

- a pre-LN transformer encoder block, d 128, 4 heads, seq 64, batch 16, MLP 512, against
  both `nn.TransformerEncoderLayer(norm_first=True)` and the same block written with
  explicit attention (`softmax(q k^T / sqrt(d)) v` from matmuls);
- an LSTM, 2 layers, input 128, hidden 256, seq 100, batch 32 (`nn.LSTM`);
- causal scaled-dot-product attention, batch 16, 4 heads, seq 256, d 32.

    python3 bench/sequence_compare.py --python /path/to/torch/venv/bin/python [--skip-cargo]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent

TORCH_SIDE = r'''
import json, os, statistics, sys, time
import torch
from torch import nn
import torch.nn.functional as F
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
from torch_blocks import Explicit

torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
torch.manual_seed(0)

def median(f, reps=20):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return statistics.median(times)

def fwd_bwd(m, x, run=None):
    def f():
        m.zero_grad(); x.grad = None
        (run(x) if run else m(x)).sum().backward()
    return f

x = torch.randn(16, 64, 128, requires_grad=True)
layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True, norm_first=True)
res = {"transformer_block_fwd_bwd": {
    "nn.TransformerEncoderLayer": median(fwd_bwd(layer, x)),
    "explicit attention": median(fwd_bwd(Explicit(), x))}}
lstm = nn.LSTM(128, 256, num_layers=2)
xs = torch.randn(100, 32, 128, requires_grad=True)
res["lstm_fwd_bwd"] = {"nn.LSTM": median(fwd_bwd(lstm, xs, lambda x: lstm(x)[0]), 10)}
q = torch.randn(16, 4, 256, 32, requires_grad=True)
def sdpa():
    q.grad = None
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
res["sdpa_causal_fwd_bwd"] = {"F.scaled_dot_product_attention": median(sdpa)}
print(json.dumps({"torch": torch.__version__, "results": res}))
'''

parser = argparse.ArgumentParser()
parser.add_argument("--python", default=os.environ.get("TORCH_PYTHON", sys.executable))
parser.add_argument("--skip-cargo", action="store_true", help="reuse the last criterion results")
args = parser.parse_args()
threads = os.cpu_count()
env = dict(os.environ, RAYON_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))
if not args.skip_cargo:
    subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--bench", "sequence", "--", "--noplot"], cwd=root, env=env, check=True)
torch_results = json.loads(subprocess.run([args.python, "-c", TORCH_SIDE, str(root)], env=env, check=True,
                                          capture_output=True, text=True).stdout)
print(f"\nferrograd vs PyTorch {torch_results['torch']} on {threads} threads, forward + backward "
      "(ratio = PyTorch time / ferrograd time)")
print(f"{'workload':<28}{'ferrograd':>11}  {'PyTorch variant':<32}{'PyTorch':>10}{'ratio':>7}")
for name, variants in torch_results["results"].items():
    est = root / "target/criterion/sequence" / name / "new/estimates.json"
    ours = json.loads(est.read_text())["median"]["point_estimate"] / 1e9
    for variant, t in variants.items():
        print(f"{name:<28}{ours * 1e3:9.2f}ms  {variant:<32}{t * 1e3:8.2f}ms{t / ours:7.2f}")
