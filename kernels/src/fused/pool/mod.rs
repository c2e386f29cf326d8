//! 2-D max and average pooling over contiguous `[n, c, h, w]` planes, forward and backward,
//! one window scan per output (no im2col copy). Planes run in parallel above the threshold.
//!
//! Windows follow [`Conv2dGeometry`] (`c` = channels, padding on both sides, dilation).
//! [`PoolGeometry`] adds the output size (PyTorch's `ceil_mode` rule) and average
//! pooling's divisor (`count_include_pad`, `divisor_override`). Max pooling returns, per
//! output, the flat index `y * w + x` of the chosen element in its plane (PyTorch's
//! `return_indices`): the first maximum, or the last NaN, as PyTorch's kernels pick
//! (`val > max || isnan(val)`); padding never wins.

use crate::cpu::Conv2dGeometry;
use crate::cpu::HostBuffer;
use crate::cpu::simd::{SimdKernel, with_simd};
use crate::cpu::unfold::valid_columns;
use crate::cpu::{PARALLEL_THRESHOLD, for_each_chunk_mut};
use crate::cuda::KernelModule;
use crate::{Element, FloatElement, NumElement};
use std::mem::MaybeUninit;

/// What average pooling divides each window's sum by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvgDivisor {
    /// The window's size, padding included but clipped to the padded input
    /// (`count_include_pad=True`, PyTorch's default).
    Padded,
    /// The number of input elements in the window (`count_include_pad=False`).
    Valid,
    /// A fixed divisor (`divisor_override`).
    Fixed(usize),
}

impl AvgDivisor {
    /// The kernels' encoding: mode 0, 1 or 2, and the fixed divisor.
    pub fn code(self) -> (u64, u64) {
        match self {
            AvgDivisor::Padded => (0, 0),
            AvgDivisor::Valid => (1, 0),
            AvgDivisor::Fixed(d) => (2, d as u64),
        }
    }
}

/// A pooling window geometry with its output size and average divisor.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::pool::{AvgDivisor, PoolGeometry};
/// let window = Conv2dGeometry { n: 1, c: 1, input: [5, 5], kernel: [2, 2], stride: [2, 2], padding: [0, 0], dilation: [1, 1] };
/// assert_eq!(PoolGeometry::new(window, false, AvgDivisor::Padded).unwrap().output, [2, 2]);
/// assert_eq!(PoolGeometry::new(window, true, AvgDivisor::Padded).unwrap().output, [3, 3]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeometry {
    /// Batch, channels, input size, window, stride, padding, dilation.
    pub window: Conv2dGeometry,
    /// Output `[oh, ow]`.
    pub output: [usize; 2],
    /// Average pooling's divisor.
    pub divisor: AvgDivisor,
}

impl PoolGeometry {
    /// The geometry with PyTorch's output size (`ceil_mode` rounds up, but the last window
    /// must start inside the input or its left padding), or `None` when no window fits.
    pub fn new(window: Conv2dGeometry, ceil_mode: bool, divisor: AvgDivisor) -> Option<Self> {
        let mut output = [0; 2];
        for (d, out) in output.iter_mut().enumerate() {
            let (stride, pad) = (window.stride[d], window.padding[d]);
            let span = window.dilation[d] * (window.kernel[d].checked_sub(1)?) + 1;
            let padded = window.input[d] + 2 * pad;
            if stride == 0 || padded < span {
                return None;
            }
            let room = padded - span;
            let mut o = if ceil_mode {
                room.div_ceil(stride)
            } else {
                room / stride
            } + 1;
            if ceil_mode && (o - 1) * stride >= window.input[d] + pad {
                o -= 1;
            }
            *out = o;
        }
        Some(PoolGeometry {
            window,
            output,
            divisor,
        })
    }

