#!/usr/bin/env python3
"""The workloads of benches/gpu.rs in PyTorch eager on cuda:0, timed the same way (3
warm-up calls, then the median of 7 rounds of N calls, each round ended by a device
synchronisation). Prints one JSON object: workload -> median seconds per iteration."""
import json
import time

import torch
import torch.nn.functional as F

dev = torch.device("cuda:0")
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False


def median_time(iters, fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / iters)
    rounds.sort()
    return rounds[len(rounds) // 2]


def param(shape, fan_in):
    bound = fan_in ** -0.5
    return (torch.rand(shape, device=dev) * 2 * bound - bound).requires_grad_(True)


def sgd_step(opt, forward):
    opt.zero_grad()
    forward().backward()
    opt.step()


results = {}
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
results["matmul_bf16_8192"] = median_time(10, lambda: a @ b)
a32, b32 = a.float(), b.float()
results["matmul_f32_8192"] = median_time(3, lambda: a32 @ b32)
torch.backends.cuda.matmul.allow_tf32 = True
results["matmul_tf32_8192"] = median_time(5, lambda: a32 @ b32)
torch.backends.cuda.matmul.allow_tf32 = False
del a, b, a32, b32

x = torch.randn(256, 784, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
p = [param((512, 784), 784), param((512,), 784), param((256, 512), 512), param((256,), 512),
     param((10, 256), 256), param((10,), 256)]


def mlp():
    h = F.linear(x, p[0], p[1]).relu()
    h = F.linear(h, p[2], p[3]).relu()
    return F.cross_entropy(F.linear(h, p[4], p[5]), y)


opt = torch.optim.SGD(p, lr=0.01)
results["mlp_step_b256"] = median_time(50, lambda: sgd_step(opt, mlp))

x = torch.randn(256, 1, 28, 28, device=dev)
p = [param((6, 1, 5, 5), 25), param((6,), 25), param((16, 6, 5, 5), 150), param((16,), 150),
     param((120, 256), 256), param((120,), 256), param((84, 120), 120), param((84,), 120),
     param((10, 84), 84), param((10,), 84)]


def lenet():
    h = F.max_pool2d(F.conv2d(x, p[0], p[1]).relu(), 2)
    h = F.max_pool2d(F.conv2d(h, p[2], p[3]).relu(), 2)
    h = F.linear(h.flatten(1), p[4], p[5]).relu()
    h = F.linear(h, p[6], p[7]).relu()
    return F.cross_entropy(F.linear(h, p[8], p[9]), y)


opt = torch.optim.SGD(p, lr=0.01)
results["lenet_step_b256"] = median_time(30, lambda: sgd_step(opt, lenet))

bsz, seq, d, heads, hidden = 32, 256, 512, 8, 2048
hd = d // heads
x = torch.randn(bsz, seq, d, device=dev, requires_grad=True)
p = [param((3 * d, d), d), param((3 * d,), d), param((d, d), d), param((d,), d),
     param((hidden, d), d), param((hidden,), d), param((d, hidden), hidden), param((d,), hidden)]


def block():
    h = F.layer_norm(x, (d,), eps=1e-5)
    qkv = F.linear(h, p[0], p[1]).reshape(bsz, seq, 3, heads, hd)
    q, k, v = (qkv.select(2, i).permute(0, 2, 1, 3) for i in range(3))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)
    att = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(bsz, seq, d)
    x1 = x + F.linear(att, p[2], p[3])
    h = F.layer_norm(x1, (d,), eps=1e-5)
    m = F.linear(F.gelu(F.linear(h, p[4], p[5])), p[6], p[7])
    return (x1 + m).sum()


def block_step():
    block().backward()
    for t in p:
        t.grad = None
    x.grad = None


results["transformer_block_fwd_bwd"] = median_time(10, block_step)
print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": results}))
