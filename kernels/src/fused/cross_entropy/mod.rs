//! Fused cross-entropy over class-index targets: one pass per row computes the row's
//! log-sum-exp, loss and weight; backward rebuilds the softmax from the saved log-sum-exp.
//! The log-sum-exp is kept as two numbers, the row's max `m` and `ln Σ exp(x - m)`, and
//! used as `(m - x) + ln Σ`: the sum `m + ln Σ` would round at the scale of `m` and lose
//! `ln Σ`'s digits for large logits (PyTorch's precision needs the two apart).
//! Formulas as PyTorch's `cross_entropy` with class weights, `ignore_index` and label
//! smoothing: with `w_c` the class weights (1 without), `eps` the smoothing and `C` classes,
//! `loss = (1 - eps) * w_t * (lse - x_t) + eps / C * sum_c w_c * (lse - x_c)`.

use crate::cpu::HostBuffer;
use crate::cpu::reduce::{exp_shifted_total, for_each_outer, row_max};
use crate::cpu::simd::{FmaKernel, with_simd};
use crate::cpu::{PARALLEL_THRESHOLD, for_each_chunk_mut};
use crate::cuda::KernelModule;
use crate::{Element, FloatElement, NumElement, Real};
use num_traits::Float;

/// The CUDA kernels of cross-entropy forward and backward (`cross_entropy.cu`), compiled by NVRTC.
pub const CUDA_MODULE: KernelModule =
    KernelModule::new("cross_entropy", include_str!("cross_entropy.cu"));

/// The options shared by forward and backward.
#[derive(Clone, Copy, Debug)]
pub struct CrossEntropyRows<'a, T> {
    /// Classes per row.
    pub classes: usize,
    /// Per-class weights, or `None` for 1.
    pub weight: Option<&'a [T]>,
    /// Rows whose target equals this contribute nothing.
    pub ignore_index: i64,
    /// Label smoothing in `[0, 1]`.
    pub smoothing: f64,
}

/// Per-row results of [`cross_entropy_rows`].
pub struct CrossEntropyOutput<T: NumElement> {
    /// Each row's loss (0 when ignored).
    pub loss: HostBuffer<T>,
    /// Each row's target weight `w_t` (0 when ignored): the mean's denominator.
    pub row_weight: HostBuffer<T>,
    /// Each row's log-sum-exp as `[max, ln Σ exp(x - max)]` pairs (`2 * rows` values),
    /// kept for backward.
    pub lse: HostBuffer<T::Acc>,
}

/// Cross-entropy of each row of contiguous logits `x` (`[rows, classes]`) at `target`
/// (valid: `0..classes` or the ignore index; checked by the caller).
///
/// ```
/// use ferrograd_kernels::fused::cross_entropy::{cross_entropy_rows, CrossEntropyRows};
/// let opts = CrossEntropyRows { classes: 2, weight: None, ignore_index: -100, smoothing: 0.0 };
/// let out = cross_entropy_rows(&[0.0f64, 0.0, 5.0, 5.0], &[1, -100], &opts);
/// assert!((out.loss[0] - 2f64.ln()).abs() < 1e-12);
/// assert_eq!((out.loss[1], out.row_weight.to_vec()), (0.0, vec![1.0, 0.0]));
/// ```
pub fn cross_entropy_rows<T: FloatElement>(
    x: &[T],
    target: &[i64],
    o: &CrossEntropyRows<'_, T>,
) -> CrossEntropyOutput<T> {
    let c = o.classes;
    let rows = target.len();
    assert!(
        x.len() == rows * c,
        "cross_entropy_rows: {} logits are not {rows} rows of {c}",
        x.len()
    );
    let mut out = vec![(T::ZERO, T::ZERO, [T::Acc::ZERO; 2]); rows];
    // Tasks of several rows.
    let per_task = if rows * c < PARALLEL_THRESHOLD {
        rows.max(1)
    } else {
        rows.div_ceil(crate::cpu::num_threads() * 4).max(1)
    };
    for_each_chunk_mut(&mut out, per_task, |task, slots| {
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = row_loss(x, target, o, task * per_task + i);
        }
    });
    CrossEntropyOutput {
        loss: out.iter().map(|o| o.0).collect(),
        row_weight: out.iter().map(|o| o.1).collect(),
        lse: out.iter().flat_map(|o| o.2).collect(),
    }
}