    /// Per output row (`d = 0`) or column (`d = 1`), the extent average pooling divides by
    /// along that dim; the divisor of output `(oy, ox)` is the product of the two (or the
    /// fixed divisor). PyTorch's rule: the window clipped to the padded input, or to the
    /// input itself for [`AvgDivisor::Valid`].
    pub fn extents(&self, d: usize) -> Vec<usize> {
        let g = &self.window;
        let (k, s, p, n) = (
            g.kernel[d] as i64,
            g.stride[d] as i64,
            g.padding[d] as i64,
            g.input[d] as i64,
        );
        (0..self.output[d] as i64)
            .map(|o| match self.divisor {
                AvgDivisor::Fixed(_) => 1,
                AvgDivisor::Padded => {
                    let start = o * s - p;
                    ((start + k).min(n + p) - start) as usize
                }
                AvgDivisor::Valid => {
                    let start = o * s - p;
                    ((start + k).min(n) - start.max(0)).max(0) as usize
                }
            })
            .collect()
    }

    /// The divisors of one output plane, row-major.
    fn divisors<A: Element + std::ops::Mul<Output = A>>(&self) -> Vec<A> {
        if let AvgDivisor::Fixed(d) = self.divisor {
            return vec![A::from_f64(d as f64); self.output[0] * self.output[1]];
        }
        let (rows, cols) = (self.extents(0), self.extents(1));
        rows.iter()
            .flat_map(|&r| cols.iter().map(move |&c| A::from_f64((r * c) as f64)))
            .collect()
    }
}

/// The CUDA kernels of max and average pooling (`pool.cu`), compiled by NVRTC.
pub const CUDA_MODULE: KernelModule = KernelModule::new("pool", include_str!("pool.cu"));

/// Runs `f(first_plane, out_chunk)` over `out` split into whole planes of `plane_len`
/// outputs: one call serially below the parallel threshold, else chunks of planes.
fn for_planes<T: Send>(
    out: &mut [T],
    plane_len: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if plane_len == 0 || out.is_empty() {
        return;
    }
    let planes = out.len() / plane_len;
    if work < PARALLEL_THRESHOLD || planes == 1 {
        f(0, out);
        return;
    }
    let per_task = (PARALLEL_THRESHOLD / (work / planes).max(1)).clamp(1, planes);
    for_each_chunk_mut(out, per_task * plane_len, |i, chunk| f(i * per_task, chunk));
}

/// Calls `f(oy, ox0, n, start)` for every output row `oy` of one plane and each window tap
/// `(ki, kj)`, in that order, whose input row lies inside the image: the tap is inside the
/// image for the `n` output columns from `ox0`, which read the input at plane offsets
/// `start, start + stride, ...`. Bounds are worked out once per tap and row, so the
/// per-element loops check nothing.
#[inline(always)]
fn for_each_tap(
    g: &Conv2dGeometry,
    [oh, ow]: [usize; 2],
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let [h, w] = g.input;
    for oy in 0..oh {
        for ki in 0..g.kernel[0] {
            let Some(y) = (oy * g.stride[0] + ki * g.dilation[0])
                .checked_sub(g.padding[0])
                .filter(|&y| y < h)
            else {
                continue;
            };
            for kj in 0..g.kernel[1] {
                let offset = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
                let cols = valid_columns(offset, g.stride[1], w, ow);
                if cols.is_empty() {
                    continue;
                }
                let first = (y * w) as isize + (cols.start * g.stride[1]) as isize + offset;
                f(oy, cols.start, cols.len(), first as usize);
            }
        }
    }
}

/// Max pooling: the outputs `[n, c, oh, ow]` and, per output, the flat in-plane index of
/// the element chosen.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::pool::{max_pool2d, AvgDivisor, PoolGeometry};
/// let w = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [2, 2], padding: [0, 0], dilation: [1, 1] };
/// let g = PoolGeometry::new(w, false, AvgDivisor::Padded).unwrap();
/// let (out, idx) = max_pool2d(&[1.0f32, 4.0, 3.0, 2.0], &g);
/// assert_eq!((out.to_vec(), idx.to_vec()), (vec![4.0], vec![1]));
/// ```
pub fn max_pool2d<T: FloatElement>(x: &[T], pg: &PoolGeometry) -> (HostBuffer<T>, HostBuffer<i64>) {
    let g = &pg.window;
    let [h, w] = g.input;
    let [oh, ow] = pg.output;
    assert_eq!(x.len(), g.n * g.c * h * w, "max_pool2d: input length");
    let plane_out = oh * ow;
    let work = g.n * g.c * plane_out * g.kernel[0] * g.kernel[1];
    if is_2x2(pg) {
        return max_pool_2x2(x, pg);
    }
    let len = g.n * g.c * plane_out;
    if g.dilation == [1, 1] && g.input[0] * g.input[1] < i32::MAX as usize {
        let mut out = HostBuffer::<T>::new_uninit(len);
        let mut indices = HostBuffer::<i64>::new_uninit(len);
        max_pool_separable(x, pg, &mut out, &mut indices);
        // SAFETY: `max_pool_separable` hands every plane of both buffers to one
        // `MaxSeparable`, which writes each of its `oh` rows of `ow` values and indices.
        return unsafe { (out.assume_init(), indices.assume_init()) };
    }
    max_pool_scan(x, pg, HostBuffer::<i64>::zeroed(len), work)
}

