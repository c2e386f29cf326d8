//! Batch norm over dim 1 in few passes. [`channel_affine`] is `x * scale[c] + shift[c]` in
//! one pass: eval-mode batch norm once its running statistics are folded into a per-channel
//! scale and shift (its backward is tensor ops, differentiable again as it stands).
//! [`batch_norm_train`] is training mode: a statistics pass, then the same affine pass,
//! with a fused backward (two passes) unless `create_graph` asks for differentiable
//! gradients. CPU kernels: `ferrograd_kernels::fused::batch_norm`; CUDA and
//! half-precision tensors take broadcast ops.

use super::{range, with_optional};
use crate::autograd::{SavedTensor, is_grad_enabled, no_grad, record};
use crate::{DType, Device, Tensor};
use ferrograd_kernels::fused::batch_norm::{
    ReluAfter, channel_affine as affine_kernel, channel_affine_relu as affine_relu_kernel,
    channel_grad_input, channel_grad_sums, channel_moments, channel_normalize,
    channel_normalize_relu,
};
use ferrograd_kernels::{Element, with_wide_float_dtype};

/// `input * scale[c] + shift[c]` for `input` `[N, C, ...]` and `scale`, `shift` `[C]` on the
/// input's device (checked by the caller). Differentiable in all three. Operands of
/// different dtypes take the broadcast ops, which promote as PyTorch does.
pub(crate) fn channel_affine(input: &Tensor, scale: &Tensor, shift: &Tensor) -> Tensor {
    channel_affine_maybe_relu(input, scale, shift, false)
}

/// `relu(input * scale[c] + shift[c])` as [`channel_affine`] then `relu`: one pass for
/// inference (see [`super::inference_fusable`]), else those two ops.
pub(crate) fn channel_affine_relu(input: &Tensor, scale: &Tensor, shift: &Tensor) -> Tensor {
    if super::inference_fusable(&[Some(input), Some(scale), Some(shift)]) {
        channel_affine_maybe_relu(input, scale, shift, true)
    } else {
        channel_affine(input, scale, shift).relu()
    }
}

/// [`channel_affine`], with the ReLU in the same pass when `relu` (only for callers that
/// need no gradient: the node recorded is the affine map's).
fn channel_affine_maybe_relu(input: &Tensor, scale: &Tensor, shift: &Tensor, relu: bool) -> Tensor {
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
                with_wide_float_dtype!(x.dtype(), T => {
                    let kernel = if relu { affine_relu_kernel::<T> } else { affine_kernel::<T> };
                    T::into_storage(kernel(
                        &xs.typed::<T>()[range(&x)],
                        &ss.typed::<T>()[range(&s)],
                        &ts.typed::<T>()[range(&t)],
                        inner,
                    ))
                }, else unreachable!("channel_affine takes f32 or f64"))
            })
        })
    });
    let out = Tensor::from_cpu(out, input.shape());
    if relu {
        return out;
    }
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

/// Fewest elements per plane (`H·W`) for [`batch_norm_train`]: its per-channel loops walk
/// planes, so `[N, C]` inputs (`BatchNorm1d` after a linear layer, one element per plane)
/// take the composed ops, whose reductions run along the batch instead.
const MIN_INNER: usize = 2;

/// Whether [`batch_norm_train`] serves `input` with these parameters: CPU tensors of f32 or
/// f64, all of one dtype (others take the composed ops, which promote as PyTorch does).
fn train_applies(input: &Tensor, params: &[Option<&Tensor>]) -> bool {
    let same = |t: &Tensor| t.device() == Device::Cpu && t.dtype() == input.dtype();
    matches!(input.dtype(), DType::F32 | DType::F64)
        && same(input)
        && input.numel() > 0
        && params.iter().flatten().all(|t| same(t))
}

