//! Reductions along one dim of a contiguous buffer viewed as `[outer, r, inner]`, and the
//! row-wise fused softmax kernels. Multi-dim reductions are sequences of these.

use super::PARALLEL_THRESHOLD;
use super::par::for_each_chunk_mut;
use super::pool::HostBuffer;
use super::simd::{FmaKernel, with_simd};
use crate::{DType, Element, FloatElement, NumElement, Real};
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
    // 16 lanes: one AVX-512 or two AVX2 accumulators; the tail goes into the first
    // lanes too, so short rows do not end in a serial loop.
    const LANES: usize = 16;
    let mut lanes = [T::Acc::ZERO; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = *l + v.to_acc();
        }
    }
    for (l, &v) in lanes.iter_mut().zip(tail) {
        *l = *l + v.to_acc();
    }
    let mut total = T::Acc::ZERO;
    for l in lanes {
        total = total + l;
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
    let threads = crate::cpu::num_threads();
    if outer == 1
        && inner >= 16
        && r >= 2 * ROW_BLOCK
        && r * inner >= PARALLEL_THRESHOLD
        && (T::DTYPE == DType::F32 || T::DTYPE == DType::F64)
    {
        // Column sums of many rows (a bias gradient): rows in fixed blocks, each block's
        // column sums on the thread that takes it, then the blocks' sums added in order.
        // Each thread reads rows that the step's previous op (cut by rows) has just left
        // in its cache, where a cut by columns reads half of them from the other core's:
        // in a transformer block's step a [1024, 512] gradient's sums took 36-38 instead
        // of 90-96 us (2-core Xeon, fam 6 model 167). The blocks depend only on the
        // shape, so the result does not depend on the thread count.
        let rows = ROW_BLOCK.max(r.div_ceil(MAX_ROW_BLOCKS));
        let blocks = r.div_ceil(rows);
        let per = blocks.div_ceil(threads);
        let mut partial = HostBuffer::<T>::zeroed(blocks * inner);
        crate::cpu::for_each_chunk_mut(&mut partial, per * inner, |t, sums| {
            for (j, dst) in sums.chunks_exact_mut(inner).enumerate() {
                let b = t * per + j;
                let span = b * rows..((b + 1) * rows).min(r);
                with_simd(SumBlock {
                    block: &src[span.start * inner..span.end * inner],
                    dst,
                    inner,
                });
            }
        });
        for sums in partial.chunks_exact(inner) {
            for (d, v) in out.iter_mut().zip(sums) {
                *d = *d + *v;
            }
        }
        return out;
    }
    if outer < threads && inner >= 2 * COLUMN_BLOCK && outer * r * inner >= PARALLEL_THRESHOLD {
        // Few outer indices (half-precision column sums, or a few outer blocks): columns split
        // across the threads instead, each column still summed row by row in the same
        // order (the same result as one task).
        let per = inner
            .div_ceil(threads.div_ceil(outer))
            .next_multiple_of(COLUMN_BLOCK);
        let pieces: Vec<std::sync::Mutex<(usize, usize, &mut [T])>> = out
            .chunks_mut(inner)
            .enumerate()
            .flat_map(|(o, row)| {
                row.chunks_mut(per)
                    .enumerate()
                    .map(move |(p, dst)| std::sync::Mutex::new((o, p * per, dst)))
            })
            .collect();
        crate::cpu::run_tasks(pieces.len(), |t| {
            let mut piece = pieces[t].lock().unwrap_or_else(|e| e.into_inner());
            let (o, first, ref mut dst) = *piece;
            with_simd(SumColumns {
                block: &src[o * r * inner..(o + 1) * r * inner],
                dst,
                inner,
                first,
            })
        });
        drop(pieces);
        return out;
    }
    for_each_outer(&mut out, outer, r * inner, |o, dst| {
        with_simd(SumBlock {
            block: &src[o * r * inner..(o + 1) * r * inner],
            dst,
            inner,
        })
    });
    out
}

/// Columns per piece when [`sum_dim`] splits columns across threads (whole vectors).
const COLUMN_BLOCK: usize = 64;

/// The fewest rows per block of [`sum_dim`]'s column sums by row blocks.
const ROW_BLOCK: usize = 128;

