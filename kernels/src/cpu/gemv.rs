//! Matrix-vector products (`m == 1`: a decoder's next token at batch 1), and the products
//! of a few rows (`m <= 8`: a decode step of a small running batch), which the `gemm`
//! crate runs far from memory bandwidth: the weight matrix is streamed once for all the
//! rows, split over the threads by output columns (or by its rows, with partial sums),
//! with loops compiled per SIMD level ([`with_simd`]).

use super::simd::{FmaKernel, with_simd};

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 16;

/// `out[j] = sum_p x[p] * w[j * row_stride + p]` for `j < out.len()`: each output is the
/// dot product of the contiguous `x` with a contiguous row of `w` (`x @ W^T`, a linear
/// layer's weight `[n, k]` as stored).
struct DotRows<'a> {
    x: &'a [f32],
    w: &'a [f32],
    row_stride: usize,
    out: &'a mut [f32],
}

/// `x . row` (both `x.len()` long) in `L` lanes of partial sums; with `prefetch`, the
/// cache lines 6 KiB ahead in `row` are asked for (the best of 1 to 16 KiB measured on a
/// Xeon, fam 6 model 167, 2 threads: GPT-2's tied head `[50257, 768]` 27-28 -> 34-40
/// GB/s, `[4096, 32768]` 22-24 -> 25-26 GB/s, PyTorch 35-37 and 31), so that one thread
/// keeps enough loads in flight.
#[inline(always)]
fn dot<const L: usize, const FMA: bool>(x: &[f32], row: &[f32], prefetch: bool) -> f32 {
    const PREFETCH: usize = 1536;
    let k = x.len();
    let mut acc = [0f32; L];
    for (xs, ws) in x.chunks_exact(L).zip(row.chunks_exact(L)) {
        #[cfg(target_arch = "x86_64")]
        if prefetch {
            // Every cache line of the chunk PREFETCH floats ahead (further along this
            // row, or into the next ones: rows follow each other in a weight).
            let ahead = ws.as_ptr().wrapping_add(PREFETCH).cast::<i8>();
            // SAFETY: a prefetch never faults, wherever it points.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                for line in 0..L.div_ceil(16) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line));
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = prefetch;
        for l in 0..L {
            acc[l] = if FMA {
                xs[l].mul_add(ws[l], acc[l])
            } else {
                acc[l] + xs[l] * ws[l]
            };
        }
    }
    let tail = k - k % L;
    let mut sum: f32 = acc.iter().sum();
    for (x, w) in x[tail..].iter().zip(&row[tail..k]) {
        sum += x * w;
    }
    sum
}

impl FmaKernel for DotRows<'_> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let k = self.x.len();
        for (j, o) in self.out.iter_mut().enumerate() {
            let row = &self.w[j * self.row_stride..j * self.row_stride + k];
            *o = dot::<32, FMA>(self.x, row, true);
        }
    }
}

/// `acc[j] += sum_p x[p * x_stride] * b[p * row_stride + j]` over rows `p < k` of `b`
/// (`[k, n]` with unit column stride, GPT-2's `Conv1D` weight), row by row (four at a
/// time): each thread streams a contiguous block of `b`'s rows, where
/// splitting by columns had every thread read a few cache lines of every row (17 GB/s
/// on two Xeon cores for a `[32768, 4096]` weight, against 31 for PyTorch's).
struct AxpyStream<'a> {
    x: &'a [f32],
    x_stride: usize,
    k: usize,
    b: &'a [f32],
    row_stride: usize,
    acc: &'a mut [f32],
}

impl FmaKernel for AxpyStream<'_> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let n = self.acc.len();
        let row = |p: usize| &self.b[p * self.row_stride..p * self.row_stride + n];
        let fma = |a: f32, b: f32, c: f32| if FMA { a.mul_add(b, c) } else { c + a * b };
        let mut p = 0;
        while p + 4 <= self.k {
            let xs: [f32; 4] = std::array::from_fn(|i| self.x[(p + i) * self.x_stride]);
            let (r0, r1, r2, r3) = (row(p), row(p + 1), row(p + 2), row(p + 3));
            for ((((a, &v0), &v1), &v2), &v3) in self.acc.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3)
            {
                *a = fma(
                    xs[3],
                    v3,
                    fma(xs[2], v2, fma(xs[1], v1, fma(xs[0], v0, *a))),
                );
            }
            p += 4;
        }
        for p in p..self.k {
            let xp = self.x[p * self.x_stride];
            for (a, &v) in self.acc.iter_mut().zip(row(p)) {
                *a = fma(xp, v, *a);
            }
        }
    }
}