/// [`max_pool2d`] for undilated windows, separably, columns first: per output row, the
/// maxima of its window rows for every input column (contiguous, vectorised selects),
/// split by column phase modulo the stride so that each window column is a contiguous
/// run across the outputs, then each output's maximum over its window columns (again
/// vectorised). Both steps keep PyTorch's pick — the last NaN in row-major window order
/// if there is one, else the first maximum — which is the best candidate under one total
/// order (NaNs by larger flat index, then values by size, ties by smaller flat index):
/// the column step meets a column's rows in index order, the row step compares the
/// columns' winners by that order.
fn max_pool_separable<T: FloatElement>(
    x: &[T],
    pg: &PoolGeometry,
    out: &mut [MaybeUninit<T>],
    indices: &mut [MaybeUninit<i64>],
) {
    let g = &pg.window;
    let [h, w] = g.input;
    let [oh, ow] = pg.output;
    let plane_out = oh * ow;
    let work = out.len() * g.kernel[0] * g.kernel[1];
    let phases = if g.stride[1] > 1 {
        w.div_ceil(g.stride[1]) * g.stride[1]
    } else {
        0
    };
    // Scratch rows, reused by whichever task runs next.
    let scratch = std::sync::Mutex::new(Vec::new());
    for_plane_pairs(out, indices, plane_out, work, |p, values, idx| {
        let mut mine = scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_else(|| Scratch {
                vv: vec![T::neg_infinity(); w],
                vi: vec![-1; w],
                // Unit strides read the row itself (no phases).
                pv: vec![T::neg_infinity(); phases],
                pi: vec![-1; phases],
                rv: vec![T::neg_infinity(); ow],
                ri: vec![-1; ow],
            });
        with_simd(MaxSeparable {
            src: &x[p * h * w..(p + 1) * h * w],
            values,
            indices: idx,
            g,
            out: [oh, ow],
            s: &mut mine,
        });
        scratch.lock().unwrap_or_else(|e| e.into_inner()).push(mine);
    });
}

/// One task's scratch rows for [`MaxSeparable`].
struct Scratch<T> {
    /// One output row's maxima over its window rows per input column, and their flat
    /// indices.
    vv: Vec<T>,
    vi: Vec<i32>,
    /// The same by column phase: phase `r` (columns `r, r + stride, ...`) at
    /// `r * ceil(w / stride)` (empty at unit stride).
    pv: Vec<T>,
    pi: Vec<i32>,
    /// One output row's running maxima and indices (-1: none yet).
    rv: Vec<T>,
    ri: Vec<i32>,
}

/// One plane of [`max_pool_separable`].
struct MaxSeparable<'a, T> {
    src: &'a [T],
    values: &'a mut [MaybeUninit<T>],
    indices: &'a mut [MaybeUninit<i64>],
    g: &'a Conv2dGeometry,
    out: [usize; 2],
    s: &'a mut Scratch<T>,
}