/// The most row blocks of [`sum_dim`]'s column sums (longer blocks beyond).
const MAX_ROW_BLOCKS: usize = 64;

/// Columns `first..first + dst.len()` of one outer index of [`sum_dim`], each summed row
/// by row (all of them: [`SumBlock`]'s rows wider than one).
struct SumColumns<'a, T> {
    block: &'a [T],
    dst: &'a mut [T],
    inner: usize,
    first: usize,
}

impl<T: NumElement> super::simd::SimdKernel for SumColumns<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Self {
            block,
            dst,
            inner,
            first,
        } = self;
        let width = dst.len();
        let mut acc = vec![T::Acc::ZERO; width];
        for row in block.chunks_exact(inner) {
            for (a, &v) in acc.iter_mut().zip(&row[first..first + width]) {
                *a = *a + v.to_acc();
            }
        }
        for (d, a) in dst.iter_mut().zip(acc) {
            *d = T::from_acc(a);
        }
    }
}

/// One outer index of [`sum_dim`]: `dst[i] = sum_j block[j * inner + i]`, compiled per
/// SIMD level (the same lanes at every level, so the rounding does not depend on the CPU).
struct SumBlock<'a, T> {
    block: &'a [T],
    dst: &'a mut [T],
    inner: usize,
}

impl<T: NumElement> super::simd::SimdKernel for SumBlock<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Self { block, dst, inner } = self;
        if inner == 1 {
            dst[0] = T::from_acc(sum_slice(block));
        } else {
            // Inlined into this SIMD level's copy.
            SumColumns {
                block,
                dst,
                inner,
                first: 0,
            }
            .run();
        }
    }
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

/// The largest element of a row, for softmax and cross-entropy. NaN is skipped here: a
/// NaN element still makes every output NaN, because its `e^(x - max)` is NaN and so is
/// the row's sum (PyTorch's result). Skipping it lets the loop be a plain `max`.
#[inline(always)]
pub(crate) fn row_max<T: FloatElement>(row: &[T]) -> T::Acc {
    #[inline(always)]
    fn max<A: PartialOrd>(m: A, v: A) -> A {
        if v > m { v } else { m }
    }
    // 16 lanes stay in registers; each step folds a block of 64 as a tree first, so the
    // running maxima wait on one operation per block.
    let mut lanes = [T::Acc::neg_infinity(); ROW_LANES];
    let blocks = row.chunks_exact(4 * ROW_LANES);
    let tail = blocks.remainder();
    for c in blocks {
        for (j, m) in lanes.iter_mut().enumerate() {
            let (a, b) = (c[j].to_acc(), c[j + ROW_LANES].to_acc());
            let (x, y) = (c[j + 2 * ROW_LANES].to_acc(), c[j + 3 * ROW_LANES].to_acc());
            *m = max(*m, max(max(a, b), max(x, y)));
        }
    }
    let vectors = tail.chunks_exact(ROW_LANES);
    let scalars = vectors.remainder();
    for c in vectors {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = max(*m, v.to_acc());
        }
    }
    let m = lanes.iter().fold(T::Acc::neg_infinity(), |m, &v| max(m, v));
    scalars.iter().fold(m, |m, &v| max(m, v.to_acc()))
}

/// The register-resident lanes of the row loops.
const ROW_LANES: usize = 16;

/// One row of softmax (or log-softmax): max, exponentials with their sum, then scale or
/// shift. Writes every element of `dst` (uninitialised on entry) exactly once before
/// reading it. The row stays in L1 between the passes, so the input is read from memory
/// once and the output written once.
struct SoftmaxRow<'a, T> {
    row: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
    log: bool,
}

impl<T: FloatElement> FmaKernel for SoftmaxRow<'_, T> {
    type Output = ();

    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let max = row_max(self.row);
        let total = exp_shifted_sum::<T, FMA>(self.row, self.dst, max);
        // SAFETY: `exp_shifted_sum` wrote every element of `dst` (`row` is as long);
        // `MaybeUninit<T>` has `T`'s layout.
        let dst = unsafe { &mut *(self.dst as *mut [MaybeUninit<T>] as *mut [T]) };
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

