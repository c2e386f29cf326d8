//! CPU kernels: contiguous fast paths, strided fallbacks, the kernels' thread team
//! ([`run_tasks`]) above a size threshold.

mod arena;
mod gemv;
mod index;
mod map;
mod matmul;
mod packed;
mod par;
mod pool;
mod random;
pub(crate) mod reduce;
pub(crate) mod simd;
mod sort;
pub mod spans;
pub(crate) mod unfold;

pub use index::{cat_dim, gather, index_select, scatter_add};
pub use map::{
    binary_inplace, binary_map, bytes_to_unit, cast, fill_strided, ternary_map, unary_inplace,
    unary_map,
};
pub(crate) use matmul::{GEMM_PARALLEL_FLOPS, gemm, gemm_into};
pub use matmul::{MatmulShape, Parallelism, linear, matmul};
pub use packed::PackedRhs;
pub(crate) use packed::{as_f32, as_f32_mut, small_product};
#[cfg(test)]
pub(crate) use par::thread_count_lock;
pub use par::{
    for_each_chunk_mut, num_threads, run_tasks, set_num_threads, set_spin_time, spin_time,
};
pub use pool::{
    ALIGN, DEFAULT_CACHE_LIMIT, HOST_POOL, HostBuffer, HostPool, HostStats, size_class,
};
pub use random::philox4x32_10;
pub use reduce::{
    arg_reduce_dim, cumsum_dim, log_softmax_rows, reduce_dim, softmax_backward_rows, softmax_rows,
    sum_dim,
};
pub use simd::simd_has_fma;
pub use sort::{DimIndexOp, dim_indices};
pub use unfold::{Conv2dGeometry, fold2d, unfold2d};

use crate::{DType, Element};
use half::{bf16, f16};

/// Below this many elements, elementwise kernels run on the calling thread: handing
/// tasks to the team costs more than it saves.
pub const PARALLEL_THRESHOLD: usize = 1 << 15;

/// A tensor's elements in host memory, one variant per dtype.
///
/// ```
/// use ferrograd_kernels::{cpu::CpuStorage, DType};
/// let s = CpuStorage::F32(vec![1.0, 2.0].into());
/// assert_eq!(s.dtype(), DType::F32);
/// assert_eq!(s.len(), 2);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum CpuStorage {
    /// float32 elements.
    F32(HostBuffer<f32>),
    /// float64 elements.
    F64(HostBuffer<f64>),
    /// float16 elements.
    F16(HostBuffer<f16>),
    /// bfloat16 elements.
    BF16(HostBuffer<bf16>),
    /// int64 elements.
    I64(HostBuffer<i64>),
    /// uint8 elements.
    U8(HostBuffer<u8>),
    /// bool elements.
    Bool(HostBuffer<bool>),
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`.
///
/// ```
/// use ferrograd_kernels::{with_dtype, DType};
/// let size = with_dtype!(DType::F64, T => std::mem::size_of::<T>());
/// assert_eq!(size, 8);
/// ```
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::with_num_dtype!($dtype, $T => $body, else {
            type $T = bool;
            $body
        })
    };
}

/// Like [`with_dtype!`] for dtypes with arithmetic; `$other` runs for bool.
///
/// ```
/// use ferrograd_kernels::{with_num_dtype, DType};
/// assert_eq!(with_num_dtype!(DType::U8, T => std::mem::size_of::<T>(), else 0), 1);
/// assert_eq!(with_num_dtype!(DType::Bool, T => std::mem::size_of::<T>(), else 0), 0);
/// ```
#[macro_export]
macro_rules! with_num_dtype {
    ($dtype:expr, $T:ident => $body:expr, else $other:expr) => {
        $crate::with_float_dtype!($dtype, $T => $body, else match $dtype {
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            _ => $other,
        })
    };
}

/// Like [`with_dtype!`] for floating dtypes; `$other` runs for the rest.
///
/// ```
/// use ferrograd_kernels::{with_float_dtype, DType};
/// assert_eq!(with_float_dtype!(DType::BF16, T => std::mem::size_of::<T>(), else 0), 2);
/// ```
#[macro_export]
macro_rules! with_float_dtype {
    ($dtype:expr, $T:ident => $body:expr, else $other:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            _ => $other,
        }
    };
}

/// Like [`with_dtype!`] for f32 and f64 only (the [`WideFloat`](crate::WideFloat) types);
/// `$other` runs for the rest.
///
/// ```
/// use ferrograd_kernels::{with_wide_float_dtype, DType};
/// assert_eq!(with_wide_float_dtype!(DType::F64, T => std::mem::size_of::<T>(), else 0), 8);
/// assert_eq!(with_wide_float_dtype!(DType::F16, T => std::mem::size_of::<T>(), else 0), 0);
/// ```
#[macro_export]
macro_rules! with_wide_float_dtype {
    ($dtype:expr, $T:ident => $body:expr, else $other:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            _ => $other,
        }
    };
}

impl CpuStorage {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::Bool(_) => DType::Bool,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_dtype!(self.dtype(), T => self.typed::<T>().len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as a typed slice.
    ///
    /// # Panics
    /// If `T` is not this storage's element type (an internal dispatch bug).
    #[track_caller]
    pub fn typed<T: Element>(&self) -> &[T] {
        T::slice(self).unwrap_or_else(|| {
            panic!(
                "internal: storage holds {:?}, kernel asked for {:?}",
                self.dtype(),
                T::DTYPE
            )
        })
    }

    /// The elements as a mutable typed slice.
    ///
    /// # Panics
    /// If `T` is not this storage's element type (an internal dispatch bug).
    #[track_caller]
    pub fn typed_mut<T: Element>(&mut self) -> &mut [T] {
        let dtype = self.dtype();
        T::slice_mut(self).unwrap_or_else(|| {
            panic!(
                "internal: storage holds {dtype:?}, kernel asked for {:?}",
                T::DTYPE
            )
        })
    }

    /// `n` copies of `value` converted to `dtype`.
    ///
    /// Zeros (all bits clear) come from [`HostBuffer::zeroed`]: memory fresh from the
    /// system is not written, so a large zero tensor is not resident until used.
    pub fn full(dtype: DType, n: usize, value: f64) -> Self {
        if value.to_bits() == 0 {
            return with_dtype!(dtype, T => T::into_storage(HostBuffer::zeroed(n)));
        }
        with_dtype!(dtype, T => T::into_storage(HostBuffer::full(n, T::from_f64(value))))
    }
}
