//! Reductions along one dim of a contiguous buffer viewed as `[outer, r, inner]`, and the
//! row-wise fused softmax kernels. Multi-dim reductions are sequences of these.

use super::PARALLEL_THRESHOLD;
use super::par::for_each_chunk_mut;
use super::pool::HostBuffer;
use super::simd::{SimdKernel, with_simd};
use crate::{Element, FloatElement, NumElement, Real};
use num_traits::Float;
use std::mem::MaybeUninit;

/// Runs `body(o, out_row)` for every outer index, in parallel when the work is large.
pub(crate) fn for_each_outer<U: Send>(
    out: &mut [U],
    outer: usize,
    work_per_outer: usize,
    body: impl Fn(usize, &mut [U]) + Sync,
) {
    if outer == 0 {
        return;
    }
    let row = out.len() / outer;
    if outer * work_per_outer < PARALLEL_THRESHOLD || outer == 1 || row == 0 {
        if row == 0 {
            return;
        }
        out.chunks_mut(row)
            .enumerate()
            .for_each(|(o, chunk)| body(o, chunk));
    } else {
        // Several rows per task keep the scheduling cost off tiny rows.
        let rows_per_task = outer.div_ceil(crate::cpu::num_threads() * 4).max(1);
        for_each_chunk_mut(out, row * rows_per_task, |t, rows| {
            for (i, chunk) in rows.chunks_mut(row).enumerate() {
                body(t * rows_per_task + i, chunk);
            }
        });
    }
}

/// A general fold along the middle dim: `out[o, i] = finish(fold(.. fold(init, x[o, 0, i]) .., x[o, r-1, i]))`.
///
/// ```
/// use ferrograd_kernels::cpu::reduce_dim;
/// // prod over dim 1 of a [1, 3, 2] buffer
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let p = reduce_dim(&x, 1, 3, 2, 1.0f32, |a, v| a * v, |a: f32| a);
/// assert_eq!(p, vec![15.0, 48.0]);
/// ```
pub fn reduce_dim<T: Element, A: Copy + Send + Sync, U: Element>(
    src: &[T],
    outer: usize,
    r: usize,
    inner: usize,
    init: A,
    fold: impl Fn(A, T) -> A + Sync,
    finish: impl Fn(A) -> U + Sync,
) -> HostBuffer<U> {
    let mut out = HostBuffer::<U>::zeroed(outer * inner);
    for_each_outer(&mut out, outer, r * inner, |o, dst| {
        let block = &src[o * r * inner..(o + 1) * r * inner];
        if inner == 1 {
            dst[0] = finish(block.iter().fold(init, |a, &v| fold(a, v)));
        } else {
            let mut acc = vec![init; inner];
            for row in block.chunks_exact(inner) {
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a = fold(*a, v);
                }
            }
            for (d, a) in dst.iter_mut().zip(acc) {
                *d = finish(a);
            }
        }
    });
    out
}

/// Sums a contiguous slice in the accumulator type with several independent lanes, so the
/// loop vectorises and the rounding error grows more slowly than a serial sum.
#[inline(always)]
pub(crate) fn sum_slice<T: NumElement>(x: &[T]) -> T::Acc {
    const LANES: usize = 8;
    let mut lanes = [T::Acc::ZERO; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = *l + v.to_acc();
        }
    }
    let mut total = T::Acc::ZERO;
    for l in lanes {
        total = total + l;
    }
    for &v in tail {
        total = total + v.to_acc();
    }
    total
}

/// Sum along the middle dim of `[outer, r, inner]`, accumulating in `T::Acc`.
///
/// ```
/// use ferrograd_kernels::cpu::sum_dim;
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// assert_eq!(sum_dim(&x, 2, 3, 1), vec![6.0, 15.0]);
/// assert_eq!(sum_dim(&x, 1, 2, 3), vec![5.0, 7.0, 9.0]);
/// ```
pub fn sum_dim<T: NumElement>(src: &[T], outer: usize, r: usize, inner: usize) -> HostBuffer<T> {
    let mut out = HostBuffer::<T>::zeroed(outer * inner);
    for_each_outer(&mut out, outer, r * inner, |o, dst| {
        let block = &src[o * r * inner..(o + 1) * r * inner];
        if inner == 1 {
            dst[0] = T::from_acc(sum_slice(block));
        } else {
            let mut acc = vec![T::Acc::ZERO; inner];
            for row in block.chunks_exact(inner) {
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a = *a + v.to_acc();
                }
            }
            for (d, a) in dst.iter_mut().zip(acc) {
                *d = T::from_acc(a);
            }
        }
    });
    out
}

