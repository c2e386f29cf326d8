//! The CUDA side of fused cross-entropy: the launches of `cross_entropy.cu` (kernels crate, `fused/cross_entropy/`) and their dispatch from tensors.

use crate::Tensor;
use crate::nn::fused::device::dispatch;
use ferrograd_kernels::IndexBounds;
dispatch! {
    /// Fused cross-entropy of contiguous logits `[rows, classes]` at int64 `target`: per-row
    /// losses, per-row target weights and log-sum-exps; targets checked against `bounds`.
    fn cross_entropy(x: &Tensor, target: &Tensor, bounds: &IndexBounds, weight: Option<&Tensor>, ignore_index: i64, smoothing: f64) -> Option<(Tensor, Tensor, Tensor)>;
    /// The logits' gradient of [`cross_entropy`] for per-row upstream `grad` (`[rows]`, or
    /// one element for every row).
    fn cross_entropy_backward(x: &Tensor, target: &Tensor, weight: Option<&Tensor>, ignore_index: i64, smoothing: f64, lse: &Tensor, grad: &Tensor) -> Option<Tensor>;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::nn::fused::device::*;

    /// The kernel options of a cross-entropy launch over logits `x` `[rows, classes]`.
    fn ce_opts<'a>(
        x: &Tensor,
        td: &'a Option<Dev<'_>>,
        target: &Tensor,
        wd: &'a Option<Dev<'_>>,
        weight: Option<&Tensor>,
        ignore_index: i64,
        smoothing: f64,
    ) -> Option<k::CrossEntropy<'a>> {
        Some(k::CrossEntropy {
            target: operand(td, Some(target))?,
            weight: operand(wd, weight),
            rows: x.shape()[0],
            classes: x.shape()[1],
            ignore_index,
            smoothing,
        })
    }
    #[track_caller]
    pub(super) fn cross_entropy(
        x: &Tensor,
        target: &Tensor,
        bounds: &IndexBounds,
        weight: Option<&Tensor>,
        ignore_index: i64,
        smoothing: f64,
    ) -> Option<(Tensor, Tensor, Tensor)> {
        if !x.dtype().is_float() {
            return None;
        }
        let d = devs([Some(x), Some(target), weight])?;
        let rows = x.shape()[0];
        let opts = ce_opts(x, &d[1], target, &d[2], weight, ignore_index, smoothing)?;
        let (loss, row_weight, lse) = k::cross_entropy(operand(&d[0], Some(x))?, &opts, bounds)
            .unwrap_or_else(|e| fail("cross_entropy", e));
        Some((
            cuda_tensor(loss, &[rows]),
            cuda_tensor(row_weight, &[rows]),
            cuda_tensor(lse, &[rows, 2]),
        ))
    }
    #[track_caller]
    pub(super) fn cross_entropy_backward(
        x: &Tensor,
        target: &Tensor,
        weight: Option<&Tensor>,
        ignore_index: i64,
        smoothing: f64,
        lse: &Tensor,
        grad: &Tensor,
    ) -> Option<Tensor> {
        let d = devs([Some(x), Some(target), weight, Some(lse), Some(grad)])?;
        let opts = ce_opts(x, &d[1], target, &d[2], weight, ignore_index, smoothing)?;
        let stride = if grad.numel() == 1 { 0 } else { 1 };
        let dx = k::cross_entropy_backward(
            operand(&d[0], Some(x))?,
            &opts,
            d[3].as_ref()?.get(),
            operand(&d[4], Some(grad))?,
            stride,
        )
        .unwrap_or_else(|e| panic!("cross_entropy backward: {e}"));
        Some(cuda_tensor(dx, x.shape()))
    }

    /// The launches, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::CudaStorage;
        use crate::storage::cuda::launch::*;

        use ferrograd_kernels::IndexBounds;
        use ferrograd_kernels::cuda as kernels;

        /// The options of the fused cross-entropy kernels.
        pub(crate) struct CrossEntropy<'a> {
            pub(crate) target: Operand<'a>,
            pub(crate) weight: Option<Operand<'a>>,
            pub(crate) rows: usize,
            pub(crate) classes: usize,
            pub(crate) ignore_index: i64,
            pub(crate) smoothing: f64,
        }

        /// Fused cross-entropy of contiguous logits `[rows, classes]`: per-row loss and target
        /// weight (dtype of `x`), and log-sum-exp as `[max, ln Σ]` pairs (accumulator dtype).
        pub(crate) fn cross_entropy(
            x: Operand<'_>,
            o: &CrossEntropy<'_>,
            bounds: &IndexBounds,
        ) -> Result<(CudaStorage, CudaStorage, CudaStorage)> {
            let dev = x.0.device();
            let dtype = x.0.dtype();
            let loss = output(dev, dtype, o.rows)?;
            let row_weight = output(dev, dtype, o.rows)?;
            // `[max, ln Σ]` per row (see the kernel).
            let lse = output(dev, acc_dtype(dtype), 2 * o.rows)?;
            if o.rows == 0 {
                return Ok((loss, row_weight, lse));
            }
            let (c, xs, ts, w) = (
                o.classes as u64,
                address(Some(x)),
                address(Some(o.target)),
                address(o.weight),
            );
            let (ignore, smoothing) = (o.ignore_index, o.smoothing);
            let (ls, ws, es) = (
                loss.address_of(0),
                row_weight.address_of(0),
                lse.address_of(0),
            );
            let check = index_check(dev, bounds, o.classes)?;
            let cfg = per_row(o.rows, o.classes, acc_size(dtype));
            launch!(dev, &kernels::CROSS_ENTROPY_ROWS, dtype, cfg; c, xs, ts, check, w, ignore, smoothing, ls, ws, es)?;
            dev.after_index_check()?;
            Ok((loss, row_weight, lse))
        }

        /// The logits' gradient of [`cross_entropy`]'s per-row losses, row `r` scaled by
        /// `grad[r * grad_stride]`.
        pub(crate) fn cross_entropy_backward(
            x: Operand<'_>,
            o: &CrossEntropy<'_>,
            lse: &CudaStorage,
            grad: Operand<'_>,
            grad_stride: usize,
        ) -> Result<CudaStorage> {
            let dev = x.0.device();
            let dtype = x.0.dtype();
            let dx = output(dev, dtype, o.rows * o.classes)?;
            if o.rows * o.classes == 0 {
                return Ok(dx);
            }
            let (c, xs, ts, w) = (
                o.classes as u64,
                address(Some(x)),
                address(Some(o.target)),
                address(o.weight),
            );
            let (ignore, smoothing, es) = (o.ignore_index, o.smoothing, lse.address_of(0));
            let (gs, stride, dxs) = (address(Some(grad)), grad_stride as u64, dx.address_of(0));
            let cfg = per_row(o.rows, o.classes, acc_size(dtype));
            launch!(dev, &kernels::CROSS_ENTROPY_BACKWARD_ROWS, dtype, cfg; c, xs, ts, w, ignore, smoothing, es, gs, stride, dxs)?;
            Ok(dx)
        }
    }
}