impl<T: FloatElement> SimdKernel for MaxSeparable<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let g = self.g;
        let [h, w] = g.input;
        let [oh, ow] = self.out;
        let [k0, k1] = g.kernel;
        let [s0, s1] = g.stride;
        let [p0, p1] = g.padding;
        let Scratch {
            vv,
            vi,
            pv,
            pi,
            rv,
            ri,
        } = self.s;
        let phase_len = w.div_ceil(s1);
        for oy in 0..oh {
            let rows = (oy * s0).saturating_sub(p0)..(oy * s0 + k0).saturating_sub(p0).min(h);
            let (ov, oi) = (
                &mut self.values[oy * ow..(oy + 1) * ow],
                &mut self.indices[oy * ow..(oy + 1) * ow],
            );
            if rows.is_empty() {
                ov.iter_mut().for_each(|d| _ = d.write(T::neg_infinity()));
                oi.iter_mut().for_each(|d| _ = d.write(-1));
                continue;
            }
            let top = rows.start;
            let base = (top * w) as i32;
            vv.copy_from_slice(&self.src[top * w..(top + 1) * w]);
            for (x, a) in vi.iter_mut().enumerate() {
                *a = base + x as i32;
            }
            for y in rows.start + 1..rows.end {
                let base = (y * w) as i32;
                let row = &self.src[y * w..(y + 1) * w];
                for (x, ((b, a), &v)) in vv.iter_mut().zip(vi.iter_mut()).zip(row).enumerate() {
                    // Later rows hold larger indices: a NaN or a strictly larger value wins.
                    let better = (v > *b) | v.is_nan();
                    *b = if better { v } else { *b };
                    *a = if better { base + x as i32 } else { *a };
                }
            }
            // Column phases (only with a stride: else phase 0 is the row itself).
            let (cv, ci) = if s1 == 1 {
                (&vv[..], &vi[..])
            } else {
                for r in 0..s1 {
                    let (dv, di) = (
                        &mut pv[r * phase_len..(r + 1) * phase_len],
                        &mut pi[r * phase_len..(r + 1) * phase_len],
                    );
                    let (sv, si) = (vv[r..].iter().step_by(s1), vi[r..].iter().step_by(s1));
                    for ((d, e), (&v, &c)) in dv.iter_mut().zip(di.iter_mut()).zip(sv.zip(si)) {
                        (*d, *e) = (v, c);
                    }
                }
                (&pv[..], &pi[..])
            };
            rv.fill(T::neg_infinity());
            ri.fill(-1);
            for kj in 0..k1 {
                // Output `ox` reads column `ox * s1 + kj - p1` = `(ox + q) * s1 + r`.
                let shift = kj as isize - p1 as isize;
                let (q, r) = (shift.div_euclid(s1 as isize), shift.rem_euclid(s1 as isize));
                let r = r as usize;
                // Outputs whose column lies in `0..w`: `0 <= (ox + q) * s1 + r < w`.
                let lo = (-q).max(0) as usize;
                let hi = ((w.saturating_sub(r)).div_ceil(s1) as isize - q).clamp(0, ow as isize)
                    as usize;
                if lo >= hi {
                    continue;
                }
                let from = r * phase_len + (lo as isize + q) as usize;
                let (sv, si) = (&cv[from..from + (hi - lo)], &ci[from..from + (hi - lo)]);
                for (((b, a), &v), &c) in rv[lo..hi]
                    .iter_mut()
                    .zip(ri[lo..hi].iter_mut())
                    .zip(sv)
                    .zip(si)
                {
                    let nan = v.is_nan();
                    let better = (*a < 0)
                        | (nan & (!b.is_nan() | (c > *a)))
                        | (!nan & ((v > *b) | ((v == *b) & (c < *a))));
                    *b = if better { v } else { *b };
                    *a = if better { c } else { *a };
                }
            }
            for ((d, i), (&v, &c)) in ov
                .iter_mut()
                .zip(oi.iter_mut())
                .zip(rv.iter().zip(ri.iter()))
            {
                d.write(v);
                i.write(c as i64);
            }
        }
    }
}

/// [`max_pool2d`] for any window: the argmax of each output row by window taps, then the
/// values gathered.
fn max_pool_scan<T: FloatElement>(
    x: &[T],
    pg: &PoolGeometry,
    mut indices: HostBuffer<i64>,
    work: usize,
) -> (HostBuffer<T>, HostBuffer<i64>) {
    let g = &pg.window;
    let [h, w] = g.input;
    let [oh, ow] = pg.output;
    let mut out = HostBuffer::<T>::zeroed(indices.len());
    for_plane_pairs(
        &mut out,
        &mut indices,
        oh * ow,
        work,
        |first, values, idx| {
            with_simd(MaxPlane {
                src: &x[first * h * w..(first + 1) * h * w],
                indices: idx,
                values,
                g,
                out: [oh, ow],
            });
        },
    );
    (out, indices)
}

