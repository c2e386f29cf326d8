//! The CUDA side of dropout: the launch of `dropout.cu` (kernels crate, `fused/dropout/`) and its dispatch from tensors.

use crate::Tensor;
use crate::nn::fused::device::dispatch;

dispatch! {
    /// Dropout of contiguous float `x` with the Philox stream of `seed`: `(y, mask)`.
    fn dropout(x: &Tensor, seed: u64, p: f64, scale: f64) -> Option<(Tensor, Tensor)>;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::nn::fused::device::*;

    #[track_caller]
    pub(super) fn dropout(x: &Tensor, seed: u64, p: f64, scale: f64) -> Option<(Tensor, Tensor)> {
        if !x.dtype().is_float() {
            return None;
        }
        let s = dev(x)?;
        let (y, mask) = k::dropout(s.get(), contiguous_offset(x), x.numel(), seed, p, scale)
            .unwrap_or_else(|e| panic!("dropout: {e}"));
        Some((cuda_tensor(y, x.shape()), cuda_tensor(mask, x.shape())))
    }

    /// The launches, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::CudaStorage;
        use crate::storage::cuda::launch::*;

        use ferrograd_kernels::cuda as kernels;

        /// Dropout of the contiguous `n` elements of `x` at `offset` with the Philox stream of
        /// `seed`: `(y, mask)`, mask holding `scale` where kept and 0 where dropped.
        pub(crate) fn dropout(
            x: &CudaStorage,
            offset: usize,
            n: usize,
            seed: u64,
            p: f64,
            scale: f64,
        ) -> Result<(CudaStorage, CudaStorage)> {
            let dev = x.device();
            let dtype = x.dtype();
            let y = output(dev, dtype, n)?;
            let mask = output(dev, dtype, n)?;
            if n == 0 {
                return Ok((y, mask));
            }
            let (nn, xs, ys, ms) = (
                n as u64,
                x.address_of(offset),
                y.address_of(0),
                mask.address_of(0),
            );
            launch!(dev, &kernels::DROPOUT, dtype, spread(n.div_ceil(4)); nn, seed, p, scale, xs, ys, ms)?;
            Ok((y, mask))
        }
    }
}
