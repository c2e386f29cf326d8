"""Throughput of ferrograd-serve's LLM endpoint against llama.cpp's server
(llama-cpp-python[server]) on the same model and the same load.

The model is GPT-2 small's shape (768 wide, 12 layers, 12 heads, 1024 positions,
50,257 tokens) with random weights (N(0, 0.02), unit layer norms), written twice from
the same arrays: a Hugging Face folder for ferrograd (with the word-level tokenizer of
`ferrograd_serve::llm::fixtures`) and an f32 GGUF (`gpt2` architecture) for llama.cpp,
whose tokenizer has GPT-2's 256 byte tokens at the first ids. Both servers get the same
load: C clients, each sending R completions back to back, each prompt 8 tokens and each
answer `--tokens` greedy tokens (`/v1/completions`, not streamed); tokens/s is the
completion tokens the servers report over the wall time. Both use `--threads` threads
(llama.cpp's `n_threads`, ferrograd's `FERROGRAD_NUM_THREADS`); ferrograd decodes up to
32 sequences together (continuous batching), llama-cpp-python's server one request at
a time (it has no parallel slots).

    python3 -m venv venv && venv/bin/pip install "llama-cpp-python[server]" gguf safetensors numpy
    cargo build --release -p ferrograd-serve
    venv/bin/python bench/llm_server_compare.py --threads 2
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
from safetensors.numpy import save_file

E, L, H, P, V = 768, 12, 12, 1024, 50257


def weights(seed=3):
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.02)
    st = {"transformer.wte.weight": w(V, E), "transformer.wpe.weight": w(P, E)}
    for i in range(L):
        p = f"transformer.h.{i}."
        for k, s in [("attn.c_attn.weight", (E, 3 * E)), ("attn.c_attn.bias", (3 * E,)),
                     ("attn.c_proj.weight", (E, E)), ("attn.c_proj.bias", (E,)),
                     ("mlp.c_fc.weight", (E, 4 * E)), ("mlp.c_fc.bias", (4 * E,)),
                     ("mlp.c_proj.weight", (4 * E, E)), ("mlp.c_proj.bias", (E,))]:
            st[p + k] = w(*s)
        for ln in ("ln_1", "ln_2"):
            st[f"{p}{ln}.weight"] = np.ones(E, np.float32)
            st[f"{p}{ln}.bias"] = np.zeros(E, np.float32)
    st["transformer.ln_f.weight"] = np.ones(E, np.float32)
    st["transformer.ln_f.bias"] = np.zeros(E, np.float32)
    return st


def write_hf(dir, st):
    os.makedirs(dir, exist_ok=True)
    json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "n_embd": E,
               "n_layer": L, "n_head": H, "n_positions": P, "vocab_size": V,
               "bos_token_id": V - 1, "eos_token_id": V - 1, "tie_word_embeddings": True},
              open(os.path.join(dir, "config.json"), "w"))
    save_file(st, os.path.join(dir, "model.safetensors"))
    vocab = {f"w{i}": i for i in range(V - 1)}
    vocab["<|endoftext|>"] = V - 1
    json.dump({"version": "1.0", "truncation": None, "padding": None,
               "added_tokens": [{"id": V - 1, "content": "<|endoftext|>", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": True}],
               "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
               "post_processor": None, "decoder": None,
               "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<|endoftext|>"}},
              open(os.path.join(dir, "tokenizer.json"), "w"))
    json.dump({"bos_token": "w3", "eos_token": {"content": "<|endoftext|>"}},
              open(os.path.join(dir, "tokenizer_config.json"), "w"))


def byte_tokens():
    """GPT-2's byte-to-unicode table: the 256 byte tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def write_gguf(path, st):
    import gguf
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_context_length(P)
    w.add_embedding_length(E)
    w.add_feed_forward_length(4 * E)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_layer_norm_eps(1e-5)
    w.add_file_type(0)
    tokens = byte_tokens() + ["ab"] + [f"w{i}" for i in range(V - 258)] + ["<|endoftext|>"]
    assert len(tokens) == V
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (V - 1) + [3])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(V - 1)
    w.add_eos_token_id(V - 1)
    w.add_add_bos_token(False)
    t = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a))
    t("token_embd.weight", st["transformer.wte.weight"])
    t("position_embd.weight", st["transformer.wpe.weight"])
    for i in range(L):
        p = f"transformer.h.{i}."
        # Hugging Face's Conv1D keeps [in, out]; GGUF wants [out, in] (as nn.Linear).
        for ours, theirs in [("ln_1", "attn_norm"), ("ln_2", "ffn_norm")]:
            t(f"blk.{i}.{theirs}.weight", st[f"{p}{ours}.weight"])
            t(f"blk.{i}.{theirs}.bias", st[f"{p}{ours}.bias"])
        for ours, theirs in [("attn.c_attn", "attn_qkv"), ("attn.c_proj", "attn_output"),
                             ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")]:
            t(f"blk.{i}.{theirs}.weight", st[f"{p}{ours}.weight"].T)
            t(f"blk.{i}.{theirs}.bias", st[f"{p}{ours}.bias"])
    t("output_norm.weight", st["transformer.ln_f.weight"])
    t("output_norm.bias", st["transformer.ln_f.bias"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def wait_up(port, proc, seconds=300):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"the server exited: {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            return
        except Exception:
            time.sleep(0.5)
    sys.exit("the server did not come up")


def load(port, prompt_of, clients, requests, tokens):
    counts, errors = [], []

    def client(c):
        for r in range(requests):
            try:
                out = post(port, {"prompt": prompt_of(c, r), "max_tokens": tokens,
                                  "temperature": 0, "stream": False})
                counts.append(out["usage"]["completion_tokens"])
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))

    start = time.time()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    if errors:
        sys.exit(f"{len(errors)} requests failed: {errors[0]}")
    return sum(counts) / wall, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--server", default=os.path.join(os.path.dirname(__file__), "..",
                                                     "target", "release", "ferrograd-serve"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ferrograd-llm-compare-")
    st = weights()
    write_hf(os.path.join(work, "hf"), st)
    write_gguf(os.path.join(work, "model.gguf"), st)
    del st
    clients = [int(c) for c in a.clients.split(",")]
    # 8-token prompts: 8 words for the word-level tokenizer, 8 letters (byte tokens) for
    # llama.cpp's.
    words = lambda c, r: " ".join(f"w{(c * 131 + r * 17 + k * 7) % 250 + 10}" for k in range(8))
    letters = lambda c, r: "".join(chr(ord("c") + (c * 3 + r * 5 + k) % 20) for k in range(8))
    results = {}
    subjects = [
        ("llama.cpp", [sys.executable, "-m", "llama_cpp.server", "--model",
                       os.path.join(work, "model.gguf"), "--n_threads", str(a.threads),
                       "--n_threads_batch", str(a.threads), "--n_ctx", "1024",
                       "--port", "18431"], 18431, letters, {}),
        ("ferrograd", [a.server, "--llm", os.path.join(work, "hf"), "--llm-max-batch", "32",
                       "--port", "18432"], 18432, words,
         {"FERROGRAD_NUM_THREADS": str(a.threads)}),
    ]
    for name, cmd, port, prompt_of, env in subjects:
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_up(port, proc)
            post(port, {"prompt": prompt_of(0, 0), "max_tokens": 4, "temperature": 0})
            for c in clients:
                rate, counts = load(port, prompt_of, c, a.requests, a.tokens)
                short = sum(1 for n in counts if n != a.tokens)
                results[(name, c)] = rate
                print(f"{name}: {c} clients: {rate:.1f} tokens/s"
                      + (f" ({short} answers shorter than {a.tokens})" if short else ""),
                      flush=True)
        finally:
            proc.terminate()
            proc.wait()
    print()
    print(f"| clients | llama.cpp server, tokens/s | ferrograd-serve, tokens/s | ratio |")
    print("| --- | --- | --- | --- |")
    for c in clients:
        l, f = results[("llama.cpp", c)], results[("ferrograd", c)]
        print(f"| {c} | {l:.1f} | {f:.1f} | {f / l:.2f}x |")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
