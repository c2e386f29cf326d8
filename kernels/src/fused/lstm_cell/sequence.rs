//! A whole LSTM direction in one call: every step's recurrent product accumulates into
//! that step's slice of the input projection, and the cell's elementwise half then turns
//! it into the activated gates in place, writing `c`, `tanh(c)` and `h` straight into
//! per-sequence buffers. No step allocates, copies or stacks anything; the backward runs
//! the same way into one `[T, N, 4H]` gradient that the caller turns into the weight and
//! input gradients with three large products.

use crate::Real;
use crate::cpu::HostBuffer;
use crate::cpu::reduce::for_each_outer;
use crate::cpu::simd::{FmaKernel, with_simd};
use crate::cpu::{
    GEMM_PARALLEL_FLOPS, PackedRhs, Parallelism, as_f32, as_f32_mut, gemm_into, num_threads,
    run_tasks,
};
use std::ops::Range;

/// The sizes of one direction: `steps` time steps of `batch` rows, hidden size `hidden`;
/// `reverse` runs the steps from the last to the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LstmDims {
    /// `T`.
    pub steps: usize,
    /// `N`.
    pub batch: usize,
    /// `H`.
    pub hidden: usize,
    /// Whether the steps run from `T - 1` down to 0.
    pub reverse: bool,
}

impl LstmDims {
    /// The time index of the `s`-th step run.
    ///
    /// ```
    /// use ferrograd_kernels::fused::lstm_cell::LstmDims;
    /// let dims = LstmDims { steps: 5, batch: 1, hidden: 1, reverse: true };
    /// assert_eq!((dims.time(0), dims.time(4)), (4, 0));
    /// ```
    pub fn time(&self, s: usize) -> usize {
        if self.reverse { self.steps - 1 - s } else { s }
    }
}

/// What [`lstm_sequence_forward`] keeps for [`lstm_sequence_backward`], indexed by time.
pub struct LstmSequence<T> {
    /// `[T, N, 4H]`: `sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)` of every step.
    pub gates: HostBuffer<T>,
    /// `[T, N, H]`: the cell state each step leaves.
    pub c: HostBuffer<T>,
    /// `[T, N, H]`: its tanh.
    pub tanh_c: HostBuffer<T>,
}

/// The recurrent weight as every step multiplies it: `[k, n]` through (row, column)
/// strides, and in f32 packed once for the sequence ([`PackedRhs`]), so no step packs it
/// again.
struct StepWeight<'a, T> {
    w: &'a [T],
    shape: (usize, usize),
    strides: (usize, usize),
    packed: Option<PackedRhs>,
}

impl<'a, T: Real + Send + Sync + 'static> StepWeight<'a, T> {
    fn new(w: &'a [T], shape: (usize, usize), strides: (usize, usize)) -> Self {
        let packed = as_f32(w).and_then(|w| PackedRhs::pack(w, shape, strides));
        StepWeight {
            w,
            shape,
            strides,
            packed,
        }
    }

    /// `dst (+)= a @ w` for row-major `dst` `[m, n]` and `a` `[m, k]`: on the team when
    /// the product is large enough to share.
    fn product(&self, dst: &mut [T], m: usize, a: &[T], accumulate: bool) {
        let (k, n) = self.shape;
        let shared = m * n * k >= GEMM_PARALLEL_FLOPS;
        if let (Some(p), Some(d), Some(a)) = (&self.packed, as_f32_mut(dst), as_f32(a)) {
            let threads = if shared { num_threads() } else { 1 };
            p.matmul_into(d, m, a, k, accumulate, threads);
            return;
        }
        let parallelism = if shared {
            Parallelism::Threads(num_threads())
        } else {
            Parallelism::None
        };
        gemm_into(
            parallelism,
            dst,
            (m, n, k),
            a,
            (k, 1),
            self.w,
            self.strides,
            accumulate,
        );
    }
}

