//! Fused layer normalisation over contiguous rows: the forward pass writes the output and
//! each row's mean and reciprocal standard deviation (kept for backward, in the
//! accumulator type); the backward pass turns the output gradient into the input gradient
//! in one pass per row, and the weight and bias gradients from per-task partial sums.

use crate::cpu::HostBuffer;
use crate::cpu::reduce::{for_each_outer, sum_slice};
use crate::cpu::simd::{SimdKernel, with_simd};
use crate::cpu::{PARALLEL_THRESHOLD, run_tasks};
use crate::cuda::KernelModule;
use crate::{Element, FloatElement, NumElement};
use num_traits::Float;
use std::mem::MaybeUninit;
use std::sync::Mutex;

/// The CUDA kernels of layer norm forward and backward (`layer_norm.cu`), compiled by NVRTC.
pub const CUDA_MODULE: KernelModule =
    KernelModule::new("layer_norm", include_str!("layer_norm.cu"));

/// A row's (mean, reciprocal std).
type Stats<A> = (A, A);

/// One output row to write, and where its statistics go.
type RowPiece<'a, T> = (
    &'a mut [MaybeUninit<T>],
    &'a mut Stats<<T as NumElement>::Acc>,
);

/// One task's partial sums of the weight and bias gradients.
type Partial<A> = Mutex<(Vec<A>, Vec<A>)>;

/// A task's weight and bias partial sums, borrowed by one row.
type PartialRows<'a, A> = (&'a mut [A], &'a mut [A]);

/// The results of [`layer_norm_rows`]: output, per-row mean and reciprocal std.
pub struct LayerNormOutput<T: NumElement> {
    /// Normalised, scaled and shifted rows.
    pub y: HostBuffer<T>,
    /// Each row's mean.
    pub mean: HostBuffer<T::Acc>,
    /// Each row's `1 / sqrt(var + eps)` (biased variance).
    pub rstd: HostBuffer<T::Acc>,
}

/// Layer norm of `rows` contiguous rows of `len`: `(x - mean) * rstd * weight + bias`.
///
/// ```
/// use ferrograd_kernels::fused::layer_norm::layer_norm_rows;
/// let out = layer_norm_rows(&[1.0f64, 3.0], 1, 2, None, None, 0.0);
/// assert_eq!((out.y.to_vec(), out.mean.to_vec(), out.rstd.to_vec()), (vec![-1.0, 1.0], vec![2.0], vec![1.0]));
/// ```
pub fn layer_norm_rows<T: FloatElement>(
    x: &[T],
    rows: usize,
    len: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    eps: f64,
) -> LayerNormOutput<T> {
    assert!(
        x.len() == rows * len,
        "layer_norm_rows: {} elements are not {rows} rows of {len}",
        x.len()
    );
    // Every element is written below (no zero fill first: a 4096 x 384 row block spent
    // a quarter of its time in the fill).
    let mut y = HostBuffer::<T>::new_uninit(rows * len);
    let mut stats = vec![(T::Acc::ZERO, T::Acc::ZERO); rows];
    let eps = <T::Acc as Element>::from_f64(eps);
    let n = <T::Acc as Element>::from_f64(len as f64);
    // Rows and their statistics in the same tasks: pair them up first.
    let mut pieces: Vec<RowPiece<'_, T>> = y.chunks_mut(len.max(1)).zip(stats.iter_mut()).collect();
    let body = |r: usize, (dst, stat): &mut RowPiece<'_, T>| {
        let row = &x[r * len..(r + 1) * len];
        **stat = with_simd(NormRow {
            row,
            dst,
            weight,
            bias,
            n,
            eps,
        });
    };
    if len > 0 {
        for_each_outer(&mut pieces, rows, len * 3, |r, piece| {
            body(r, &mut piece[0])
        });
    }
    // SAFETY: the rows tile `y` and `NormRow` writes every element of its row (`len` is
    // 0 only when `y` is empty).
    let y = unsafe { y.assume_init() };
    let mean = stats.iter().map(|s| s.0).collect();
    let rstd = stats.iter().map(|s| s.1).collect();
    LayerNormOutput { y, mean, rstd }
}