/// Training-mode batch norm of `input` `[N, C, ...]` with optional `weight` and `bias` `[C]`
/// (checked by the caller): the output and the batch's per-channel mean and biased variance
/// (`[C]`, the input's dtype, for the running statistics), or `None` where the fused kernels
/// do not apply (see [`train_applies`] and [`MIN_INNER`]). One autograd node. With `relu`,
/// the output is `relu` of the norm's, in the same pass, and the backward masks the
/// gradient by the pre-activation, recomputed from the input bit for bit as the forward
/// computed it (nothing more is saved, and the ReLU's own pass and node disappear).
pub(crate) fn batch_norm_train(
    input: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
    relu: bool,
) -> Option<(Tensor, Tensor, Tensor)> {
    if !train_applies(input, &[weight, bias]) {
        return None;
    }
    let op = "batch_norm";
    let c = input.shape()[1];
    let inner = input.numel() / (input.shape()[0] * c);
    if inner < MIN_INNER {
        return None;
    }
    let x = input.detach().contiguous();
    let host = |t: &Tensor| t.detach().to_dtype(DType::F64).to_vec::<f64>();
    let (w, b) = (weight.map(host), bias.map(host));
    let (mean, var) = x.with_cpu(op, |xs, _| {
        with_wide_float_dtype!(x.dtype(), T => channel_moments::<T>(
            &xs.typed::<T>()[range(&x)], c, inner,
        ), else unreachable!("batch_norm_train takes f32 or f64"))
    });
    let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let scale: Vec<f64> = (0..c)
        .map(|i| invstd[i] * w.as_ref().map_or(1.0, |w| w[i]))
        .collect();
    let shift: Vec<f64> = (0..c).map(|i| b.as_ref().map_or(0.0, |b| b[i])).collect();
    let dtype = input.dtype();
    let per_channel = move |v: &[f64]| Tensor::from_vec(v.to_vec(), &[c]).to_dtype(dtype);
    let out = x.with_cpu(op, |xs, _| {
        with_wide_float_dtype!(dtype, T => {
            let kernel = if relu { channel_normalize_relu::<T> } else { channel_normalize::<T> };
            T::into_storage(kernel(
                &xs.typed::<T>()[range(&x)],
                &cast::<T>(&mean),
                &cast::<T>(&scale),
                &cast::<T>(&shift),
                inner,
            ))
        }, else unreachable!("batch_norm_train takes f32 or f64"))
    });
    let out = Tensor::from_cpu(out, input.shape());
    let (mean_t, var_t) = (per_channel(&mean), per_channel(&var));
    let mut inputs = vec![input];
    inputs.extend(weight);
    inputs.extend(bias);
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let out = record(out, "batch_norm", &inputs, || {
        let sx = SavedTensor::new(input);
        let sw = weight.map(SavedTensor::new);
        move |ctx, g: &Tensor| {
            let x = sx.get("batch_norm");
            let w = sw.as_ref().map(|s| s.get("batch_norm"));
            let want_w = has_w && ctx.needs(1);
            let want_b = has_b && ctx.needs(1 + has_w as usize);
            let (dx, dw, db) = if is_grad_enabled() {
                let g = if relu {
                    // The ReLU's gradient as a constant mask (its second derivative is 0).
                    let pre = no_grad(|| pre_activation(&x, &mean, &scale, &shift));
                    g.mul(&pre.le_scalar(0.0).logical_not().to_dtype(g.dtype()))
                } else {
                    g.clone()
                };
                train_backward_graph(&g, &x, w.as_ref(), eps)
            } else {
                let (gy, x) = (g.contiguous(), x.detach().contiguous());
                let w = w.map(|w| w.detach().contiguous());
                let op = "batch_norm backward";
                let (sg, sgx, dx) = gy.with_cpu(op, |gs, _| {
                    x.with_cpu(op, |xs, _| {
                        with_optional(op, w.as_ref(), |ws| {
                            with_wide_float_dtype!(x.dtype(), T => {
                                let (gy_h, x_h) = (&gs.typed::<T>()[range(&gy)], &xs.typed::<T>()[range(&x)]);
                                let operands = relu.then(|| [cast::<T>(&mean), cast::<T>(&scale), cast::<T>(&shift)]);
                                let mask = operands.as_ref().map(|[center, scale, shift]| ReluAfter { center, scale, shift });
                                let (sg, sgx) = channel_grad_sums(gy_h, x_h, &mean, inner, mask);
                                let dx = ctx.needs(0).then(|| T::into_storage(channel_grad_input(
                                    gy_h,
                                    x_h,
                                    &mean,
                                    &invstd,
                                    ws.map(|s| &s.typed::<T>()[range(w.as_ref().expect("present"))]),
                                    &sg,
                                    &sgx,
                                    inner,
                                    mask,
                                )));
                                (sg, sgx, dx)
                            }, else unreachable!("batch_norm_train takes f32 or f64"))
                        })
                    })
                });
                let dw: Vec<f64> = sgx.iter().zip(&invstd).map(|(s, r)| s * r).collect();
                (
                    dx.map(|s| Tensor::from_cpu(s, x.shape())),
                    Some(per_channel(&dw)),
                    Some(per_channel(&sg)),
                )
            };
            let mut grads = vec![ctx.needs(0).then_some(dx).flatten()];
            if has_w {
                grads.push(want_w.then_some(dw).flatten());
            }
            if has_b {
                grads.push(want_b.then_some(db).flatten());
            }
            grads
        }
    });
    Some((out, mean_t, var_t))
}

