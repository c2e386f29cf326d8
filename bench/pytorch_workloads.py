#!/usr/bin/env python3
"""The workloads of benches/core_ops.rs in PyTorch, timed on this machine with the same
thread count. Prints one JSON object: benchmark id -> median seconds per iteration.

`BENCH_ONLY` (comma-separated ids) times only those; `BENCH_ONLY=list` times nothing and
prints every id (`compare_pytorch.py` alternates the two frameworks row by row)."""
import json
import os
import sys
import timeit

import torch
import torch.nn.functional as F

threads = int(os.environ.get("BENCH_THREADS", os.cpu_count()))
torch.set_num_threads(threads)
torch.manual_seed(0)


def median_time(fn, min_time=1.0):
    """Median seconds per call over repeats of >= min_time/10 seconds each."""
    fn()
    number = 1
    while timeit.timeit(fn, number=number) < min_time / 10:
        number *= 2
    runs = timeit.repeat(fn, number=number, repeat=10)
    runs.sort()
    return runs[len(runs) // 2] / number


results = {}
only = os.environ.get("BENCH_ONLY")
wanted = None if only is None or only == "list" else set(only.split(","))


def timed(name, fn, **kw):
    """Times `fn` as `name` if wanted (with `BENCH_ONLY=list`, records the name only)."""
    if only == "list":
        results[name] = None
    elif wanted is None or name in wanted:
        results[name] = median_time(fn, **kw)

for n in [256, 512, 1024, 2048]:
    a, b = torch.randn(n, n), torch.randn(n, n)
    timed(f"matmul_f32/{n}", lambda: a @ b)

a, b = torch.randn(1_000_000), torch.randn(1_000_000)
timed("add_1e6_f32", lambda: a + b)

x = torch.randn(256, 1024)
timed("softmax_256x1024", lambda: torch.softmax(x, -1))

x = torch.randn(256, 1024, requires_grad=True)
lw = torch.ones(1024, requires_grad=True)
lb = torch.zeros(1024, requires_grad=True)


def layer_norm_step():
    F.layer_norm(x, (1024,), lw, lb, 1e-5).sum().backward()
    x.grad = lw.grad = lb.grad = None


timed("layer_norm_fwd_bwd_256x1024", layer_norm_step)
xb = torch.randn(8, 64, 56, 56, requires_grad=True)
bw = torch.ones(64, requires_grad=True)
bb = torch.zeros(64, requires_grad=True)
rm, rv = torch.zeros(64), torch.ones(64)
gy = torch.randn(8, 64, 56, 56)


def batch_norm_step():
    F.batch_norm(xb, rm, rv, bw, bb, True, 0.1, 1e-5).backward(gy)
    xb.grad = bw.grad = bb.grad = None


timed("batch_norm_train_fwd_bwd_8x64x56x56", batch_norm_step)
logits = torch.randn(256, 1000, requires_grad=True)
target = torch.randint(0, 1000, (256,))


def cross_entropy_step():
    F.cross_entropy(logits, target).backward()
    logits.grad = None


timed("cross_entropy_fwd_bwd_256x1000", cross_entropy_step)
xa = torch.randn(256, 4096, requires_grad=True)
ga = torch.randn(256, 4096)


def activation_step(f):
    f(xa).backward(ga)
    xa.grad = None


timed("gelu_fwd_bwd_256x4096", lambda: activation_step(F.gelu))
timed("silu_fwd_bwd_256x4096", lambda: activation_step(F.silu))
p = torch.randn(1_000_000, requires_grad=True)
p.grad = torch.randn(1_000_000)
opt = torch.optim.Adam([p])  # the default single-tensor/foreach CPU implementation
timed("adam_step_1e6", opt.step)

x1, w1 = torch.randn(64, 1, 28, 28), torch.randn(6, 1, 5, 5)
x2, w2 = torch.randn(64, 6, 14, 14), torch.randn(16, 6, 5, 5)
timed("conv2d_lenet1_b64", lambda: F.conv2d(x1, w1, padding=2))
timed("conv2d_lenet2_b64", lambda: F.conv2d(x2, w2))
xd, wd = torch.randn(20, 96, 112, 112), torch.randn(96, 1, 3, 3)
timed("conv2d_depthwise_b20", lambda: F.conv2d(xd, wd, padding=1, groups=96))
xt = torch.randn(16, 128, 16, 16, requires_grad=True)
wt = torch.randn(128, 64, 4, 4, requires_grad=True)


def conv_transpose_step():
    F.conv_transpose2d(xt, wt, stride=2, padding=1).sum().backward()
    xt.grad = wt.grad = None


timed("conv_transpose2d_dcgan_fwd_bwd_b16", conv_transpose_step)
xp = torch.randn(64, 6, 28, 28, requires_grad=True)
timed("max_pool2d_lenet_b64", lambda: F.max_pool2d(xp, 2).sum().backward())

a, b = torch.randn(1), torch.randn(1)
timed("add_1elem_nograd", lambda: a + b)
ag = a.clone().requires_grad_(True)
timed("add_1elem_grad", lambda: ag + b)

xg, w = torch.randn(64, requires_grad=True), torch.randn(64)


def chain10():
    y = xg * w
    y = y + w
    y = torch.tanh(y)
    y = torch.exp(y)
    y = y * xg
    y = torch.sigmoid(y)
    y = y - w
    y = torch.relu(y)
    y = y * y
    loss = y.sum()
    loss.backward()
    xg.grad = None


timed("chain10_fwd_bwd", chain10)

# Whole CNNs (torchvision architectures, random weights), as benches/core_ops.rs' cnn group.
try:
    import torchvision
    mobilenet = torchvision.models.mobilenet_v2().eval()
    x20 = torch.randn(20, 3, 224, 224)
    with torch.no_grad():
        timed("cnn/mobilenet_v2_fwd_b20", lambda: mobilenet(x20), min_time=5.0)
    x1 = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        timed("cnn/mobilenet_v2_fwd_b1", lambda: mobilenet(x1), min_time=3.0)
    resnet = torchvision.models.resnet18().eval()
    x8 = torch.randn(8, 3, 224, 224)
    with torch.no_grad():
        timed("cnn/resnet18_fwd_b8", lambda: resnet(x8), min_time=5.0)
        timed("cnn/resnet18_fwd_b1", lambda: resnet(x1), min_time=3.0)
    resnet.train()

    def resnet_step():
        resnet(x8).sum().backward()
        resnet.zero_grad(set_to_none=True)

    timed("cnn/resnet18_fwd_bwd_b8", resnet_step, min_time=5.0)
except ImportError:
    print("torchvision is not installed: skipping the cnn workloads", file=sys.stderr)
json.dump({"torch": torch.__version__, "threads": threads, "results": results}, sys.stdout, indent=1)
