//! How a large product is cut up: split along the contraction (split-K, partial sums
//! combined after), and thin products run in the other orientation into a scratch matrix.

use super::*;

/// Whether a threaded f32 product splits its contracted dim across the threads (each
/// thread a partial product over its stretch of `k`, then summed) rather than the
/// destination: weight gradients (`dY^T X`, contracted over a batch's rows) have a small
/// destination and a long `k`, and each thread then reads only its own stretch of both
/// operands, which a training step has just written and left out of cache. On a 2-core
/// Xeon (fam 6 model 167, binaries alternated) the transformer block's step went 6.54-6.60
/// -> 6.32-6.61 ms and the LSTM LM's 18.6-19.1 -> 18.2-18.7 ms; ResNet-18 (batch 1
/// forward: the 7² and 14² convolutions' `k` of 9 x channels) stayed within noise. Hot
/// in cache, alone, some of these products lose (`[128, 1024] x [1024, 128]`: 98 against
/// 110 us): the gain is the cold operands'.
pub(super) fn split_contraction<T: 'static>(
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    dst_cs: isize,
    dst_rs: isize,
) -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && threads > 1
        && k >= SPLIT_K_MIN
        && k >= 2 * m.max(n)
        && (dst_cs == 1 || dst_rs == 1)
}

/// The shortest contracted dim [`split_contraction`] splits.
pub(super) const SPLIT_K_MIN: usize = 512;

/// [`gemm`] for f32 with the contracted dim cut into one stretch per thread: thread 0
/// writes its partial product into `dst` as `gemm` would (`alpha * dst + beta * P_0`),
/// the others `beta * P_t` into scratch matrices laid out as `dst`, which are then added
/// to `dst` row block by row block on the team.
///
/// # Safety
/// As [`gemm`], with `dst` row-major (`dst_cs == 1`) or column-major (`dst_rs == 1`).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_split_k(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    (dst_cs, dst_rs): (isize, isize),
    read_dst: bool,
    (lhs, lhs_cs, lhs_rs): (*const f32, isize, isize),
    (rhs, rhs_cs, rhs_rs): (*const f32, isize, isize),
    alpha: f32,
    beta: f32,
    threads: usize,
) {
    let step = k.div_ceil(threads).next_multiple_of(GEMM_BLOCK_ALIGN);
    let parts = k.div_ceil(step);
    let row_major = dst_cs == 1;
    // Scratch matrices laid out as `dst`'s orientation, contiguous.
    let (tcs, trs) = if row_major {
        (1, n as isize)
    } else {
        (m as isize, 1)
    };
    let mut scratch = HostBuffer::<f32>::new_uninit((parts - 1) * m * n);
    let p = GemmPtrs {
        dst,
        lhs,
        rhs,
        tmp: scratch.as_mut_ptr() as *mut f32,
    };
    crate::cpu::run_tasks(parts, |t| {
        let (dst, lhs, rhs, tmp) = p.get();
        let k0 = t * step;
        let len = step.min(k - k0);
        // SAFETY: stretch `k0..k0 + len` of the contracted dim is columns of `lhs` and
        // rows of `rhs` inside what the caller vouched for; part 0 writes `dst` alone,
        // part `t` its own scratch matrix of `m * n` elements.
        unsafe {
            let (l, r) = (
                lhs.offset(k0 as isize * lhs_cs),
                rhs.offset(k0 as isize * rhs_rs),
            );
            let (d, cs, rs, read, a) = if t == 0 {
                (dst, dst_cs, dst_rs, read_dst, alpha)
            } else {
                (tmp.add((t - 1) * m * n), tcs, trs, false, 0.0)
            };
            gemm::gemm(
                m,
                n,
                len,
                d,
                cs,
                rs,
                read,
                l,
                lhs_cs,
                lhs_rs,
                r,
                rhs_cs,
                rhs_rs,
                a,
                beta,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    });
    // dst += the other parts, by blocks of its outer (non-contiguous) dim.
    let (outer, inner, d_os) = if row_major {
        (m, n, dst_rs)
    } else {
        (n, m, dst_cs)
    };
    let per = outer.div_ceil(threads);
    crate::cpu::run_tasks(outer.div_ceil(per), |b| {
        let (dst, _, _, tmp) = p.get();
        for o in b * per..((b + 1) * per).min(outer) {
            // SAFETY: row (or column) `o` of `dst` and of every scratch matrix, `inner`
            // contiguous elements each, inside them; blocks own disjoint rows.
            unsafe {
                let d = std::slice::from_raw_parts_mut(dst.offset(o as isize * d_os), inner);
                for t in 1..parts {
                    let src =
                        std::slice::from_raw_parts(tmp.add((t - 1) * m * n + o * inner), inner);
                    for (d, s) in d.iter_mut().zip(src) {
                        *d += *s;
                    }
                }
            }
        }
    });
    drop(scratch);
}

/// `dst[m, n] (+)= a[m, k] @ b[k, n]` for row-major `dst` (row stride `n`), `a` and `b`
/// read through (row, column) strides, on `parallelism`'s threads: the safe face of
/// [`gemm`] for the fused kernels' products into buffers of their own.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into<T: NumElement + Send + Sync + 'static>(
    parallelism: Parallelism,
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (a_rs, a_cs): (usize, usize),
    b: &[T],
    (b_rs, b_cs): (usize, usize),
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(dst.len() >= m * n, "gemm_into: destination too small");
    if k == 0 {
        if !accumulate {
            dst[..m * n].iter_mut().for_each(|v| *v = T::ZERO);
        }
        return;
    }
    let a_last = (m - 1) * a_rs + (k - 1) * a_cs;
    let b_last = (k - 1) * b_rs + (n - 1) * b_cs;
    assert!(
        a_last < a.len() && b_last < b.len(),
        "gemm_into: operand out of range"
    );
    // SAFETY: `dst` holds at least m*n elements written row-major (row stride n, column
    // stride 1); every element of `a` and `b` read is at most `a_last`/`b_last`, checked
    // above to be in bounds; `dst` is a distinct mutable borrow, so nothing overlaps.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            T::ONE,
            T::ONE,
            parallelism,
        );
    }
}