/// Runs `f(plane, values, indices)` for every output plane of max pooling (`plane_len`
/// outputs each), serially below the parallel threshold, else whole planes per task.
fn for_plane_pairs<T: Send, I: Send>(
    out: &mut [T],
    indices: &mut [I],
    plane_len: usize,
    work: usize,
    f: impl Fn(usize, &mut [T], &mut [I]) + Sync,
) {
    let planes = out.len() / plane_len.max(1);
    if planes == 0 || plane_len == 0 {
        return;
    }
    let per_task = if work < PARALLEL_THRESHOLD {
        planes
    } else {
        (PARALLEL_THRESHOLD / (work / planes).max(1)).clamp(1, planes)
    };
    let tasks: Vec<PlaneJob<'_, T, I>> = out
        .chunks_mut(per_task * plane_len)
        .zip(indices.chunks_mut(per_task * plane_len))
        .map(|pair| std::sync::Mutex::new(Some(pair)))
        .collect();
    crate::cpu::run_tasks(tasks.len(), |t| {
        let (out, idx) = tasks[t]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("each task runs once");
        for (p, (o, i)) in out
            .chunks_exact_mut(plane_len)
            .zip(idx.chunks_exact_mut(plane_len))
            .enumerate()
        {
            f(t * per_task + p, o, i);
        }
    });
}

/// Whether `pg` is the common non-overlapping 2x2 window with stride 2 and every window
/// inside the input (no padding, dilation or `ceil_mode` overhang).
fn is_2x2(pg: &PoolGeometry) -> bool {
    let g = &pg.window;
    g.kernel == [2, 2]
        && g.stride == [2, 2]
        && g.padding == [0, 0]
        && g.dilation == [1, 1]
        && 2 * pg.output[0] <= g.input[0]
        && 2 * pg.output[1] <= g.input[1]
}

/// [`max_pool2d`] for [`is_2x2`] windows: value and index of each output in one pass, the
/// four candidates compared in window order with selects.
fn max_pool_2x2<T: FloatElement>(x: &[T], pg: &PoolGeometry) -> (HostBuffer<T>, HostBuffer<i64>) {
    let g = &pg.window;
    let [h, w] = g.input;
    let plane_out = pg.output[0] * pg.output[1];
    let len = g.n * g.c * plane_out;
    // Every output is written once below: no zero fill first.
    let mut out = HostBuffer::<T>::new_uninit(len);
    let mut indices = HostBuffer::<i64>::new_uninit(len);
    for_plane_pairs(&mut out, &mut indices, plane_out, len * 4, |p, o, i| {
        with_simd(Max2x2Plane {
            src: &x[p * h * w..(p + 1) * h * w],
            out: o,
            idx: i,
            w,
            ow: pg.output[1],
        });
    });
    // SAFETY: `for_plane_pairs` hands every plane of both buffers (their whole length, a
    // multiple of `plane_out`) to one `Max2x2Plane`, which writes each of its `oh` rows of
    // `ow` values and indices.
    unsafe { (out.assume_init(), indices.assume_init()) }
}

/// One task's planes of values and indices, taken once by the task that runs them.
type PlaneJob<'a, T, I> = std::sync::Mutex<Option<(&'a mut [T], &'a mut [I])>>;

/// One plane of [`max_pool_2x2`].
struct Max2x2Plane<'a, T> {
    src: &'a [T],
    out: &'a mut [MaybeUninit<T>],
    idx: &'a mut [MaybeUninit<i64>],
    w: usize,
    ow: usize,
}

