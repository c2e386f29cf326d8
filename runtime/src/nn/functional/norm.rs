//! Normalisation: `layer_norm` (fused) and `batch_norm`.

use crate::autograd::no_grad;
use crate::{DType, Device, Tensor};

/// Layer normalisation over the trailing `normalized_shape` dims (`F.layer_norm`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[1, 2]);
/// let y = F::layer_norm(&x, &[2], None, None, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0]);
/// ```
#[track_caller]
pub fn layer_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = layer_norm_untraced(input, normalized_shape, weight, bias, eps);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), weight, bias],
        || crate::dispatch::Op::LayerNorm {
            ndim: normalized_shape.len(),
            eps,
            has_weight: weight.is_some(),
            has_bias: bias.is_some(),
        },
        out,
    )
}

#[track_caller]
fn layer_norm_untraced(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    if let Some([x]) = crate::dispatch::cast("layer_norm", [input]) {
        return layer_norm(&x, normalized_shape, weight, bias, eps);
    }
    let k = normalized_shape.len();
    assert!(
        k <= input.dim() && input.shape()[input.dim() - k..] == *normalized_shape,
        "layer_norm: given normalized_shape={normalized_shape:?}, expected input with shape [*, {}], but got input of size {:?}",
        normalized_shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        input.shape()
    );
    assert!(
        input.dtype().is_float(),
        "layer_norm: expected a floating-point input, got {:?} (shape {:?})",
        input.dtype(),
        input.shape()
    );
    for (name, t) in [("weight", weight), ("bias", bias)] {
        if let Some(t) = t {
            assert!(
                t.shape() == normalized_shape,
                "layer_norm: {name} of shape {:?} must have shape {normalized_shape:?}",
                t.shape()
            );
        }
    }
    // Fused: one pass per row forward, one backward; weight and bias follow the input's
    // dtype (as under autocast).
    let len = normalized_shape.iter().product();
    let weight = weight.map(|w| w.to_dtype(input.dtype()));
    let bias = bias.map(|b| b.to_dtype(input.dtype()));
    crate::nn::fused::layer_norm(input, weight.as_ref(), bias.as_ref(), len, eps)
}

/// Layer norm of `input + shift + residual` (`F.layer_norm(input + shift + residual,
/// ...)`): a residual block's ending, with `shift` the bias of the linear layer that made
/// `input` (added first, broadcast over the last dim), so the model runs that layer
/// without its bias. For inference on the host (f32 or f64, nothing to differentiate,
/// not while tracing for export) it is one pass that reads `input` and `residual` and
/// writes the output (`ferrograd_kernels::fused::layer_norm::add_layer_norm_rows`), where
/// the adds and the norm make three; everywhere else it runs as those ops, with the same
/// results and gradients.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let (x, r) = (Tensor::from_vec(vec![0.0f64, 1.0], &[1, 2]), Tensor::from_vec(vec![0.0f64, 1.0], &[1, 2]));
/// let shift = Tensor::from_vec(vec![1.0f64, 1.0], &[2]);
/// // [1, 3], normalised.
/// let y = no_grad(|| F::add_layer_norm(&x, &r, Some(&shift), &[2], None, None, 0.0));
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0]);
/// ```
#[track_caller]
pub fn add_layer_norm(
    input: &Tensor,
    residual: &Tensor,
    shift: Option<&Tensor>,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("add_layer_norm", &[input, residual]);
    let len = normalized_shape.last().copied().unwrap_or(0);
    let fused =
        crate::nn::fused::inference_fusable(&[Some(input), Some(residual), shift, weight, bias])
            && crate::dispatch::cast("layer_norm", [input]).is_none()
            && normalized_shape.len() == 1
            && input.dim() >= 1
            && input.shape() == residual.shape()
            && input.shape()[input.dim() - 1] == len
            && shift.is_none_or(|s| s.shape() == [len])
            && weight.is_none_or(|w| w.shape() == [len])
            && bias.is_none_or(|b| b.shape() == [len]);
    if !fused {
        let x = shift.map_or_else(|| input.clone(), |s| input.add(s));
        return layer_norm(&x.add(residual), normalized_shape, weight, bias, eps);
    }
    crate::nn::fused::add_layer_norm(input, residual, shift, len, weight, bias, eps)
}

/// Panics unless every given per-channel tensor has shape `[C]` for `input` `[N, C, ...]`.
#[track_caller]
fn check_per_channel(op: &str, input: &Tensor, tensors: &[(&str, Option<&Tensor>)]) {
    let c = input.shape()[1];
    for (name, t) in tensors {
        if let Some(t) = t {
            assert!(
                t.shape() == [c],
                "{op}: {name} should have shape [{c}] for input of shape {:?}, got {:?}",
                input.shape(),
                t.shape()
            );
        }
    }
}