/// From this contracted length on, [`scratch_orientation`] may turn a product around.
pub(super) const ORIENT_MIN_K: usize = 256;
/// ... when its destination's short side has at most this many rows or columns ...
pub(super) const ORIENT_MAX_SIDE: usize = 256;
/// ... and its long side is at least this many times as long.
pub(super) const ORIENT_MIN_ASPECT: usize = 4;

/// Whether an f32 product runs faster in the other orientation from its destination's:
/// `Some(true)` to compute it column-major, `Some(false)` row-major, `None` to leave it.
///
/// The `gemm` crate computes a column-major destination (a row-major one as its
/// transpose, `C^T = B^T A^T`), and with a long contracted dim its rate depends on the
/// operands' layouts in that orientation. On a 2-core Cascade Lake Xeon (f32, 2 threads,
/// GFLOP/s, as laid out / turned around, `k` = 1024, row-major destination):
///
/// | product | `m` 32, `n` 2048 | `m` 128, `n` 512 | `m` 512, `n` 128 | `m` 2048, `n` 128 |
/// | --- | --- | --- | --- | --- |
/// | `A @ B^T` (a linear layer's `x @ W^T`) | 49 / 193 | 131 / 170 | as is | as is |
/// | `A^T @ B` (a weight gradient) | as is | as is | 136 / 195 | 109 / 146 |
///
/// The fast orientation is the one whose left operand is column-major if only one is;
/// else, when both are (`A^T @ B`), the one whose destination has more rows than
/// columns, and when neither is (`A @ B^T`), the one with fewer. Turning around costs
/// `m * n` copies against `m * n * k` multiply-adds; it gains where the destination is
/// far from square, and loses where both sides are long (`gemm` is fast either way:
/// 1024 x 2048 went from 249 to 168) or `k` is short. So only products with `k` from
/// [`ORIENT_MIN_K`], a short side of at most [`ORIENT_MAX_SIDE`] and a long side
/// [`ORIENT_MIN_ASPECT`] times as long turn.
pub(super) fn scratch_orientation<T: 'static>(
    m: usize,
    n: usize,
    k: usize,
    dst_cs: isize,
    dst_rs: isize,
    lhs_rs: isize,
    rhs_cs: isize,
) -> Option<bool> {
    let dst_row_major = dst_cs == 1 && dst_rs != 1;
    let dst_col_major = dst_rs == 1 && dst_cs != 1;
    if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>()
        || k < ORIENT_MIN_K
        || m.min(n) > ORIENT_MAX_SIDE
        || m.max(n) < ORIENT_MIN_ASPECT * m.min(n)
        || m < 2
        || n < 2
        || !(dst_row_major || dst_col_major)
    {
        return None;
    }
    // Column-major orientation: left operand `A` (column-major when its row stride is
    // 1), `m x n`. Row-major: left operand `B^T` (column-major when `B`'s column stride
    // is 1), `n x m`.
    let want_col = match (lhs_rs == 1, rhs_cs == 1) {
        (true, false) => true,
        (false, true) => false,
        (true, true) if m != n => m > n,
        (false, false) if m != n => m < n,
        _ => dst_col_major,
    };
    (want_col != dst_col_major).then_some(want_col)
}