/// Rows of the left operand the few-row kernels take at most (a decode step's batch);
/// taller products go to the GEMM.
pub(crate) const MAX_FEW_ROWS: usize = 8;

/// `out_t[j * m + i] = x_i . w_j` for the `m` contiguous rows `x_i` (`x_rs` apart, `k`
/// long) and the weight rows `w_j` (`row_stride` apart): [`DotRows`] for several rows,
/// each weight row read from memory once and from L1 for the other rows.
struct DotRowsFew<'a> {
    x: &'a [f32],
    x_rs: usize,
    m: usize,
    k: usize,
    w: &'a [f32],
    row_stride: usize,
    out_t: &'a mut [f32],
}

impl FmaKernel for DotRowsFew<'_> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        // 16 lanes measured best here (the head of GPT-2 small, [8, 768] x [50257, 768]^T
        // on two Xeon cores: 13.5 ms against 16.4 with 32 and 25 with 64); the weight row
        // is fetched ahead for the first row only (the others find it in L1).
        let (m, k) = (self.m, self.k);
        for (j, o) in self.out_t.chunks_mut(m).enumerate() {
            let row = &self.w[j * self.row_stride..j * self.row_stride + k];
            for (i, o) in o.iter_mut().enumerate() {
                let xi = &self.x[i * self.x_rs..i * self.x_rs + k];
                *o = dot::<16, FMA>(xi, row, i == 0);
            }
        }
    }
}

/// `acc[i * n + j] += sum_p x[i * x_rs + p * x_stride] * b[p * row_stride + j]`:
/// [`AxpyStream`] for `m` rows, a block of `b`'s columns at a time (in L1 with the rows'
/// sums), so `b` is read from memory once for all the rows.
struct AxpyStreamFew<'a> {
    x: &'a [f32],
    x_rs: usize,
    x_stride: usize,
    m: usize,
    k: usize,
    b: &'a [f32],
    row_stride: usize,
    acc: &'a mut [f32],
}

impl FmaKernel for AxpyStreamFew<'_> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        const COLS: usize = 512;
        let n = self.acc.len() / self.m.max(1);
        let fma = |a: f32, b: f32, c: f32| if FMA { a.mul_add(b, c) } else { c + a * b };
        let mut c0 = 0;
        while c0 < n {
            let cw = COLS.min(n - c0);
            let brow = |p: usize| &self.b[p * self.row_stride + c0..p * self.row_stride + c0 + cw];
            let xv = |i: usize, p: usize| self.x[i * self.x_rs + p * self.x_stride];
            // Four rows of `b` at a time: each sum loaded and stored once per four.
            let mut p = 0;
            while p + 4 <= self.k {
                let (r0, r1, r2, r3) = (brow(p), brow(p + 1), brow(p + 2), brow(p + 3));
                for i in 0..self.m {
                    let xs = [xv(i, p), xv(i, p + 1), xv(i, p + 2), xv(i, p + 3)];
                    let a = &mut self.acc[i * n + c0..i * n + c0 + cw];
                    for ((((a, &v0), &v1), &v2), &v3) in
                        a.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3)
                    {
                        *a = fma(
                            xs[3],
                            v3,
                            fma(xs[2], v2, fma(xs[1], v1, fma(xs[0], v0, *a))),
                        );
                    }
                }
                p += 4;
            }
            for p in p..self.k {
                let r = brow(p);
                for i in 0..self.m {
                    let xi = xv(i, p);
                    let a = &mut self.acc[i * n + c0..i * n + c0 + cw];
                    for (a, &v) in a.iter_mut().zip(r) {
                        *a = fma(xi, v, *a);
                    }
                }
            }
            c0 += cw;
        }
    }
}