/// `y * weight[c] + bias[c]` over dim 1 of `y` `[N, C, ...]`, each optional.
fn per_channel_affine(mut y: Tensor, weight: Option<&Tensor>, bias: Option<&Tensor>) -> Tensor {
    let mut shape = vec![1usize; y.dim()];
    shape[1] = y.shape()[1];
    if let Some(w) = weight {
        y = y.mul(&w.reshape(&shape));
    }
    if let Some(b) = bias {
        y = y.add(&b.reshape(&shape));
    }
    y
}

/// Batch normalisation over dim 1 of `[N, C, ...]` (`F.batch_norm`). In training it
/// normalises with the batch statistics and updates the running ones in place
/// (`running = (1 - momentum) * running + momentum * batch`, unbiased variance); in eval
/// it uses the running statistics.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1]);
/// let (rm, rv) = (Tensor::zeros(&[1], DType::F64, &Device::Cpu), Tensor::ones(&[1], DType::F64, &Device::Cpu));
/// let y = F::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0]);
/// assert!((rm.item::<f64>() - 0.2).abs() < 1e-12 && (rv.item::<f64>() - 1.1).abs() < 1e-12);
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn batch_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = batch_norm_untraced(
        input,
        running_mean,
        running_var,
        weight,
        bias,
        training,
        momentum,
        eps,
        false,
    );
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), running_mean, running_var, weight, bias],
        || crate::dispatch::Op::BatchNorm {
            eps,
            training,
            has_weight: weight.is_some(),
            has_bias: bias.is_some(),
            has_stats: running_mean.is_some() && running_var.is_some(),
        },
        out,
    )
}

/// `relu(batch_norm(...))` (`F.relu(F.batch_norm(...))`), the pair at the start of
/// every ResNet block: the same arguments, results and gradients as [`batch_norm`]
/// followed by [`Tensor::relu`], in fewer passes. On the host (f32 or f64) the ReLU is
/// applied in the norm's output pass; in training its backward is folded into the
/// norm's, which recomputes the mask from the saved input (no ReLU pass, node or saved
/// output); in eval mode without gradients it is one pass. While tracing for export, on
/// CUDA and for other dtypes it runs as the two ops.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// // Two samples of two channels: each channel normalised to ±1, then the ReLU.
/// let x = Tensor::from_vec(vec![1.0f64, 3.0, -2.0, 2.0], &[2, 2]);
/// let y = F::batch_norm_relu(&x, None, None, None, None, true, 0.1, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![1.0, 1.0, 0.0, 0.0]);
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn batch_norm_relu(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("batch_norm_relu", &[input]);
    if crate::onnx::is_tracing() {
        return batch_norm(
            input,
            running_mean,
            running_var,
            weight,
            bias,
            training,
            momentum,
            eps,
        )
        .relu();
    }
    batch_norm_untraced(
        input,
        running_mean,
        running_var,
        weight,
        bias,
        training,
        momentum,
        eps,
        true,
    )
}

#[allow(clippy::too_many_arguments)]
#[track_caller]
fn batch_norm_untraced(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
    relu: bool,
) -> Tensor {
    assert!(
        input.dim() >= 2,
        "batch_norm: expected input of shape [N, C, ...], got {:?}",
        input.shape()
    );
    let c = input.shape()[1];
    let mut stat_shape = vec![1usize; input.dim()];
    stat_shape[1] = c;
    let dims: Vec<isize> = (0..input.dim() as isize).filter(|&d| d != 1).collect();
    let per_channel = input.numel() / c.max(1);
    check_per_channel(
        "batch_norm",
        input,
        &[
            ("running_mean", running_mean),
            ("running_var", running_var),
            ("weight", weight),
            ("bias", bias),
        ],
    );
    let (mean, var) = if training {
        assert!(
            per_channel > 1,
            "batch_norm: expected more than 1 value per channel when training, got input size {:?}",
            input.shape()
        );
        let fused = crate::nn::fused::batch_norm_train(input, weight, bias, eps, relu);
        let (out, mean, var) = match fused {
            Some((out, mean, var)) => (Some(out), mean, var),
            None => {
                let mean = input.mean(&dims, true);
                let centered = input.sub(&mean);
                let var = centered.mul(&centered).mean(&dims, true);
                (None, mean, var)
            }
        };
        no_grad(|| {
            let unbiased = var.mul_scalar(per_channel as f64 / (per_channel - 1) as f64);
            if let Some(rm) = running_mean {
                rm.mul_scalar_(1.0 - momentum)
                    .add_scaled_(&mean.reshape(&[c]), momentum);
            }
            if let Some(rv) = running_var {
                rv.mul_scalar_(1.0 - momentum)
                    .add_scaled_(&unbiased.reshape(&[c]), momentum);
            }
        });
        if let Some(out) = out {
            return out;
        }
        (mean, var)
    } else {
        let rm = running_mean.expect("batch_norm: running_mean is required in eval mode");
        let rv = running_var.expect("batch_norm: running_var is required in eval mode");
        // One pass over the input: the statistics, weight and bias folded into a
        // per-channel scale and shift first (on [C], as PyTorch's CPU kernel does): in
        // one host loop when no gradient can flow (inference: five tensor ops per norm
        // cost ResNet-18 about 0.2 ms of an 18 ms batch-1 forward), else as ops.
        let (scale, shift) = match eval_scale_shift_host(rm, rv, weight, bias, eps) {
            Some(folded) => folded,
            None => {
                let mut scale = rv.add_scalar(eps).rsqrt();
                if let Some(w) = weight {
                    scale = scale.mul(w);
                }
                let mut shift = rm.mul(&scale).neg();
                if let Some(b) = bias {
                    shift = shift.add(b);
                }
                (scale, shift)
            }
        };
        if relu {
            return crate::nn::fused::channel_affine_relu(input, &scale, &shift);
        }
        return crate::nn::fused::channel_affine(input, &scale, &shift);
    };
    let out = per_channel_affine(
        input.sub(&mean).mul(&var.add_scalar(eps).rsqrt()),
        weight,
        bias,
    );
    if relu { out.relu() } else { out }
}