impl<T: FloatElement> SimdKernel for Max2x2Plane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (w, ow) = (self.w, self.ow);
        for (oy, (orow, irow)) in self
            .out
            .chunks_exact_mut(ow)
            .zip(self.idx.chunks_exact_mut(ow))
            .enumerate()
        {
            let y0 = 2 * oy * w;
            let r0 = &self.src[y0..y0 + 2 * ow];
            let r1 = &self.src[y0 + w..y0 + w + 2 * ow];
            let (orow, irow) = (&mut orow[..ow], &mut irow[..ow]);
            let (row_at, wi) = (y0 as i64, w as i64);
            // The index: the window's first tap plus the winner's offset in the plane.
            for ox in 0..ow {
                let (a0, a1, c0, c1) = (r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]);
                // PyTorch's rule, as in `MaxPlane`: the first maximum, or the last NaN.
                let (mut m, mut off) = (a0, 0i64);
                for (v, o) in [(a1, 1), (c0, wi), (c1, wi + 1)] {
                    let better = (v > m) | v.is_nan();
                    m = if better { v } else { m };
                    off = if better { o } else { off };
                }
                orow[ox].write(m);
                irow[ox].write(row_at + 2 * ox as i64 + off);
            }
        }
    }
}

/// The window argmax of one plane, compiled per CPU feature level (where the selects below
/// can become blends rather than branches that mispredict on random data).
struct MaxPlane<'a, T> {
    src: &'a [T],
    indices: &'a mut [i64],
    /// The plane's output values, which hold each row's running maxima.
    values: &'a mut [T],
    g: &'a Conv2dGeometry,
    out: [usize; 2],
}

impl<T: FloatElement> SimdKernel for MaxPlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (src, indices, values) = (self.src, self.indices, self.values);
        let (ow, stride) = (self.out[1], self.g.stride[1]);
        indices.fill(-1);
        values.fill(T::neg_infinity());
        for_each_tap(self.g, self.out, |oy, ox0, count, start| {
            let at = &mut indices[oy * ow + ox0..oy * ow + ox0 + count];
            let best = &mut values[oy * ow + ox0..oy * ow + ox0 + count];
            let taps = src[start..].iter().step_by(stride);
            let positions = (start as i64..).step_by(stride);
            for (((b, a), &v), i) in best.iter_mut().zip(at).zip(taps).zip(positions) {
                // PyTorch's rule: the first maximum, or the last NaN; padding never wins.
                // Non-short-circuit `|`: a select, not a chain of branches.
                let better = (*a < 0) | (v > *b) | v.is_nan();
                *b = if better { v } else { *b };
                *a = if better { i } else { *a };
            }
        });
    }
}

/// The input gradient of [`max_pool2d`]: each output's gradient added at its chosen index.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::pool::{max_pool2d_backward, AvgDivisor, PoolGeometry};
/// let w = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [2, 2], padding: [0, 0], dilation: [1, 1] };
/// let g = PoolGeometry::new(w, false, AvgDivisor::Padded).unwrap();
/// assert_eq!(max_pool2d_backward(&[5.0f32], &[1], &g), vec![0.0, 5.0, 0.0, 0.0]);
/// ```
pub fn max_pool2d_backward<T: FloatElement>(
    grad: &[T],
    indices: &[i64],
    pg: &PoolGeometry,
) -> HostBuffer<T> {
    let g = &pg.window;
    let [h, w] = g.input;
    let [oh, ow] = pg.output;
    let plane_out = oh * ow;
    assert!(
        grad.len() == g.n * g.c * plane_out && indices.len() == grad.len(),
        "max_pool2d_backward: gradient and index lengths"
    );
    // Each plane is zeroed by the task that scatters into it, while it is in cache.
    let mut dx = HostBuffer::<T>::new_uninit(g.n * g.c * h * w);
    let work = grad.len() + dx.len();
    for_planes(&mut dx, h * w, work, |first, chunk| {
        for (p, plane) in chunk.chunks_exact_mut(h * w).enumerate() {
            plane.fill(MaybeUninit::new(T::ZERO));
            // SAFETY: every element of `plane` was written just above.
            let plane = unsafe { &mut *(plane as *mut [MaybeUninit<T>] as *mut [T]) };
            let range = (first + p) * plane_out..(first + p + 1) * plane_out;
            for (&gv, &i) in grad[range.clone()].iter().zip(&indices[range]) {
                plane[i as usize] = plane[i as usize] + gv;
            }
        }
    });
    // SAFETY: `for_planes` hands every plane of `dx` (its whole length, a multiple of
    // `h * w`) to the closure, which fills it.
    unsafe { dx.assume_init() }
}

