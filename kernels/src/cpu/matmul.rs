//! Batched matrix multiply through the `gemm` crate, which takes arbitrary row and column
//! strides, so transposed and broadcast operands are never copied.

use super::pool::HostBuffer;
use crate::{DType, Layout, NumElement};
use half::bf16;

mod strategies;

pub(crate) use strategies::gemm_into;
use strategies::*;

/// Sizes of a batched matmul `[batch, m, k] @ [batch, k, n] -> [batch, m, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Number of matrices.
    pub batch: usize,
    /// Rows of the left operand and of the result.
    pub m: usize,
    /// Columns of the right operand and of the result.
    pub n: usize,
    /// The contracted dim.
    pub k: usize,
}

/// Below this many multiply-adds per matrix, a product runs on one thread.
pub(crate) const GEMM_PARALLEL_FLOPS: usize = 48 * 48 * 48;

/// How many threads one GEMM of [`gemm`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parallelism {
    /// The calling thread alone.
    None,
    /// The calling thread and helpers of the kernels' team ([`run_tasks`](super::run_tasks)),
    /// this many threads in all.
    Threads(usize),
}

/// Pointers a GEMM's blocks share; each block reads the operands and writes only its own
/// part of the destination.
struct GemmPtrs<T> {
    dst: *mut T,
    lhs: *const T,
    rhs: *const T,
    /// The scratch matrix of a product turned around ([`scratch_orientation`]), or null.
    tmp: *mut f32,
}

// SAFETY: the blocks of `gemm` write disjoint parts of `dst` (rows or columns of their
// own) and only read `lhs`/`rhs`, which the caller guarantees stay valid and unaliased
// by writes for the call; `T` values may be sent between threads.
unsafe impl<T: Send> Sync for GemmPtrs<T> {}

impl<T> GemmPtrs<T> {
    /// The four pointers (a method, so closures capture the whole struct).
    fn get(&self) -> (*mut T, *const T, *const T, *mut f32) {
        (self.dst, self.lhs, self.rhs, self.tmp)
    }
}

/// Rows or columns per block of a threaded GEMM are a multiple of this (whole SIMD
/// vectors and microkernel panels).
const GEMM_BLOCK_ALIGN: usize = 16;

/// A row-major product at least this tall, and at least twice as tall as wide, is cut
/// into blocks of rows rather than of columns: each thread then reads only its own rows
/// of the left operand, which the step's previous op (cut by rows too) has just left in
/// that thread's cache, and packs the narrow right operand itself. A transformer block's
/// `[1024, 128] x [128, 384 | 512]` and `[1024, 512] x [512, 128]` products went from
/// 238-264 to 265-317 GFLOP/s inside the step (2-core Xeon, fam 6 model 167), the step
/// 7.0-7.15 -> 6.65-6.87 ms.
const TALL_ROWS: usize = 256;

/// `dst = alpha * dst + beta * lhs @ rhs` (dst read only when `read_dst`), with `gemm`'s
/// arguments: `m x n` destination and `m x k` / `k x n` operands given by a pointer and
/// column / row strides. With [`Parallelism::Threads`] the destination is cut into one
/// block per thread (by columns when it is row-major) and each block is one
/// single-threaded GEMM on the kernels' team, so the calling thread does its share (the
/// `gemm` crate's own threading parks the caller and hands the product to rayon's pool).
///
/// # Safety
/// As `gemm::gemm`: every element each pointer and stride reach must be in bounds, `dst`
/// must not overlap the operands, and the operands must stay unwritten during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<T: 'static + Copy + Send + Sync>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_cs: isize,
    dst_rs: isize,
    read_dst: bool,
    lhs: *const T,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const T,
    rhs_cs: isize,
    rhs_rs: isize,
    alpha: T,
    beta: T,
    parallelism: Parallelism,
) {
    // SAFETY: the caller's contract, passed on whole.
    unsafe {
        gemm_then(
            m,
            n,
            k,
            dst,
            dst_cs,
            dst_rs,
            read_dst,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            alpha,
            beta,
            parallelism,
            &|_| {},
        )
    }
}

/// The rows and columns of a block of a GEMM's destination that [`gemm_then`] has
/// finished.
#[derive(Clone, Debug)]
pub(crate) struct Finished {
    pub(crate) rows: std::ops::Range<usize>,
    pub(crate) cols: std::ops::Range<usize>,
}