/// `out = X @ W^T` for `m` (at most [`MAX_FEW_ROWS`]) contiguous rows of `X` (`k` long,
/// `x_rs` apart) and `W`'s `n` rows of `k` contiguous floats `row_stride` apart: `out` is
/// `[m, n]` row-major.
///
/// # Panics
/// When an operand is too short.
pub(crate) fn gemv_rows_few(
    x: &[f32],
    x_rs: usize,
    m: usize,
    k: usize,
    w: &[f32],
    row_stride: usize,
    out: &mut [f32],
) {
    let n = out.len() / m.max(1);
    assert!(
        m == 0
            || k == 0
            || ((m - 1) * x_rs + k <= x.len() && (n == 0 || (n - 1) * row_stride + k <= w.len())),
        "gemv: operand view outside its storage"
    );
    let mut out_t = super::HostBuffer::<f32>::zeroed(n * m);
    if n * k < PARALLEL_MACS {
        with_simd(DotRowsFew {
            x,
            x_rs,
            m,
            k,
            w,
            row_stride,
            out_t: &mut out_t,
        });
    } else {
        let per = columns_per_task(n);
        super::for_each_chunk_mut(&mut out_t, per * m, |t, o| {
            with_simd(DotRowsFew {
                x,
                x_rs,
                m,
                k,
                w: &w[t * per * row_stride..],
                row_stride,
                out_t: o,
            })
        });
    }
    for (j, col) in out_t.chunks_exact(m.max(1)).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
}

/// `out = X @ B` for `m` (at most [`MAX_FEW_ROWS`]) rows of `X` (`x_rs` apart, elements
/// `x_stride` apart, `k` each) and `B` `[k, n]` with unit column stride and rows
/// `row_stride` apart: `out` is `[m, n]` row-major.
///
/// # Panics
/// When an operand is too short.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv_cols_few(
    x: &[f32],
    x_rs: usize,
    x_stride: usize,
    m: usize,
    k: usize,
    b: &[f32],
    row_stride: usize,
    out: &mut [f32],
) {
    let n = out.len() / m.max(1);
    assert!(
        m == 0
            || n == 0
            || k == 0
            || ((m - 1) * x_rs + (k - 1) * x_stride < x.len()
                && (k - 1) * row_stride + n <= b.len()),
        "gemv: operand view outside its storage"
    );
    if n * k < PARALLEL_MACS {
        out.fill(0.0);
        return with_simd(AxpyStreamFew {
            x,
            x_rs,
            x_stride,
            m,
            k,
            b,
            row_stride,
            acc: out,
        });
    }
    // Each thread sums a contiguous block of `b`'s rows into its own partial `[m, n]`,
    // then the partials are added.
    let threads = super::num_threads().clamp(1, k.div_ceil(4));
    let rows = k.div_ceil(threads);
    let mut partial = super::HostBuffer::<f32>::zeroed(threads * m * n);
    super::for_each_chunk_mut(&mut partial, m * n, |t, acc| {
        let p0 = t * rows;
        if p0 >= k {
            return;
        }
        with_simd(AxpyStreamFew {
            x: &x[p0 * x_stride..],
            x_rs,
            x_stride,
            m,
            k: rows.min(k - p0),
            b: &b[p0 * row_stride..],
            row_stride,
            acc,
        })
    });
    let (first, rest) = partial.split_at(m * n);
    out.copy_from_slice(first);
    for part in rest.chunks_exact(m * n) {
        for (o, &v) in out.iter_mut().zip(part) {
            *o += v;
        }
    }
}

/// Output columns per task: enough tasks for every thread to stay busy, in multiples of
/// 64 (whole cache lines of the output and of `b`'s rows).
fn columns_per_task(n: usize) -> usize {
    let tasks = super::num_threads().max(1) * 4;
    n.div_ceil(tasks).div_ceil(64).max(1) * 64
}

/// `x @ W^T` for one row `x` (`k` contiguous floats) and `W` rows of `k` contiguous floats
/// `row_stride` apart (`n` rows): `out` gets `n` floats.
///
/// # Panics
/// When `w` is too short for `n` rows.
pub(crate) fn gemv_rows(x: &[f32], w: &[f32], row_stride: usize, out: &mut [f32]) {
    let (n, k) = (out.len(), x.len());
    assert!(
        n == 0 || k == 0 || (n - 1) * row_stride + k <= w.len(),
        "gemv: weight view outside its storage"
    );
    if n * k < PARALLEL_MACS {
        return with_simd(DotRows {
            x,
            w,
            row_stride,
            out,
        });
    }
    let per = columns_per_task(n);
    super::for_each_chunk_mut(out, per, |t, o| {
        let w = &w[t * per * row_stride..];
        with_simd(DotRows {
            x,
            w,
            row_stride,
            out: o,
        })
    });
}

