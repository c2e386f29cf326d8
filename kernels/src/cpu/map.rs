//! Elementwise kernels: one generic loop per arity, with a contiguous fast path, a
//! strided fallback over coalesced rows, and the thread team above [`PARALLEL_THRESHOLD`].

use super::PARALLEL_THRESHOLD;
use super::par::for_each_chunk_mut;
use super::pool::HostBuffer;
use super::simd::{SimdKernel, with_simd};
use crate::layout::{coalesce, for_each_row};
use crate::{Element, Layout};
use std::mem::MaybeUninit;

/// Builds a pooled buffer of `n` elements by handing disjoint chunks of its uninitialised slots
/// to `fill(start, chunk)`, which must write every slot of its chunk. Above the threshold
/// the chunks go to the thread team, a few per thread; no zero-fill happens first.
fn build_vec<U: Copy + Send>(
    n: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) -> HostBuffer<U> {
    build_vec_in(
        n,
        if n < PARALLEL_THRESHOLD {
            n
        } else {
            parallel_chunk(n)
        },
        fill,
    )
}

/// Elements per task for a contiguous loop over `n` elements: a few tasks per thread so
/// that a late-starting worker costs little, never below 4096.
fn parallel_chunk(n: usize) -> usize {
    n.div_ceil(crate::cpu::num_threads() * 4).max(4096)
}

/// [`build_vec`] with chunks of exactly `chunk` slots (the last may be shorter): one
/// chunk runs on the calling thread, several go to the thread team.
pub(crate) fn build_vec_in<U: Copy + Send>(
    n: usize,
    chunk: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) -> HostBuffer<U> {
    let mut out = HostBuffer::<U>::new_uninit(n);
    let slots = &mut out[..];
    if chunk >= n {
        fill(0, slots);
    } else {
        let chunk = chunk.max(1);
        for_each_chunk_mut(slots, chunk, |i, c| fill(i * chunk, c));
    }
    // SAFETY: the chunks partition the first `n` slots and every caller's `fill` writes
    // every slot of its chunk (each zips the chunk with a source of the same length, or
    // walks whole rows that tile it).
    unsafe { out.assume_init() }
}

/// `dst[i] = f(src[i])` over equally long slices, vectorised per CPU level.
struct MapSlice<'a, T, U, F> {
    src: &'a [T],
    dst: &'a mut [MaybeUninit<U>],
    f: &'a F,
}

impl<T: Copy, U, F: Fn(T) -> U> SimdKernel for MapSlice<'_, T, U, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (d, &x) in self.dst.iter_mut().zip(self.src) {
            d.write((self.f)(x));
        }
    }
}

/// `dst[i] = f(a[i], b[i])` over equally long slices, vectorised per CPU level.
struct ZipSlices<'a, T, U, F> {
    a: &'a [T],
    b: &'a [T],
    dst: &'a mut [MaybeUninit<U>],
    f: &'a F,
}

impl<T: Copy, U, F: Fn(T, T) -> U> SimdKernel for ZipSlices<'_, T, U, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for ((d, &x), &y) in self.dst.iter_mut().zip(self.a).zip(self.b) {
            d.write((self.f)(x, y));
        }
    }
}

/// Rows handed to one task in strided loops.
fn rows_per_task(rows: usize, row_len: usize) -> usize {
    let per_task = (PARALLEL_THRESHOLD / row_len.max(1)).max(1);
    per_task.min(rows.max(1))
}

/// Output rows per block (and columns per tile) of [`transposed_map`].
const TRANSPOSE_BLOCK: usize = 16;
/// Output row strides (bytes) at whose multiples [`transposed_map`]'s block rows map to
/// so few L1 sets that they evict one another (64 sets of 64 bytes: 16 rows 4 KiB apart
/// share one set, 2 KiB apart two sets of 8, as many as an 8-way L1 holds).
const ALIASING_STRIDE: usize = 2048;

