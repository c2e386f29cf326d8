//! `x * scale[c] + shift[c]` over dim 1 in one pass: eval-mode batch norm once its running
//! statistics are folded into a per-channel scale and shift. CPU kernel:
//! `ferrograd_kernels::fused::batch_norm`; CUDA and half-precision tensors take two
//! broadcast ops. The backward is tensor ops (a broadcast product and two reductions), so
//! it is differentiable again as it stands.

use super::range;
use crate::autograd::{SavedTensor, record};
use crate::{DType, Device, Tensor};
use ferrograd_kernels::fused::batch_norm::channel_affine as affine_kernel;
use ferrograd_kernels::{Element, with_wide_float_dtype};

/// `input * scale[c] + shift[c]` for `input` `[N, C, ...]` and `scale`, `shift` `[C]` on the
/// input's device (checked by the caller). Differentiable in all three. Operands of
/// different dtypes take the broadcast ops, which promote as PyTorch does.
pub(crate) fn channel_affine(input: &Tensor, scale: &Tensor, shift: &Tensor) -> Tensor {
    let c = input.shape()[1];
    let mut stat_shape = vec![1usize; input.dim()];
    stat_shape[1] = c;
    let fused = input.device() == Device::Cpu
        && matches!(input.dtype(), DType::F32 | DType::F64)
        && scale.dtype() == input.dtype()
        && shift.dtype() == input.dtype()
        && input.numel() > 0;
    if !fused {
        return input
            .mul(&scale.reshape(&stat_shape))
            .add(&shift.reshape(&stat_shape));
    }
    let op = "batch_norm";
    let x = input.detach().contiguous();
    let (s, t) = (scale.detach().contiguous(), shift.detach().contiguous());
    let inner = input.numel() / (input.shape()[0] * c);
    let out = x.with_cpu(op, |xs, _| {
        s.with_cpu(op, |ss, _| {
            t.with_cpu(op, |ts, _| {
                with_wide_float_dtype!(x.dtype(), T => T::into_storage(affine_kernel::<T>(
                    &xs.typed::<T>()[range(&x)],
                    &ss.typed::<T>()[range(&s)],
                    &ts.typed::<T>()[range(&t)],
                    inner,
                )), else unreachable!("channel_affine takes f32 or f64"))
            })
        })
    });
    let out = Tensor::from_cpu(out, input.shape());
    record(out, "batch_norm", &[input, scale, shift], || {
        let (sx, ss) = (SavedTensor::new(input), SavedTensor::new(scale));
        let dims: Vec<isize> = (0..input.dim() as isize).filter(|&d| d != 1).collect();
        move |ctx, g: &Tensor| {
            let scale = ss.get("batch_norm");
            vec![
                ctx.needs(0).then(|| g.mul(&scale.reshape(&stat_shape))),
                ctx.needs(1)
                    .then(|| g.mul(&sx.get("batch_norm")).sum(&dims, false)),
                ctx.needs(2).then(|| g.sum(&dims, false)),
            ]
        }
    })
}