/// Layer norm of the sums `x + shift + residual` (`shift` `[len]` broadcast over the
/// rows, added first, as a linear layer's bias before its residual connection) of `rows`
/// contiguous rows of `len`, without their statistics (inference: nothing is kept for a
/// backward). Each row's sum is written into its output row and normalised there while
/// it is in L1, so the pass reads `x` and `residual` once and writes the output once,
/// where an add, a broadcast add and a layer norm make three passes. Every sum rounds to
/// `T` as the separate adds would.
///
/// ```
/// use ferrograd_kernels::fused::layer_norm::add_layer_norm_rows;
/// // (0 + 1) + 0 and (1 + 1) + 1: [1, 3], normalised to [-1, 1].
/// let y = add_layer_norm_rows(&[0.0f64, 1.0], &[0.0, 1.0], Some(&[1.0, 1.0]), 1, 2, None, None, 0.0);
/// assert_eq!(y.to_vec(), vec![-1.0, 1.0]);
/// ```
///
/// # Panics
/// When `x` or `residual` is not `rows * len` long or `shift` not `len`.
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm_rows<T: FloatElement>(
    x: &[T],
    residual: &[T],
    shift: Option<&[T]>,
    rows: usize,
    len: usize,
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    eps: f64,
) -> HostBuffer<T> {
    assert!(
        x.len() == rows * len && residual.len() == x.len() && shift.is_none_or(|s| s.len() == len),
        "add_layer_norm_rows: {} and {} elements are not {rows} rows of {len} (shift {:?})",
        x.len(),
        residual.len(),
        shift.map(<[T]>::len)
    );
    let mut y = HostBuffer::<T>::new_uninit(rows * len);
    let eps = <T::Acc as Element>::from_f64(eps);
    let n = <T::Acc as Element>::from_f64(len as f64);
    if len > 0 {
        for_each_outer(&mut y, rows, len * 4, |r, dst| {
            let at = r * len..(r + 1) * len;
            with_simd(AddNormRow {
                x: &x[at.clone()],
                residual: &residual[at],
                shift,
                dst,
                weight,
                bias,
                n,
                eps,
            });
        });
    }
    // SAFETY: the rows tile `y` and `AddNormRow` writes every element of its row (`len`
    // is 0 only when `y` is empty).
    unsafe { y.assume_init() }
}