/// Row `r` of [`cross_entropy_rows`]: (loss, target weight, `[max, ln Σ]`).
fn row_loss<T: FloatElement>(
    x: &[T],
    target: &[i64],
    o: &CrossEntropyRows<'_, T>,
    r: usize,
) -> (T, T, [T::Acc; 2]) {
    let c = o.classes;
    let acc = |v: f64| <T::Acc as Element>::from_f64(v);
    let eps = acc(o.smoothing);
    let w = |j: usize| o.weight.map_or(T::Acc::ONE, |w| w[j].to_acc());
    let row = &x[r * c..(r + 1) * c];
    let lse = with_simd(RowLse { row });
    let [shift, log_total] = lse;
    // `lse - x` as `(max - x) + ln Σ` (see the module docs).
    let nll = |j: usize| (shift - row[j].to_acc()) + log_total;
    let t = target[r];
    if t == o.ignore_index {
        return (T::ZERO, T::ZERO, lse);
    }
    let t = t as usize;
    let mut loss = (T::Acc::ONE - eps) * w(t) * nll(t);
    if o.smoothing != 0.0 {
        let smooth = (0..c).fold(T::Acc::ZERO, |s, j| s + w(j) * nll(j));
        loss = loss + eps / acc(c as f64) * smooth;
    }
    (T::from_acc(loss), T::from_acc(w(t)), lse)
}

/// The gradient of [`cross_entropy_rows`]' per-row losses with respect to the logits,
/// each row scaled by `grad[r * grad_stride]` (stride 0: one scalar for all rows).
///
/// ```
/// use ferrograd_kernels::fused::cross_entropy::{cross_entropy_rows, cross_entropy_backward_rows, CrossEntropyRows};
/// let opts = CrossEntropyRows { classes: 2, weight: None, ignore_index: -100, smoothing: 0.0 };
/// let x = [0.0f64, 0.0];
/// let f = cross_entropy_rows(&x, &[1], &opts);
/// let dx = cross_entropy_backward_rows(&x, &[1], &opts, &f.lse, &[1.0], 0);
/// assert_eq!(dx, vec![0.5, -0.5]); // softmax minus the one-hot target
/// ```
pub fn cross_entropy_backward_rows<T: FloatElement>(
    x: &[T],
    target: &[i64],
    o: &CrossEntropyRows<'_, T>,
    lse: &[T::Acc],
    grad: &[T],
    grad_stride: usize,
) -> HostBuffer<T> {
    let c = o.classes;
    let rows = target.len();
    let acc = |v: f64| <T::Acc as Element>::from_f64(v);
    let eps = acc(o.smoothing);
    let w = |j: usize| o.weight.map_or(T::Acc::ONE, |w| w[j].to_acc());
    let total_w = match o.weight {
        Some(ws) => ws.iter().fold(T::Acc::ZERO, |s, &v| s + v.to_acc()),
        None => acc(c as f64),
    };
    let per_class = eps / acc(c as f64);
    let mut dx = HostBuffer::<T>::zeroed(rows * c);
    for_each_outer(&mut dx, rows, c * 2, |r, dst| {
        let t = target[r];
        if t == o.ignore_index {
            return;
        }
        let t = t as usize;
        let g = grad[r * grad_stride].to_acc();
        with_simd(GradRow {
            row: &x[r * c..(r + 1) * c],
            dst,
            shift: lse[2 * r],
            log_total: lse[2 * r + 1],
            // d = g * ((1 - eps) * w_t + eps / C * W) * p_j - g * eps / C * w_j,
            // then - g * (1 - eps) * w_t at the target.
            coef: g * ((T::Acc::ONE - eps) * w(t) + per_class * total_w),
            offset: g * per_class,
            weight: o.weight,
        });
        dst[t] = T::from_acc(dst[t].to_acc() - g * (T::Acc::ONE - eps) * w(t));
    });
    dx
}

/// A row's log-sum-exp: the max, then the sum of the exponentials (nothing stored).
struct RowLse<'a, T> {
    row: &'a [T],
}

impl<T: FloatElement> FmaKernel for RowLse<'_, T> {
    /// `[max, ln Σ exp(x - max)]` (max 0 for an all `-inf` row).
    type Output = [T::Acc; 2];

    #[inline(always)]
    fn body<const FMA: bool>(self) -> [T::Acc; 2] {
        let max = row_max(self.row);
        let shift = if max == T::Acc::neg_infinity() {
            T::Acc::ZERO
        } else {
            max
        };
        [shift, exp_shifted_total::<T, FMA>(self.row, shift).ln()]
    }
}

