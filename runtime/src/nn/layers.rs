//! Layers with learnable state, initialised as PyTorch initialises them.

use super::Module;
use super::functional::{self as F, Conv1dArgs, Conv2dArgs};
use crate::autograd::no_grad;
use crate::{DType, Device, Tensor};

/// `U(-bound, bound)` as a leaf that requires grad (PyTorch's default `kaiming_uniform_`
/// with `a = sqrt(5)` reduces to `bound = 1 / sqrt(fan_in)`).
fn uniform_param(shape: &[usize], fan_in: usize, device: &Device) -> Tensor {
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    let t = Tensor::rand(shape, DType::F32, &Device::Cpu)
        .mul_scalar(2.0 * bound)
        .sub_scalar(bound);
    on(t, device).requires_grad(true)
}

/// Weight `[out, in/groups, *kernel]` and bias `[out]` of a convolution, initialised
/// like PyTorch's (uniform in ±1/sqrt(fan_in), fan_in = in/groups * kernel size).
fn conv_params(
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    kernel: &[usize],
    device: &Device,
) -> (Tensor, Option<Tensor>) {
    let per_group = in_channels / groups.max(1);
    let fan_in = per_group * kernel.iter().product::<usize>();
    let shape: Vec<usize> = [out_channels, per_group]
        .iter()
        .chain(kernel)
        .copied()
        .collect();
    (
        uniform_param(&shape, fan_in, device),
        Some(uniform_param(&[out_channels], fan_in, device)),
    )
}

fn on(t: Tensor, device: &Device) -> Tensor {
    t.to_device(device)
        .unwrap_or_else(|e| panic!("cannot create a layer on {device}: {e}"))
}

/// `y = x W^T + b` (`nn.Linear`): weight `[out, in]`, bias `[out]`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module};
/// let fc = Linear::new(3, 2, &Device::Cpu);
/// assert_eq!(fc.forward(&Tensor::ones(&[5, 3], DType::F32, &Device::Cpu)).shape(), &[5, 2]);
/// assert_eq!(fc.state_dict().keys().collect::<Vec<_>>(), ["bias", "weight"]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Linear {
    /// `[out_features, in_features]`.
    #[param]
    pub weight: Tensor,
    /// `[out_features]`, if the layer has a bias.
    #[param]
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with bias, initialised like `nn.Linear(in_features, out_features)`.
    pub fn new(in_features: usize, out_features: usize, device: &Device) -> Self {
        Linear {
            weight: uniform_param(&[out_features, in_features], in_features, device),
            bias: Some(uniform_param(&[out_features], in_features, device)),
        }
    }

    /// A layer without bias (`bias=False`).
    pub fn no_bias(in_features: usize, out_features: usize, device: &Device) -> Self {
        Linear {
            weight: uniform_param(&[out_features, in_features], in_features, device),
            bias: None,
        }
    }

    /// Applies the layer to `[*, in_features]`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::linear(x, &self.weight, self.bias.as_ref())
    }
}

/// 2-D convolution (`nn.Conv2d`): weight `[out, in/groups, kh, kw]`, bias `[out]`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::Conv2d;
/// let conv = Conv2d::new(1, 6, [5, 5], F::Conv2dArgs::default().padding(2), &Device::Cpu);
/// let y = conv.forward(&Tensor::zeros(&[2, 1, 28, 28], DType::F32, &Device::Cpu));
/// assert_eq!(y.shape(), &[2, 6, 28, 28]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Conv2d {
    /// `[out, in/groups, kh, kw]`.
    #[param]
    pub weight: Tensor,
    /// `[out]`.
    #[param]
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation, groups.
    #[module(skip)]
    pub args: Conv2dArgs,
}

impl Conv2d {
    /// A convolution with bias, initialised like `nn.Conv2d`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        args: Conv2dArgs,
        device: &Device,
    ) -> Self {
        let (weight, bias) = conv_params(in_channels, out_channels, args.groups, &kernel, device);
        Conv2d { weight, bias, args }
    }

    /// Applies the convolution to `[N, C, H, W]`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::conv2d(x, &self.weight, self.bias.as_ref(), &self.args)
    }
}