/// Max/min-style reduction with indices along the middle dim: `better(candidate, best)`
/// says when a candidate replaces the best so far; NaN always wins, as in PyTorch.
///
/// ```
/// use ferrograd_kernels::cpu::arg_reduce_dim;
/// let x = [3.0f32, 7.0, 7.0, 1.0];
/// let (v, i) = arg_reduce_dim(&x, 1, 4, 1, |c, b| c > b);
/// assert_eq!((v.to_vec(), i.to_vec()), (vec![7.0], vec![1]));
/// ```
pub fn arg_reduce_dim<T: Element>(
    src: &[T],
    outer: usize,
    r: usize,
    inner: usize,
    better: impl Fn(T, T) -> bool + Sync,
) -> (HostBuffer<T>, HostBuffer<i64>) {
    #[allow(clippy::eq_op)]
    let is_nan = |v: T| v != v;
    let mut out: Vec<(T, i64)> = vec![(T::default(), 0); outer * inner];
    let pick = |best: &mut (T, i64), v: T, j: usize| {
        if !is_nan(best.0) && (is_nan(v) || better(v, best.0)) {
            *best = (v, j as i64);
        }
    };
    for_each_outer(&mut out, outer, r * inner, |o, dst| {
        let block = &src[o * r * inner..(o + 1) * r * inner];
        for (i, d) in dst.iter_mut().enumerate() {
            *d = (block[i], 0);
        }
        for j in 1..r {
            for (i, d) in dst.iter_mut().enumerate() {
                pick(d, block[j * inner + i], j);
            }
        }
    });
    (
        out.iter().map(|&(v, _)| v).collect(),
        out.iter().map(|&(_, i)| i).collect(),
    )
}

/// Inclusive prefix sum along the middle dim of `[outer, r, inner]`.
///
/// ```
/// use ferrograd_kernels::cpu::cumsum_dim;
/// assert_eq!(cumsum_dim(&[1i64, 2, 3, 4], 1, 4, 1), vec![1, 3, 6, 10]);
/// ```
pub fn cumsum_dim<T: NumElement>(src: &[T], outer: usize, r: usize, inner: usize) -> HostBuffer<T> {
    let mut out = HostBuffer::<T>::zeroed(outer * r * inner);
    for_each_outer(&mut out, outer, r * inner, |o, dst| {
        let block = &src[o * r * inner..(o + 1) * r * inner];
        let mut acc = vec![T::Acc::ZERO; inner];
        for j in 0..r {
            for i in 0..inner {
                acc[i] = acc[i] + block[j * inner + i].to_acc();
                dst[j * inner + i] = T::from_acc(acc[i]);
            }
        }
    });
    out
}

/// The maximum of a row in the accumulator type, over independent lanes so it vectorises.
#[inline(always)]
pub(crate) fn row_max<T: FloatElement>(row: &[T]) -> T::Acc {
    const LANES: usize = 8;
    let mut lanes = [T::Acc::neg_infinity(); LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    // NaN-propagating max: once a lane holds NaN it keeps it, as PyTorch's softmax does.
    #[inline(always)]
    fn nan_max<A: num_traits::Float>(m: A, v: A) -> A {
        if v > m || v.is_nan() { v } else { m }
    }
    for chunk in chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = nan_max(*m, v.to_acc());
        }
    }
    let max = lanes
        .iter()
        .fold(T::Acc::neg_infinity(), |m, &v| nan_max(m, v));
    tail.iter().fold(max, |m, &v| nan_max(m, v.to_acc()))
}

/// One row of softmax (or log-softmax): max, exponentials, sum, then scale or shift.
/// Writes every element of `dst` (uninitialised on entry) exactly once before reading it.
struct SoftmaxRow<'a, T> {
    row: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
    log: bool,
}

