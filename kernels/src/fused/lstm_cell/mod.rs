//! Fused LSTM cell: the elementwise half of one time step, forward and backward, each
//! one pass over the batch's rows (the recurrent product `h W_hh^T` stays a GEMM).
//!
//! Gate order is PyTorch's `i, f, g, o`: a row of pre-activations holds `4 H` values,
//! `[i | f | g | o]`. CUDA runs the composite tensor ops instead (no `.cu` yet).

use crate::Real;
use crate::cpu::simd::{FmaKernel, with_simd};
use crate::cpu::{HostBuffer, PARALLEL_THRESHOLD, run_tasks};

/// What one forward step produces: the activated gates (kept for the backward), the new
/// cell state, its tanh (kept too) and the new hidden state.
pub struct LstmCellOutput<T> {
    /// `[N, 4H]`: `sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)`.
    pub gates: HostBuffer<T>,
    /// `[N, H]`: `c' = f c + i g`.
    pub c: HostBuffer<T>,
    /// `[N, H]`: `tanh(c')`.
    pub tanh_c: HostBuffer<T>,
    /// `[N, H]`: `h' = o tanh(c')`.
    pub h: HostBuffer<T>,
}

/// The logistic function, overflow-free (`e^-|x|` never overflows) and vectorisable.
#[inline(always)]
fn sigmoid<T: Real>(x: T) -> T {
    let e = (-x.abs()).exp_vec();
    let r = T::one() / (T::one() + e);
    if x >= T::zero() { r } else { e * r }
}

/// Rows per task: enough work per task that the hand-off pays (small batches run on
/// the calling thread).
fn rows_per_task(rows: usize, hidden: usize) -> usize {
    (PARALLEL_THRESHOLD / (4 * hidden).max(1))
        .max(1)
        .min(rows.max(1))
}

/// Splits `rows` into tasks and runs `body(first_row, last_row)` for each.
fn for_row_blocks(rows: usize, hidden: usize, body: impl Fn(usize, usize) + Sync) {
    let per = rows_per_task(rows, hidden);
    let tasks = rows.div_ceil(per);
    if tasks <= 1 {
        body(0, rows);
    } else {
        run_tasks(tasks, |t| body(t * per, ((t + 1) * per).min(rows)));
    }
}

/// A raw pointer that tasks writing disjoint rows share.
#[derive(Clone, Copy)]
struct Out<T>(*mut T);
// SAFETY: every task writes only its own rows (disjoint ranges of the buffer).
unsafe impl<T> Send for Out<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Out<T> {}

impl<T> Out<T> {
    /// The rows `[first, last)` of width `width`.
    ///
    /// # Safety
    /// No other live slice may overlap these rows, and the buffer must hold them.
    #[allow(clippy::mut_from_ref)]
    unsafe fn rows(&self, first: usize, last: usize, width: usize) -> &mut [T] {
        // SAFETY: the caller guarantees the rows are in bounds and unaliased.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(first * width), (last - first) * width) }
    }
}

struct Forward<'a, T> {
    xt: &'a [T],
    hw: &'a [T],
    c_prev: &'a [T],
    gates: &'a mut [T],
    c: &'a mut [T],
    tanh_c: &'a mut [T],
    h: &'a mut [T],
    hidden: usize,
}