/// `dst = (read_dst ? alpha * dst : 0) + beta * tmp` over `outer x inner` elements, where
/// `tmp` is laid out transposed from `dst`: `dst[o * d_os + i]` and `tmp[o + i * t_is]`.
/// By 16 x 16 blocks: a block of `tmp` is read along its unit-stride axis, transposed in
/// registers, and written out along the destination's.
///
/// # Safety
/// Every `(o, i)` with `o < outer`, `i < inner` is in bounds of `dst` and of `tmp` with
/// these strides.
// The block loops index `blk` by column as often as by row: ranges read plainer.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub(super) unsafe fn combine(
    outer: usize,
    inner: usize,
    dst: *mut f32,
    d_os: isize,
    tmp: *const f32,
    t_is: isize,
    read_dst: bool,
    alpha: f32,
    beta: f32,
) {
    const B: usize = 16;
    let out = |v: f32, p: &mut f32| {
        *p = if read_dst {
            alpha * *p + beta * v
        } else {
            beta * v
        }
    };
    let mut blk = [[0f32; B]; B];
    for o0 in (0..outer).step_by(B) {
        let bo = B.min(outer - o0);
        for i0 in (0..inner).step_by(B) {
            let bi = B.min(inner - i0);
            // SAFETY (both branches): (o0 + o, i0 + i) with o < bo, i < bi is inside both
            // matrices (caller).
            if bo == B && bi == B {
                // A whole block: fixed-size loops that compile to vector moves.
                for (i, col) in blk.iter_mut().enumerate() {
                    *col = unsafe {
                        *(tmp.offset((i0 + i) as isize * t_is + o0 as isize) as *const [f32; B])
                    };
                }
                for o in 0..B {
                    let d = unsafe {
                        &mut *(dst.offset((o0 + o) as isize * d_os + i0 as isize) as *mut [f32; B])
                    };
                    for (i, p) in d.iter_mut().enumerate() {
                        out(blk[i][o], p);
                    }
                }
            } else {
                for o in o0..o0 + bo {
                    for i in i0..i0 + bi {
                        unsafe {
                            out(
                                *tmp.offset(o as isize + i as isize * t_is),
                                &mut *dst.offset(o as isize * d_os + i as isize),
                            )
                        };
                    }
                }
            }
        }
    }
}
