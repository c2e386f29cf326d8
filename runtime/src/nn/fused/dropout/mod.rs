//! Dropout: one kernel draws the mask from a Philox stream and applies it; backward
//! multiplies by the saved mask. CPU kernel and `.cu`: `ferrograd_kernels::fused::dropout`.

mod cuda;

use super::range;
use crate::Tensor;
use crate::autograd::record;
use ferrograd_kernels::fused::dropout::dropout as dropout_kernel;
use ferrograd_kernels::{Element, with_float_dtype};

/// Dropout with probability `0 < p < 1` (checked by the caller): one kernel draws the mask
/// from a Philox stream seeded by the global generator (the same mask on every device for
/// a seed) and applies it; backward multiplies by the saved scaled mask. Integer inputs
/// are refused, as in PyTorch.
pub(crate) fn dropout(input: &Tensor, p: f64) -> Tensor {
    assert!(
        input.dtype().is_float(),
        "dropout: expected a floating-point input, got {:?} (shape {:?})",
        input.dtype(),
        input.shape()
    );
    let seed = crate::random::with_global(|g| g.next_u64());
    let scale = 1.0 / (1.0 - p);
    let x = input.detach().contiguous();
    let (y, mask) = cuda::dropout(&x, seed, p, scale).unwrap_or_else(|| {
        let (y, mask) = x.with_cpu("dropout", |xs, _| {
            with_float_dtype!(xs.dtype(), T => {
                let (y, mask) = dropout_kernel(&xs.typed::<T>()[range(&x)], seed, p, scale);
                (T::into_storage(y), T::into_storage(mask))
            }, else unreachable!("checked above"))
        });
        let device = x.device();
        (
            Tensor::from_cpu_on(y, x.shape(), device),
            Tensor::from_cpu_on(mask, x.shape(), device),
        )
    });
    record(y, "dropout", &[input], move || {
        move |_, g: &Tensor| vec![Some(g.mul(&mask))]
    })
}