impl<T: Real> FmaKernel for Forward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let hs = self.hidden;
        let rows = self.c_prev.len() / hs.max(1);
        for r in 0..rows {
            let (xt, hw) = (
                &self.xt[r * 4 * hs..][..4 * hs],
                &self.hw[r * 4 * hs..][..4 * hs],
            );
            let gates = &mut self.gates[r * 4 * hs..][..4 * hs];
            // Short loops over few slices each, so that every one vectorises (one loop
            // over all eight operands would need more runtime alias checks than LLVM
            // emits, and would stay scalar). A row is a few KiB: it stays in L1.
            for (q, gate) in gates.chunks_exact_mut(hs).enumerate() {
                let (x, w) = (&xt[q * hs..][..hs], &hw[q * hs..][..hs]);
                if q == 2 {
                    for ((o, x), w) in gate.iter_mut().zip(x).zip(w) {
                        *o = (*x + *w).tanh_vec();
                    }
                } else {
                    for ((o, x), w) in gate.iter_mut().zip(x).zip(w) {
                        *o = sigmoid(*x + *w);
                    }
                }
            }
            let (i, rest) = gates.split_at(hs);
            let (f, rest) = rest.split_at(hs);
            let (g, o) = rest.split_at(hs);
            let range = r * hs..(r + 1) * hs;
            let c = &mut self.c[range.clone()];
            for (((c, cp), (f, i)), g) in c
                .iter_mut()
                .zip(&self.c_prev[range.clone()])
                .zip(f.iter().zip(i))
                .zip(g)
            {
                *c = *f * *cp + *i * *g;
            }
            let tc = &mut self.tanh_c[range.clone()];
            for (t, c) in tc.iter_mut().zip(c.iter()) {
                *t = c.tanh_vec();
            }
            for ((h, o), t) in self.h[range].iter_mut().zip(o).zip(tc.iter()) {
                *h = *o * *t;
            }
        }
    }
}

/// One LSTM step's elementwise part over `n` rows: pre-activations `xt + hw` (both
/// `[n, 4 hidden]`: the input projection with both biases, and `h W_hh^T`), the previous
/// cell state `c_prev` `[n, hidden]`.
///
/// ```
/// use ferrograd_kernels::fused::lstm_cell::lstm_cell_forward;
/// // One row, hidden 1: i = f = g = o = 0 before activation, c_prev = 1.
/// let out = lstm_cell_forward(&[0.0f64; 4], &[0.0; 4], &[1.0], 1);
/// assert_eq!(out.c.to_vec(), vec![0.5]); // 0.5 * 1 + 0.5 * tanh(0)
/// assert!((out.h[0] - 0.5 * 0.5f64.tanh()).abs() < 1e-15);
/// ```
pub fn lstm_cell_forward<T: Real>(
    xt: &[T],
    hw: &[T],
    c_prev: &[T],
    hidden: usize,
) -> LstmCellOutput<T> {
    let n = c_prev.len() / hidden.max(1);
    assert!(
        xt.len() == 4 * n * hidden && hw.len() == xt.len() && c_prev.len() == n * hidden,
        "lstm_cell_forward: xt {} / hw {} elements are not {n} rows of 4 x {hidden}",
        xt.len(),
        hw.len()
    );
    let mut gates = HostBuffer::<T>::zeroed(4 * n * hidden);
    let (mut c, mut tanh_c, mut h) = (
        HostBuffer::<T>::zeroed(n * hidden),
        HostBuffer::<T>::zeroed(n * hidden),
        HostBuffer::<T>::zeroed(n * hidden),
    );
    let ptrs = (
        Out(gates.as_mut_ptr()),
        Out(c.as_mut_ptr()),
        Out(tanh_c.as_mut_ptr()),
        Out(h.as_mut_ptr()),
    );
    let hs = hidden;
    for_row_blocks(n, hidden, |first, last| {
        let ptrs = &ptrs;
        // SAFETY: each task gets disjoint rows [first, last) of buffers holding n rows.
        let (gates, c, tanh_c, h) = unsafe {
            (
                ptrs.0.rows(first, last, 4 * hs),
                ptrs.1.rows(first, last, hs),
                ptrs.2.rows(first, last, hs),
                ptrs.3.rows(first, last, hs),
            )
        };
        with_simd(Forward {
            xt: &xt[first * 4 * hs..last * 4 * hs],
            hw: &hw[first * 4 * hs..last * 4 * hs],
            c_prev: &c_prev[first * hs..last * hs],
            gates,
            c,
            tanh_c,
            h,
            hidden: hs,
        });
    });
    LstmCellOutput {
        gates,
        c,
        tanh_c,
        h,
    }
}

struct Backward<'a, T> {
    dh: &'a [T],
    dc: &'a [T],
    gates: &'a [T],
    tanh_c: &'a [T],
    c_prev: &'a [T],
    da: &'a mut [T],
    dc_prev: &'a mut [T],
    hidden: usize,
}