/// `Σ e^(x - max)` over `row` (`max` at least every element, or NaN follows), in the
/// blocks and lanes of [`exp_shifted_sum`], storing nothing.
#[inline(always)]
pub(crate) fn exp_shifted_total<T: FloatElement, const FMA: bool>(
    row: &[T],
    max: T::Acc,
) -> T::Acc {
    let e = |v: T| (v.to_acc() - max).exp_nonpos::<FMA>();
    let mut lanes = [T::Acc::ZERO; ROW_LANES];
    let blocks = row.chunks_exact(4 * ROW_LANES);
    let tail = blocks.remainder();
    for c in blocks {
        for (j, l) in lanes.iter_mut().enumerate() {
            let (a, b) = (e(c[j]), e(c[j + ROW_LANES]));
            let (x, y) = (e(c[j + 2 * ROW_LANES]), e(c[j + 3 * ROW_LANES]));
            *l = *l + ((a + b) + (x + y));
        }
    }
    let vectors = tail.chunks_exact(ROW_LANES);
    let scalars = vectors.remainder();
    for c in vectors {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = *l + e(v);
        }
    }
    let total = lanes.iter().fold(T::Acc::ZERO, |t, &l| t + l);
    scalars.iter().fold(total, |t, &v| t + e(v))
}

/// Writes `e^(x - max)` of `row` into `dst` and returns their sum (of the values before
/// rounding to `T`), in one pass: blocks of 64 summed as trees into 16 lanes, so neither
/// the exponentials nor the additions wait on one another. A NaN in the row makes the
/// sum NaN.
#[inline(always)]
pub(crate) fn exp_shifted_sum<T: FloatElement, const FMA: bool>(
    row: &[T],
    dst: &mut [MaybeUninit<T>],
    max: T::Acc,
) -> T::Acc {
    debug_assert_eq!(row.len(), dst.len());
    let e = |v: T| (v.to_acc() - max).exp_nonpos::<FMA>();
    let mut lanes = [T::Acc::ZERO; ROW_LANES];
    let mut src = row.chunks_exact(4 * ROW_LANES);
    let mut out = dst.chunks_exact_mut(4 * ROW_LANES);
    for (c, d) in (&mut src).zip(&mut out) {
        for (j, l) in lanes.iter_mut().enumerate() {
            let (a, b) = (e(c[j]), e(c[j + ROW_LANES]));
            let (x, y) = (e(c[j + 2 * ROW_LANES]), e(c[j + 3 * ROW_LANES]));
            d[j].write(T::from_acc(a));
            d[j + ROW_LANES].write(T::from_acc(b));
            d[j + 2 * ROW_LANES].write(T::from_acc(x));
            d[j + 3 * ROW_LANES].write(T::from_acc(y));
            *l = *l + ((a + b) + (x + y));
        }
    }
    let (src, out) = (src.remainder(), out.into_remainder());
    let mut vectors = src.chunks_exact(ROW_LANES);
    let mut outs = out.chunks_exact_mut(ROW_LANES);
    for (c, d) in (&mut vectors).zip(&mut outs) {
        for ((l, o), &v) in lanes.iter_mut().zip(d).zip(c) {
            let ev = e(v);
            o.write(T::from_acc(ev));
            *l = *l + ev;
        }
    }
    let mut total = lanes.iter().fold(T::Acc::ZERO, |t, &l| t + l);
    for (o, &v) in outs.into_remainder().iter_mut().zip(vectors.remainder()) {
        let ev = e(v);
        o.write(T::from_acc(ev));
        total = total + ev;
    }
    total
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

/// `Σ f(row[j], other[j])` over two rows of equal length in 16 lanes (blocks of 64 as
/// trees), so the additions do not wait on one another.
#[inline(always)]
fn lane_sum<T: FloatElement>(a: &[T], b: &[T], f: impl Fn(T::Acc, T::Acc) -> T::Acc) -> T::Acc {
    debug_assert_eq!(a.len(), b.len());
    let mut lanes = [T::Acc::ZERO; ROW_LANES];
    let (blocks_a, blocks_b) = (a.chunks_exact(4 * ROW_LANES), b.chunks_exact(4 * ROW_LANES));
    let (tail_a, tail_b) = (blocks_a.remainder(), blocks_b.remainder());
    for (x, y) in blocks_a.zip(blocks_b) {
        for (j, l) in lanes.iter_mut().enumerate() {
            let t = |k: usize| f(x[j + k * ROW_LANES].to_acc(), y[j + k * ROW_LANES].to_acc());
            *l = *l + ((t(0) + t(1)) + (t(2) + t(3)));
        }
    }
    let (vectors_a, vectors_b) = (
        tail_a.chunks_exact(ROW_LANES),
        tail_b.chunks_exact(ROW_LANES),
    );
    let (scalars_a, scalars_b) = (vectors_a.remainder(), vectors_b.remainder());
    for (x, y) in vectors_a.zip(vectors_b) {
        for ((l, &u), &v) in lanes.iter_mut().zip(x).zip(y) {
            *l = *l + f(u.to_acc(), v.to_acc());
        }
    }
    let total = lanes.iter().fold(T::Acc::ZERO, |t, &l| t + l);
    scalars_a
        .iter()
        .zip(scalars_b)
        .fold(total, |t, (&u, &v)| t + f(u.to_acc(), v.to_acc()))
}

/// One row of the softmax (or log-softmax) input gradient from the output `y` and its
/// gradient `g`: a sum, then one pass writing every element of `dst`.
struct SoftmaxBackwardRow<'a, T> {
    y: &'a [T],
    g: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
    log: bool,
}