/// Eval-mode batch norm's per-channel `scale = w / sqrt(var + eps)` and `shift = b -
/// mean · scale` computed in one host loop, in the tensors' own precision and order of
/// operations, when the running statistics, weight and bias are CPU tensors of one float
/// dtype (f32 or f64) and no gradient can reach the weight or bias; `None` otherwise
/// (the caller composes tensor ops, which autograd records).
fn eval_scale_shift_host(
    rm: &Tensor,
    rv: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Option<(Tensor, Tensor)> {
    let present = [Some(rm), Some(rv), weight, bias];
    let plain = present
        .iter()
        .flatten()
        .all(|t| t.device() == Device::Cpu && t.dtype() == rm.dtype() && t.shape() == rm.shape());
    let grad = crate::autograd::is_grad_enabled()
        && present.iter().flatten().any(|t| t.requires_grad_flag());
    if !plain || grad || rm.dim() != 1 {
        return None;
    }
    fn fold<T: crate::Element + num_traits::Float>(
        [rm, rv]: [&Tensor; 2],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> (Tensor, Tensor) {
        let eps = T::from(eps).expect("a float");
        let (w, b) = (
            weight.map(|t| t.to_vec::<T>()),
            bias.map(|t| t.to_vec::<T>()),
        );
        let scale: Vec<T> = rv
            .to_vec::<T>()
            .into_iter()
            .enumerate()
            .map(|(c, v)| {
                let r = (v + eps).sqrt().recip();
                w.as_ref().map_or(r, |w| r * w[c])
            })
            .collect();
        let shift: Vec<T> = rm
            .to_vec::<T>()
            .into_iter()
            .zip(&scale)
            .enumerate()
            .map(|(c, (m, &s))| {
                let ms = -(m * s);
                b.as_ref().map_or(ms, |b| ms + b[c])
            })
            .collect();
        let shape = rm.shape();
        (
            Tensor::from_vec(scale, shape),
            Tensor::from_vec(shift, shape),
        )
    }
    match rm.dtype() {
        DType::F32 => Some(fold::<f32>([rm, rv], weight, bias, eps)),
        DType::F64 => Some(fold::<f64>([rm, rv], weight, bias, eps)),
        _ => None,
    }
}

/// Group normalisation (`F.group_norm`): the channels of `[N, C, ...]` are split into
/// `num_groups` groups, each normalised over its channels and spatial positions (biased
/// variance), then scaled and shifted per channel.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], &[1, 4, 1]);
/// let y = F::group_norm(&x, 2, None, None, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0, -1.0, 1.0]);
/// ```
#[track_caller]
pub fn group_norm(
    input: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = group_norm_untraced(input, num_groups, weight, bias, eps);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), weight, bias],
        || crate::dispatch::Op::GroupNorm {
            groups: num_groups,
            eps,
            has_weight: weight.is_some(),
            has_bias: bias.is_some(),
        },
        out,
    )
}