impl<T: Real> FmaKernel for Backward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let hs = self.hidden;
        let rows = self.dh.len() / hs.max(1);
        let one = T::one();
        for r in 0..rows {
            let gates = &self.gates[r * 4 * hs..][..4 * hs];
            let (i, rest) = gates.split_at(hs);
            let (f, rest) = rest.split_at(hs);
            let (g, o) = rest.split_at(hs);
            let da = &mut self.da[r * 4 * hs..][..4 * hs];
            let (di, rest) = da.split_at_mut(hs);
            let (df, rest) = rest.split_at_mut(hs);
            let (dg, d_o) = rest.split_at_mut(hs);
            let range = r * hs..(r + 1) * hs;
            let (dh, dc, tc, cp) = (
                &self.dh[range.clone()],
                &self.dc[range.clone()],
                &self.tanh_c[range.clone()],
                &self.c_prev[range.clone()],
            );
            // The gradient reaching c' (kept in dc_prev, scaled by f at the end); short
            // loops as in the forward, so each vectorises.
            let dct = &mut self.dc_prev[range];
            for (((d, dc), dh), (o, t)) in dct.iter_mut().zip(dc).zip(dh).zip(o.iter().zip(tc)) {
                *d = *dc + *dh * *o * (one - *t * *t);
            }
            for (((d, dct), g), i) in di.iter_mut().zip(dct.iter()).zip(g).zip(i) {
                *d = *dct * *g * *i * (one - *i);
            }
            for (((d, dct), cp), f) in df.iter_mut().zip(dct.iter()).zip(cp).zip(f) {
                *d = *dct * *cp * *f * (one - *f);
            }
            for (((d, dct), i), g) in dg.iter_mut().zip(dct.iter()).zip(i).zip(g) {
                *d = *dct * *i * (one - *g * *g);
            }
            for (((d, dh), t), o) in d_o.iter_mut().zip(dh).zip(tc).zip(o) {
                *d = *dh * *t * *o * (one - *o);
            }
            for (d, f) in dct.iter_mut().zip(f) {
                *d = *d * *f;
            }
        }
    }
}

