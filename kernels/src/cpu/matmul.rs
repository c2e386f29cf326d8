//! Batched matrix multiply through the `gemm` crate, which takes arbitrary row and column
//! strides, so transposed and broadcast operands are never copied.

use super::pool::HostBuffer;
use crate::{DType, Layout, NumElement};
use gemm::Parallelism;
use half::bf16;

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
const GEMM_PARALLEL_FLOPS: usize = 48 * 48 * 48;

/// Batched matmul of strided 3-D views `lhs: [batch, m, k]` and `rhs: [batch, k, n]`
/// (a batch stride of 0 broadcasts); the result is contiguous `[batch, m, n]`.
///
/// ```
/// use ferrograd_kernels::{cpu::matmul, Layout};
/// let a = [1.0f32, 2.0, 3.0, 4.0]; // [[1, 2], [3, 4]]
/// let l = Layout::contiguous(&[1, 2, 2]);
/// assert_eq!(matmul(&a, &l, &a, &l.transpose(1, 2)), vec![5.0, 11.0, 11.0, 25.0]);
/// ```
pub fn matmul<T: NumElement>(
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
) -> HostBuffer<T> {
    let (ls, rs) = (lhs_layout.shape(), rhs_layout.shape());
    let shape = MatmulShape {
        batch: ls[0],
        m: ls[1],
        k: ls[2],
        n: rs[2],
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

/// Views initialised memory as possibly-uninitialised (always sound).
fn as_uninit<T>(x: &mut [T]) -> &mut [std::mem::MaybeUninit<T>] {
    // SAFETY: MaybeUninit<T> has T's layout, and writing initialised values through it
    // keeps the slice initialised.
    unsafe { &mut *(x as *mut [T] as *mut [std::mem::MaybeUninit<T>]) }
}

fn gemm_batched<T: NumElement>(
    out: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
    s: MatmulShape,
) {
    let (lst, rst) = (lhs_layout.strides(), rhs_layout.strides());
    if gemv_batched(out, lhs, lhs_layout, rhs, rhs_layout, s) {
        return;
    }
    let flops = s.m * s.n * s.k;
    let one_product = |b: usize, dst: &mut [std::mem::MaybeUninit<T>], parallelism: Parallelism| {
        let lhs_off = lhs_layout.offset() + b * lst[0];
        let rhs_off = rhs_layout.offset() + b * rst[0];
        // Bounds: the views were built from these buffers by the runtime; check the last
        // element each one touches so the raw pointers below stay inside the slices.
        let lhs_last = lhs_off + (s.m.max(1) - 1) * lst[1] + (s.k.max(1) - 1) * lst[2];
        let rhs_last = rhs_off + (s.k.max(1) - 1) * rst[1] + (s.n.max(1) - 1) * rst[2];
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
            gemm::gemm(
                s.m,
                s.n,
                s.k,
                dst.as_mut_ptr() as *mut T,
                1,
                s.n as isize,
                false,
                lhs.as_ptr().add(lhs_off),
                lst[2] as isize,
                lst[1] as isize,
                rhs.as_ptr().add(rhs_off),
                rst[2] as isize,
                rst[1] as isize,
                T::ZERO,
                T::ONE,
                false,
                false,
                false,
                parallelism,
            );
        }
    };
    let per = s.m * s.n;
    if s.batch > 1 && flops < GEMM_PARALLEL_FLOPS * 8 {
        crate::cpu::for_each_chunk_mut(out, per, |b, dst| one_product(b, dst, Parallelism::None));
    } else {
        let parallelism = if flops >= GEMM_PARALLEL_FLOPS {
            Parallelism::Rayon(crate::cpu::num_threads())
        } else {
            Parallelism::None
        };
        for (b, dst) in out.chunks_mut(per).enumerate() {
            one_product(b, dst, parallelism);
        }
    }
}

/// `[batch, 1, k] @ [batch, k, n]` of f32 through the matrix-vector kernels when the
/// right operand has a unit stride (a linear layer's `W^T`, or a `[k, n]` weight);
/// returns whether it did (else `out` is untouched).
fn gemv_batched<T: NumElement>(
    out: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_layout: &Layout,
    rhs: &[T],
    rhs_layout: &Layout,
    s: MatmulShape,
) -> bool {
    let (lst, rst) = (lhs_layout.strides(), rhs_layout.strides());
    let rows = rst[1] == 1 && lst[2] == 1;
    let cols = rst[2] == 1;
    if T::DTYPE != DType::F32 || s.m != 1 || !(rows || cols) {
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
    for (b, dst) in out.chunks_mut(s.n).enumerate().take(s.batch) {
        let lo = lhs_layout.offset() + b * lst[0];
        let ro = rhs_layout.offset() + b * rst[0];
        if rows {
            super::gemv::gemv_rows(&lhs[lo..lo + s.k], &rhs[ro..], rst[2], dst);
        } else {
            super::gemv::gemv_cols(&lhs[lo..], lst[2], s.k, &rhs[ro..], rst[1], dst);
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
    let (lst, rst) = (lhs_layout.strides(), rhs_layout.strides());
    for b in 0..s.batch {
        let lo = lhs_layout.offset() + b * lst[0];
        let ro = rhs_layout.offset() + b * rst[0];
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = T::ZERO;
                for p in 0..s.k {
                    acc =
                        acc + lhs[lo + i * lst[1] + p * lst[2]] * rhs[ro + p * rst[1] + j * rst[2]];
                }
                out[(b * s.m + i) * s.n + j] = acc;
            }
        }
    }
}
