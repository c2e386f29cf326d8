#!/usr/bin/env python3
"""The compile-time cost of `network!`: `cargo check` of a small crate with and without a
100-layer network (50 x `Linear(64 -> 64)`, `relu`), dependencies already checked, each
timed 15 times alternately after touching its source; prints both medians and their ratio.
With OPT_MACROS=1 the crate compiles its proc macros optimised
(`[profile.dev.build-override] opt-level = 3`, as README recommends); LAYERS=k sets the
number of `Linear`/`relu` pairs (50), RUNS=k the number of runs of each (15).

    python3 bench/dsl_check_time.py
"""
import os
import pathlib
import statistics
import subprocess
import tempfile
import time

root = pathlib.Path(__file__).resolve().parent.parent
crate = pathlib.Path(tempfile.mkdtemp(prefix="dsl_check_"))
(crate / "src").mkdir()
(crate / "Cargo.toml").write_text(f'''[package]
name = "dsl_check"
version = "0.1.0"
edition = "2024"

[dependencies]
ferrograd = {{ path = "{root}" }}

[features]
with_net = []
''' + ("\n[profile.dev.build-override]\nopt-level = 3\n" if os.environ.get("OPT_MACROS") == "1" else ""))
layers = "\n".join(f"        fc{i}: Linear(64 -> 64),\n        relu," for i in range(int(os.environ.get("LAYERS", "50"))))
(crate / "src" / "lib.rs").write_text(f'''use ferrograd::prelude::*;

/// Plain code the crate has either way.
pub fn step(x: &Tensor, w: &Tensor) -> Tensor {{
    x.matmul(w).relu()
}}

#[cfg(feature = "with_net")]
network! {{
    pub struct Deep(x: [N, 64]) -> [N, 64] {{
{layers}
    }}
}}
''')
env = dict(os.environ, CARGO_TARGET_DIR=str(crate / "target"))


def check(with_net):
    os.utime(crate / "src" / "lib.rs")
    start = time.perf_counter()
    args = ["cargo", "check", "-q"] + (["--features", "with_net"] if with_net else [])
    subprocess.run(args, cwd=crate, env=env, check=True)
    return time.perf_counter() - start


check(False)
check(True)
without, with_net = [], []
for _ in range(int(os.environ.get("RUNS", "15"))):
    without.append(check(False))
    with_net.append(check(True))
a, b = statistics.median(without), statistics.median(with_net)
print(f"cargo check without: {a:.3f} s, with a {2 * int(os.environ.get('LAYERS', '50'))}-layer network: {b:.3f} s, ratio {b / a:.3f} (+{1000 * (b - a):.1f} ms)")
