//! The op descriptors of the backend boundary. An op type (in `crate::ops`) implements
//! one of these traits once: its CPU function (`apply`, generic over the element type)
//! and its CUDA kernels as [`CudaKernel`] constants. Every backend then runs every op of
//! the family through one path (`Storage::unary`, `Storage::binary`, ...), and a CUDA
//! storage without a kernel for the dtype at hand runs `apply` on a host copy.

// The CUDA constants are read by the CUDA backend only.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
use ferrograd_kernels::{NumElement, Real};

/// A float function of one element, computed in the accumulator type (f32 for f16/bf16).
pub(crate) trait UnaryOp: Sync + Copy {
    /// The CUDA kernels computing the same function, out of place and in place (`None`:
    /// CUDA tensors take the host fallback).
    const CUDA: Option<[&'static CudaKernel; 2]>;

    /// The function.
    fn apply<A: Real>(&self, x: A) -> A;

    /// Whether [`UnaryOp::apply_fma`] differs from `apply` (the CPU map then runs it on
    /// CPUs whose SIMD level has FMA).
    const FMA: bool = false;

    /// The function with fused multiply-adds when `FMA` (called only from code compiled
    /// with FMA; see `ferrograd_kernels::cpu::simd_has_fma`).
    #[inline(always)]
    fn apply_fma<A: Real, const FMA: bool>(&self, x: A) -> A {
        self.apply(x)
    }

    /// The two scalar parameters the CUDA kernel takes (`affine`'s mul and add, ...).
    fn params(&self) -> (f64, f64) {
        (0.0, 0.0)
    }
}

/// A function of two elements of any numeric dtype, computed in the accumulator type.
pub(crate) trait BinaryOp: Sync {
    /// The CUDA kernels, out of place and in place; each computes `a op (alpha * b)`.
    const CUDA: Option<[&'static CudaKernel; 2]>;

    /// The function.
    fn apply<A: NumElement>(&self, a: A, b: A) -> A;

    /// The scale the CUDA kernel applies to `b` first (`add_(b, alpha)`); `apply` includes it.
    fn alpha(&self) -> f64 {
        1.0
    }
}

/// A function of two float elements (`pow`, `atan2`): float dtypes only.
pub(crate) trait BinaryFloatOp: Sync {
    /// The CUDA kernels, out of place and in place.
    const CUDA: Option<[&'static CudaKernel; 2]>;

    /// The function.
    fn apply<A: Real>(&self, a: A, b: A) -> A;

    /// Whether [`BinaryFloatOp::apply_fma`] differs from `apply`.
    const FMA: bool = false;

    /// The function with fused multiply-adds when `FMA` (as [`UnaryOp::apply_fma`]).
    #[inline(always)]
    fn apply_fma<A: Real, const FMA: bool>(&self, a: A, b: A) -> A {
        self.apply(a, b)
    }
}

/// Comparison kinds producing bool tensors.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    /// The CUDA kernel of this comparison.
    pub(crate) fn cuda(self) -> &'static CudaKernel {
        match self {
            Cmp::Eq => &kernels::EQ,
            Cmp::Ne => &kernels::NE,
            Cmp::Lt => &kernels::LT,
            Cmp::Le => &kernels::LE,
            Cmp::Gt => &kernels::GT,
            Cmp::Ge => &kernels::GE,
        }
    }

    /// The comparison itself.
    #[inline(always)]
    pub(crate) fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
}

/// Sum or product along a dim.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReduceOp {
    Sum,
    Prod,
}

impl ReduceOp {
    /// The op's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
        }
    }

    /// The CUDA kernels of this reduction.
    pub(crate) fn cuda(self) -> ReduceKernels {
        match self {
            ReduceOp::Sum => ReduceKernels {
                rows: &kernels::SUM_ROWS,
                cols: &kernels::SUM_COLS,
                row_chunks: &kernels::SUM_ROW_CHUNKS,
                cols_tiled: &kernels::SUM_COLS_TILED,
                finish: &kernels::SUM_FINISH,
            },
            ReduceOp::Prod => ReduceKernels {
                rows: &kernels::PROD_ROWS,
                cols: &kernels::PROD_COLS,
                row_chunks: &kernels::PROD_ROW_CHUNKS,
                cols_tiled: &kernels::PROD_COLS_TILED,
                finish: &kernels::PROD_FINISH,
            },
        }
    }
}

/// A reduction's CUDA kernels: one block per contiguous row, one thread per output along a
/// strided middle dim, and the split forms for too few outputs to fill the device (chunks
/// of rows, 32-column tiles, and the pass combining their partials).
pub(crate) struct ReduceKernels {
    pub(crate) rows: &'static CudaKernel,
    pub(crate) cols: &'static CudaKernel,
    pub(crate) row_chunks: &'static CudaKernel,
    pub(crate) cols_tiled: &'static CudaKernel,
    pub(crate) finish: &'static CudaKernel,
}

/// Row-wise fused ops over the last dim.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RowOp {
    Softmax,
    LogSoftmax,
}

impl RowOp {
    /// The CUDA kernel of this row op.
    pub(crate) fn cuda(self) -> &'static CudaKernel {
        match self {
            RowOp::Softmax => &kernels::SOFTMAX_ROWS,
            RowOp::LogSoftmax => &kernels::LOG_SOFTMAX_ROWS,
        }
    }

    /// The CUDA kernel of this row op's input gradient (from its output and the output's
    /// gradient).
    pub(crate) fn cuda_backward(self) -> &'static CudaKernel {
        match self {
            RowOp::Softmax => &kernels::SOFTMAX_BACKWARD_ROWS,
            RowOp::LogSoftmax => &kernels::LOG_SOFTMAX_BACKWARD_ROWS,
        }
    }
}

/// Integer (and bool) maps computed through f64 and converted back, as the dtype's
/// `from_f64` does (saturating). No CUDA kernels: CUDA tensors take the host fallback.
#[derive(Clone, Copy, Debug)]
pub(crate) enum IntMap {
    Neg,
    Abs,
    Clamp(f64, f64),
}

impl IntMap {
    /// The op's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            IntMap::Neg => "neg",
            IntMap::Abs => "abs",
            IntMap::Clamp(..) => "clamp",
        }
    }

    /// The map itself.
    #[inline(always)]
    pub(crate) fn apply(self, x: f64) -> f64 {
        match self {
            IntMap::Neg => -x,
            IntMap::Abs => x.abs(),
            IntMap::Clamp(lo, hi) => x.clamp(lo, hi),
        }
    }
}