/// A sequence buffer (`[T, N, width]`) shared by tasks that each own a block of batch
/// rows: the rows of a batch are independent sequences, so each task runs its rows
/// through every step, reading and writing only their slices of each step's block.
struct Shared<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the tasks form references only to the rows they own (see `rows_mut`), so
// sharing the base pointer is like handing out disjoint `chunks_mut`; `T: Send` lets the
// elements cross threads.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn new(s: &mut [T]) -> Self {
        Shared {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    /// A buffer not yet written: its rows are formed only through [`Shared::rows_zeroed`]
    /// (then, written, through [`Shared::rows_mut`]).
    fn uninit(s: &mut [std::mem::MaybeUninit<T>]) -> Self {
        Shared {
            ptr: s.as_mut_ptr().cast::<T>(),
            len: s.len(),
        }
    }

    /// [`Shared::rows_mut`] of rows not yet written, zeroed first: in cache, just before
    /// the task writes them, where zeroing the whole buffer up front wrote every element
    /// through memory once more (an 8 MiB `memset` per backward of the language-model
    /// benchmark's LSTM).
    ///
    /// # Safety
    /// As [`Shared::rows_mut`]; and `T` is a float type, whose all-zero bytes are `0`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn rows_zeroed(
        &self,
        t: usize,
        n: usize,
        width: usize,
        rows: &Range<usize>,
    ) -> &mut [T] {
        let start = (t * n + rows.start) * width;
        let len = rows.len() * width;
        assert!(
            start + len <= self.len,
            "lstm sequence: rows past the buffer"
        );
        // SAFETY: in bounds (checked), exclusive (the caller's contract); all-zero bytes
        // are a valid `T` (the caller's contract), so the slice formed after is
        // initialised.
        unsafe {
            self.ptr.add(start).write_bytes(0, len);
            std::slice::from_raw_parts_mut(self.ptr.add(start), len)
        }
    }

    /// Rows `rows` (of `width` elements) of step `t`'s block (`n` rows), to write (or,
    /// reborrowed shared, to read).
    ///
    /// # Safety
    /// No other live reference may overlap them (each task owns its rows).
    #[allow(clippy::mut_from_ref)]
    unsafe fn rows_mut(&self, t: usize, n: usize, width: usize, rows: &Range<usize>) -> &mut [T] {
        let start = (t * n + rows.start) * width;
        let len = rows.len() * width;
        assert!(
            start + len <= self.len,
            "lstm sequence: rows past the buffer"
        );
        // SAFETY: in bounds (checked); exclusive (the caller's contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// How many blocks of batch rows run a sequence side by side, each on one thread
/// through every step with no step-by-step synchronisation (rows are independent
/// sequences): as many as there are threads while every block keeps a full register
/// block of rows (8) and the recurrent weight fits a core's L2 beside its work (1 MiB:
/// each thread reads all of it every step). Otherwise one block, whose step products and
/// cells are shared by the threads step by step. On a 2-core Xeon (fam 6 model 167) at
/// T 64, batch 32, hidden 256 the row blocks took the forward 4.76-5.42 -> 4.66-4.97 ms
/// and the backward 5.23-5.79 -> 4.69-4.93 ms (binaries alternated), the LSTM LM training
/// step 23.4 -> 21.5 ms (medians of five).
fn row_blocks(n: usize, hs: usize, elem: usize) -> usize {
    const MIN_ROWS: usize = 8;
    const MAX_WEIGHT_BYTES: usize = 1 << 20;
    if 4 * hs * hs * elem > MAX_WEIGHT_BYTES {
        return 1;
    }
    num_threads().min(n / MIN_ROWS).max(1)
}

/// One row of the forward (of a sequence's step, and of [`lstm_cell_forward`]'s one
/// step), in place: `pre` (`4H` pre-activations, to which `add` is added first: the
/// biases, or the input projection) becomes the activated gates.
///
/// [`lstm_cell_forward`]: super::lstm_cell_forward
pub(super) struct ForwardRow<'a, T> {
    pub(super) pre: &'a mut [T],
    pub(super) add: Option<&'a [T]>,
    pub(super) c_prev: &'a [T],
    pub(super) c: &'a mut [T],
    pub(super) tanh_c: &'a mut [T],
    pub(super) h: &'a mut [T],
}

