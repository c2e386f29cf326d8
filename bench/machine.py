"""The machine a benchmark ran on, for the tables that report ratios: the CPU model and
the widest vector ISA it has (`from machine import cpu_model, isa` in the bench scripts,
which Python runs with this folder on its path)."""
import platform


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
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