/// Average pooling: each output is the window's sum over its divisor
/// ([`PoolGeometry::extents`]).
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::pool::{avg_pool2d, AvgDivisor, PoolGeometry};
/// let w = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [2, 2], padding: [0, 0], dilation: [1, 1] };
/// let g = PoolGeometry::new(w, false, AvgDivisor::Padded).unwrap();
/// assert_eq!(avg_pool2d(&[1.0f32, 4.0, 3.0, 2.0], &g), vec![2.5]);
/// ```
pub fn avg_pool2d<T: FloatElement>(x: &[T], pg: &PoolGeometry) -> HostBuffer<T> {
    let g = &pg.window;
    let [h, w] = g.input;
    let [oh, ow] = pg.output;
    assert_eq!(x.len(), g.n * g.c * h * w, "avg_pool2d: input length");
    let plane_out = oh * ow;
    let divisors = pg.divisors::<T::Acc>();
    let mut out = HostBuffer::<T>::zeroed(g.n * g.c * plane_out);
    let work = out.len() * g.kernel[0] * g.kernel[1];
    let stride = g.stride[1];
    for_planes(&mut out, plane_out, work, |first, chunk| {
        let mut sums = vec![<T::Acc as NumElement>::ZERO; plane_out];
        for (p, plane) in chunk.chunks_exact_mut(plane_out).enumerate() {
            let src = &x[(first + p) * h * w..(first + p + 1) * h * w];
            sums.fill(<T::Acc as NumElement>::ZERO);
            for_each_tap(g, [oh, ow], |oy, ox0, n, start| {
                let dst = &mut sums[oy * ow + ox0..oy * ow + ox0 + n];
                for (s, &v) in dst.iter_mut().zip(src[start..].iter().step_by(stride)) {
                    *s = *s + v.to_acc();
                }
            });
            for ((d, &s), &count) in plane.iter_mut().zip(&sums).zip(&divisors) {
                *d = T::from_acc(s / count);
            }
        }
    });
    out
}

/// The input gradient of [`avg_pool2d`]: each output's gradient over its divisor, added
/// to every input its window covers.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::pool::{avg_pool2d_backward, AvgDivisor, PoolGeometry};
/// let w = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [2, 2], padding: [0, 0], dilation: [1, 1] };
/// let g = PoolGeometry::new(w, false, AvgDivisor::Padded).unwrap();
/// assert_eq!(avg_pool2d_backward(&[4.0f32], &g), vec![1.0; 4]);
/// ```
pub fn avg_pool2d_backward<T: FloatElement>(grad: &[T], pg: &PoolGeometry) -> HostBuffer<T> {
    let g = &pg.window;
    let [h, w] = g.input;
    let [oh, ow] = pg.output;
    let plane_out = oh * ow;
    assert_eq!(
        grad.len(),
        g.n * g.c * plane_out,
        "avg_pool2d_backward: gradient length"
    );
    let divisors = pg.divisors::<T::Acc>();
    let mut dx = HostBuffer::<T>::zeroed(g.n * g.c * h * w);
    let work = grad.len() * g.kernel[0] * g.kernel[1];
    let stride = g.stride[1];
    for_planes(&mut dx, h * w, work, |first, chunk| {
        let mut acc = vec![<T::Acc as NumElement>::ZERO; h * w];
        let mut shares = vec![<T::Acc as NumElement>::ZERO; plane_out];
        for (p, plane) in chunk.chunks_exact_mut(h * w).enumerate() {
            acc.fill(<T::Acc as NumElement>::ZERO);
            let gp = &grad[(first + p) * plane_out..(first + p + 1) * plane_out];
            for ((s, &gv), &count) in shares.iter_mut().zip(gp).zip(&divisors) {
                *s = gv.to_acc() / count;
            }
            for_each_tap(g, [oh, ow], |oy, ox0, n, start| {
                let src = &shares[oy * ow + ox0..oy * ow + ox0 + n];
                for (a, &s) in acc[start..].iter_mut().step_by(stride).zip(src) {
                    *a = *a + s;
                }
            });
            for (d, &a) in plane.iter_mut().zip(&acc) {
                *d = T::from_acc(a);
            }
        }
    });
    dx
}

#[cfg(test)]
mod tests;