/// [`unary_map`] of a transposed matrix: output `(r, j)` from `src[offset + r + j *
/// stride]` (`rows` output rows of `cols`; a transposed contiguous matrix, such as
/// `w.t().contiguous()`). Blocks of [`TRANSPOSE_BLOCK`] output rows: for each column, the
/// block's inputs are one contiguous run, written down the column of the block, whose
/// rows stay in L1; a row at a time read every input from another cache line instead.
/// Output rows a multiple of [`ALIASING_STRIDE`] apart share their L1 sets, so the
/// block's rows do not stay there (every store missed: 2048 × 1024 took 2.2 ms against
/// 0.4 for 2000 × 1000 on the Zen 5): those blocks go by tiles of [`TRANSPOSE_BLOCK`]
/// columns, turned in a scratch and written as one contiguous run per output row
/// (0.34–0.40 ms; where the rows do stay, the tiles were slower than the columns).
fn transposed_map<T: Element, U: Element>(
    src: &[T],
    offset: usize,
    (rows, cols): (usize, usize),
    stride: usize,
    f: &(impl Fn(T) -> U + Sync),
) -> HostBuffer<U> {
    const B: usize = TRANSPOSE_BLOCK;
    let n = rows * cols;
    let rows_per = if n < PARALLEL_THRESHOLD {
        rows
    } else {
        rows_per_task(rows, cols).next_multiple_of(B)
    };
    let aliased = (cols * std::mem::size_of::<U>()).is_multiple_of(ALIASING_STRIDE);
    build_vec_in(n, rows_per * cols, |start, chunk| {
        let first = start / cols;
        let count = chunk.len() / cols;
        let mut tile = [[U::default(); B]; B];
        let mut r = 0;
        while r < count {
            let b = B.min(count - r);
            let block = &mut chunk[r * cols..(r + b) * cols];
            if !aliased {
                for j in 0..cols {
                    let at = offset + first + r + j * stride;
                    for (k, &x) in src[at..at + b].iter().enumerate() {
                        block[k * cols + j].write(f(x));
                    }
                }
                r += b;
                continue;
            }
            let mut j0 = 0;
            while j0 < cols {
                let jb = B.min(cols - j0);
                for (jj, col) in tile.iter_mut().enumerate().take(jb) {
                    let at = offset + first + r + (j0 + jj) * stride;
                    for (t, &x) in col.iter_mut().zip(&src[at..at + b]) {
                        *t = f(x);
                    }
                }
                for (k, row) in block.chunks_exact_mut(cols).enumerate() {
                    for (jj, d) in row[j0..j0 + jb].iter_mut().enumerate() {
                        d.write(tile[jj][k]);
                    }
                }
                j0 += jb;
            }
            r += b;
        }
    })
}