/// Gradients of [`layer_norm_rows`]: `(dx, dweight, dbias)`, the last two only when asked
/// for (`want_weight`, `want_bias`). `weight` is the forward's (or `None`).
///
/// ```
/// use ferrograd_kernels::fused::layer_norm::{layer_norm_rows, layer_norm_backward_rows};
/// let x = [1.0f64, 3.0];
/// let f = layer_norm_rows(&x, 1, 2, None, None, 0.0);
/// let (dx, dw, db) = layer_norm_backward_rows(&[1.0, 1.0], &x, &f.mean, &f.rstd, None, 1, 2, true, true);
/// assert_eq!(dx, vec![0.0, 0.0]); // shifting every input leaves the output unchanged
/// assert_eq!((dw.unwrap().to_vec(), db.unwrap().to_vec()), (vec![-1.0, 1.0], vec![1.0, 1.0]));
/// ```
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward_rows<T: FloatElement>(
    dy: &[T],
    x: &[T],
    mean: &[T::Acc],
    rstd: &[T::Acc],
    weight: Option<&[T]>,
    rows: usize,
    len: usize,
    want_weight: bool,
    want_bias: bool,
) -> (HostBuffer<T>, Option<HostBuffer<T>>, Option<HostBuffer<T>>) {
    // Every element is written below (no zero fill first).
    let mut dx = HostBuffer::<T>::new_uninit(rows * len);
    let n = <T::Acc as Element>::from_f64(len as f64);
    // Rows per task: about PARALLEL_THRESHOLD elements each, one task when small.
    let per_task = if rows * len < PARALLEL_THRESHOLD {
        rows.max(1)
    } else {
        (PARALLEL_THRESHOLD / len.max(1)).clamp(1, rows.max(1))
    };
    let tasks = rows.div_ceil(per_task);
    let params = want_weight || want_bias;
    let partials: Vec<Partial<T::Acc>> = (0..if params { tasks } else { 0 })
        .map(|_| Mutex::new((vec![T::Acc::ZERO; len], vec![T::Acc::ZERO; len])))
        .collect();
    let pieces: Vec<Mutex<&mut [MaybeUninit<T>]>> = dx
        .chunks_mut((per_task * len).max(1))
        .map(Mutex::new)
        .collect();
    let task = |t: usize| {
        let mut dst = pieces[t].lock().unwrap_or_else(|e| e.into_inner());
        let mut part = partials
            .get(t)
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()));
        let mut scratch = vec![T::Acc::ZERO; len];
        for (i, dxr) in dst.chunks_mut(len).enumerate() {
            let r = t * per_task + i;
            with_simd(NormGradRow {
                scratch: &mut scratch,
                row: &x[r * len..(r + 1) * len],
                g: &dy[r * len..(r + 1) * len],
                dx: dxr,
                stats: (mean[r], rstd[r]),
                weight,
                partial: part.as_deref_mut().map(|p| (&mut p.0[..], &mut p.1[..])),
                n,
            });
        }
    };
    if len > 0 {
        run_tasks(tasks, task);
    }
    drop(pieces);
    // SAFETY: the tasks' pieces tile `dx` and `NormGradRow` writes every element of its
    // row (`len` is 0 only when `dx` is empty).
    let dx = unsafe { dx.assume_init() };
    let (dw, db) = if params {
        let mut dw = vec![T::Acc::ZERO; len];
        let mut db = vec![T::Acc::ZERO; len];
        for p in partials {
            let (pw, pb) = p.into_inner().unwrap_or_else(|e| e.into_inner());
            for j in 0..len {
                dw[j] = dw[j] + pw[j];
                db[j] = db[j] + pb[j];
            }
        }
        let narrow = |v: Vec<T::Acc>| v.into_iter().map(T::from_acc).collect::<HostBuffer<T>>();
        (
            want_weight.then(|| narrow(dw)),
            want_bias.then(|| narrow(db)),
        )
    } else {
        (None, None)
    };
    (dx, dw, db)
}

/// Sums `f(a[j], b[j])` in [`LANES`] independent lanes over zipped chunks (vectorises, no
/// bounds checks; the rounding error grows more slowly than a serial sum's).
#[inline(always)]
fn laned_sum<A: NumElement, X: Copy, Y: Copy>(a: &[X], b: &[Y], f: impl Fn(X, Y) -> A) -> A {
    let mut lanes = [A::ZERO; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        for ((l, &x), &y) in lanes.iter_mut().zip(xa).zip(xb) {
            *l = *l + f(x, y);
        }
    }
    let mut total = A::ZERO;
    for l in lanes {
        total = total + l;
    }
    for (&x, &y) in ta.iter().zip(tb) {
        total = total + f(x, y);
    }
    total
}

/// Lanes of the row sums.
const LANES: usize = 16;

/// A row's mean and reciprocal standard deviation (biased variance, `eps` added) by
/// laned sums; `n` is the row's length.
#[inline(always)]
fn row_stats<T: FloatElement>(row: &[T], n: T::Acc, eps: T::Acc) -> Stats<T::Acc> {
    let mean = sum_slice(row) / n;
    let var = laned_sum(row, row, |v, _| {
        let d = v.to_acc() - mean;
        d * d
    }) / n;
    (mean, T::Acc::ONE / Float::sqrt(var + eps))
}

/// One row of the forward pass: statistics by laned sums, then the output as one
/// branch-free map per weight/bias combination. Returns (mean, rstd).
struct NormRow<'a, T: NumElement> {
    row: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
    weight: Option<&'a [T]>,
    bias: Option<&'a [T]>,
    n: T::Acc,
    eps: T::Acc,
}