#[track_caller]
fn group_norm_untraced(
    input: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    if let Some([x]) = crate::dispatch::cast("group_norm", [input]) {
        return group_norm(&x, num_groups, weight, bias, eps);
    }
    assert!(
        input.dim() >= 2,
        "group_norm: expected input of shape [N, C, ...], got {:?}",
        input.shape()
    );
    let (n, c) = (input.shape()[0], input.shape()[1]);
    assert!(
        num_groups > 0 && c.is_multiple_of(num_groups),
        "group_norm: expected number of channels in input ({c}, dim 1 of shape {:?}) to be divisible by num_groups, but got num_groups={num_groups}",
        input.shape()
    );
    let grouped = input.reshape(&[n, num_groups, input.numel() / (n * num_groups).max(1)]);
    let mean = grouped.mean(&[2], true);
    let centered = grouped.sub(&mean);
    let var = centered.mul(&centered).mean(&[2], true);
    check_per_channel("group_norm", input, &[("weight", weight), ("bias", bias)]);
    let y = centered
        .mul(&var.add_scalar(eps).rsqrt())
        .reshape(input.shape());
    per_channel_affine(y, weight, bias)
}

/// Instance normalisation (`F.instance_norm`): each channel of each sample of `[N, C, ...]`
/// normalised over its spatial positions. With `use_input_stats` the running statistics,
/// if given, are updated with the batch average of the per-instance ones (as PyTorch,
/// unbiased variance); without it they are used instead.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], &[2, 1, 2]);
/// let y = F::instance_norm(&x, None, None, None, None, true, 0.1, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0, -1.0, 1.0]);
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn instance_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    use_input_stats: bool,
    momentum: f64,
    eps: f64,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("instance_norm", &[input]);
    assert!(
        input.dim() >= 3,
        "instance_norm: expected input of shape [N, C, L] or [N, C, H, W], got {:?}",
        input.shape()
    );
    let (n, c) = (input.shape()[0], input.shape()[1]);
    let mut folded: Vec<usize> = vec![1, n * c];
    folded.extend_from_slice(&input.shape()[2..]);
    let x = input.reshape(&folded);
    // PyTorch's formulation: batch_norm over [1, N*C, ...] with the statistics repeated
    // per sample, then the running statistics averaged back over the samples.
    let repeated = |t: Option<&Tensor>| t.map(|t| t.detach().repeat(&[n]));
    let (rm, rv) = (repeated(running_mean), repeated(running_var));
    let (w, b) = (weight.map(|w| w.repeat(&[n])), bias.map(|b| b.repeat(&[n])));
    let y = batch_norm(
        &x,
        rm.as_ref(),
        rv.as_ref(),
        w.as_ref(),
        b.as_ref(),
        use_input_stats,
        momentum,
        eps,
    );
    if use_input_stats {
        no_grad(|| {
            for (running, updated) in [(running_mean, rm), (running_var, rv)] {
                if let (Some(running), Some(updated)) = (running, updated) {
                    running.copy_(&updated.reshape(&[n, c]).mean(&[0], false));
                }
            }
        });
    }
    y.reshape(input.shape())
}

/// Root-mean-square normalisation over the trailing `normalized_shape` dims
/// (`F.rms_norm`): `x / sqrt(mean(x²) + eps) * weight`; `eps = None` uses the dtype's
/// machine epsilon, as PyTorch.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![3.0f64, 4.0], &[1, 2]);
/// let y = F::rms_norm(&x, &[2], None, Some(0.0));
/// let r = (12.5f64).sqrt();
/// assert_eq!(y.to_vec::<f64>(), vec![3.0 / r, 4.0 / r]);
/// ```
#[track_caller]
pub fn rms_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = rms_norm_untraced(input, normalized_shape, weight, eps);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), weight],
        || crate::dispatch::Op::RmsNorm {
            ndim: normalized_shape.len(),
            eps,
            has_weight: weight.is_some(),
        },
        out,
    )
}

#[track_caller]
fn rms_norm_untraced(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Tensor {
    if let Some([x]) = crate::dispatch::cast("rms_norm", [input]) {
        return rms_norm(&x, normalized_shape, weight, eps);
    }
    let k = normalized_shape.len();
    assert!(
        k <= input.dim() && input.shape()[input.dim() - k..] == *normalized_shape,
        "rms_norm: given normalized_shape={normalized_shape:?}, expected input with shape [*, {}], but got input of size {:?}",
        normalized_shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        input.shape()
    );
    let eps = eps.unwrap_or(match input.dtype() {
        crate::DType::F64 => f64::EPSILON,
        crate::DType::F16 => 9.765_625e-4,
        crate::DType::BF16 => 7.812_5e-3,
        _ => f32::EPSILON as f64,
    });
    let dims: Vec<isize> = (input.dim() - k..input.dim()).map(|d| d as isize).collect();
    let y = input.mul(&input.mul(input).mean(&dims, true).add_scalar(eps).rsqrt());
    match weight {
        Some(w) => {
            assert!(
                w.shape() == normalized_shape,
                "rms_norm: weight of shape {:?} must have shape {normalized_shape:?}",
                w.shape()
            );
            y.mul(w)
        }
        None => y,
    }
}
