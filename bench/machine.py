"""The machine a benchmark ran on, for the tables that report ratios: the CPU model and
the widest vector ISA it has (`from machine import cpu_model, isa` in the bench scripts,
which Python runs with this folder on its path)."""
import platform


def cpu_model():
    """The CPU's model name from /proc/cpuinfo with its family and model numbers (a
    virtual machine's name is often generic: "Intel(R) Xeon(R) Processor"), else what
    `platform` knows."""
    try:
        fields = {}
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
        name = fields.get("model name")
        if name:
            if "cpu family" in fields and "model" in fields:
                return f"{name}, family {fields['cpu family']} model {fields['model']}"
            return name
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def isa():
    """"AVX-512", "AVX2" or "SSE": the widest x86 vector extension the CPU reports."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return "unknown ISA"
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"


def slug(text):
    """A folder name for a CPU model: lower case, words joined by `-`."""
    import re
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def record(script, reference, rows, note=""):
    """Writes this run's ratios to `bench/results/<cpu>/<script>.json`, which
    `cargo run -p xtask -- bench-tables` turns into the book's performance tables: `rows` is a list of
    `(workload, ferrograd seconds, reference seconds)` over all rounds (a workload that
    appears in several rounds keeps every round's ratio). Returns the path."""
    import datetime
    import json
    import os
    import pathlib
    import subprocess
    root = pathlib.Path(__file__).resolve().parent.parent
    git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    merged = {}
    for workload, ours, theirs in rows:
        if ours is None or theirs is None:
            continue
        r = merged.setdefault(workload, {"workload": workload, "ratio": [], "ferrograd_s": [], "reference_s": []})
        r["ratio"].append(round(theirs / ours, 3))
        r["ferrograd_s"].append(ours)
        r["reference_s"].append(theirs)
    out = {
        "script": f"bench/{script}.py",
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "cpu": cpu_model(),
        "isa": isa(),
        "threads": os.cpu_count(),
        "reference": reference,
        "note": note,
        "rows": list(merged.values()),
    }
    path = root / "bench" / "results" / slug(cpu_model()) / f"{script}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nrecorded {path.relative_to(root)} (cargo run -p xtask -- bench-tables updates the book)")
    return path