/// `out[i] = f(src[i])` over a strided view; the result is contiguous.
///
/// ```
/// use ferrograd_kernels::{cpu::unary_map, Layout};
/// let src = [1.0f32, 2.0, 3.0, 4.0];
/// let t = Layout::contiguous(&[2, 2]).transpose(0, 1);
/// assert_eq!(unary_map(&src, &t, |x| x * 10.0), vec![10.0, 30.0, 20.0, 40.0]);
/// ```
pub fn unary_map<T: Element, U: Element>(
    src: &[T],
    layout: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> HostBuffer<U> {
    let n = layout.numel();
    if let Some(range) = layout.contiguous_range() {
        let src = &src[range];
        return build_vec(n, |start, dst| {
            let src = &src[start..start + dst.len()];
            with_simd(MapSlice { src, dst, f: &f })
        });
    }
    let (shape, strides) = coalesce(layout.shape(), [layout.strides()]);
    let inner = *shape.last().unwrap();
    let inner_stride = *strides[0].last().unwrap();
    if inner == 0 {
        return HostBuffer::zeroed(0);
    }
    if shape.len() == 2 && strides[0][0] == 1 && inner_stride > 1 {
        return transposed_map(src, layout.offset(), (shape[0], inner), inner_stride, &f);
    }
    if shape.len() == 1 {
        // One strided row (an expanded scalar, such as the gradient of a `sum`, is one
        // row of stride 0): split along it, as a contiguous loop is.
        let off = layout.offset();
        return build_vec(n, |start, dst| {
            if inner_stride == 0 {
                let v = f(src[off]);
                for d in dst.iter_mut() {
                    d.write(v);
                }
            } else {
                // Indexed, so a layout past the storage panics instead of leaving slots
                // unwritten.
                for (i, d) in dst.iter_mut().enumerate() {
                    d.write(f(src[off + (start + i) * inner_stride]));
                }
            }
        });
    }
    // Whole rows per task; each task writes exactly its rows.
    let rows_per = rows_per_task(n / inner, inner);
    let rows_per = if n < PARALLEL_THRESHOLD {
        n / inner
    } else {
        rows_per
    };
    build_vec_in(n, rows_per * inner, |start, chunk| {
        let first = start / inner;
        for_each_row(
            &shape,
            &strides,
            [layout.offset()],
            first..first + chunk.len() / inner,
            |row, [o]| {
                let dst = &mut chunk[(row - first) * inner..(row - first + 1) * inner];
                match inner_stride {
                    // Unit stride: a slice map the compiler vectorises, at the CPU's width.
                    1 => with_simd(MapSlice {
                        src: &src[o..o + inner],
                        dst,
                        f: &f,
                    }),
                    // A broadcast (an expanded scalar or row): one value, a vector fill.
                    0 => {
                        let v = f(src[o]);
                        for d in dst.iter_mut() {
                            d.write(v);
                        }
                    }
                    _ => {
                        let row = src[o..].iter().step_by(inner_stride);
                        for (d, &x) in dst.iter_mut().zip(row) {
                            d.write(f(x));
                        }
                    }
                }
            },
        );
    })
}

/// `out[i] = f(lhs[i], rhs[i])` over two strided views of one shape (broadcast views have
/// stride 0); the result is contiguous.
///
/// ```
/// use ferrograd_kernels::{cpu::binary_map, Layout};
/// let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let b = [10.0f32, 20.0, 30.0];
/// let la = Layout::contiguous(&[2, 3]);
/// let lb = Layout::contiguous(&[3]).broadcast_to(&[2, 3]);
/// assert_eq!(binary_map(&a, &la, &b, &lb, |x, y| x + y), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
/// ```
pub fn binary_map<T: Element, U: Element>(
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
    f: impl Fn(T, T) -> U + Sync,
) -> HostBuffer<U> {
    debug_assert_eq!(lhs_layout.shape(), rhs_layout.shape());
    let n = lhs_layout.numel();
    if let (Some(lr), Some(rr)) = (lhs_layout.contiguous_range(), rhs_layout.contiguous_range()) {
        let (l, r) = (&lhs[lr], &rhs[rr]);
        return build_vec(n, |start, dst| {
            let end = start + dst.len();
            with_simd(ZipSlices {
                a: &l[start..end],
                b: &r[start..end],
                dst,
                f: &f,
            })
        });
    }
    // A contiguous view against one value broadcast (a scalar operand: `x * 0.5`), as a
    // vectorised map in parallel chunks; coalesced, it would be one row on one thread.
    let single = |l: &Layout| l.strides().iter().all(|&s| s == 0);
    if n > 0 {
        if let (Some(lr), true) = (lhs_layout.contiguous_range(), single(rhs_layout)) {
            let (l, b, f) = (&lhs[lr], rhs[rhs_layout.offset()], &f);
            // `move`: the value held in the closure, not read through a reference on
            // every element (which keeps the loop scalar).
            let g = move |a: T| f(a, b);
            return build_vec(n, |start, dst| {
                let src = &l[start..start + dst.len()];
                with_simd(MapSlice { src, dst, f: &g })
            });
        }
        if let (true, Some(rr)) = (single(lhs_layout), rhs_layout.contiguous_range()) {
            let (a, r, f) = (lhs[lhs_layout.offset()], &rhs[rr], &f);
            let g = move |b: T| f(a, b);
            return build_vec(n, |start, dst| {
                let src = &r[start..start + dst.len()];
                with_simd(MapSlice { src, dst, f: &g })
            });
        }
    }
    let (shape, strides) = coalesce(
        lhs_layout.shape(),
        [lhs_layout.strides(), rhs_layout.strides()],
    );
    let inner = *shape.last().unwrap();
    let (ls, rs) = (*strides[0].last().unwrap(), *strides[1].last().unwrap());
    if inner == 0 {
        return HostBuffer::zeroed(0);
    }
    let base = [lhs_layout.offset(), rhs_layout.offset()];
    let rows_per = if n < PARALLEL_THRESHOLD {
        n / inner
    } else {
        rows_per_task(n / inner, inner)
    };
    build_vec_in(n, rows_per * inner, |start, chunk| {
        let first = start / inner;
        for_each_row(
            &shape,
            &strides,
            base,
            first..first + chunk.len() / inner,
            |row, [lo, ro]| {
                let dst = &mut chunk[(row - first) * inner..(row - first + 1) * inner];
                match (ls, rs) {
                    // The common broadcast patterns get loops the compiler vectorises, at
                    // the CPU's vector width.
                    (1, 1) => with_simd(ZipSlices {
                        a: &lhs[lo..lo + inner],
                        b: &rhs[ro..ro + inner],
                        dst,
                        f: &f,
                    }),
                    (1, 0) => {
                        let (b, f) = (rhs[ro], &f);
                        let g = move |a: T| f(a, b);
                        with_simd(MapSlice {
                            src: &lhs[lo..lo + inner],
                            dst,
                            f: &g,
                        })
                    }
                    (0, 1) => {
                        let (a, f) = (lhs[lo], &f);
                        let g = move |b: T| f(a, b);
                        with_simd(MapSlice {
                            src: &rhs[ro..ro + inner],
                            dst,
                            f: &g,
                        })
                    }
                    _ => {
                        for (j, d) in dst.iter_mut().enumerate() {
                            d.write(f(lhs[lo + j * ls], rhs[ro + j * rs]));
                        }
                    }
                }
            },
        );
    })
}

/// `out[i] = f(cond[i], a[i], b[i])` over three strided views of one shape (used by `where`).
pub fn ternary_map<C: Element, T: Element, U: Element>(
    cond: &[C],
    cond_layout: &Layout,
    a: &[T],
    a_layout: &Layout,
    b: &[T],
    b_layout: &Layout,
    f: impl Fn(C, T, T) -> U + Sync,
) -> HostBuffer<U> {
    let n = cond_layout.numel();
    let (shape, strides) = coalesce(
        cond_layout.shape(),
        [
            cond_layout.strides(),
            a_layout.strides(),
            b_layout.strides(),
        ],
    );
    let inner = *shape.last().unwrap();
    let (cs, as_, bs) = (
        strides[0][shape.len() - 1],
        strides[1][shape.len() - 1],
        strides[2][shape.len() - 1],
    );
    if n == 0 || inner == 0 {
        return HostBuffer::zeroed(n);
    }
    let rows = n / inner;
    let per = if n < PARALLEL_THRESHOLD {
        rows
    } else {
        rows_per_task(rows, inner)
    };
    let base = [cond_layout.offset(), a_layout.offset(), b_layout.offset()];
    build_vec_in(n, per * inner, |start, chunk| {
        let first = start / inner;
        for_each_row(
            &shape,
            &strides,
            base,
            first..first + chunk.len() / inner,
            |row, [co, ao, bo]| {
                let dst = &mut chunk[(row - first) * inner..(row - first + 1) * inner];
                for (j, d) in dst.iter_mut().enumerate() {
                    d.write(f(cond[co + j * cs], a[ao + j * as_], b[bo + j * bs]));
                }
            },
        );
    })
}

/// `dst[i] = src[i] / 255` in f32: image bytes to `[0, 1]` exactly as torchvision's
/// `ToTensor` (`x.float().div(255)`, a true division, so every value is bit-identical),
/// vectorised per CPU level.
///
/// # Panics
/// If the slices differ in length.
///
/// ```
/// use ferrograd_kernels::cpu::bytes_to_unit;
/// use std::mem::MaybeUninit;
/// let mut out = [MaybeUninit::<f32>::uninit(); 3];
/// bytes_to_unit(&[0, 51, 255], &mut out);
/// // SAFETY: bytes_to_unit wrote every slot.
/// let out: Vec<f32> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
/// assert_eq!(out, vec![0.0, 0.2, 1.0]);
/// ```
#[track_caller]
pub fn bytes_to_unit(src: &[u8], dst: &mut [MaybeUninit<f32>]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "bytes_to_unit: {} bytes for {} outputs",
        src.len(),
        dst.len()
    );
    with_simd(MapSlice {
        src,
        dst,
        f: &|p: u8| p as f32 / 255.0,
    })
}

