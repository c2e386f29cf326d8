//! Fused LSTM cell: the elementwise half of one time step, forward and backward, each
//! one pass over the batch's rows (the recurrent product `h W_hh^T` stays a GEMM).
//!
//! Gate order is PyTorch's `i, f, g, o`: a row of pre-activations holds `4 H` values,
//! `[i | f | g | o]`. CUDA runs the composite tensor ops instead (no `.cu` yet).

mod sequence;
pub use sequence::{LstmDims, LstmSequence, lstm_sequence_backward, lstm_sequence_forward};

use crate::Real;
use crate::cpu::HostBuffer;
use crate::cpu::reduce::for_each_outer;
use crate::cpu::simd::with_simd;

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
    let hs = hidden.max(1);
    // The gates start as `hw`; each row adds `xt` and activates them in place.
    let mut gates = HostBuffer::<T>::from_slice(hw);
    let mut c = HostBuffer::<T>::zeroed(n * hidden);
    let mut tanh_c = HostBuffer::<T>::zeroed(n * hidden);
    let mut h = HostBuffer::<T>::zeroed(n * hidden);
    // Each row's outputs paired up, so one task writes all of a row (as layer norm does).
    let mut rows: Vec<_> = gates
        .chunks_mut(4 * hs)
        .zip(c.chunks_mut(hs))
        .zip(tanh_c.chunks_mut(hs))
        .zip(h.chunks_mut(hs))
        .collect();
    if hidden > 0 {
        for_each_outer(&mut rows, n, 16 * hidden, |r, row| {
            let (((gates, c), tanh_c), h) = &mut row[0];
            with_simd(sequence::ForwardRow {
                pre: gates,
                add: Some(&xt[r * 4 * hs..(r + 1) * 4 * hs]),
                c_prev: &c_prev[r * hs..(r + 1) * hs],
                c,
                tanh_c,
                h,
            });
        });
    }
    drop(rows);
    LstmCellOutput {
        gates,
        c,
        tanh_c,
        h,
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
    let hs = hidden.max(1);
    let mut da = HostBuffer::<T>::zeroed(4 * n * hidden);
    // dc becomes dc_prev in place.
    let mut dc_prev = HostBuffer::<T>::from_slice(dc);
    let mut rows: Vec<_> = da.chunks_mut(4 * hs).zip(dc_prev.chunks_mut(hs)).collect();
    if hidden > 0 {
        for_each_outer(&mut rows, n, 8 * hidden, |r, row| {
            let (da, dc) = &mut row[0];
            let rr = r * hs..(r + 1) * hs;
            with_simd(sequence::BackwardRow {
                dh: &dh[rr.clone()],
                dy: None,
                dc,
                gates: &gates[r * 4 * hs..(r + 1) * 4 * hs],
                tanh_c: &tanh_c[rr.clone()],
                c_prev: &c_prev[rr],
                da,
            });
        });
    }
    drop(rows);
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