impl<T: Real> FmaKernel for ForwardRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let hs = self.c_prev.len();
        if let Some(b) = self.add {
            for (p, b) in self.pre.iter_mut().zip(b) {
                *p = *p + *b;
            }
        }
        // Short loops over few slices each, so that every one vectorises.
        for (q, gate) in self.pre.chunks_exact_mut(hs).enumerate() {
            if q == 2 {
                gate.iter_mut().for_each(|v| *v = v.tanh_fma::<FMA>());
            } else {
                gate.iter_mut().for_each(|v| *v = v.sigmoid_fma::<FMA>());
            }
        }
        let (i, rest) = self.pre.split_at(hs);
        let (f, rest) = rest.split_at(hs);
        let (g, o) = rest.split_at(hs);
        for ((c, cp), ((f, i), g)) in self
            .c
            .iter_mut()
            .zip(self.c_prev)
            .zip(f.iter().zip(i).zip(g))
        {
            *c = *f * *cp + *i * *g;
        }
        for (t, c) in self.tanh_c.iter_mut().zip(self.c.iter()) {
            *t = c.tanh_fma::<FMA>();
        }
        for ((h, o), t) in self.h.iter_mut().zip(o).zip(self.tanh_c.iter()) {
            *h = *o * *t;
        }
    }
}