/// Converts a strided view to another element type, contiguous.
///
/// ```
/// use ferrograd_kernels::{cpu::cast, Layout};
/// let v: ferrograd_kernels::cpu::HostBuffer<i64> = cast(&[1.5f32, -2.5], &Layout::contiguous(&[2]));
/// assert_eq!(v, vec![1, -2]);
/// ```
pub fn cast<T: Element, U: Element>(src: &[T], layout: &Layout) -> HostBuffer<U> {
    unary_map(src, layout, |x| U::from_f64(x.to_f64()))
}

/// `dst[i] = f(dst[i])` in place over a strided view.
pub fn unary_inplace<T: Element>(dst: &mut [T], layout: &Layout, f: impl Fn(T) -> T + Sync) {
    if let Some(range) = layout.contiguous_range() {
        let dst = &mut dst[range];
        if dst.len() < PARALLEL_THRESHOLD {
            dst.iter_mut().for_each(|x| *x = f(*x));
        } else {
            for_each_chunk_mut(dst, parallel_chunk(dst.len()), |_, c| {
                c.iter_mut().for_each(|x| *x = f(*x))
            });
        }
        return;
    }
    // Coalesced rows: one index computation per row, not per element.
    let (shape, strides) = coalesce(layout.shape(), [layout.strides()]);
    let inner = *shape.last().unwrap_or(&1);
    let step = *strides[0].last().unwrap_or(&1);
    let rows: usize = shape[..shape.len() - 1].iter().product();
    for_each_row(&shape, &strides, [layout.offset()], 0..rows, |_, [o]| {
        if step == 1 {
            dst[o..o + inner].iter_mut().for_each(|x| *x = f(*x));
        } else {
            for i in 0..inner {
                dst[o + i * step] = f(dst[o + i * step]);
            }
        }
    });
}

