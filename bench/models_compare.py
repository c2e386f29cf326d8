#!/usr/bin/env python3
"""The workloads of benches/models.rs in PyTorch (transformers) on the same machine and
threads, and the ratios (PyTorch time / ferrograd time: >1 means ferrograd is faster):

- all-MiniLM-L6-v2 (`BertModel`), 32 x 128 tokens, forward under `torch.inference_mode`;
- GPT-2 small (random weights, `GPT2LMHeadModel(GPT2Config())`), a 512-token prefill
  (`logits_to_keep=1`);
- the same, `generate(do_sample=False)` of 32 new tokens after 16 at batch 1 (KV cache),
  with the tokens/s of both and the GB/s of weights read per generated token;
- a training step of examples/char_gpt.rs's model (`GPT2LMHeadModel`, 4 layers, 4 heads,
  width 128, context 64, 65 characters, batch 32): forward, cross-entropy, backward,
  `clip_grad_norm_`, AdamW; PyTorch's time is the faster of AdamW's `foreach` and
  `fused` implementations.

    python3 bench/models_compare.py --python /path/to/venv/bin/python [--skip-cargo]
"""
import argparse
import json
import os
import pathlib
import subprocess

from machine import cpu_model, isa

root = pathlib.Path(__file__).resolve().parent.parent

TORCH_SIDE = r'''
import json, os, statistics, time, pathlib
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import BertModel, GPT2Config, GPT2LMHeadModel
torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
torch.manual_seed(0)

def median(f, reps=10):
    for _ in range(2):
        f()
    times = []
    for _ in range(reps):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return statistics.median(times)

def ids(n, t, vocab):
    return torch.tensor([[((i * t + j) * 7919 + 13) % (vocab - 1) + 1 for j in range(t)] for i in range(n)])

out = {"torch": torch.__version__, "results": {}}
data = pathlib.Path(os.environ.get("FERROGRAD_DATA", str(pathlib.Path(os.environ["ROOT"]).parent / "shared" / "data")))
bert = BertModel.from_pretrained(str(data / "all-minilm-l6-v2")).eval()
x = ids(32, 128, 30522); mask = torch.ones_like(x)
with torch.inference_mode():
    out["results"]["minilm_b32_t128"] = median(lambda: bert(input_ids=x, attention_mask=mask))
gpt = GPT2LMHeadModel(GPT2Config()).eval()
prompt = ids(1, 512, 50257)
short = ids(1, 16, 50257)
with torch.inference_mode():
    out["results"]["gpt2_small_prefill_512"] = median(lambda: gpt(prompt, logits_to_keep=1))
    out["results"]["gpt2_small_generate_32"] = median(lambda: gpt.generate(
        short, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0), reps=5)
out["gpt2_bytes"] = sum(p.numel() * p.element_size() for p in gpt.parameters())
del gpt
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=65, n_positions=64, n_embd=128, n_layer=4, n_head=4,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
small = GPT2LMHeadModel(cfg).train()
cx = ids(32, 64, 65); cy = ids(32, 64, 65).reshape(-1)
best = None
for impl in ("foreach", "fused"):
    opt = torch.optim.AdamW(small.parameters(), lr=2e-3, betas=(0.9, 0.99), weight_decay=0.1,
                            **{impl: True})
    def step():
        logits = small(cx).logits.reshape(-1, 65)
        loss = torch.nn.functional.cross_entropy(logits, cy)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(small.parameters(), 1.0)
        opt.step()
    t = median(step, reps=20)
    out.setdefault("char_gpt_step_by_impl", {})[impl] = t
    best = t if best is None else min(best, t)
out["results"]["char_gpt_step"] = best
print(json.dumps(out))
'''


parser = argparse.ArgumentParser()
parser.add_argument("--python", default="python3")
parser.add_argument("--skip-cargo", action="store_true")
args = parser.parse_args()
threads = os.cpu_count()
env = dict(os.environ, RAYON_NUM_THREADS=str(threads), BENCH_THREADS=str(threads), ROOT=str(root))
if not args.skip_cargo:
    subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--bench", "models", "--", "--noplot"], cwd=root, env=env, check=True)
torch_results = json.loads(subprocess.run([args.python, "-c", TORCH_SIDE], env=env, check=True,
                                          capture_output=True, text=True).stdout)
print(f"\nferrograd vs PyTorch {torch_results['torch']} on {cpu_model()} ({isa()}), {threads} threads "
      "(ratio = PyTorch time / ferrograd time)")
print(f"{'workload':<26}{'ferrograd':>12}{'PyTorch':>12}{'ratio':>8}")
for name, t in torch_results["results"].items():
    est = root / "target/criterion/models" / name / "new/estimates.json"
    ours = json.loads(est.read_text())["median"]["point_estimate"] / 1e9
    print(f"{name:<26}{ours * 1e3:10.1f}ms{t * 1e3:10.1f}ms{t / ours:8.2f}")
    if name == "char_gpt_step":
        impls = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in torch_results["char_gpt_step_by_impl"].items())
        print(f"{'':<26}(PyTorch AdamW: {impls})")
    if name == "gpt2_small_generate_32":
        gb = torch_results["gpt2_bytes"] / 1e9
        print(f"{'':<26}{32 / ours:9.1f} tok/s{32 / t:7.1f} tok/s  "
              f"(weights read per token: {gb:.2f} GB, so {gb * 32 / ours:.1f} vs {gb * 32 / t:.1f} GB/s)")
