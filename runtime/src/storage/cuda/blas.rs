//! Matrix products through cuBLAS.

use super::CudaStorage;
use super::launch::{cast, fill, output};
use crate::{Error, Result};
use cudarc::cublas::{CudaBlas, sys as blas};
use ferrograd_kernels::{DType, Layout};

/// A device's cuBLAS handle, bound to its stream.
pub(crate) struct Blas(CudaBlas);

/// How cuBLAS (column-major) sees one row-major operand of `rows x cols` with strides
/// `(sr, sc)`: whether it is transposed relative to row-major, and its leading dimension.
/// `None` when neither dim is unit-stride (copy it first).
fn blas_operand(rows: usize, cols: usize, sr: usize, sc: usize) -> Option<(bool, usize)> {
    if cols == 1 || sc == 1 {
        let ld = if rows == 1 { cols.max(1) } else { sr };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if rows == 1 || sr == 1 {
        let ld = if cols == 1 { rows.max(1) } else { sc };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// `[batch, m, k] x [batch, k, n]` for float dtypes; layouts are 3-D views (batch stride 0
/// broadcasts). `Ok(None)` for dtypes cuBLAS does not take (the caller falls back).
pub(crate) fn matmul(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
) -> Result<Option<CudaStorage>> {
    let dtype = a.dtype();
    use blas::cublasComputeType_t as Compute;
    use blas::cudaDataType as Data;
    let (data_type, compute) = match dtype {
        DType::F32 if crate::storage::cuda_flags::allow_tf32() => {
            (Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F_FAST_TF32)
        }
        DType::F32 => (Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F),
        DType::F64 => (Data::CUDA_R_64F, Compute::CUBLAS_COMPUTE_64F),
        DType::F16 => (Data::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F),
        DType::BF16 => (Data::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F),
        _ => return Ok(None),
    };
    let (sa, sb) = (la.shape(), lb.shape());
    let (batch, m, k, n) = (sa[0], sa[1], sa[2], sb[2]);
    let dev = a.device();
    let out = output(dev, dtype, batch * m * n)?;
    if batch * m * n == 0 {
        return Ok(Some(out));
    }
    if k == 0 {
        fill(&out, &Layout::contiguous(&[batch * m * n]), 0.0)?;
        return Ok(Some(out));
    }
    // Operands that cuBLAS cannot read as they are become contiguous first.
    let owned_a;
    let (a, la) = match blas_operand(m, k, la.strides()[1], la.strides()[2]) {
        Some(_) => (a, la.clone()),
        None => {
            owned_a = cast(a, la, dtype)?;
            (&owned_a, Layout::contiguous(sa))
        }
    };
    let owned_b;
    let (b, lb) = match blas_operand(k, n, lb.strides()[1], lb.strides()[2]) {
        Some(_) => (b, lb.clone()),
        None => {
            owned_b = cast(b, lb, dtype)?;
            (&owned_b, Layout::contiguous(sb))
        }
    };
    let (ta, lda) =
        blas_operand(m, k, la.strides()[1], la.strides()[2]).expect("usable after copy");
    let (tb, ldb) =
        blas_operand(k, n, lb.strides()[1], lb.strides()[2]).expect("usable after copy");
    let batch_stride = |l: &Layout| if batch == 1 { 0 } else { l.strides()[0] as i64 };
    let int = |v: usize| i32::try_from(v).ok();
    let (Some(mi), Some(ni), Some(ki), Some(bi), Some(lda), Some(ldb)) =
        (int(m), int(n), int(k), int(batch), int(lda), int(ldb))
    else {
        return Ok(None);
    };
    let op = |t: bool| {
        if t {
            blas::cublasOperation_t::CUBLAS_OP_T
        } else {
            blas::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let mut guard = dev.blas.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { blas::is_culib_present() } {
            return Err(Error::CudaLibraryMissing {
                library: "libcublas",
            });
        }
        let handle = CudaBlas::new(dev.stream().clone()).map_err(|e| Error::CudaDevice {
            ordinal: dev.ordinal(),
            reason: e.to_string(),
        })?;
        *guard = Some(Blas(handle));
    }
    let handle = *guard.as_ref().expect("created above").0.handle();
    let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) = if dtype == DType::F64 {
        (
            (&one64 as *const f64).cast(),
            (&zero64 as *const f64).cast(),
        )
    } else {
        (
            (&one32 as *const f32).cast(),
            (&zero32 as *const f32).cast(),
        )
    };
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first.
    // SAFETY: the handle is bound to this device's stream; the pointers address live
    // blocks holding the operands as described by (trans, ld, batch stride), the output
    // holds batch*m*n elements, and alpha/beta live on this stack frame through the call.
    unsafe {
        cudarc::cublas::result::gemm_strided_batched_ex(
            handle,
            op(tb),
            op(ta),
            ni,
            mi,
            ki,
            alpha,
            b.address_of(lb.offset()) as *const std::ffi::c_void,
            data_type,
            ldb,
            batch_stride(&lb),
            a.address_of(la.offset()) as *const std::ffi::c_void,
            data_type,
            lda,
            batch_stride(&la),
            beta,
            out.address_of(0) as *mut std::ffi::c_void,
            data_type,
            ni,
            (m * n) as i64,
            bi,
            compute,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| Error::CudaDevice {
        ordinal: dev.ordinal(),
        reason: format!("cuBLAS gemm: {e}"),
    })?;
    super::note_queued();
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blas_operand_reads_row_and_column_major_views() {
        // row-major [3, 4]
        assert_eq!(blas_operand(3, 4, 4, 1), Some((false, 4)));
        // its transpose, a [4, 3] view with strides (1, 4)
        assert_eq!(blas_operand(4, 3, 1, 4), Some((true, 4)));
        // a row of a wider matrix: leading dim is the parent's row length
        assert_eq!(blas_operand(2, 3, 10, 1), Some((false, 10)));
        // neither dim unit-stride
        assert_eq!(blas_operand(2, 3, 6, 2), None);
        // single rows and columns take any stride
        assert_eq!(blas_operand(1, 5, 0, 1), Some((false, 5)));
        assert_eq!(blas_operand(5, 1, 1, 0), Some((false, 1)));
    }
}