impl<T: FloatElement> SimdKernel for SoftmaxRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let max = row_max(self.row);
        // A pure map (vectorises), then a laned sum: a running sum in the same loop would
        // serialise on the float additions.
        for (d, &v) in self.dst.iter_mut().zip(self.row) {
            d.write(T::from_acc((v.to_acc() - max).exp_vec()));
        }
        // SAFETY: the loop above wrote every element of `dst` (`row` is as long as `dst`);
        // `MaybeUninit<T>` has `T`'s layout.
        let dst = unsafe { &mut *(self.dst as *mut [MaybeUninit<T>] as *mut [T]) };
        let total = sum_slice(dst);
        if self.log {
            // `(x - max) - ln Σ`, not `x - (max + ln Σ)`: the sum `max + ln Σ` rounds at the
            // scale of `max` and loses the digits of `ln Σ` for large inputs.
            let log_total = total.ln();
            for (d, &v) in dst.iter_mut().zip(self.row) {
                *d = T::from_acc((v.to_acc() - max) - log_total);
            }
        } else {
            let inv = T::Acc::ONE / total;
            for d in dst.iter_mut() {
                *d = T::from_acc(d.to_acc() * inv);
            }
        }
    }
}

fn softmax_family<T: FloatElement>(src: &[T], rows: usize, len: usize, log: bool) -> HostBuffer<T> {
    debug_assert_eq!(src.len(), rows * len);
    let mut out = HostBuffer::<T>::new_uninit(rows * len);
    for_each_outer(&mut out, rows, len * 4, |o, dst| {
        with_simd(SoftmaxRow {
            row: &src[o * len..(o + 1) * len],
            dst,
            log,
        })
    });
    // SAFETY: `for_each_outer` hands every row of `out` to one `SoftmaxRow`, which writes
    // all of it.
    unsafe { out.assume_init() }
}

/// Softmax of each contiguous row of length `len` (accumulating in f32 for half types).
///
/// ```
/// use ferrograd_kernels::cpu::softmax_rows;
/// let s = softmax_rows(&[0.0f32, 0.0, 1000.0, 1000.0], 2, 2);
/// assert_eq!(s, vec![0.5, 0.5, 0.5, 0.5]);
/// ```
pub fn softmax_rows<T: FloatElement>(src: &[T], rows: usize, len: usize) -> HostBuffer<T> {
    softmax_family(src, rows, len, false)
}

/// Log-softmax of each contiguous row: `x - max - log(sum(exp(x - max)))`.
///
/// ```
/// use ferrograd_kernels::cpu::log_softmax_rows;
/// let s = log_softmax_rows(&[0.0f64, 0.0], 1, 2);
/// assert!((s[0] + std::f64::consts::LN_2).abs() < 1e-12);
/// ```
pub fn log_softmax_rows<T: FloatElement>(src: &[T], rows: usize, len: usize) -> HostBuffer<T> {
    softmax_family(src, rows, len, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(x - max) - ln Σ`: inputs near 1e4 in f32 give log-probabilities to f32 precision
    /// of the values themselves (the old `x - (max + ln Σ)` was off by ~1e-4 here).
    #[test]
    fn log_softmax_of_large_inputs_is_precise() {
        let x: Vec<f32> = (0..9).map(|j| 1.0e4 + 0.25 * j as f32).collect();
        let xr: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let max = xr.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + xr.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        let got = log_softmax_rows(&x, 1, 9);
        for (j, (&g, &v)) in got.iter().zip(&xr).enumerate() {
            let want = v - lse;
            assert!((g as f64 - want).abs() < 1e-6, "[{j}]: {g} vs {want}");
        }
        let p = softmax_rows(&x, 1, 9);
        let total: f32 = p.iter().sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    /// Every element of a multi-row, parallel-sized output is written (the buffer starts
    /// uninitialised).
    #[test]
    fn softmax_rows_write_every_element() {
        let (rows, len) = (300, 513);
        let x: Vec<f32> = (0..rows * len)
            .map(|i| ((i * 7) % 13) as f32 * 0.1)
            .collect();
        for log in [false, true] {
            let out = softmax_family(&x, rows, len, log);
            for r in 0..rows {
                let row = &out[r * len..(r + 1) * len];
                let total: f32 = if log {
                    row.iter().map(|v| v.exp()).sum()
                } else {
                    row.iter().sum()
                };
                assert!((total - 1.0).abs() < 1e-4, "row {r} (log {log}): {total}");
            }
        }
    }
}