/// The forward of one LSTM direction. `pre` `[T, N, 4H]` holds every step's input
/// projection `x W_ih^T` (without the biases) and becomes the kept gates; `bias` `[4H]`
/// is `b_ih + b_hh`; `w_hh` `[4H, H]` row-major; `h0`, `c0` `[N, H]`. Writes every step's
/// `h` into `y` `[T, N, H]` (by time index); the final state is `y` and `c` at the last
/// step run.
///
/// ```
/// use ferrograd_kernels::cpu::HostBuffer;
/// use ferrograd_kernels::fused::lstm_cell::{LstmDims, lstm_cell_forward, lstm_sequence_forward};
/// // One step, one row, hidden 1, zero recurrent weight: the cell alone.
/// let dims = LstmDims { steps: 1, batch: 1, hidden: 1, reverse: false };
/// let mut y = [0.0f64];
/// let seq = lstm_sequence_forward(HostBuffer::from_slice(&[0.5, -1.0, 2.0, 0.25]), None, &[0.0; 4], &[0.0], &[1.0], &mut y, dims);
/// let cell = lstm_cell_forward(&[0.5, -1.0, 2.0, 0.25], &[0.0; 4], &[1.0], 1);
/// assert_eq!(y[0], cell.h[0]);
/// assert_eq!(seq.c[0], cell.c[0]);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn lstm_sequence_forward<T: Real + Send + Sync + 'static>(
    mut pre: HostBuffer<T>,
    bias: Option<&[T]>,
    w_hh: &[T],
    h0: &[T],
    c0: &[T],
    y: &mut [T],
    dims: LstmDims,
) -> LstmSequence<T> {
    let LstmDims {
        steps,
        batch: n,
        hidden: hs,
        ..
    } = dims;
    let (row, gate_row) = (n * hs, 4 * n * hs);
    assert!(
        pre.len() == steps * gate_row
            && w_hh.len() == 4 * hs * hs
            && h0.len() == row
            && c0.len() == row
            && y.len() == steps * row
            && bias.is_none_or(|b| b.len() == 4 * hs),
        "lstm_sequence_forward: buffers do not match {steps} steps of {n} x {hs}"
    );
    if hs == 0 || n == 0 {
        return LstmSequence {
            gates: pre,
            c: HostBuffer::zeroed(steps * row),
            tanh_c: HostBuffer::zeroed(steps * row),
        };
    }
    // Every step's rows are zeroed by the block that owns them just before it writes them
    // (`rows_zeroed`), so every element is written before `assume_init` below.
    let mut c = HostBuffer::<T>::new_uninit(steps * row);
    let mut tanh_c = HostBuffer::<T>::new_uninit(steps * row);
    // W_hh^T [H, 4H]: W_hh^T[k, j] = w_hh[j * H + k].
    let w_t = StepWeight::new(w_hh, (hs, 4 * hs), (1, hs));
    let blocks = row_blocks(n, hs, std::mem::size_of::<T>());
    let per = n.div_ceil(blocks);
    let bufs = [
        Shared::new(&mut pre),
        Shared::uninit(&mut c),
        Shared::uninit(&mut tanh_c),
        Shared::new(y),
    ];
    let run = |b: usize| {
        let rows = b * per..((b + 1) * per).min(n);
        let m = rows.len();
        let [pre, c, tanh_c, y] = &bufs;
        for s in 0..steps {
            let t = dims.time(s);
            let prev = (s > 0).then(|| dims.time(s - 1));
            // SAFETY: this block's rows of step t (written; those of `c` and `tanh_c`
            // zeroed first, `T` a float) and of the previous step (read, written by this
            // block one step earlier): no other block touches them.
            let (gates, h_t, h_prev, c_t, c_prev, tanh_t) = unsafe {
                (
                    pre.rows_mut(t, n, 4 * hs, &rows),
                    y.rows_mut(t, n, hs, &rows),
                    match prev {
                        Some(p) => &*y.rows_mut(p, n, hs, &rows),
                        None => &h0[rows.start * hs..rows.end * hs],
                    },
                    c.rows_zeroed(t, n, hs, &rows),
                    match prev {
                        Some(p) => &*c.rows_mut(p, n, hs, &rows),
                        None => &c0[rows.start * hs..rows.end * hs],
                    },
                    tanh_c.rows_zeroed(t, n, hs, &rows),
                )
            };
            // gates += h_prev @ W_hh^T (on the team when one block runs all rows).
            w_t.product(gates, m, h_prev, true);
            let mut cells: Vec<_> = gates
                .chunks_mut(4 * hs)
                .zip(c_t.chunks_mut(hs))
                .zip(tanh_t.chunks_mut(hs))
                .zip(h_t.chunks_mut(hs))
                .collect();
            for_each_outer(&mut cells, m, 16 * hs, |r, one| {
                let (((pre, c), tanh_c), h) = &mut one[0];
                with_simd(ForwardRow {
                    pre,
                    add: bias,
                    c_prev: &c_prev[r * hs..(r + 1) * hs],
                    c,
                    tanh_c,
                    h,
                });
            });
        }
    };
    // One block runs on the caller, its products and cells on the team.
    run_tasks(blocks, run);
    // SAFETY: the blocks cover every row of every step, each zeroed then written above.
    let (c, tanh_c) = unsafe { (c.assume_init(), tanh_c.assume_init()) };
    LstmSequence {
        gates: pre,
        c,
        tanh_c,
    }
}

/// One row of the backward (of a sequence's step, and of [`lstm_cell_backward`]'s one
/// step): `dh + dy` reaches `h'` (`dh` alone without `dy`), `dc` reaches `c'` and becomes
/// the gradient reaching `c` (in place); writes the pre-activation gradient `da` (`4H`).
///
/// [`lstm_cell_backward`]: super::lstm_cell_backward
pub(super) struct BackwardRow<'a, T> {
    pub(super) dh: &'a [T],
    pub(super) dy: Option<&'a [T]>,
    pub(super) dc: &'a mut [T],
    pub(super) gates: &'a [T],
    pub(super) tanh_c: &'a [T],
    pub(super) c_prev: &'a [T],
    pub(super) da: &'a mut [T],
}