/// 1-D convolution (`nn.Conv1d`): weight `[out, in/groups, k]`, bias `[out]`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::Conv1d;
/// let conv = Conv1d::new(3, 4, 3, F::Conv1dArgs::default().padding(1), &Device::Cpu);
/// assert_eq!(conv.forward(&Tensor::zeros(&[2, 3, 10], DType::F32, &Device::Cpu)).shape(), &[2, 4, 10]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Conv1d {
    /// `[out, in/groups, k]`.
    #[param]
    pub weight: Tensor,
    /// `[out]`.
    #[param]
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation, groups.
    #[module(skip)]
    pub args: Conv1dArgs,
}

impl Conv1d {
    /// A convolution with bias, initialised like `nn.Conv1d`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        args: Conv1dArgs,
        device: &Device,
    ) -> Self {
        let (weight, bias) = conv_params(in_channels, out_channels, args.groups, &[kernel], device);
        Conv1d { weight, bias, args }
    }

    /// Applies the convolution to `[N, C, L]`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::conv1d(x, &self.weight, self.bias.as_ref(), &self.args)
    }
}

macro_rules! batch_norm {
    ($name:ident, $doc:literal, $shape:literal) => {
        #[doc = $doc]
        ///
        /// Learnable `weight`/`bias` (ones/zeros) and `running_mean`/`running_var` buffers
        /// (zeros/ones) and `num_batches_tracked` (an int64 count, so a PyTorch state dict
        /// loads strictly), with `momentum = Some(0.1)` and `eps = 1e-5` as in PyTorch;
        /// `momentum = None` keeps a cumulative average (factor `1 / num_batches_tracked`).
        #[derive(Module, Debug)]
        #[module(crate = crate)]
        pub struct $name {
            /// Per-channel scale.
            #[param]
            pub weight: Tensor,
            /// Per-channel shift.
            #[param]
            pub bias: Tensor,
            /// Running mean, updated in training.
            #[buffer]
            pub running_mean: Tensor,
            /// Running (unbiased) variance, updated in training.
            #[buffer]
            pub running_var: Tensor,
            /// Training batches seen (0-d int64), counted in training mode.
            #[buffer]
            pub num_batches_tracked: Tensor,
            /// Update weight of the running statistics; `None` for a cumulative average.
            #[module(skip)]
            pub momentum: Option<f64>,
            /// Added to the variance.
            #[module(skip)]
            pub eps: f64,
            /// Batch statistics (true) or running statistics (false).
            #[module(training)]
            pub training: bool,
        }

        impl $name {
            /// A layer over `channels` channels, in training mode.
            pub fn new(channels: usize, device: &Device) -> Self {
                $name {
                    weight: on(Tensor::ones(&[channels], DType::F32, &Device::Cpu), device)
                        .requires_grad(true),
                    bias: on(Tensor::zeros(&[channels], DType::F32, &Device::Cpu), device)
                        .requires_grad(true),
                    running_mean: on(Tensor::zeros(&[channels], DType::F32, &Device::Cpu), device),
                    running_var: on(Tensor::ones(&[channels], DType::F32, &Device::Cpu), device),
                    num_batches_tracked: on(Tensor::zeros(&[], DType::I64, &Device::Cpu), device),
                    momentum: Some(0.1),
                    eps: 1e-5,
                    training: true,
                }
            }

            #[doc = concat!("Normalises ", $shape, " over the batch (and spatial) dims.")]
            #[track_caller]
            pub fn forward(&self, x: &Tensor) -> Tensor {
                let factor = if self.training {
                    no_grad(|| self.num_batches_tracked.add_scalar_(1.0));
                    self.momentum
                        .unwrap_or_else(|| 1.0 / self.num_batches_tracked.item::<i64>() as f64)
                } else {
                    0.0 // unused: eval normalises with the running statistics
                };
                F::batch_norm(
                    x,
                    Some(&self.running_mean),
                    Some(&self.running_var),
                    Some(&self.weight),
                    Some(&self.bias),
                    self.training,
                    factor,
                    self.eps,
                )
            }
        }
    };
}