/// `dst[i] = f(dst[i], src[i])` in place; `src_layout` is already broadcast to
/// `dst_layout`'s shape and `src` is a different buffer from `dst`.
pub fn binary_inplace<T: Element>(
    dst: &mut [T],
    dst_layout: &Layout,
    src: &[T],
    src_layout: &Layout,
    f: impl Fn(T, T) -> T + Sync,
) {
    if let (Some(dr), Some(sr)) = (dst_layout.contiguous_range(), src_layout.contiguous_range()) {
        let (d, s) = (&mut dst[dr], &src[sr]);
        if d.len() < PARALLEL_THRESHOLD {
            d.iter_mut().zip(s).for_each(|(x, &y)| *x = f(*x, y));
        } else {
            let chunk = parallel_chunk(d.len());
            for_each_chunk_mut(d, chunk, |i, c| {
                let s = &s[i * chunk..i * chunk + c.len()];
                c.iter_mut().zip(s).for_each(|(x, &y)| *x = f(*x, y))
            });
        }
        return;
    }
    // Coalesced rows: one index computation per row, not per element (a gradient added
    // into a narrowed or transposed slice).
    let (shape, strides) = coalesce(
        dst_layout.shape(),
        [dst_layout.strides(), src_layout.strides()],
    );
    let inner = *shape.last().unwrap_or(&1);
    let step = |k: usize| *strides[k].last().unwrap_or(&1);
    let (dstep, sstep) = (step(0), step(1));
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let base = [dst_layout.offset(), src_layout.offset()];
    for_each_row(&shape, &strides, base, 0..rows, |_, [d, s]| {
        if dstep == 1 && sstep == 1 {
            let src = &src[s..s + inner];
            for (x, &y) in dst[d..d + inner].iter_mut().zip(src) {
                *x = f(*x, y);
            }
        } else {
            for i in 0..inner {
                dst[d + i * dstep] = f(dst[d + i * dstep], src[s + i * sstep]);
            }
        }
    });
}