impl<T: Real> FmaKernel for BackwardRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let hs = self.dh.len();
        let one = T::one();
        let (i, rest) = self.gates.split_at(hs);
        let (f, rest) = rest.split_at(hs);
        let (g, o) = rest.split_at(hs);
        let (di, rest) = self.da.split_at_mut(hs);
        let (df, rest) = rest.split_at_mut(hs);
        let (dg, d_o) = rest.split_at_mut(hs);
        let (dh, dy, tc, cp) = (self.dh, self.dy, self.tanh_c, self.c_prev);
        // dm = dh + dy reaches h' = o tanh(c'), kept in d_o for now; short loops over few
        // slices each, so that every one vectorises.
        match dy {
            Some(dy) => {
                for (d, (dh, dy)) in d_o.iter_mut().zip(dh.iter().zip(dy)) {
                    *d = *dh + *dy;
                }
            }
            None => d_o.copy_from_slice(dh),
        }
        // The gradient reaching c' (in `dc`, scaled by f at the end).
        let dct = self.dc;
        for ((d, dm), (o, t)) in dct.iter_mut().zip(d_o.iter()).zip(o.iter().zip(tc)) {
            *d = *d + *dm * *o * (one - *t * *t);
        }
        for ((d, t), o) in d_o.iter_mut().zip(tc).zip(o) {
            *d = *d * *t * *o * (one - *o);
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
        for (d, f) in dct.iter_mut().zip(f) {
            *d = *d * *f;
        }
    }
}