impl<T: FloatElement> FmaKernel for SoftmaxBackwardRow<'_, T> {
    type Output = ();

    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let rows = self.dst.iter_mut().zip(self.y.iter().zip(self.g));
        if self.log {
            // g - e^y Σ g (y is a log-probability, at most 0)
            let total = lane_sum(self.g, self.g, |g, _| g);
            for (d, (&y, &g)) in rows {
                d.write(T::from_acc(
                    g.to_acc() - y.to_acc().exp_nonpos::<FMA>() * total,
                ));
            }
        } else {
            // y (g - Σ g y)
            let dot = lane_sum(self.y, self.g, |y, g| y * g);
            for (d, (&y, &g)) in rows {
                d.write(T::from_acc(y.to_acc() * (g.to_acc() - dot)));
            }
        }
    }
}

/// The input gradient of softmax (`log == false`: `y · (g − Σ g·y)`) or log-softmax
/// (`g − e^y · Σ g`) over each contiguous row of length `len`, from the forward's output
/// `y` and the output gradient `g` (accumulating in f32 for half types): one kernel where
/// the formula takes four, and no temporaries.
///
/// ```
/// use ferrograd_kernels::cpu::softmax_backward_rows;
/// // softmax [0.5, 0.5]: a gradient on the first output moves the inputs apart
/// let dx = softmax_backward_rows(&[0.5f64, 0.5], &[1.0, 0.0], 1, 2, false);
/// assert_eq!(dx, vec![0.25, -0.25]);
/// ```
pub fn softmax_backward_rows<T: FloatElement>(
    y: &[T],
    g: &[T],
    rows: usize,
    len: usize,
    log: bool,
) -> HostBuffer<T> {
    assert!(
        y.len() == rows * len && g.len() == rows * len,
        "softmax_backward_rows: output {} and gradient {} elements for {rows} rows of {len}",
        y.len(),
        g.len()
    );
    let mut out = HostBuffer::<T>::new_uninit(rows * len);
    for_each_outer(&mut out, rows, len * 3, |o, dst| {
        let at = o * len..(o + 1) * len;
        with_simd(SoftmaxBackwardRow {
            y: &y[at.clone()],
            g: &g[at],
            dst,
            log,
        })
    });
    // SAFETY: `for_each_outer` hands every row of `out` to one `SoftmaxBackwardRow`, which
    // writes all of it.
    unsafe { out.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column sums split across 2 and 3 threads (few outer indices, uneven pieces; row
    /// blocks, with more blocks than the cap) equal one thread's bit for bit, and the
    /// plain loop.
    #[test]
    fn column_split_sums_equal_one_threads() {
        let _lock = crate::cpu::par::thread_count_lock();
        for (outer, r, inner) in [
            (1, 1000, 384),
            (2, 700, 200),
            (1, 300, 130),
            (3, 90, 1000),
            (1, 2048, 65),
            (1, 9000, 16),
        ] {
            let src: Vec<f32> = (0..outer * r * inner)
                .map(|i| ((i * 37) % 101) as f32 * 0.013 - 0.6)
                .collect();
            crate::cpu::set_num_threads(1);
            let one = sum_dim(&src, outer, r, inner);
            for threads in [2, 3] {
                crate::cpu::set_num_threads(threads);
                assert_eq!(
                    sum_dim(&src, outer, r, inner),
                    one,
                    "{outer} x {r} x {inner}"
                );
            }
            for o in 0..outer {
                for i in 0..inner {
                    let want: f64 = (0..r).map(|j| src[(o * r + j) * inner + i] as f64).sum();
                    assert!((one[o * inner + i] as f64 - want).abs() < 1e-3);
                }
            }
        }
        crate::cpu::set_num_threads(0);
    }

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
    /// Every block/lane/tail split of a row (64-blocks, 16-vectors, scalars) against an
    /// f64 reference, with a NaN row and an all `-inf` row.
    #[test]
    fn softmax_rows_match_the_reference_at_every_length() {
        for len in [1, 5, 16, 17, 63, 64, 65, 100, 1000] {
            let rows = 3;
            let mut x: Vec<f32> = (0..rows * len)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
                .collect();
            x[len + len / 2] = f32::NAN;
            for v in &mut x[2 * len..] {
                *v = f32::NEG_INFINITY;
            }
            for log in [false, true] {
                let got = softmax_family(&x, rows, len, log);
                let row = &x[..len];
                let max = row.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
                let total: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
                for (j, &v) in row.iter().enumerate() {
                    let lp = (v as f64 - max) - total.ln();
                    let want = if log { lp } else { lp.exp() };
                    let g = got[j] as f64;
                    assert!(
                        (g - want).abs() <= 2e-6 * want.abs().max(1.0),
                        "len {len} [{j}] log {log}: {g} vs {want}"
                    );
                }
                assert!(
                    got[len..].iter().all(|v| v.is_nan()),
                    "len {len}: a NaN or all -inf row gives NaN"
                );
            }
        }
    }

    /// The fused backward against the formula in f64 at every block/lane/tail split of a
    /// row, for both forms, f32 and f64, over enough rows to run in parallel.
    #[test]
    fn softmax_backward_rows_match_the_formula() {
        for len in [1, 5, 16, 17, 63, 64, 65, 100, 1000] {
            let rows = if len == 1000 { 70 } else { 3 };
            let x: Vec<f64> = (0..rows * len)
                .map(|i| ((i * 37 % 101) as f64 - 50.0) * 0.07)
                .collect();
            let g: Vec<f64> = (0..rows * len)
                .map(|i| ((i * 53 % 97) as f64 - 48.0) * 0.03)
                .collect();
            for log in [false, true] {
                let y = softmax_family(&x, rows, len, log);
                let got64 = softmax_backward_rows(&y, &g, rows, len, log);
                let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
                let g32: Vec<f32> = g.iter().map(|&v| v as f32).collect();
                let got32 = softmax_backward_rows(&y32, &g32, rows, len, log);
                for r in 0..rows {
                    let (yr, gr) = (&y[r * len..][..len], &g[r * len..][..len]);
                    let s: f64 = if log {
                        gr.iter().sum()
                    } else {
                        yr.iter().zip(gr).map(|(a, b)| a * b).sum()
                    };
                    for j in 0..len {
                        let want = if log {
                            gr[j] - yr[j].exp() * s
                        } else {
                            yr[j] * (gr[j] - s)
                        };
                        let (a, b) = (got64[r * len + j], got32[r * len + j] as f64);
                        assert!(
                            (a - want).abs() <= 1e-12,
                            "len {len} log {log} f64: {a} vs {want}"
                        );
                        assert!(
                            (b - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "len {len} log {log} f32: {b} vs {want}"
                        );
                    }
                }
            }
        }
    }

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
