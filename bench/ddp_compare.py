#!/usr/bin/env python3
"""DistributedDataParallel against PyTorch's on the same machine.

    python3 bench/ddp_compare.py --python /path/to/venv/bin/python

Runs, one thread per rank:
  - ours: `cargo bench -p ferrograd-benches --features mpi,models --bench ddp` (mpirun, 1 and 2 ranks);
  - PyTorch: DDP over gloo, launched with `torchrun --nproc_per_node N` (N = 1, 2), the
    same models (LeNet-5 b64, MLP 784-128-10 b64, torchvision ResNet-18 b8 at 224^2),
    the same step (zero_grad, forward, cross_entropy, backward, SGD momentum);
  - the engine alone: an in-place f32 MPI_Allreduce through mpi4py (`mpirun -n 2`),
    against our ProcessGroup::all_reduce, 4 KB to 64 MB.
Prints the CPU model, each pair and its ratio (PyTorch time / ours: above 1 is faster),
and what the gradient reduction costs a step in each: the step time minus that of the
same step under no_sync, measured alternately.
"""
import argparse, json, os, subprocess, sys

from machine import cpu_model, isa

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKER = r'''
import os, sys, time, json, statistics
import torch, torch.nn as nn, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
steps = int(os.environ.get("STEPS", "20"))

def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

def resnet():
    import torchvision
    return torchvision.models.resnet18()

def run(name, make, shape, classes, batch, n):
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn((batch, *shape), generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    import contextlib
    times, local = [], []
    for i in range(2 * n + 4):
        dist.barrier()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        sync = i % 2 == 0
        with (contextlib.nullcontext() if sync else model.no_sync()):
            nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 4:
            (times if sync else local).append(time.perf_counter() - t)
    sec = statistics.median(times)
    if rank == 0:
        print(json.dumps({"name": name, "world": world, "seconds": sec,
                          "no_sync_seconds": statistics.median(local),
                          "samples_per_sec": batch * world / sec}), flush=True)

run("step/lenet_b64", lenet, (1, 28, 28), 10, 64, steps * 5)
run("step/mlp_b64", mlp, (1, 28, 28), 10, 64, steps * 10)
try:
    run("step/resnet18_b8", resnet, (3, 224, 224), 1000, 8, 5)
except ImportError:
    pass
dist.destroy_process_group()
'''

MPI4PY = r'''
import time, json, statistics, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
nbytes = 4096
while nbytes <= 64 << 20:
    buf = np.ones(nbytes // 4, dtype=np.float32)
    reps = (256 << 20) // max(nbytes, 1 << 20) * 4 + 5
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    times = []
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        times.append(time.perf_counter() - t)
    sec = statistics.median(times)
    if rank == 0:
        busbw = 2 * (world - 1) / world * nbytes / sec / 1e9
        print(json.dumps({"name": f"allreduce/{nbytes}", "world": world, "seconds": sec,
                          "busbw_gbps": busbw}), flush=True)
    nbytes *= 4
'''


def mpi_env():
    env = dict(os.environ, RAYON_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def lines(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            out[(d["name"], d["world"])] = d
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable, help="a Python with torch (and torchvision, mpi4py)")
    args = ap.parse_args()
    env = mpi_env()
    ours = lines(subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--features", "mpi,models", "--bench", "ddp"], cwd=ROOT,
                                env=env, capture_output=True, text=True, check=True).stdout)
    torchrun = os.path.join(os.path.dirname(args.python), "torchrun")
    theirs = {}
    for n in (1, 2):
        script = os.path.join("/tmp", "ferrograd_ddp_worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        r = subprocess.run([torchrun, "--nproc_per_node", str(n), script], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"torchrun failed:\n{r.stderr[-3000:]}")
        theirs.update(lines(r.stdout))
    script = os.path.join("/tmp", "ferrograd_mpi4py_allreduce.py")
    with open(script, "w") as f:
        f.write(MPI4PY)
    pairs = []
    for _ in range(2):
        r = subprocess.run(["mpirun", "-n", "2", "--bind-to", "core", args.python, script], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"(mpi4py run failed: {r.stderr[-500:]})")
            break
        mine = subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--features", "mpi,models", "--bench", "ddp"], cwd=ROOT,
                              env=dict(env, FERROGRAD_BENCH_ALLREDUCE_ONLY="1"), capture_output=True,
                              text=True, check=True).stdout
        pairs.append((lines(mine), lines(r.stdout)))

    print(f"CPU: {cpu_model()} ({isa()}), {os.cpu_count()} cores; one thread per rank")
    print("\n| step (2 ranks) | ferrograd | PyTorch DDP (gloo) | ratio | reduction's cost, ours | PyTorch's |")
    print("|---|---|---|---|---|---|")
    cost = lambda d: f"{(d['seconds'] - d['no_sync_seconds']) * 1e3:+.2f} ms ({(d['seconds'] - d['no_sync_seconds']) / d['seconds'] * 100:+.0f}%)"
    for name in ("step/lenet_b64", "step/mlp_b64", "step/resnet18_b8"):
        a, b = ours.get((name, 2)), theirs.get((name, 2))
        if a and b:
            print(f"| {name[5:]} | {a['seconds']*1e3:.2f} ms | {b['seconds']*1e3:.2f} ms | "
                  f"{b['seconds']/a['seconds']:.2f} | {cost(a)} | {cost(b)} |")
    print("\n| scaling, 2 ranks vs 1 (samples/s) | ferrograd efficiency | PyTorch efficiency |")
    print("|---|---|---|")
    for name in ("step/lenet_b64", "step/mlp_b64", "step/resnet18_b8"):
        cells = []
        for d in (ours, theirs):
            one, two = d.get((name, 1)), d.get((name, 2))
            cells.append(f"{two['samples_per_sec'] / (2 * one['samples_per_sec']):.2f}" if one and two else "-")
        print(f"| {name[5:]} | {cells[0]} | {cells[1]} |")
    print("\n| all-reduce f32, 2 ranks | ferrograd busbw (alternated runs) | mpi4py busbw | ratio per pair |")
    print("|---|---|---|---|")
    size = 4096
    while size <= 64 << 20:
        key = (f"allreduce/{size}", 2)
        got = [(o[key], m[key]) for o, m in pairs if key in o and key in m]
        label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
        if got:
            ours_bw = " / ".join("%.2f" % o["busbw_gbps"] for o, _ in got)
            theirs_bw = " / ".join("%.2f" % m["busbw_gbps"] for _, m in got)
            ratios = " / ".join("%.2f" % (m["seconds"] / o["seconds"]) for o, m in got)
            print(f"| {label} | {ours_bw} GB/s | {theirs_bw} GB/s | {ratios} |")
        size *= 4


if __name__ == "__main__":
    main()