/// `dst[j] = coef * softmax_j - offset * w_j` over a row (w_j = 1 without weights).
struct GradRow<'a, T: NumElement> {
    row: &'a [T],
    dst: &'a mut [T],
    /// The row's `[max, ln Σ]`: `p_j = exp((x_j - max) - ln Σ)`.
    shift: T::Acc,
    log_total: T::Acc,
    coef: T::Acc,
    offset: T::Acc,
    weight: Option<&'a [T]>,
}

impl<T: FloatElement> FmaKernel for GradRow<'_, T> {
    type Output = ();

    /// `(x - max) - ln Σ <= 0`, so the exponential needs no overflow branch.
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let (shift, log_total, coef, offset) = (self.shift, self.log_total, self.coef, self.offset);
        match self.weight {
            Some(w) => {
                for ((d, &v), &wj) in self.dst.iter_mut().zip(self.row).zip(w) {
                    let p = ((v.to_acc() - shift) - log_total).exp_nonpos::<FMA>();
                    *d = T::from_acc(coef * p - offset * wj.to_acc());
                }
            }
            None => {
                for (d, &v) in self.dst.iter_mut().zip(self.row) {
                    *d = T::from_acc(
                        coef * ((v.to_acc() - shift) - log_total).exp_nonpos::<FMA>() - offset,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_matches_finite_differences_with_weights_and_smoothing() {
        let (rows, c) = (4, 5);
        let x: Vec<f64> = (0..rows * c)
            .map(|i| ((i * 37) % 11) as f64 / 3.0 - 1.5)
            .collect();
        let target = [2i64, -100, 0, 4];
        let weight = [0.5, 1.0, 2.0, 1.5, 0.25];
        let grad = [1.0, 2.0, -0.5, 3.0];
        let o = CrossEntropyRows {
            classes: c,
            weight: Some(&weight),
            ignore_index: -100,
            smoothing: 0.2,
        };
        let f = cross_entropy_rows(&x, &target, &o);
        assert_eq!(f.loss[1], 0.0);
        assert_eq!(f.row_weight, vec![2.0, 0.0, 0.5, 0.25]);
        let dx = cross_entropy_backward_rows(&x, &target, &o, &f.lse, &grad, 1);
        let objective = |x: &[f64]| -> f64 {
            let l = cross_entropy_rows(x, &target, &o).loss;
            l.iter().zip(&grad).map(|(a, b)| a * b).sum()
        };
        for i in 0..rows * c {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += 1e-6;
            xm[i] -= 1e-6;
            let fd = (objective(&xp) - objective(&xm)) / 2e-6;
            assert!((fd - dx[i]).abs() < 1e-7, "dx[{i}]: {fd} vs {}", dx[i]);
        }
    }

    /// Logits near 1e4 in f32: the loss and gradient keep f64's digits to f32 precision
    /// (the old `lse = max + ln Σ` form lost ~1e-4 in the loss at this scale).
    #[test]
    fn large_logits_keep_their_precision() {
        let c = 7;
        let x64: Vec<f64> = (0..c).map(|j| 1.0e4 + 0.37 * j as f64 - 1.1).collect();
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        // Reference on the f32-rounded inputs, in f64.
        let xr: Vec<f64> = x32.iter().map(|&v| v as f64).collect();
        let max = xr.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + xr.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        let o = CrossEntropyRows {
            classes: c,
            weight: None,
            ignore_index: -100,
            smoothing: 0.0,
        };
        let f = cross_entropy_rows(&x32, &[3], &o);
        let want = lse - xr[3];
        assert!(
            (f.loss[0] as f64 - want).abs() < 2e-6,
            "loss {} vs {want}",
            f.loss[0]
        );
        let dx = cross_entropy_backward_rows(&x32, &[3], &o, &f.lse, &[1.0], 0);
        for j in 0..c {
            let p = (xr[j] - lse).exp() - if j == 3 { 1.0 } else { 0.0 };
            assert!((dx[j] as f64 - p).abs() < 1e-6, "dx[{j}]: {} vs {p}", dx[j]);
        }
    }
}