type BatchNormGrads = (Option<Tensor>, Option<Tensor>, Option<Tensor>);

/// The per-channel operands in the element type, rounded as the kernels take them.
fn cast<T: Element>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&a| T::from_f64(a)).collect()
}

/// The pre-activation `(x - mean[c]) * scale[c] + shift[c]` of a fused batch norm + ReLU,
/// by the forward's own kernel (so bit for bit its values).
fn pre_activation(x: &Tensor, mean: &[f64], scale: &[f64], shift: &[f64]) -> Tensor {
    let x = x.detach().contiguous();
    let c = x.shape()[1];
    let inner = x.numel() / (x.shape()[0] * c);
    let out = x.with_cpu("batch_norm backward", |xs, _| {
        with_wide_float_dtype!(x.dtype(), T => T::into_storage(channel_normalize::<T>(
            &xs.typed::<T>()[range(&x)],
            &cast::<T>(mean),
            &cast::<T>(scale),
            &cast::<T>(shift),
            inner,
        )), else unreachable!("batch_norm_train takes f32 or f64"))
    });
    Tensor::from_cpu(out, x.shape())
}

/// Training-mode batch norm's gradients as tensor ops (differentiable again, for
/// `create_graph`): the statistics are recomputed from `x`, so second derivatives flow
/// through them.
fn train_backward_graph(g: &Tensor, x: &Tensor, w: Option<&Tensor>, eps: f64) -> BatchNormGrads {
    let c = x.shape()[1];
    let mut stat_shape = vec![1usize; x.dim()];
    stat_shape[1] = c;
    let dims: Vec<isize> = (0..x.dim() as isize).filter(|&d| d != 1).collect();
    let mean = x.mean(&dims, true);
    let centered = x.sub(&mean);
    let rstd = centered
        .mul(&centered)
        .mean(&dims, true)
        .add_scalar(eps)
        .rsqrt();
    let xhat = centered.mul(&rstd);
    let gw = match w {
        Some(w) => g.mul(&w.reshape(&stat_shape)),
        None => g.clone(),
    };
    let dx = rstd.mul(
        &gw.sub(&gw.mean(&dims, true))
            .sub(&xhat.mul(&gw.mul(&xhat).mean(&dims, true))),
    );
    let dw = g.mul(&xhat).sum(&dims, false);
    let db = g.sum(&dims, false);
    (Some(dx), Some(dw), Some(db))
}