/// `x @ B` for one row `x` (`k` floats `x_stride` apart) and `B` `[k, n]` with unit
/// column stride and rows `row_stride` apart: `out` gets `n` floats.
///
/// # Panics
/// When `x` or `b` is too short.
pub(crate) fn gemv_cols(
    x: &[f32],
    x_stride: usize,
    k: usize,
    b: &[f32],
    row_stride: usize,
    out: &mut [f32],
) {
    let n = out.len();
    assert!(
        n == 0 || k == 0 || ((k - 1) * x_stride < x.len() && (k - 1) * row_stride + n <= b.len()),
        "gemv: operand view outside its storage"
    );
    if n * k < PARALLEL_MACS {
        out.fill(0.0);
        return with_simd(AxpyStream {
            x,
            x_stride,
            k,
            b,
            row_stride,
            acc: out,
        });
    }
    // Each thread sums a contiguous block of rows into its own partial output (in L1 or
    // L2: `n` floats), then the partials are added.
    let threads = super::num_threads().clamp(1, k.div_ceil(4));
    let rows = k.div_ceil(threads);
    let mut partial = super::HostBuffer::<f32>::zeroed(threads * n);
    super::for_each_chunk_mut(&mut partial, n, |t, acc| {
        let p0 = t * rows;
        if p0 >= k {
            return;
        }
        let count = rows.min(k - p0);
        with_simd(AxpyStream {
            x: &x[p0 * x_stride..],
            x_stride,
            k: count,
            b: &b[p0 * row_stride..],
            row_stride,
            acc,
        })
    });
    let (first, rest) = partial.split_at(n);
    out.copy_from_slice(first);
    for part in rest.chunks_exact(n) {
        for (o, &v) in out.iter_mut().zip(part) {
            *o += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
            })
            .collect()
    }

    /// Both layouts against a plain f64 loop, over sizes around the lane width, the
    /// task width and the parallel threshold.
    #[test]
    fn both_layouts_equal_a_plain_loop() {
        for (n, k) in [
            (1, 1),
            (3, 31),
            (17, 33),
            (64, 64),
            (100, 770),
            (1000, 300),
            (2305, 97),
            // Few rows against many columns: the row blocks of the threads' partial sums.
            (20000, 5),
            (70000, 1),
        ] {
            let x = data(k * 2, 1);
            let w = data(n * (k + 3), 2); // rows k + 3 apart
            let mut out = vec![0f32; n];
            gemv_rows(&x[..k], &w, k + 3, &mut out);
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| x[p] as f64 * w[j * (k + 3) + p] as f64)
                    .sum();
                assert!(
                    (out[j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                    "rows {n}x{k} [{j}]"
                );
            }
            let b = data(k * (n + 5), 3); // [k, n] rows n + 5 apart
            // A few rows: each equals its own product (x's rows k + 1 apart).
            for m in [2usize, 3, MAX_FEW_ROWS] {
                let xs = data(m * (2 * k + 1), 4);
                let mut few = vec![0f32; m * n];
                gemv_rows_few(&xs, k + 1, m, k, &w, k + 3, &mut few);
                for i in 0..m {
                    for j in (0..n).step_by(n.div_ceil(50)) {
                        let want: f64 = (0..k)
                            .map(|p| xs[i * (k + 1) + p] as f64 * w[j * (k + 3) + p] as f64)
                            .sum();
                        let got = few[i * n + j] as f64;
                        assert!(
                            (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                            "rows few {m} {n}x{k}"
                        );
                    }
                }
                gemv_cols_few(&xs, 2 * k + 1, 2, m, k, &b, n + 5, &mut few);
                for i in 0..m {
                    for j in (0..n).step_by(n.div_ceil(50)) {
                        let want: f64 = (0..k)
                            .map(|p| xs[i * (2 * k + 1) + 2 * p] as f64 * b[p * (n + 5) + j] as f64)
                            .sum();
                        let got = few[i * n + j] as f64;
                        assert!(
                            (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                            "cols few {m} {n}x{k}"
                        );
                    }
                }
            }
            gemv_cols(&x, 2, k, &b, n + 5, &mut out);
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| x[2 * p] as f64 * b[p * (n + 5) + j] as f64)
                    .sum();
                assert!(
                    (out[j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                    "cols {n}x{k} [{j}]"
                );
            }
        }
    }
}