impl<T: FloatElement> SimdKernel for NormRow<'_, T> {
    type Output = Stats<T::Acc>;
    #[inline(always)]
    fn run(self) -> Stats<T::Acc> {
        let row = self.row;
        let (mean, rstd) = row_stats(row, self.n, self.eps);
        let xhat = |v: T| (v.to_acc() - mean) * rstd;
        let out = self.dst.iter_mut().zip(row);
        match (self.weight, self.bias) {
            (Some(w), Some(b)) => {
                for ((d, &v), (&wj, &bj)) in out.zip(w.iter().zip(b)) {
                    d.write(T::from_acc(xhat(v) * wj.to_acc() + bj.to_acc()));
                }
            }
            (Some(w), None) => {
                for ((d, &v), &wj) in out.zip(w) {
                    d.write(T::from_acc(xhat(v) * wj.to_acc()));
                }
            }
            (None, Some(b)) => {
                for ((d, &v), &bj) in out.zip(b) {
                    d.write(T::from_acc(xhat(v) + bj.to_acc()));
                }
            }
            (None, None) => {
                for (d, &v) in out {
                    d.write(T::from_acc(xhat(v)));
                }
            }
        }
        (mean, rstd)
    }
}

/// One row of [`add_layer_norm_rows`]: the sums into `dst`, their statistics by laned
/// sums, then the output over the sums in place.
struct AddNormRow<'a, T: NumElement> {
    x: &'a [T],
    residual: &'a [T],
    shift: Option<&'a [T]>,
    dst: &'a mut [MaybeUninit<T>],
    weight: Option<&'a [T]>,
    bias: Option<&'a [T]>,
    n: T::Acc,
    eps: T::Acc,
}

impl<T: FloatElement> SimdKernel for AddNormRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let add = |a: T, b: T| T::from_acc(a.to_acc() + b.to_acc());
        let sums = self.dst.iter_mut().zip(self.x.iter().zip(self.residual));
        match self.shift {
            Some(s) => {
                for ((d, (&a, &r)), &c) in sums.zip(s) {
                    d.write(add(add(a, c), r));
                }
            }
            None => {
                for (d, (&a, &r)) in sums {
                    d.write(add(a, r));
                }
            }
        }
        // SAFETY: every element of `dst` was written just above (`x` is as long);
        // `MaybeUninit<T>` has `T`'s layout.
        let row = unsafe { &mut *(self.dst as *mut [MaybeUninit<T>] as *mut [T]) };
        let (mean, rstd) = row_stats(row, self.n, self.eps);
        let xhat = |v: T| (v.to_acc() - mean) * rstd;
        match (self.weight, self.bias) {
            (Some(w), Some(b)) => {
                for (v, (&wj, &bj)) in row.iter_mut().zip(w.iter().zip(b)) {
                    *v = T::from_acc(xhat(*v) * wj.to_acc() + bj.to_acc());
                }
            }
            (Some(w), None) => {
                for (v, &wj) in row.iter_mut().zip(w) {
                    *v = T::from_acc(xhat(*v) * wj.to_acc());
                }
            }
            (None, Some(b)) => {
                for (v, &bj) in row.iter_mut().zip(b) {
                    *v = T::from_acc(xhat(*v) + bj.to_acc());
                }
            }
            (None, None) => row.iter_mut().for_each(|v| *v = T::from_acc(xhat(*v))),
        }
    }
}

/// One row of the backward pass: `dx`, and this task's weight/bias partial sums.
struct NormGradRow<'a, T: NumElement> {
    row: &'a [T],
    g: &'a [T],
    dx: &'a mut [MaybeUninit<T>],
    stats: Stats<T::Acc>,
    weight: Option<&'a [T]>,
    partial: Option<PartialRows<'a, T::Acc>>,
    /// The row's upstream gradient through the weight (as long as the row).
    scratch: &'a mut [T::Acc],
    n: T::Acc,
}

