#!/usr/bin/env python3
"""Fits the rational approximation of erf behind `Real::normal_cdf` (GELU's forward) in
kernels/src/dtype.rs: erf(z) ~ z P(z^2) / Q(z^2) on [0, 3.92] (past 3.92 erf rounds to
1 in f32), P and Q of degree 5, Q(0) = 1, minimising the largest absolute error by
Lawson's iteration over linearised least squares (Loeb's weights 1/Q). Prints the f32
coefficients and the error of the f32 evaluation (Horner, no FMA) against mpmath.

    python3 tools/fit_erf.py          # needs numpy and mpmath
"""
from math import erf

import mpmath
import numpy as np

C, DEG = 3.92, 5


def fit(iters=120):
    x = np.linspace(0.0, C, 6000)
    f = np.array([erf(v) for v in x])
    t = x * x
    w, q_prev, best = np.ones_like(x), np.ones_like(x), None
    for _ in range(iters):
        # x P(t) - f (Q(t) - 1) = f, unknowns p0..p5, q1..q5.
        a = np.concatenate(
            [np.stack([x * t**i for i in range(DEG + 1)], 1),
             np.stack([-f * t**i for i in range(1, DEG + 1)], 1)], 1)
        wt = w / q_prev
        sol, *_ = np.linalg.lstsq(a * wt[:, None], f * wt, rcond=None)
        p, q = sol[:DEG + 1], np.concatenate([[1.0], sol[DEG + 1:]])
        big_q = sum(q[i] * t**i for i in range(DEG + 1))
        err = x * sum(p[i] * t**i for i in range(DEG + 1)) / big_q - f
        worst = np.abs(err).max()
        if best is None or worst < best[0]:
            best = (worst, p, q)
        q_prev = big_q
        w = np.maximum(w * np.abs(err) / np.abs(err).mean(), 1e-12)
        w /= w.mean()
    return best


def main():
    worst, p, q = fit()
    p32, q32 = [np.float32(v) for v in p], [np.float32(v) for v in q]
    print(f"f64 fit: largest absolute error {worst:.3g}")
    print("P:", ", ".join(repr(float(v)) for v in p32))
    print("Q:", ", ".join(repr(float(v)) for v in q32))
    z = np.linspace(-5, 5, 200_001).astype(np.float32)
    a = np.clip(z, np.float32(-C), np.float32(C))
    t = a * a
    num, den = p32[DEG], q32[DEG]
    for i in range(DEG - 1, -1, -1):
        num, den = num * t + p32[i], den * t + q32[i]
    got = np.clip(a * num / den, np.float32(-1), np.float32(1)).astype(np.float64)
    want = np.array([float(mpmath.erf(mpmath.mpf(float(v)))) for v in z])
    print(f"f32 evaluation: largest absolute error {np.abs(got - want).max():.3g}")


if __name__ == "__main__":
    main()
