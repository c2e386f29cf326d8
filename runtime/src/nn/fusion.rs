//! Inference-time folding of a batch norm into the layer before it
//! (`torch.nn.utils.fusion`): an eval-mode `BatchNorm` after a convolution or a linear
//! layer is an affine map per output channel, so it can be multiplied into that layer's
//! weight and bias, and the network runs one layer instead of two. Opt-in, for models in
//! `eval()`: the fused layer has the running statistics baked in.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::nn::{BatchNorm2d, Conv2d, ConvOptions, Module, fusion};
//! let conv = Conv2d::new(3, 8, 3, ConvOptions::default().padding(1).bias(false), &Device::Cpu);
//! let mut bn = BatchNorm2d::new(8, &Device::Cpu);
//! bn.eval();
//! let fused = fusion::fuse_conv_bn_eval(&conv, &bn);
//! let x = Tensor::randn(&[2, 3, 16, 16], DType::F32, &Device::Cpu);
//! let (a, b) = (bn.forward(&conv.forward(&x)), fused.forward(&x));
//! assert!(a.sub(&b).abs().max_all().item::<f32>() < 1e-5);
//! ```

use super::{BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Linear};
use crate::Tensor;
use crate::autograd::no_grad;

/// The weight and bias of a convolution or linear layer (`weight` `[out, ...]`, `bias`
/// `[out]` or none) with a batch norm over its `out` channels folded in
/// (`torch.nn.utils.fusion.fuse_conv_bn_weights`):
/// `w' = w · γ/√(var + eps)` per output channel and `b' = (b − mean) · γ/√(var + eps) + β`.
/// `γ`/`β` are 1/0 when the norm has no affine parameters. The results are new leaves
/// that require a gradient when `weight` does.
///
/// # Panics
/// When the statistics are not `[out]` vectors.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::fusion::fuse_conv_bn_weights;
/// let w = Tensor::ones(&[2, 1, 1, 1], DType::F64, &Device::Cpu);
/// let mean = Tensor::from_vec(vec![1.0f64, 2.0], &[2]);
/// let var = Tensor::from_vec(vec![3.0f64, 0.0], &[2]);
/// let (fw, fb) = fuse_conv_bn_weights(&w, None, &mean, &var, 1.0, None, None);
/// assert_eq!(fw.to_vec::<f64>(), vec![0.5, 1.0]);
/// assert_eq!(fb.to_vec::<f64>(), vec![-0.5, -2.0]);
/// ```
#[track_caller]
pub fn fuse_conv_bn_weights(
    weight: &Tensor,
    bias: Option<&Tensor>,
    running_mean: &Tensor,
    running_var: &Tensor,
    eps: f64,
    bn_weight: Option<&Tensor>,
    bn_bias: Option<&Tensor>,
) -> (Tensor, Tensor) {
    let out = weight.size(0);
    for (name, t) in [
        ("running_mean", Some(running_mean)),
        ("running_var", Some(running_var)),
        ("bias", bias),
        ("bn weight", bn_weight),
        ("bn bias", bn_bias),
    ] {
        if let Some(t) = t {
            assert!(
                t.shape() == [out],
                "fuse_conv_bn_weights: {name} of shape {:?} does not match the {out} output channels of a weight of shape {:?}",
                t.shape(),
                weight.shape()
            );
        }
    }
    let requires_grad = weight.requires_grad_flag();
    let (w, b) = no_grad(|| {
        let dtype = weight.dtype();
        let scale = running_var.add_scalar(eps).rsqrt().to_dtype(dtype);
        let scale = match bn_weight {
            Some(g) => scale.mul(&g.to_dtype(dtype)),
            None => scale,
        };
        let mut per_channel = vec![1usize; weight.dim()];
        per_channel[0] = out;
        let w = weight.mul(&scale.reshape(&per_channel));
        let centred = match bias {
            Some(b) => b.sub(&running_mean.to_dtype(dtype)),
            None => running_mean.to_dtype(dtype).neg(),
        };
        let b = centred.mul(&scale);
        let b = match bn_bias {
            Some(beta) => b.add(&beta.to_dtype(dtype)),
            None => b,
        };
        (w.contiguous(), b.contiguous())
    });
    (
        w.detach().requires_grad(requires_grad),
        b.detach().requires_grad(requires_grad),
    )
}

/// The running statistics and affine parameters of an eval-mode batch norm.
macro_rules! eval_stats {
    ($f:literal, $bn:expr) => {{
        let bn = $bn;
        assert!(
            !bn.training,
            concat!($f, ": the batch norm must be in eval mode (call .eval())")
        );
        let (Some(mean), Some(var)) = (bn.running_mean.as_ref(), bn.running_var.as_ref()) else {
            panic!(concat!(
                $f,
                ": the batch norm has no running statistics (track_running_stats=false)"
            ));
        };
        (mean, var, bn.eps, bn.weight.as_ref(), bn.bias.as_ref())
    }};
}

/// `conv` followed by the eval-mode `bn`, as one convolution
/// (`torch.nn.utils.fusion.fuse_conv_bn_eval`); see the [module docs](self).
///
/// # Panics
/// When `bn` is in training mode, has no running statistics, or has another number of
/// channels than `conv` has outputs.
#[track_caller]
pub fn fuse_conv_bn_eval(conv: &Conv2d, bn: &BatchNorm2d) -> Conv2d {
    let (mean, var, eps, g, beta) = eval_stats!("fuse_conv_bn_eval", bn);
    let (weight, bias) =
        fuse_conv_bn_weights(&conv.weight, conv.bias.as_ref(), mean, var, eps, g, beta);
    Conv2d {
        weight,
        bias: Some(bias),
        options: conv.options,
    }
}