/// The gradients of one [`lstm_cell_forward`] step: from `dh` and `dc` (`[n, hidden]`,
/// the gradients reaching `h'` and `c'`) and what the forward kept, the pre-activation
/// gradient `da` `[n, 4 hidden]` and `dc_prev` `[n, hidden]`.
///
/// ```
/// use ferrograd_kernels::fused::lstm_cell::{lstm_cell_backward, lstm_cell_forward};
/// let out = lstm_cell_forward(&[0.0f64; 4], &[0.0; 4], &[1.0], 1);
/// let (da, dc_prev) = lstm_cell_backward(&[0.0], &[1.0], &out.gates, &out.tanh_c, &[1.0], 1);
/// // Only c' is used: dc_prev = f = 0.5; d(i) = g i (1 - i) = 0; d(f) = c_prev f (1 - f).
/// assert_eq!(dc_prev.to_vec(), vec![0.5]);
/// assert_eq!(da.to_vec(), vec![0.0, 0.25, 0.5, 0.0]);
/// ```
pub fn lstm_cell_backward<T: Real>(
    dh: &[T],
    dc: &[T],
    gates: &[T],
    tanh_c: &[T],
    c_prev: &[T],
    hidden: usize,
) -> (HostBuffer<T>, HostBuffer<T>) {
    let n = dh.len() / hidden.max(1);
    assert!(
        dh.len() == n * hidden
            && dc.len() == dh.len()
            && tanh_c.len() == dh.len()
            && c_prev.len() == dh.len()
            && gates.len() == 4 * dh.len(),
        "lstm_cell_backward: operands are not {n} rows of hidden {hidden} (gates 4 x)"
    );
    let mut da = HostBuffer::<T>::zeroed(4 * n * hidden);
    let mut dc_prev = HostBuffer::<T>::zeroed(n * hidden);
    let ptrs = (Out(da.as_mut_ptr()), Out(dc_prev.as_mut_ptr()));
    let hs = hidden;
    for_row_blocks(n, hidden, |first, last| {
        let ptrs = &ptrs;
        // SAFETY: each task gets disjoint rows [first, last) of buffers holding n rows.
        let (da, dc_prev) = unsafe {
            (
                ptrs.0.rows(first, last, 4 * hs),
                ptrs.1.rows(first, last, hs),
            )
        };
        let rows = first * hs..last * hs;
        with_simd(Backward {
            dh: &dh[rows.clone()],
            dc: &dc[rows.clone()],
            gates: &gates[first * 4 * hs..last * 4 * hs],
            tanh_c: &tanh_c[rows.clone()],
            c_prev: &c_prev[rows],
            da,
            dc_prev,
            hidden: hs,
        });
    });
    (da, dc_prev)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cell written out in f64 with std's functions.
    fn reference(xt: &[f64], hw: &[f64], c_prev: &[f64], hs: usize) -> (Vec<f64>, Vec<f64>) {
        let n = c_prev.len() / hs;
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let (mut c, mut h) = (vec![0.0; n * hs], vec![0.0; n * hs]);
        for r in 0..n {
            for k in 0..hs {
                let a = |q: usize| xt[r * 4 * hs + q * hs + k] + hw[r * 4 * hs + q * hs + k];
                let cv = s(a(1)) * c_prev[r * hs + k] + s(a(0)) * a(2).tanh();
                c[r * hs + k] = cv;
                h[r * hs + k] = s(a(3)) * cv.tanh();
            }
        }
        (c, h)
    }

    fn data(len: usize, seed: u64) -> Vec<f64> {
        (0..len)
            .map(|i| (((i as u64 * 2_654_435_761 + seed) % 1000) as f64 / 125.0) - 4.0)
            .collect()
    }

    #[test]
    fn forward_matches_the_formula_in_f64_and_f32_over_row_blocks() {
        // 1 row (no split), and enough rows that the work is split across tasks.
        for (n, hs) in [(1, 3), (5, 7), (200, 64)] {
            let (xt, hw, cp) = (data(4 * n * hs, 1), data(4 * n * hs, 2), data(n * hs, 3));
            let (c, h) = reference(&xt, &hw, &cp, hs);
            let out = lstm_cell_forward(&xt, &hw, &cp, hs);
            for (a, b) in out.c.iter().zip(&c).chain(out.h.iter().zip(&h)) {
                assert!((a - b).abs() < 1e-14, "f64 {a} vs {b}");
            }
            let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<_>>();
            let out = lstm_cell_forward(&f(&xt), &f(&hw), &f(&cp), hs);
            for (a, b) in out.c.iter().zip(&c).chain(out.h.iter().zip(&h)) {
                assert!((*a as f64 - b).abs() < 2e-6, "f32 {a} vs {b}");
            }
        }
    }

    #[test]
    fn backward_matches_finite_differences() {
        let (n, hs) = (3, 5);
        let (xt, hw, cp) = (data(4 * n * hs, 4), data(4 * n * hs, 5), data(n * hs, 6));
        let (dh, dc) = (data(n * hs, 7), data(n * hs, 8));
        let out = lstm_cell_forward(&xt, &hw, &cp, hs);
        let (da, dcp) = lstm_cell_backward(&dh, &dc, &out.gates, &out.tanh_c, &cp, hs);
        // L = sum(dh * h') + sum(dc * c').
        let loss = |xt: &[f64], cp: &[f64]| {
            let (c, h) = reference(xt, &hw, cp, hs);
            c.iter()
                .zip(&dc)
                .chain(h.iter().zip(&dh))
                .map(|(a, b)| a * b)
                .sum::<f64>()
        };
        let eps = 1e-6;
        for j in 0..xt.len() {
            let (mut up, mut down) = (xt.clone(), xt.clone());
            up[j] += eps;
            down[j] -= eps;
            let fd = (loss(&up, &cp) - loss(&down, &cp)) / (2.0 * eps);
            assert!((fd - da[j]).abs() < 1e-7, "da[{j}] {} vs {fd}", da[j]);
        }
        for j in 0..cp.len() {
            let (mut up, mut down) = (cp.clone(), cp.clone());
            up[j] += eps;
            down[j] -= eps;
            let fd = (loss(&xt, &up) - loss(&xt, &down)) / (2.0 * eps);
            assert!(
                (fd - dcp[j]).abs() < 1e-7,
                "dc_prev[{j}] {} vs {fd}",
                dcp[j]
            );
        }
    }
}