/// [`gemm`], then `after` on each finished block of the destination, on the thread that
/// computed it while the block is still in its cache (a linear layer's bias). The blocks
/// cover the destination once; a product whose contraction is split across the threads
/// has one block, the whole destination, finished on the caller.
///
/// # Safety
/// As [`gemm`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_then<T: 'static + Copy + Send + Sync>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_cs: isize,
    dst_rs: isize,
    read_dst: bool,
    lhs: *const T,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const T,
    rhs_cs: isize,
    rhs_rs: isize,
    alpha: T,
    beta: T,
    parallelism: Parallelism,
    after: &(dyn Fn(Finished) + Sync),
) {
    let threads = match parallelism {
        Parallelism::Threads(t) => t,
        Parallelism::None => 1,
    };
    if split_contraction::<T>(m, n, k, threads, dst_cs, dst_rs) {
        // SAFETY: the caller's contract, passed on whole.
        unsafe {
            gemm_split_k(
                m,
                n,
                k,
                dst as *mut f32,
                (dst_cs, dst_rs),
                read_dst,
                (lhs as *const f32, lhs_cs, lhs_rs),
                (rhs as *const f32, rhs_cs, rhs_rs),
                *(&alpha as *const T as *const f32),
                *(&beta as *const T as *const f32),
                threads,
            )
        };
        after(Finished {
            rows: 0..m,
            cols: 0..n,
        });
        return;
    }
    // `gemm` runs a row-major destination as its transpose, so its microkernel's long
    // side (and the side its own threading splits, sharing the packed other operand) is
    // the destination's columns: cut there, unless there are too few of them.
    let by_rows = if dst_cs.abs() <= dst_rs.abs() {
        (n < 2 * GEMM_BLOCK_ALIGN && m > n) || (m >= 2 * n && m >= TALL_ROWS)
    } else {
        m >= 2 * GEMM_BLOCK_ALIGN || m > n
    };
    let long = if by_rows { m } else { n };
    let step = long
        .div_ceil(threads.max(1))
        .next_multiple_of(GEMM_BLOCK_ALIGN);
    let blocks = long.div_ceil(step.max(1));
    // An f32 product that the `gemm` crate runs slowly in its destination's orientation
    // is computed in the other one, into a scratch matrix, and copied over.
    let col = scratch_orientation::<T>(m, n, k, dst_cs, dst_rs, lhs_rs, rhs_cs);
    let mut scratch = col.map(|_| HostBuffer::<f32>::new_uninit(m * n));
    let (tcs, trs) = if col == Some(true) {
        (m as isize, 1)
    } else {
        (1, n as isize)
    };
    let tmp = scratch
        .as_mut()
        .map_or(std::ptr::null_mut(), |b| b.as_mut_ptr() as *mut f32);
    let p = GemmPtrs { dst, lhs, rhs, tmp };
    // One block (one thread, or a product too narrow to cut) runs on the caller.
    super::run_tasks(blocks, |b| {
        let start = b * step;
        let len = step.min(long - start);
        let at = start as isize;
        let (dst, lhs, rhs, tmp) = p.get();
        // SAFETY: block `b` is rows (or columns) `start..start + len` of the destination,
        // and the matching rows of `lhs` (or columns of `rhs`): a sub-matrix of what the
        // caller vouched for, with the same strides. Blocks write disjoint parts of `dst`
        // (and of the scratch matrix, `m * n` elements reached by `tcs`/`trs`).
        unsafe {
            let (bm, bn, d, l, r) = if by_rows {
                (
                    len,
                    n,
                    dst.offset(at * dst_rs),
                    lhs.offset(at * lhs_rs),
                    rhs,
                )
            } else {
                (
                    m,
                    len,
                    dst.offset(at * dst_cs),
                    lhs,
                    rhs.offset(at * rhs_cs),
                )
            };
            if tmp.is_null() {
                gemm::gemm(
                    bm,
                    bn,
                    k,
                    d,
                    dst_cs,
                    dst_rs,
                    read_dst,
                    l,
                    lhs_cs,
                    lhs_rs,
                    r,
                    rhs_cs,
                    rhs_rs,
                    alpha,
                    beta,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            } else {
                // T is f32 here (`scratch_orientation` checked it): the casts are
                // identities.
                let t = tmp.offset(at * if by_rows { trs } else { tcs });
                gemm::gemm(
                    bm,
                    bn,
                    k,
                    t as *mut T,
                    tcs,
                    trs,
                    false,
                    l,
                    lhs_cs,
                    lhs_rs,
                    r,
                    rhs_cs,
                    rhs_rs,
                    alpha,
                    *(&1.0f32 as *const f32 as *const T),
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
                // The scratch matrix is laid out transposed from `dst` (one of them
                // row-major, the other column-major): walk `dst` along its unit stride.
                let (outer, inner, d_os, t_is) = if dst_cs == 1 {
                    (bm, bn, dst_rs, tcs)
                } else {
                    (bn, bm, dst_cs, trs)
                };
                combine(
                    outer,
                    inner,
                    d as *mut f32,
                    d_os,
                    t,
                    t_is,
                    read_dst,
                    *(&alpha as *const T as *const f32),
                    *(&beta as *const T as *const f32),
                );
            }
        }
        let (rows, cols) = if by_rows {
            (start..start + len, 0..n)
        } else {
            (0..m, start..start + len)
        };
        after(Finished { rows, cols });
    });
    drop(scratch);
}

/// Batched matmul of strided views `lhs: [..batch, m, k]` and `rhs: [..batch, k, n]`
/// with the same batch dims (one or more; a batch stride of 0 broadcasts), which need not
/// merge into one stride: a `[B, H, T, D]` view transposed from `[B, T, H, D]` (attention's
/// heads) is multiplied where it lies, not copied first. The result is contiguous
/// `[batch, m, n]`, `batch` the product of the batch dims.
///
/// ```
/// use ferrograd_kernels::{cpu::matmul, Layout};
/// let a = [1.0f32, 2.0, 3.0, 4.0]; // [[1, 2], [3, 4]]
/// let l = Layout::contiguous(&[1, 2, 2]);
/// assert_eq!(matmul(&a, &l, &a, &l.transpose(1, 2)), vec![5.0, 11.0, 11.0, 25.0]);
/// ```
///
/// # Panics
/// When a layout has fewer than three dims or the batch dims differ.
pub fn matmul<T: NumElement>(
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
) -> HostBuffer<T> {
    let (ls, rs) = (lhs_layout.shape(), rhs_layout.shape());
    assert!(
        ls.len() >= 3 && ls.len() == rs.len() && ls[..ls.len() - 2] == rs[..rs.len() - 2],
        "matmul: batched operands of shapes {ls:?} and {rs:?} need the same batch dims"
    );
    let r = ls.len();
    let shape = MatmulShape {
        batch: ls[..r - 2].iter().product(),
        m: ls[r - 2],
        k: ls[r - 1],
        n: rs[r - 1],
    };
    let len = shape.batch * shape.m * shape.n;
    if len == 0 || shape.k == 0 {
        return HostBuffer::zeroed(len);
    }
    if T::DTYPE == DType::F32 || T::DTYPE == DType::F64 || T::DTYPE == DType::F16 {
        // gemm overwrites every element of its destination (beta = 0, read_dst = false),
        // so the output needs no zero-fill first.
        let mut out = HostBuffer::<T>::new_uninit(len);
        gemm_batched(&mut out[..], lhs, lhs_layout, rhs, rhs_layout, shape);
        // SAFETY: gemm_batched wrote all `len` elements (every batch's m x n block).
        return unsafe { out.assume_init() };
    }
    let mut out = HostBuffer::<T>::zeroed(len);
    match T::DTYPE {
        DType::BF16 => {
            // gemm has no bf16 kernel: widen to f32 (the accumulation type anyway).
            let widen = |x: &[T]| x.iter().map(|v| v.to_f64() as f32).collect::<Vec<f32>>();
            let (l32, r32) = (widen(lhs), widen(rhs));
            let mut o32 = vec![0f32; out.len()];
            gemm_batched(
                as_uninit(&mut o32),
                &l32,
                lhs_layout,
                &r32,
                rhs_layout,
                shape,
            );
            for (o, &v) in out.iter_mut().zip(o32.iter()) {
                *o = T::from_f64(bf16::from_f32(v).to_f64());
            }
        }
        _ => naive_batched(&mut out, lhs, lhs_layout, rhs, rhs_layout, shape),
    }
    out
}

/// `x @ w^T + bias` (a linear layer's forward) for `x` `[m, k]` and `w` `[n, k]` viewed
/// through their layouts (any strides), `bias` `[n]` contiguous: the product of [`matmul`]
/// with the bias added to each row in place while the row is in cache, so the output is
/// written once and no broadcast add follows.
///
/// ```
/// use ferrograd_kernels::{cpu::linear, Layout};
/// let x = [1.0f32, 2.0]; // [[1, 2]]
/// let w = [1.0f32, 1.0, 0.0, 1.0]; // [[1, 1], [0, 1]]
/// let y = linear(&x, &Layout::contiguous(&[1, 2]), &w, &Layout::contiguous(&[2, 2]), Some(&[0.5, -1.0]));
/// assert_eq!(y.to_vec(), vec![3.5, 1.0]);
/// ```
///
/// # Panics
/// When a layout is not 2-D, the contracted dims differ or the bias is not `[n]`.
pub fn linear<T: NumElement>(
    x: &[T],
    x_layout: &Layout,
    w: &[T],
    w_layout: &Layout,
    bias: Option<&[T]>,
) -> HostBuffer<T> {
    let (xs, ws) = (x_layout.shape(), w_layout.shape());
    assert!(
        xs.len() == 2 && ws.len() == 2 && xs[1] == ws[1] && bias.is_none_or(|b| b.len() == ws[0]),
        "linear: expected x [m, k], weight [n, k] and bias [n], got {xs:?}, {ws:?} and {:?}",
        bias.map(<[T]>::len)
    );
    if let Some(b) = bias
        && let Some(y) = linear_with_bias(x, x_layout, w, w_layout, b)
    {
        return y;
    }
    let (xl, wl) = (x_layout.unsqueeze(0), w_layout.transpose(0, 1).unsqueeze(0));
    let mut y = matmul(x, &xl, w, &wl);
    if let Some(b) = bias {
        super::reduce::for_each_outer(&mut y, xs[0], ws[0], |_, row| {
            for (v, b) in row.iter_mut().zip(b) {
                *v = *v + *b;
            }
        });
    }
    y
}

/// [`linear`] with a bias, in f32 and f64 over more than one row: one GEMM whose blocks
/// each add the bias to the rows they have just written, on their own thread, before the
/// next op reads them (no second pass over the output on the team). `None` for other
/// dtypes and for one row (the matrix-vector kernels' case).
fn linear_with_bias<T: NumElement>(
    x: &[T],
    x_layout: &Layout,
    w: &[T],
    w_layout: &Layout,
    bias: &[T],
) -> Option<HostBuffer<T>> {
    let (m, k, n) = (
        x_layout.shape()[0],
        x_layout.shape()[1],
        w_layout.shape()[0],
    );
    if !(T::DTYPE == DType::F32 || T::DTYPE == DType::F64) || m < 2 || n == 0 || k == 0 {
        return None;
    }
    let (xs, ws) = (x_layout.strides(), w_layout.strides());
    let x_last = x_layout.offset() + (m - 1) * xs[0] + (k - 1) * xs[1];
    let w_last = w_layout.offset() + (n - 1) * ws[0] + (k - 1) * ws[1];
    assert!(
        x_last < x.len() && w_last < w.len(),
        "linear: view outside storage"
    );
    let mut out = HostBuffer::<T>::new_uninit(m * n);
    let parallelism = if m * n * k >= GEMM_PARALLEL_FLOPS {
        Parallelism::Threads(crate::cpu::num_threads())
    } else {
        Parallelism::None
    };
    let dst = SharedDst(out.as_mut_ptr() as *mut T);
    let add_bias = |f: Finished| {
        for r in f.rows {
            // SAFETY: row `r`, columns `f.cols` of the `[m, n]` output: a block this
            // thread's GEMM has just written and no other thread touches.
            let row = unsafe {
                std::slice::from_raw_parts_mut(dst.get().add(r * n + f.cols.start), f.cols.len())
            };
            for (v, b) in row.iter_mut().zip(&bias[f.cols.clone()]) {
                *v = *v + *b;
            }
        }
    };
    // SAFETY: `out` holds `m x n` elements written row-major (row stride n, column stride
    // 1); every index of `x` and `w` reached is at most `x_last` / `w_last`, checked above;
    // `out` is freshly allocated, so it overlaps neither operand. The GEMM writes every
    // element (beta = 0, read_dst = false) before `add_bias` reads its block.
    unsafe {
        gemm_then(
            m,
            n,
            k,
            dst.get(),
            1,
            n as isize,
            false,
            x.as_ptr().add(x_layout.offset()),
            xs[1] as isize,
            xs[0] as isize,
            w.as_ptr().add(w_layout.offset()),
            ws[0] as isize,
            ws[1] as isize,
            T::ZERO,
            T::ONE,
            parallelism,
            &add_bias,
        );
        Some(out.assume_init())
    }
}

/// A GEMM destination whose finished blocks the threads each update.
struct SharedDst<T>(*mut T);
// SAFETY: each thread writes only the block it finished (see `linear_with_bias`).
unsafe impl<T: Send> Sync for SharedDst<T> {}
impl<T> SharedDst<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}

/// Views initialised memory as possibly-uninitialised (always sound).
fn as_uninit<T>(x: &mut [T]) -> &mut [std::mem::MaybeUninit<T>] {
    // SAFETY: MaybeUninit<T> has T's layout, and writing initialised values through it
    // keeps the slice initialised.
    unsafe { &mut *(x as *mut [T] as *mut [std::mem::MaybeUninit<T>]) }
}

/// A batched view's matrices: the storage offset of each (its batch dims, all but the
/// last two, unravelled row-major) and the (row, column) strides they share.
fn batch_offsets(layout: &Layout) -> (Vec<usize>, [usize; 2]) {
    let (shape, strides) = (layout.shape(), layout.strides());
    let r = shape.len();
    let mut offs = vec![layout.offset()];
    for d in 0..r - 2 {
        offs = offs
            .iter()
            .flat_map(|&o| (0..shape[d]).map(move |i| o + i * strides[d]))
            .collect();
    }
    (offs, [strides[r - 2], strides[r - 1]])
}

fn gemm_batched<T: NumElement>(
    out: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
    s: MatmulShape,
) {
    let ((l_offs, lst), (r_offs, rst)) = (batch_offsets(lhs_layout), batch_offsets(rhs_layout));
    if gemv_batched(out, (lhs, &l_offs, lst), (rhs, &r_offs, rst), s) {
        return;
    }
    let flops = s.m * s.n * s.k;
    let one_product = |b: usize, dst: &mut [std::mem::MaybeUninit<T>], parallelism: Parallelism| {
        let (lhs_off, rhs_off) = (l_offs[b], r_offs[b]);
        // Bounds: the views were built from these buffers by the runtime; check the last
        // element each one touches so the raw pointers below stay inside the slices.
        let lhs_last = lhs_off + (s.m.max(1) - 1) * lst[0] + (s.k.max(1) - 1) * lst[1];
        let rhs_last = rhs_off + (s.k.max(1) - 1) * rst[0] + (s.n.max(1) - 1) * rst[1];
        assert!(
            s.k == 0 || (lhs_last < lhs.len() && rhs_last < rhs.len()),
            "matmul: view outside storage"
        );
        if s.k == 0 {
            return;
        }
        // SAFETY: `dst` holds exactly m*n elements written row-major (row stride n, column
        // stride 1); every lhs/rhs index touched is at most `lhs_last`/`rhs_last`, checked
        // above to be in bounds; the buffers do not overlap (`dst` is freshly allocated).
        unsafe {
            crate::cpu::gemm(
                s.m,
                s.n,
                s.k,
                dst.as_mut_ptr() as *mut T,
                1,
                s.n as isize,
                false,
                lhs.as_ptr().add(lhs_off),
                lst[1] as isize,
                lst[0] as isize,
                rhs.as_ptr().add(rhs_off),
                rst[1] as isize,
                rst[0] as isize,
                T::ZERO,
                T::ONE,
                parallelism,
            );
        }
    };
    let per = s.m * s.n;
    if s.batch > 1 && flops < GEMM_PARALLEL_FLOPS * 8 {
        if let (Some(o), Some(l), Some(r)) = (
            super::packed::as_f32_uninit(out),
            super::packed::as_f32(lhs),
            super::packed::as_f32(rhs),
        ) && super::packed::small_products(
            o,
            (l, &l_offs, (lst[0], lst[1])),
            (r, &r_offs, (rst[0], rst[1])),
            (s.m, s.k, s.n),
        ) {
            return;
        }
        crate::cpu::for_each_chunk_mut(out, per, |b, dst| one_product(b, dst, Parallelism::None));
    } else {
        let parallelism = if flops >= GEMM_PARALLEL_FLOPS {
            Parallelism::Threads(crate::cpu::num_threads())
        } else {
            Parallelism::None
        };
        for (b, dst) in out.chunks_mut(per).enumerate() {
            one_product(b, dst, parallelism);
        }
    }
}

/// `[batch, m, k] @ [batch, k, n]` of f32 with `m` at most `MAX_FEW_ROWS` through the
/// matrix-vector kernels when the right operand has a unit stride (a linear layer's
/// `W^T`, or a `[k, n]` weight); returns whether it did (else `out` is untouched).
fn gemv_batched<T: NumElement>(
    out: &mut [std::mem::MaybeUninit<T>],
    (lhs, l_offs, lst): (&[T], &[usize], [usize; 2]),
    (rhs, r_offs, rst): (&[T], &[usize], [usize; 2]),
    s: MatmulShape,
) -> bool {
    let rows = rst[0] == 1 && lst[1] == 1;
    let cols = rst[1] == 1;
    if T::DTYPE != DType::F32 || s.m > super::gemv::MAX_FEW_ROWS || !(rows || cols) {
        return false;
    }
    // The outputs are few (n per product, against k * n weights read): initialise them so
    // that they can be seen as floats.
    out.iter_mut().for_each(|o| {
        o.write(T::ZERO);
    });
    // SAFETY: T is f32 (checked above), so these are the same memory with the same type,
    // and every element of `out` was just initialised.
    let (lhs, rhs, out) = unsafe {
        (
            std::slice::from_raw_parts(lhs.as_ptr() as *const f32, lhs.len()),
            std::slice::from_raw_parts(rhs.as_ptr() as *const f32, rhs.len()),
            std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, out.len()),
        )
    };
    if s.m > 1 {
        // A few rows (a decode step's running batch): the weight streamed once for all.
        for (b, dst) in out.chunks_mut(s.m * s.n).enumerate().take(s.batch) {
            let (lo, ro) = (l_offs[b], r_offs[b]);
            if rows {
                super::gemv::gemv_rows_few(&lhs[lo..], lst[0], s.m, s.k, &rhs[ro..], rst[1], dst);
            } else {
                super::gemv::gemv_cols_few(
                    &lhs[lo..],
                    lst[0],
                    lst[1],
                    s.m,
                    s.k,
                    &rhs[ro..],
                    rst[0],
                    dst,
                );
            }
        }
        return true;
    }
    for (b, dst) in out.chunks_mut(s.n).enumerate().take(s.batch) {
        let (lo, ro) = (l_offs[b], r_offs[b]);
        if rows {
            super::gemv::gemv_rows(&lhs[lo..lo + s.k], &rhs[ro..], rst[1], dst);
        } else {
            super::gemv::gemv_cols(&lhs[lo..], lst[1], s.k, &rhs[ro..], rst[0], dst);
        }
    }
    true
}

fn naive_batched<T: NumElement>(
    out: &mut [T],
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
    s: MatmulShape,
) {
    let ((l_offs, lst), (r_offs, rst)) = (batch_offsets(lhs_layout), batch_offsets(rhs_layout));
    for b in 0..s.batch {
        let (lo, ro) = (l_offs[b], r_offs[b]);
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = T::ZERO;
                for p in 0..s.k {
                    acc =
                        acc + lhs[lo + i * lst[0] + p * lst[1]] * rhs[ro + p * rst[0] + j * rst[1]];
                }
                out[(b * s.m + i) * s.n + j] = acc;
            }
        }
    }
}

#[cfg(test)]
mod tests;
