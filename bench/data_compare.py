#!/usr/bin/env python3
"""The data-loading comparison of issue 15: an ImageFolder of 1,000 JPEGs through
Resize + RandomCrop + RandomHorizontalFlip + Normalize, batches of 32 on 2 workers, in
torchvision (`datasets.ImageFolder` + `DataLoader(num_workers=2)`) and in ferrograd
(`cargo bench -p ferrograd-benches --bench data`, which reads the same folder), and the ratio.

    python3 bench/data_compare.py --python /path/to/venv/bin/python

Writes the folder (real photographs: Fashion-MNIST test images, three per RGB image,
upscaled to 96x96 and saved as JPEG) to target/bench-image-folder on first use."""
import argparse
import gzip
import json
import os
import pathlib
import subprocess

root = pathlib.Path(__file__).resolve().parent.parent
folder = root / "target/bench-image-folder"
parser = argparse.ArgumentParser()
parser.add_argument("--python", default=os.environ.get("TORCH_PYTHON", "python3"))
args = parser.parse_args()

MAKE = r'''
import gzip, os, sys, numpy as np
from PIL import Image
data, out = sys.argv[1], sys.argv[2]
with gzip.open(f"{data}/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:
    imgs = np.frombuffer(f.read()[16:], dtype=np.uint8).reshape(-1, 28, 28)
with gzip.open(f"{data}/fashion-mnist/t10k-labels-idx1-ubyte.gz") as f:
    labels = np.frombuffer(f.read()[8:], dtype=np.uint8)
for i in range(1000):
    rgb = np.stack([imgs[3 * i + k] for k in range(3)], axis=-1)
    d = os.path.join(out, f"class{labels[3 * i]}")
    os.makedirs(d, exist_ok=True)
    Image.fromarray(rgb).resize((96, 96), Image.BILINEAR).save(os.path.join(d, f"{i:04d}.jpg"), quality=90)
'''

TORCH = r'''
import json, sys, time, torch
from torchvision import datasets, transforms as T
torch.set_num_threads(1)
tf = T.Compose([T.Resize(64), T.RandomCrop(56, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])])
ds = datasets.ImageFolder(sys.argv[1], transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, persistent_workers=True)
for _ in loader: pass  # warm-up: workers started, files in the page cache
times = []
for _ in range(5):
    t = time.perf_counter()
    for _ in loader: pass
    times.append(time.perf_counter() - t)
print(json.dumps({"torch": torch.__version__, "epoch_s": sorted(times)[len(times) // 2]}))
'''

data = os.environ.get("FERROGRAD_DATA", str(root.parent / "shared/data"))
if not folder.is_dir():
    subprocess.run([args.python, "-c", MAKE, data, str(folder)], check=True)
env = dict(os.environ, FERROGRAD_IMAGE_FOLDER=str(folder))
subprocess.run(["cargo", "bench", "-p", "ferrograd-benches", "--bench", "data", "--", "image_folder", "--noplot"], cwd=root, env=env, check=True)
torch_res = json.loads(subprocess.run([args.python, "-c", TORCH, str(folder)], check=True, capture_output=True,
                                      text=True).stdout)
est = root / "target/criterion/image_folder_epoch/2_workers/new/estimates.json"
ours = json.loads(est.read_text())["median"]["point_estimate"] / 1e9
print(f"ImageFolder epoch (1,000 JPEGs, batch 32, 2 workers): ferrograd {ours * 1e3:.1f} ms, "
      f"torchvision {torch_res['epoch_s'] * 1e3:.1f} ms (torch {torch_res['torch']}), ratio {torch_res['epoch_s'] / ours:.2f}")