batch_norm!(
    BatchNorm1d,
    "Batch normalisation of `[N, C]` or `[N, C, L]` (`nn.BatchNorm1d`).\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm1d, Module};\nlet mut bn = BatchNorm1d::new(3, &Device::Cpu);\nlet y = bn.forward(&Tensor::randn(&[8, 3], DType::F32, &Device::Cpu));\nassert_eq!(y.shape(), &[8, 3]);\nbn.eval();\nassert!(!bn.training);\n```",
    "`[N, C]` or `[N, C, L]`"
);
batch_norm!(
    BatchNorm2d,
    "Batch normalisation of `[N, C, H, W]` (`nn.BatchNorm2d`).\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm2d, Module};\nlet bn = BatchNorm2d::new(3, &Device::Cpu);\nlet names: Vec<String> = bn.named_buffers().into_iter().map(|(n, _)| n).collect();\nassert_eq!(names, [\"running_mean\", \"running_var\", \"num_batches_tracked\"]);\n```",
    "`[N, C, H, W]`"
);

/// Layer normalisation over the trailing dims (`nn.LayerNorm`), weight ones, bias zeros.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::LayerNorm;
/// let ln = LayerNorm::new(&[4], &Device::Cpu);
/// assert_eq!(ln.forward(&Tensor::randn(&[2, 4], DType::F32, &Device::Cpu)).shape(), &[2, 4]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct LayerNorm {
    /// Elementwise scale, shape `normalized_shape`.
    #[param]
    pub weight: Tensor,
    /// Elementwise shift, shape `normalized_shape`.
    #[param]
    pub bias: Tensor,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f64,
}

impl LayerNorm {
    /// A layer over the trailing dims `normalized_shape`, `eps = 1e-5`.
    pub fn new(normalized_shape: &[usize], device: &Device) -> Self {
        LayerNorm {
            weight: on(
                Tensor::ones(normalized_shape, DType::F32, &Device::Cpu),
                device,
            )
            .requires_grad(true),
            bias: on(
                Tensor::zeros(normalized_shape, DType::F32, &Device::Cpu),
                device,
            )
            .requires_grad(true),
            eps: 1e-5,
        }
    }

    /// Normalises the trailing dims of `x`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::layer_norm(
            x,
            self.weight.shape(),
            Some(&self.weight),
            Some(&self.bias),
            self.eps,
        )
    }
}

/// Dropout (`nn.Dropout`): active in training mode only.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Dropout, Module};
/// let mut d = Dropout::new(0.5);
/// d.eval();
/// let x = Tensor::ones(&[4], DType::F32, &Device::Cpu);
/// assert_eq!(d.forward(&x).to_vec::<f32>(), vec![1.0; 4]);
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct Dropout {
    /// Probability of zeroing an element.
    #[module(skip)]
    pub p: f64,
    /// Whether dropout is active.
    #[module(training)]
    pub training: bool,
}

impl Dropout {
    /// Dropout with probability `p`, in training mode.
    pub fn new(p: f64) -> Self {
        Dropout { p, training: true }
    }

    /// Applies dropout when training.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::dropout(x, self.p, self.training)
    }
}

/// A lookup table of `num_embeddings` vectors of size `dim` (`nn.Embedding`), `N(0, 1)`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::Embedding;
/// let emb = Embedding::new(10, 3, &Device::Cpu);
/// let ids = Tensor::from_vec(vec![1i64, 7], &[2]);
/// assert_eq!(emb.forward(&ids).shape(), &[2, 3]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Embedding {
    /// `[num_embeddings, dim]`.
    #[param]
    pub weight: Tensor,
}

impl Embedding {
    /// A table initialised from the standard normal distribution.
    pub fn new(num_embeddings: usize, dim: usize, device: &Device) -> Self {
        Embedding {
            weight: on(
                Tensor::randn(&[num_embeddings, dim], DType::F32, &Device::Cpu),
                device,
            )
            .requires_grad(true),
        }
    }

    /// Looks up int64 indices of any shape.
    #[track_caller]
    pub fn forward(&self, indices: &Tensor) -> Tensor {
        F::embedding(indices, &self.weight)
    }
}