impl<T: FloatElement> SimdKernel for NormGradRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (row, g, (mu, rs)) = (self.row, self.g, self.stats);
        let gw = &mut *self.scratch;
        match self.weight {
            Some(w) => {
                for ((s, &gj), &wj) in gw.iter_mut().zip(g).zip(w) {
                    *s = gj.to_acc() * wj.to_acc();
                }
            }
            None => {
                for (s, &gj) in gw.iter_mut().zip(g) {
                    *s = gj.to_acc();
                }
            }
        }
        let gw = &*gw;
        let xhat = |v: T| (v.to_acc() - mu) * rs;
        let mean_g = laned_sum(gw, gw, |a, _| a) / self.n;
        let mean_gx = laned_sum(gw, row, |a, v| a * xhat(v)) / self.n;
        for ((d, &a), &v) in self.dx.iter_mut().zip(gw).zip(row) {
            d.write(T::from_acc(rs * (a - mean_g - xhat(v) * mean_gx)));
        }
        if let Some((pw, pb)) = self.partial {
            for (((w, b), &gj), &v) in pw.iter_mut().zip(pb.iter_mut()).zip(g).zip(row) {
                let gj = gj.to_acc();
                *w = *w + gj * xhat(v);
                *b = *b + gj;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Central differences of `sum(dy * layer_norm(x))` in f64.
    #[test]
    fn backward_matches_finite_differences_serial_and_parallel() {
        for (rows, len) in [(3, 5), (PARALLEL_THRESHOLD / 8 + 3, 16)] {
            let x: Vec<f64> = (0..rows * len)
                .map(|i| ((i * 7919) % 101) as f64 / 17.0)
                .collect();
            let dy: Vec<f64> = (0..rows * len)
                .map(|i| ((i * 31) % 13) as f64 / 5.0 - 1.0)
                .collect();
            let w: Vec<f64> = (0..len).map(|j| 0.5 + j as f64 / 7.0).collect();
            let b: Vec<f64> = (0..len).map(|j| j as f64 / 3.0).collect();
            let f = layer_norm_rows(&x, rows, len, Some(&w), Some(&b), 1e-5);
            let (dx, dw, db) = layer_norm_backward_rows(
                &dy,
                &x,
                &f.mean,
                &f.rstd,
                Some(&w),
                rows,
                len,
                true,
                true,
            );
            let loss = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
                let y = layer_norm_rows(x, rows, len, Some(w), Some(b), 1e-5).y;
                y.iter().zip(&dy).map(|(a, g)| a * g).sum()
            };
            // Large steps: the function is smooth, and a long sum's rounding would dominate.
            let h = 1e-4;
            for i in [0, len + 1, rows * len - 1] {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp[i] += h;
                xm[i] -= h;
                let fd = (loss(&xp, &w, &b) - loss(&xm, &w, &b)) / (2.0 * h);
                assert!(
                    (fd - dx[i]).abs() < 1e-5 * (1.0 + fd.abs()),
                    "dx[{i}]: {fd} vs {}",
                    dx[i]
                );
            }
            for j in [0, len - 1] {
                let (mut wp, mut wm) = (w.clone(), w.clone());
                wp[j] += h;
                wm[j] -= h;
                let fd = (loss(&x, &wp, &b) - loss(&x, &wm, &b)) / (2.0 * h);
                let dw = dw.as_ref().unwrap()[j];
                assert!(
                    (fd - dw).abs() < 1e-5 * (1.0 + fd.abs()),
                    "dw[{j}]: {fd} vs {dw}"
                );
                let db_expected: f64 = (0..rows).map(|r| dy[r * len + j]).sum();
                assert!((db.as_ref().unwrap()[j] - db_expected).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn half_rows_accumulate_in_f32() {
        let x: Vec<half::f16> = [1000.0f32, 1001.0, 1002.0, 1003.0]
            .map(half::f16::from_f32)
            .to_vec();
        let f = layer_norm_rows(&x, 1, 4, None, None, 0.0);
        assert_eq!(f.mean, vec![1001.5f32]);
        assert!((f.y[0].to_f32() + 1.3416).abs() < 0.01);
    }
}
