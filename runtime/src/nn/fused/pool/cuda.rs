//! The CUDA side of 2-D pooling: the launches of `pool.cu` (kernels crate, `fused/pool/`) and their dispatch from tensors.

use crate::Tensor;
use crate::nn::fused::device::dispatch;
use ferrograd_kernels::fused::pool::PoolGeometry;
dispatch! {
    /// Max (`max`: values and i64 in-plane indices) or average pooling of contiguous float
    /// `x` `[n, c, h, w]`.
    fn pool2d(x: &Tensor, max: bool, g: &PoolGeometry) -> Option<(Tensor, Option<Tensor>)>;
    /// The input gradient of [`pool2d`] from contiguous `grad` (and max pooling's indices).
    fn pool2d_backward(grad: &Tensor, indices: Option<&Tensor>, g: &PoolGeometry) -> Option<Tensor>;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::nn::fused::device::*;

    #[track_caller]
    pub(super) fn pool2d(
        x: &Tensor,
        max: bool,
        g: &PoolGeometry,
    ) -> Option<(Tensor, Option<Tensor>)> {
        if !x.dtype().is_float() {
            return None;
        }
        let d = devs([Some(x)])?;
        let op = if max { "max_pool2d" } else { "avg_pool2d" };
        let (out, indices) =
            k::pool2d(max, operand(&d[0], Some(x))?, g).unwrap_or_else(|e| fail(op, e));
        let shape = [g.window.n, g.window.c, g.output[0], g.output[1]];
        Some((
            cuda_tensor(out, &shape),
            indices.map(|i| cuda_tensor(i, &shape)),
        ))
    }
    #[track_caller]
    pub(super) fn pool2d_backward(
        grad: &Tensor,
        indices: Option<&Tensor>,
        g: &PoolGeometry,
    ) -> Option<Tensor> {
        if !grad.dtype().is_float() {
            return None;
        }
        let d = devs([Some(grad), indices])?;
        let op = if indices.is_some() {
            "max_pool2d backward"
        } else {
            "avg_pool2d backward"
        };
        let dx = k::pool2d_backward(operand(&d[0], Some(grad))?, operand(&d[1], indices), g)
            .unwrap_or_else(|e| fail(op, e));
        let w = &g.window;
        Some(cuda_tensor(dx, &[w.n, w.c, w.input[0], w.input[1]]))
    }

    /// The launches, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::CudaStorage;
        use crate::storage::cuda::launch::*;

        use ferrograd_kernels::DType;
        use ferrograd_kernels::cuda as kernels;

        /// Max pooling (`max = true`: outputs and i64 in-plane indices) or average pooling
        /// (outputs only) of the contiguous `[n, c, h, w]` elements at `offset`.
        pub(crate) fn pool2d(
            max: bool,
            (src, offset): Operand<'_>,
            g: &ferrograd_kernels::fused::pool::PoolGeometry,
        ) -> Result<(CudaStorage, Option<CudaStorage>)> {
            let dev = src.device();
            let [oh, ow] = g.output;
            let len = g.window.n * g.window.c * oh * ow;
            let out = output(dev, src.dtype(), len)?;
            let indices = max.then(|| output(dev, DType::I64, len)).transpose()?;
            if len == 0 {
                return Ok((out, indices));
            }
            let geometry = ConvGeometry::with_output(&g.window, g.output);
            let (mode, fixed) = g.divisor.code();
            let (s, o) = (src.address_of(offset), out.address_of(0));
            let dtype = src.dtype();
            match &indices {
                Some(idx) => {
                    let i = idx.address_of(0);
                    launch!(dev, &kernels::MAX_POOL2D, dtype, spread(len); geometry, s, o, i)?
                }
                None => {
                    launch!(dev, &kernels::AVG_POOL2D, dtype, spread(len); geometry, s, o, mode, fixed)?
                }
            }
            Ok((out, indices))
        }

        /// The input gradient `[n, c, h, w]` of [`pool2d`] from the contiguous output gradient
        /// (and, for max pooling, the indices it returned).
        pub(crate) fn pool2d_backward(
            (grad, offset): Operand<'_>,
            indices: Option<Operand<'_>>,
            g: &ferrograd_kernels::fused::pool::PoolGeometry,
        ) -> Result<CudaStorage> {
            let dev = grad.device();
            let w = &g.window;
            let len = w.n * w.c * w.input[0] * w.input[1];
            let dx = output(dev, grad.dtype(), len)?;
            if len == 0 {
                return Ok(dx);
            }
            let geometry = ConvGeometry::with_output(w, g.output);
            let (mode, fixed) = g.divisor.code();
            let (gs, d) = (grad.address_of(offset), dx.address_of(0));
            let dtype = grad.dtype();
            match indices {
                Some(idx) => {
                    let i = address(Some(idx));
                    launch!(dev, &kernels::MAX_POOL2D_BACKWARD, dtype, spread(len); geometry, gs, i, d)?
                }
                None => {
                    launch!(dev, &kernels::AVG_POOL2D_BACKWARD, dtype, spread(len); geometry, gs, d, mode, fixed)?
                }
            }
            Ok(dx)
        }
    }
}
