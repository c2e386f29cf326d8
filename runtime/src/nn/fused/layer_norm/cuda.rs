//! The CUDA side of fused layer norm: the launches of `layer_norm.cu` (kernels crate, `fused/layer_norm/`) and their dispatch from tensors.

use crate::Tensor;
use crate::nn::fused::device::dispatch;

dispatch! {
    /// Fused layer norm of contiguous `x` as `[rows, len]` (weight/bias contiguous `[len]`
    /// of x's dtype): output, per-row mean and reciprocal std.
    fn layer_norm(x: &Tensor, weight: Option<&Tensor>, bias: Option<&Tensor>, rows: usize, len: usize, eps: f64) -> Option<(Tensor, Tensor, Tensor)>;
    /// Gradients of [`layer_norm`]: dx, and (dweight, dbias) when `params`.
    fn layer_norm_backward(dy: &Tensor, x: &Tensor, mean: &Tensor, rstd: &Tensor, weight: Option<&Tensor>, rows: usize, len: usize, params: bool) -> Option<(Tensor, Option<(Tensor, Tensor)>)>;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::nn::fused::device::*;

    #[track_caller]
    pub(super) fn layer_norm(
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        rows: usize,
        len: usize,
        eps: f64,
    ) -> Option<(Tensor, Tensor, Tensor)> {
        if !x.dtype().is_float() {
            return None;
        }
        let d = devs([Some(x), weight, bias])?;
        let (y, mean, rstd) = k::layer_norm(
            operand(&d[0], Some(x))?,
            operand(&d[1], weight),
            operand(&d[2], bias),
            rows,
            len,
            eps,
        )
        .unwrap_or_else(|e| panic!("layer_norm: {e}"));
        Some((
            cuda_tensor(y, x.shape()),
            cuda_tensor(mean, &[rows]),
            cuda_tensor(rstd, &[rows]),
        ))
    }
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer_norm_backward(
        dy: &Tensor,
        x: &Tensor,
        mean: &Tensor,
        rstd: &Tensor,
        weight: Option<&Tensor>,
        rows: usize,
        len: usize,
        params: bool,
    ) -> Option<(Tensor, Option<(Tensor, Tensor)>)> {
        let d = devs([Some(dy), Some(x), Some(mean), Some(rstd), weight])?;
        let (dx, grads) = k::layer_norm_backward(
            operand(&d[0], Some(dy))?,
            operand(&d[1], Some(x))?,
            d[2].as_ref()?.get(),
            d[3].as_ref()?.get(),
            operand(&d[4], weight),
            rows,
            len,
            params,
        )
        .unwrap_or_else(|e| panic!("layer_norm backward: {e}"));
        Some((
            cuda_tensor(dx, x.shape()),
            grads.map(|(w, b)| (cuda_tensor(w, &[len]), cuda_tensor(b, &[len]))),
        ))
    }

    /// The launches, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::CudaStorage;
        use crate::storage::cuda::launch::*;

        use cudarc::driver::LaunchConfig;
        use ferrograd_kernels::Layout;
        use ferrograd_kernels::cuda as kernels;

        /// Fused layer norm of `rows` contiguous rows of `len`: the output (dtype of `x`), and
        /// each row's mean and reciprocal std (accumulator dtype).
        pub(crate) fn layer_norm(
            x: Operand<'_>,
            weight: Option<Operand<'_>>,
            bias: Option<Operand<'_>>,
            rows: usize,
            len: usize,
            eps: f64,
        ) -> Result<(CudaStorage, CudaStorage, CudaStorage)> {
            let dev = x.0.device();
            let dtype = x.0.dtype();
            let y = output(dev, dtype, rows * len)?;
            let mean = output(dev, acc_dtype(dtype), rows)?;
            let rstd = output(dev, acc_dtype(dtype), rows)?;
            if rows * len == 0 {
                return Ok((y, mean, rstd));
            }
            let (l, xs, w, b) = (len as u64, address(Some(x)), address(weight), address(bias));
            let (ys, ms, rs) = (y.address_of(0), mean.address_of(0), rstd.address_of(0));
            launch!(dev, &kernels::LAYER_NORM_ROWS, dtype, per_row_or_warp(rows, len, acc_size(dtype)); l, xs, w, b, eps, ys, ms, rs)?;
            Ok((y, mean, rstd))
        }

        /// Gradients of [`layer_norm`]: the input's and, when `params`, the weight's and bias's
        /// (`dy * xhat` and `dy` summed over rows, in the dtype of `x`).
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn layer_norm_backward(
            dy: Operand<'_>,
            x: Operand<'_>,
            mean: &CudaStorage,
            rstd: &CudaStorage,
            weight: Option<Operand<'_>>,
            rows: usize,
            len: usize,
            params: bool,
        ) -> Result<(CudaStorage, Option<(CudaStorage, CudaStorage)>)> {
            let dev = x.0.device();
            let dtype = x.0.dtype();
            let dx = output(dev, dtype, rows * len)?;
            if rows * len == 0 {
                let grads = if params {
                    let zeros = || full(dev, dtype, len, 0.0);
                    Some((zeros()?, zeros()?))
                } else {
                    None
                };
                return Ok((dx, grads));
            }
            let (l, dys, xs, w) = (
                len as u64,
                address(Some(dy)),
                address(Some(x)),
                address(weight),
            );
            let (ms, rs, dxs) = (mean.address_of(0), rstd.address_of(0), dx.address_of(0));
            launch!(dev, &kernels::LAYER_NORM_BACKWARD_ROWS, dtype, per_row_or_warp(rows, len, acc_size(dtype)); l, dys, xs, ms, rs, w, dxs)?;
            if !params {
                return Ok((dx, None));
            }
            // Bands of rows per partial sum: enough blocks to fill the device, few partials to add.
            let parts = rows.div_ceil(64).clamp(1, 256);
            let band = rows.div_ceil(parts);
            let acc = acc_dtype(dtype);
            let dw_part = output(dev, acc, parts * len)?;
            let db_part = output(dev, acc, parts * len)?;
            let (r, b) = (rows as u64, band as u64);
            let (dwp, dbp) = (dw_part.address_of(0), db_part.address_of(0));
            let cfg = LaunchConfig {
                grid_dim: (len.div_ceil(256) as u32, parts as u32, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            launch!(dev, &kernels::LAYER_NORM_PARAM_PARTIALS, dtype, cfg; r, l, b, dys, xs, ms, rs, dwp, dbp)?;
            let total = |part: &CudaStorage| -> Result<CudaStorage> {
                let summed = reduce(
                    &crate::storage::op::ReduceOp::Sum.cuda(),
                    part,
                    0,
                    [1, parts, len],
                )?;
                if acc == dtype {
                    Ok(summed)
                } else {
                    cast(&summed, &Layout::contiguous(&[len]), dtype)
                }
            };
            Ok((dx, Some((total(&dw_part)?, total(&db_part)?))))
        }
    }
}