/// [`fuse_conv_bn_eval`] for a 1-D convolution and `BatchNorm1d`.
///
/// # Panics
/// As [`fuse_conv_bn_eval`].
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{BatchNorm1d, Conv1d, ConvOptions, Module, fusion};
/// let conv = Conv1d::new(2, 4, 3, ConvOptions::default(), &Device::Cpu);
/// let mut bn = BatchNorm1d::new(4, &Device::Cpu);
/// bn.eval();
/// let x = Tensor::randn(&[2, 2, 9], DType::F32, &Device::Cpu);
/// let fused = fusion::fuse_conv1d_bn_eval(&conv, &bn);
/// assert!(bn.forward(&conv.forward(&x)).sub(&fused.forward(&x)).abs().max_all().item::<f32>() < 1e-5);
/// ```
#[track_caller]
pub fn fuse_conv1d_bn_eval(conv: &Conv1d, bn: &BatchNorm1d) -> Conv1d {
    let (mean, var, eps, g, beta) = eval_stats!("fuse_conv1d_bn_eval", bn);
    let (weight, bias) =
        fuse_conv_bn_weights(&conv.weight, conv.bias.as_ref(), mean, var, eps, g, beta);
    Conv1d {
        weight,
        bias: Some(bias),
        options: conv.options,
    }
}

/// `linear` followed by the eval-mode `bn` over its features, as one linear layer
/// (`torch.nn.utils.fusion.fuse_linear_bn_eval`).
///
/// # Panics
/// As [`fuse_conv_bn_eval`].
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{BatchNorm1d, Linear, Module, fusion};
/// let fc = Linear::new(5, 3, &Device::Cpu);
/// let mut bn = BatchNorm1d::new(3, &Device::Cpu);
/// bn.eval();
/// let x = Tensor::randn(&[4, 5], DType::F32, &Device::Cpu);
/// let fused = fusion::fuse_linear_bn_eval(&fc, &bn);
/// assert!(bn.forward(&fc.forward(&x)).sub(&fused.forward(&x)).abs().max_all().item::<f32>() < 1e-5);
/// ```
#[track_caller]
pub fn fuse_linear_bn_eval(linear: &Linear, bn: &BatchNorm1d) -> Linear {
    let (mean, var, eps, g, beta) = eval_stats!("fuse_linear_bn_eval", bn);
    let (weight, bias) = fuse_conv_bn_weights(
        &linear.weight,
        linear.bias.as_ref(),
        mean,
        var,
        eps,
        g,
        beta,
    );
    Linear {
        weight,
        bias: Some(bias),
    }
}

/// `act(dense(x))`, with the bias added in the activation's pass (`F::bias_gelu`) for an
/// exact GELU when nothing needs a gradient: one pass over the output fewer, and the same
/// values as the two layers. `network!` runs a `Linear` piped straight into `gelu` (or
/// into an activation parameter) through this, as BERT's intermediate layer is written
/// by hand in `transformers`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Activation, Linear, fusion};
/// let dense = Linear::new(8, 16, &Device::Cpu);
/// let x = Tensor::randn(&[2, 3, 8], DType::F32, &Device::Cpu);
/// let unfused = Activation::Gelu.apply(&dense.forward(&x));
/// let fused = ferrograd_runtime::autograd::no_grad(|| fusion::linear_activation(&dense, &x, Activation::Gelu));
/// assert!(fused.sub(&unfused).abs().max_all().item::<f32>() < 1e-6);
/// ```
pub fn linear_activation(dense: &Linear, x: &Tensor, act: super::Activation) -> Tensor {
    match (act, &dense.bias) {
        (super::Activation::Gelu, Some(b)) if !crate::autograd::is_grad_enabled() => {
            super::functional::bias_gelu(&super::functional::linear(x, &dense.weight, None), b)
        }
        _ => act.apply(&dense.forward(x)),
    }
}

/// `norm(dropout(dense(x)) + residual)`, a post-norm transformer sublayer's ending
/// (BERT's `BertSelfOutput` and `BertOutput`): with the dropout inactive (eval mode, or
/// `p = 0`) and nothing to differentiate, one pass for the dense layer's bias, the
/// residual and the norm (`F::add_layer_norm`, the bias as its shift); the three layers
/// otherwise. `network!` runs that pattern through this.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Dropout, LayerNorm, Linear, fusion};
/// let (dense, norm) = (Linear::new(8, 8, &Device::Cpu), LayerNorm::new(&[8], &Device::Cpu));
/// let mut dropout = Dropout::new(0.1);
/// dropout.eval();
/// let x = Tensor::randn(&[2, 3, 8], DType::F32, &Device::Cpu);
/// let r = Tensor::randn(&[2, 3, 8], DType::F32, &Device::Cpu);
/// let unfused = norm.forward(&dropout.forward(&dense.forward(&x)).add(&r));
/// let fused = ferrograd_runtime::autograd::no_grad(|| {
///     fusion::linear_dropout_add_layer_norm(&dense, &dropout, &x, &r, &norm)
/// });
/// assert!(fused.sub(&unfused).abs().max_all().item::<f32>() < 1e-5);
/// ```
pub fn linear_dropout_add_layer_norm(
    dense: &Linear,
    dropout: &super::Dropout,
    x: &Tensor,
    residual: &Tensor,
    norm: &super::LayerNorm,
) -> Tensor {
    if (dropout.training && dropout.p > 0.0) || crate::autograd::is_grad_enabled() {
        return norm.forward(&dropout.forward(&dense.forward(x)).add(residual));
    }
    super::functional::add_layer_norm(
        &super::functional::linear(x, &dense.weight, None),
        residual,
        dense.bias.as_ref(),
        &norm.normalized_shape,
        norm.weight.as_ref(),
        norm.bias.as_ref(),
        norm.eps,
    )
}