/// Writes `value` to every element of a strided view.
pub fn fill_strided<T: Element>(dst: &mut [T], layout: &Layout, value: T) {
    unary_inplace(dst, layout, |_| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One long strided row, split between tasks: an expanded scalar (stride 0, over
    /// several dimensions that coalesce into one) and a step-3 view at an offset, each
    /// below and above the parallel threshold.
    #[test]
    fn splits_one_strided_row() {
        let src: Vec<f32> = (0..3 * PARALLEL_THRESHOLD + 30).map(|i| i as f32).collect();
        for n in [100, PARALLEL_THRESHOLD + 7] {
            let scalar = Layout::contiguous(&[1, 1]).broadcast_to(&[n, 4]);
            let out = unary_map(&src[5..], &scalar, |v| v + 1.0);
            assert_eq!(out.len(), n * 4);
            assert!(out.iter().all(|&v| v == 6.0), "scalar over {n}");
            let dims = |v: usize| crate::layout::Dims::from_slice(&[v]);
            let step = Layout::from_parts(dims(n), dims(3), 2);
            let out = unary_map(&src, &step, |v| v * 2.0);
            for (i, &v) in out.iter().enumerate() {
                assert_eq!(v, (2 + 3 * i) as f32 * 2.0, "step 3 over {n} at {i}");
            }
        }
    }

    /// Transposed views (rows below and above a block, one task and many, a row block
    /// of a larger matrix at an offset, output rows a multiple of 2 KiB long, which go
    /// by tiles) map to the same values as element-by-element indexing, with a cast on
    /// the way.
    #[test]
    fn transposed_views_map_like_indexing() {
        for (r, c) in [
            (1, 1),
            (3, 2),
            (17, 5),
            (16, 33),
            (300, 129),
            (1024, 128),
            (37, 256),
            (5, 768),
            (1030, 512),
        ] {
            // `w` is `[c + 4, r]`; its rows 2..2 + c, transposed, are an `[r, c]` view.
            let src: Vec<f32> = (0..(c + 4) * r).map(|i| i as f32 * 0.5 - 7.0).collect();
            let view = Layout::contiguous(&[c + 4, r])
                .slice(0, 2, c, 1)
                .transpose(0, 1);
            let got = unary_map(&src, &view, |x| f64::from(x) * 2.0);
            for i in 0..r {
                for j in 0..c {
                    let want = f64::from(src[(2 + j) * r + i]) * 2.0;
                    assert_eq!(got[i * c + j], want, "[{r}, {c}] at ({i}, {j})");
                }
            }
        }
    }

    #[test]
    fn bytes_to_unit_is_the_true_division_for_every_byte_and_length() {
        // Every byte value at every offset within a vector, lengths crossing the SIMD
        // widths (4, 8, 16) and their tails.
        for len in [0, 1, 7, 8, 15, 16, 17, 255, 256, 784, 1000] {
            let src: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            let mut out = vec![MaybeUninit::<f32>::uninit(); len];
            bytes_to_unit(&src, &mut out);
            for (o, &p) in out.iter().zip(&src) {
                // SAFETY: bytes_to_unit wrote every slot.
                let v = unsafe { o.assume_init() };
                assert_eq!(v.to_bits(), (p as f32 / 255.0).to_bits(), "byte {p}");
            }
        }
        let all: Vec<u8> = (0..=255).collect();
        let mut out = vec![MaybeUninit::<f32>::uninit(); 256];
        bytes_to_unit(&all, &mut out);
        // SAFETY: as above.
        let out: Vec<f32> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
        // torchvision's ToTensor gives these exactly: f64 division rounded once to f32.
        for (p, v) in out.iter().enumerate() {
            assert_eq!(*v, (p as f64 / 255.0) as f32);
        }
    }

    #[test]
    #[should_panic(expected = "bytes_to_unit: 3 bytes for 2 outputs")]
    fn bytes_to_unit_refuses_mismatched_lengths() {
        bytes_to_unit(&[1, 2, 3], &mut [MaybeUninit::uninit(); 2]);
    }

    /// Views of a `[6, 50, 130]` buffer: permuted, sliced with steps, broadcast.
    fn layouts() -> Vec<Layout> {
        let base = Layout::contiguous(&[6, 50, 130]);
        vec![
            base.clone(),
            base.permute(&[2, 0, 1]),
            base.transpose(1, 2),
            base.slice(2, 3, 60, 2),
            base.slice(0, 1, 3, 2).permute(&[1, 2, 0]),
            base.select(1, 7).unsqueeze(1).broadcast_to(&[6, 40, 130]),
        ]
    }

    #[test]
    fn strided_maps_match_the_offset_walk() {
        let src: Vec<f64> = (0..6 * 50 * 130).map(|i| i as f64).collect();
        for layout in layouts() {
            let expected: Vec<f64> = layout.offsets().map(|o| src[o] * 2.0).collect();
            assert_eq!(
                unary_map(&src, &layout, |x| x * 2.0),
                expected,
                "{layout:?}"
            );
            let other = Layout::contiguous(layout.shape());
            let ones = vec![1.0; other.numel()];
            let summed: Vec<f64> = layout.offsets().map(|o| src[o] + 1.0).collect();
            assert_eq!(
                binary_map(&src, &layout, &ones, &other, |a, b| a + b),
                summed,
                "{layout:?}"
            );
            assert_eq!(
                binary_map(&ones, &other, &src, &layout, |a, b| a + b),
                summed,
                "{layout:?}"
            );
        }
    }

    /// One value broadcast against a contiguous view, on either side, from an offset
    /// into its buffer; past the parallel threshold (chunks on the team) and below it.
    #[test]
    fn a_broadcast_value_meets_every_element() {
        for n in [7, PARALLEL_THRESHOLD * 3 + 5] {
            let src: Vec<f32> = (0..n + 3).map(|i| (i % 97) as f32 - 40.0).collect();
            let dense = Layout::contiguous(&[n + 3]).slice(0, 3, n, 1);
            let values = [0.5f32, -2.0, 7.0];
            let one = Layout::contiguous(&[3])
                .select(0, 2)
                .unsqueeze(0)
                .broadcast_to(&[n]);
            let want: Vec<f32> = src[3..].iter().map(|&x| x - 7.0).collect();
            assert_eq!(binary_map(&src, &dense, &values, &one, |a, b| a - b), want);
            let want: Vec<f32> = src[3..].iter().map(|&x| 7.0 - x).collect();
            assert_eq!(binary_map(&values, &one, &src, &dense, |a, b| a - b), want);
        }
    }
}