/// The backward of [`lstm_sequence_forward`]: from `dy` `[T, N, H]` (the gradient
/// reaching every step's output) and `dh`, `dc` `[N, H]` (reaching the final state; on
/// return, the gradients of `h0` and `c0`), the pre-activation gradient `[T, N, 4H]` of
/// every step by time index, and its column sums `[4H]` (the biases' gradient), summed
/// step by step while each step's block is in cache. The weight and input gradients are
/// products over it (`da^T x`, `da^T h_prev`, `da W_ih`), left to the caller.
///
/// ```
/// use ferrograd_kernels::cpu::HostBuffer;
/// use ferrograd_kernels::fused::lstm_cell::*;
/// let dims = LstmDims { steps: 1, batch: 1, hidden: 1, reverse: false };
/// let mut y = [0.0f64];
/// let pre = vec![0.5, -1.0, 2.0, 0.25];
/// let seq = lstm_sequence_forward(HostBuffer::from_slice(&pre), None, &[0.0; 4], &[0.0], &[1.0], &mut y, dims);
/// let (mut dh, mut dc) = ([0.0], [1.0]);
/// let (da, db) = lstm_sequence_backward(&seq, &[0.0; 4], &[1.0], &[0.5], &mut dh, &mut dc, dims);
/// let cell = lstm_cell_forward(&pre, &[0.0; 4], &[1.0], 1);
/// let (da1, dc1) = lstm_cell_backward(&[0.5], &[1.0], &cell.gates, &cell.tanh_c, &[1.0], 1);
/// assert_eq!((da.to_vec(), dc[0]), (da1.to_vec(), dc1[0]));
/// assert_eq!(db.to_vec(), da1.to_vec()); // one step of one row
/// ```
pub fn lstm_sequence_backward<T: Real + Send + Sync + 'static>(
    seq: &LstmSequence<T>,
    w_hh: &[T],
    c0: &[T],
    dy: &[T],
    dh: &mut [T],
    dc: &mut [T],
    dims: LstmDims,
) -> (HostBuffer<T>, HostBuffer<T>) {
    let LstmDims {
        steps,
        batch: n,
        hidden: hs,
        ..
    } = dims;
    let (row, gate_row) = (n * hs, 4 * n * hs);
    assert!(
        seq.gates.len() == steps * gate_row
            && seq.c.len() == steps * row
            && w_hh.len() == 4 * hs * hs
            && c0.len() == row
            && dy.len() == steps * row
            && dh.len() == row
            && dc.len() == row,
        "lstm_sequence_backward: buffers do not match {steps} steps of {n} x {hs}"
    );
    let mut db = HostBuffer::<T>::zeroed(4 * hs);
    if hs == 0 || n == 0 {
        return (HostBuffer::zeroed(steps * gate_row), db);
    }
    // Every step's rows zeroed by their block just before it writes them (`rows_zeroed`).
    let mut da = HostBuffer::<T>::new_uninit(steps * gate_row);
    let w = StepWeight::new(w_hh, (4 * hs, hs), (hs, 1));
    let blocks = row_blocks(n, hs, std::mem::size_of::<T>());
    let per = n.div_ceil(blocks);
    // Each block's bias sums, added up at the end.
    let mut sums = HostBuffer::<T>::zeroed(blocks * 4 * hs);
    let bufs = [
        Shared::uninit(&mut da),
        Shared::new(dh),
        Shared::new(dc),
        Shared::new(&mut sums),
    ];
    let run = |b: usize| {
        let rows = b * per..((b + 1) * per).min(n);
        let m = rows.len();
        let [da, dh, dc, sums] = &bufs;
        // SAFETY: this block's rows of dh, dc and of its own bias sums: no other block
        // touches them.
        let (dh, dc, db) = unsafe {
            (
                dh.rows_mut(0, n, hs, &rows),
                dc.rows_mut(0, n, hs, &rows),
                sums.rows_mut(b, 1, 4 * hs, &(0..1)),
            )
        };
        let (r0, r1) = (rows.start, rows.end);
        for s in (0..steps).rev() {
            let t = dims.time(s);
            let c_prev = match s {
                0 => &c0[r0 * hs..r1 * hs],
                _ => {
                    let p = dims.time(s - 1);
                    &seq.c[(p * n + r0) * hs..(p * n + r1) * hs]
                }
            };
            // SAFETY: this block's rows of step t, zeroed first (`T` a float): no other
            // block touches them.
            let da_t = unsafe { da.rows_zeroed(t, n, 4 * hs, &rows) };
            let (gates, tanh_c, dy_t) = (
                &seq.gates[(t * n + r0) * 4 * hs..(t * n + r1) * 4 * hs],
                &seq.tanh_c[(t * n + r0) * hs..(t * n + r1) * hs],
                &dy[(t * n + r0) * hs..(t * n + r1) * hs],
            );
            {
                let dh_in: &[T] = dh;
                let mut cells: Vec<_> = da_t.chunks_mut(4 * hs).zip(dc.chunks_mut(hs)).collect();
                for_each_outer(&mut cells, m, 12 * hs, |r, one| {
                    let (da, dc) = &mut one[0];
                    let rr = r * hs..(r + 1) * hs;
                    with_simd(BackwardRow {
                        dh: &dh_in[rr.clone()],
                        dy: Some(&dy_t[rr.clone()]),
                        dc,
                        gates: &gates[r * 4 * hs..(r + 1) * 4 * hs],
                        tanh_c: &tanh_c[rr.clone()],
                        c_prev: &c_prev[rr],
                        da,
                    });
                });
            }
            // dh = da_t @ W_hh.
            w.product(dh, m, da_t, false);
            for r in da_t.chunks_exact(4 * hs) {
                for (b, d) in db.iter_mut().zip(r) {
                    *b = *b + *d;
                }
            }
        }
    };
    run_tasks(blocks, run);
    // SAFETY: the blocks cover every row of every step, each zeroed then written above.
    let da = unsafe { da.assume_init() };
    for block in sums.chunks_exact(4 * hs) {
        for (b, p) in db.iter_mut().zip(block) {
            *b = *b + *p;
        }
    }
    (da, db)
}

#[cfg(test)]
mod tests;
