//! Normalisation layers: [`BatchNorm1d`], [`BatchNorm2d`], [`LayerNorm`], [`GroupNorm`],
//! [`InstanceNorm1d`], [`InstanceNorm2d`], [`RMSNorm`], with PyTorch's parameters,
//! buffers and defaults.

use super::Module;
use super::functional as F;
use super::init::{filled_param, on};
use crate::autograd::no_grad;
use crate::{DType, Device, Tensor};

/// The running-statistics buffers of a batch or instance norm: mean zeros, variance ones,
/// and the int64 batch count.
pub(crate) fn running_stats(channels: usize, device: &Device) -> (Tensor, Tensor, Tensor) {
    (
        on(Tensor::zeros(&[channels], DType::F32, &Device::Cpu), device),
        on(Tensor::ones(&[channels], DType::F32, &Device::Cpu), device),
        on(Tensor::zeros(&[], DType::I64, &Device::Cpu), device),
    )
}

/// The update weight of the running statistics for this training step: `momentum`, or
/// `1 / num_batches_tracked` (a cumulative average) when it is `None`. Counts the batch.
pub(crate) fn step_factor(num_batches_tracked: &Tensor, momentum: Option<f64>) -> f64 {
    no_grad(|| num_batches_tracked.add_scalar_(1.0));
    momentum.unwrap_or_else(|| 1.0 / num_batches_tracked.item::<i64>() as f64)
}

/// Which statistics a [`running_norm!`] layer normalises with.
#[derive(Clone, Copy)]
enum Stats {
    /// Over the batch and spatial dims, per channel (`F.batch_norm`).
    Batch,
    /// Over the spatial dims, per sample and channel (`F.instance_norm`), of an input of
    /// this rank.
    Instance(usize),
}

/// The forward pass shared by batch and instance norms: the step factor of the running
/// statistics (counting the batch in training) and the functional.
#[allow(clippy::too_many_arguments)]
#[track_caller]
fn running_forward(
    layer: &str,
    stats: Stats,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    running: (Option<&Tensor>, Option<&Tensor>, Option<&Tensor>),
    momentum: Option<f64>,
    eps: f64,
    training: bool,
    relu: bool,
) -> Tensor {
    let (mean, var, count) = running;
    let use_input_stats = training || mean.is_none();
    let factor = match (count, training) {
        (Some(count), true) => step_factor(count, momentum),
        _ => 0.0,
    };
    match stats {
        Stats::Batch if relu => {
            F::batch_norm_relu(x, mean, var, weight, bias, use_input_stats, factor, eps)
        }
        Stats::Batch => F::batch_norm(x, mean, var, weight, bias, use_input_stats, factor, eps),
        Stats::Instance(rank) => {
            assert!(
                x.dim() == rank,
                "{layer}: expected a {rank}D input, got shape {:?}",
                x.shape()
            );
            let y = F::instance_norm(x, mean, var, weight, bias, use_input_stats, factor, eps);
            if relu { y.relu() } else { y }
        }
    }
}

/// The forward pass of a batch norm layer (`SyncBatchNorm` on one rank or in eval).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(crate) fn batch_norm_layer_forward(
    layer: &str,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    running: (Option<&Tensor>, Option<&Tensor>, Option<&Tensor>),
    momentum: Option<f64>,
    eps: f64,
    training: bool,
) -> Tensor {
    running_forward(
        layer,
        Stats::Batch,
        x,
        weight,
        bias,
        running,
        momentum,
        eps,
        training,
        false,
    )
}

/// A normalisation layer with optional affine parameters and running statistics:
/// `BatchNorm*d` (affine and tracking by default) and `InstanceNorm*d` (neither).
macro_rules! running_norm {
    (
        $name:ident, $stats:expr, defaults($affine:expr, $track:expr), example_shape: $shape:literal,
        doc: $doc:literal, new: $new_doc:literal, options: $options_doc:literal, forward: $forward_doc:literal
    ) => {
        #[doc = $doc]
        #[derive(Module, Debug)]
        #[module(crate = crate)]
        pub struct $name {
            /// Per-channel scale (`affine`).
            #[param]
            pub weight: Option<Tensor>,
            /// Per-channel shift (`affine`).
            #[param]
            pub bias: Option<Tensor>,
            /// Running mean, updated in training (`track_running_stats`).
            #[buffer]
            pub running_mean: Option<Tensor>,
            /// Running (unbiased) variance, updated in training.
            #[buffer]
            pub running_var: Option<Tensor>,
            /// Training batches seen (0-d int64), counted in training mode.
            #[buffer]
            pub num_batches_tracked: Option<Tensor>,
            /// Update weight of the running statistics; `None` for a cumulative average.
            #[module(skip)]
            pub momentum: Option<f64>,
            /// Added to the variance.
            #[module(skip)]
            pub eps: f64,
            /// Batch statistics (true) or running statistics (false).
            #[module(training)]
            pub training: bool,
            /// Batch norms: in training, statistics over the batches of every rank of
            /// `process_group` (what `distributed::convert_sync_batchnorm` turns on; the
            /// layer then acts as `SyncBatchNorm`). Instance norms ignore it.
            #[module(skip)]
            pub sync_stats: bool,
            /// The ranks `sync_stats` normalises over; `None` for the default group.
            #[module(skip)]
            pub process_group: Option<crate::distributed::ProcessGroup>,
        }

        impl $name {
            #[doc = $new_doc]
            pub fn new(channels: usize, device: &Device) -> Self {
                Self::with_options(channels, 1e-5, Some(0.1), $affine, $track, device)
            }

            #[doc = $options_doc]
            pub fn with_options(
                channels: usize,
                eps: f64,
                momentum: Option<f64>,
                affine: bool,
                track_running_stats: bool,
                device: &Device,
            ) -> Self {
                let (mean, var, count) = running_stats(channels, device);
                let track = track_running_stats;
                $name {
                    weight: affine.then(|| filled_param(&[channels], 1.0, device)),
                    bias: affine.then(|| filled_param(&[channels], 0.0, device)),
                    running_mean: track.then_some(mean),
                    running_var: track.then_some(var),
                    num_batches_tracked: track.then_some(count),
                    momentum,
                    eps,
                    training: true,
                    sync_stats: false,
                    process_group: None,
                }
            }

            #[doc = $forward_doc]
            #[track_caller]
            pub fn forward(&self, x: &Tensor) -> Tensor {
                self.forward_maybe_relu(x, false)
            }

            /// `forward(x).relu()`, with the same results and gradients, in fewer passes
            /// where [`F::batch_norm_relu`](crate::nn::functional::batch_norm_relu) can
            /// fuse them (the norm-then-activation of ResNet-style blocks).
            ///
            /// ```
            /// use ferrograd_runtime::prelude::*;
            #[doc = concat!("use ferrograd_runtime::nn::", stringify!($name), ";")]
            #[doc = concat!("let layer = ", stringify!($name), "::new(2, &Device::Cpu);")]
            #[doc = concat!("let x = Tensor::randn(&", $shape, ", DType::F64, &Device::Cpu);")]
            /// let y = layer.forward_relu(&x);
            /// assert!(y.min_all().item::<f64>() >= 0.0);
            /// ```
            #[track_caller]
            pub fn forward_relu(&self, x: &Tensor) -> Tensor {
                self.forward_maybe_relu(x, true)
            }

            #[track_caller]
            fn forward_maybe_relu(&self, x: &Tensor, relu: bool) -> Tensor {
                let running = (
                    self.running_mean.as_ref(),
                    self.running_var.as_ref(),
                    self.num_batches_tracked.as_ref(),
                );
                if self.sync_stats && matches!($stats, Stats::Batch) {
                    let y = crate::distributed::synchronized_batch_norm(
                        stringify!($name),
                        x,
                        self.weight.as_ref(),
                        self.bias.as_ref(),
                        running,
                        (self.momentum, self.eps, self.training),
                        self.process_group.as_ref(),
                    );
                    return if relu { y.relu() } else { y };
                }
                running_forward(
                    stringify!($name),
                    $stats,
                    x,
                    self.weight.as_ref(),
                    self.bias.as_ref(),
                    running,
                    self.momentum,
                    self.eps,
                    self.training,
                    relu,
                )
            }
        }
    };
}

running_norm!(
    BatchNorm1d, Stats::Batch, defaults(true, true), example_shape: "[4, 2, 3]",
    doc: "Batch normalisation of `[N, C]` or `[N, C, L]` (`nn.BatchNorm1d`).\n\nLearnable `weight`/`bias` (ones/zeros), `running_mean`/`running_var` buffers (zeros/ones) and `num_batches_tracked` (an int64 count, so a PyTorch state dict loads strictly), with `momentum = Some(0.1)` and `eps = 1e-5` as in PyTorch; `momentum = None` keeps a cumulative average. Without `affine` there is no weight or bias; without `track_running_stats` no buffers, and batch statistics are used in eval too.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm1d, Module};\nlet mut bn = BatchNorm1d::new(3, &Device::Cpu);\nlet y = bn.forward(&Tensor::randn(&[8, 3], DType::F32, &Device::Cpu));\nassert_eq!(y.shape(), &[8, 3]);\nbn.eval();\nassert!(!bn.training);\n```",
    new: "A layer over `channels` channels with PyTorch's defaults (`eps=1e-5, momentum=0.1, affine=True, track_running_stats=True`), in training mode.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm2d, Module};\nlet bn = BatchNorm2d::new(8, &Device::Cpu);\nassert_eq!((bn.eps, bn.momentum, bn.num_parameters()), (1e-5, Some(0.1), 16));\n```",
    options: "A layer with every constructor argument of PyTorch's.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm1d, Module};\nlet bn = BatchNorm1d::with_options(8, 1e-3, None, false, true, &Device::Cpu);\nassert_eq!((bn.num_parameters(), bn.named_buffers().len()), (0, 3));\n```",
    forward: "Normalises over the batch (and spatial) dims.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::BatchNorm1d;\nlet bn = BatchNorm1d::new(3, &Device::Cpu);\nlet y = bn.forward(&Tensor::randn(&[16, 3], DType::F64, &Device::Cpu));\nassert!(y.mean(&[0], false).abs().max_all().item::<f64>() < 1e-9);\n```"
);
running_norm!(
    BatchNorm2d, Stats::Batch, defaults(true, true), example_shape: "[4, 2, 3, 3]",
    doc: "Batch normalisation of `[N, C, H, W]` (`nn.BatchNorm2d`), as [`BatchNorm1d`].\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm2d, Module};\nlet bn = BatchNorm2d::new(3, &Device::Cpu);\nlet names: Vec<String> = bn.named_buffers().into_iter().map(|(n, _)| n).collect();\nassert_eq!(names, [\"running_mean\", \"running_var\", \"num_batches_tracked\"]);\n```",
    new: "A layer over `channels` channels with PyTorch's defaults, in training mode.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm2d, Module};\nassert_eq!(BatchNorm2d::new(8, &Device::Cpu).num_parameters(), 16);\n```",
    options: "A layer with every constructor argument of PyTorch's.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{BatchNorm2d, Module};\nassert_eq!(BatchNorm2d::with_options(8, 1e-5, Some(0.1), true, false, &Device::Cpu).named_buffers().len(), 0);\n```",
    forward: "Normalises over the batch and spatial dims.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::BatchNorm2d;\nlet y = BatchNorm2d::new(2, &Device::Cpu).forward(&Tensor::randn(&[4, 2, 3, 3], DType::F64, &Device::Cpu));\nassert!(y.mean(&[0, 2, 3], false).abs().max_all().item::<f64>() < 1e-9);\n```"
);
running_norm!(
    InstanceNorm1d, Stats::Instance(3), defaults(false, false), example_shape: "[4, 2, 3]",
    doc: "Instance normalisation of `[N, C, L]` (`nn.InstanceNorm1d`): PyTorch's defaults are no affine parameters and no running statistics, `eps = 1e-5`, `momentum = 0.1`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{InstanceNorm1d, Module};\nlet norm = InstanceNorm1d::new(3, &Device::Cpu);\nassert_eq!(norm.num_parameters(), 0);\nlet y = norm.forward(&Tensor::randn(&[2, 3, 8], DType::F64, &Device::Cpu));\nassert!(y.mean(&[2], false).abs().max_all().item::<f64>() < 1e-12);\n```",
    new: "A layer with PyTorch's defaults (no parameters, no buffers).\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{InstanceNorm1d, Module};\nassert_eq!(InstanceNorm1d::new(3, &Device::Cpu).state_dict().len(), 0);\n```",
    options: "A layer with every constructor argument of PyTorch's.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{InstanceNorm1d, Module};\nassert_eq!(InstanceNorm1d::with_options(3, 1e-5, Some(0.1), true, false, &Device::Cpu).num_parameters(), 6);\n```",
    forward: "Normalises each channel of each sample over its positions.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::InstanceNorm1d;\nlet y = InstanceNorm1d::new(2, &Device::Cpu).forward(&Tensor::randn(&[1, 2, 6], DType::F64, &Device::Cpu));\nassert!(y.mean(&[2], false).abs().max_all().item::<f64>() < 1e-9);\n```"
);
running_norm!(
    InstanceNorm2d, Stats::Instance(4), defaults(false, false), example_shape: "[4, 2, 3, 3]",
    doc: "Instance normalisation of `[N, C, H, W]` (`nn.InstanceNorm2d`), as [`InstanceNorm1d`].\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{InstanceNorm2d, Module};\nlet norm = InstanceNorm2d::with_options(3, 1e-5, Some(0.1), true, true, &Device::Cpu);\nassert_eq!(norm.state_dict().len(), 5);\nassert_eq!(norm.forward(&Tensor::randn(&[2, 3, 4, 4], DType::F32, &Device::Cpu)).shape(), &[2, 3, 4, 4]);\n```",
    new: "A layer with PyTorch's defaults (no parameters, no buffers).\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{InstanceNorm2d, Module};\nassert_eq!(InstanceNorm2d::new(3, &Device::Cpu).state_dict().len(), 0);\n```",
    options: "A layer with every constructor argument of PyTorch's.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{InstanceNorm2d, Module};\nassert_eq!(InstanceNorm2d::with_options(3, 1e-5, Some(0.1), true, false, &Device::Cpu).num_parameters(), 6);\n```",
    forward: "Normalises each channel of each sample over its spatial positions.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::InstanceNorm2d;\nlet y = InstanceNorm2d::new(2, &Device::Cpu).forward(&Tensor::randn(&[1, 2, 4, 4], DType::F64, &Device::Cpu));\nassert!(y.mean(&[2, 3], false).abs().max_all().item::<f64>() < 1e-9);\n```"
);

/// Layer normalisation over the trailing dims (`nn.LayerNorm`), weight ones, bias zeros.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::LayerNorm;
/// let ln = LayerNorm::new(&[4], &Device::Cpu);
/// assert_eq!(ln.forward(&Tensor::randn(&[2, 4], DType::F32, &Device::Cpu)).shape(), &[2, 4]);
/// let ln = LayerNorm::new(&[3, 4], &Device::Cpu);
/// assert_eq!(ln.forward(&Tensor::randn(&[2, 3, 4], DType::F32, &Device::Cpu)).shape(), &[2, 3, 4]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct LayerNorm {
    /// Elementwise scale, shape `normalized_shape` (`elementwise_affine`).
    #[param]
    pub weight: Option<Tensor>,
    /// Elementwise shift, shape `normalized_shape` (`elementwise_affine` and `bias`).
    #[param]
    pub bias: Option<Tensor>,
    /// The trailing dims normalised over.
    #[module(skip)]
    pub normalized_shape: Vec<usize>,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f64,
}

impl LayerNorm {
    /// A layer over the trailing dims `normalized_shape`, `eps = 1e-5`, with weight and
    /// bias.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::LayerNorm;
    /// assert_eq!(LayerNorm::new(&[3, 4], &Device::Cpu).weight.unwrap().shape(), &[3, 4]);
    /// ```
    pub fn new(normalized_shape: &[usize], device: &Device) -> Self {
        Self::with_options(normalized_shape, 1e-5, true, true, device)
    }

    /// A layer with every constructor argument of PyTorch's.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{LayerNorm, Module};
    /// assert_eq!(LayerNorm::with_options(&[8], 1e-6, true, false, &Device::Cpu).num_parameters(), 8);
    /// ```
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{GroupNorm, Module};
    /// assert_eq!(GroupNorm::with_options(4, 8, 1e-6, false, &Device::Cpu).num_parameters(), 0);
    /// ```
    pub fn with_options(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        bias: bool,
        device: &Device,
    ) -> Self {
        LayerNorm {
            weight: elementwise_affine.then(|| filled_param(normalized_shape, 1.0, device)),
            bias: (elementwise_affine && bias).then(|| filled_param(normalized_shape, 0.0, device)),
            normalized_shape: normalized_shape.to_vec(),
            eps,
        }
    }

    /// Normalises the trailing dims of `x`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::LayerNorm;
    /// let y = LayerNorm::new(&[4], &Device::Cpu).forward(&Tensor::randn(&[2, 4], DType::F64, &Device::Cpu));
    /// assert!(y.mean(&[1], false).abs().max_all().item::<f64>() < 1e-9);
    /// ```
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::layer_norm(
            x,
            &self.normalized_shape,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}

/// Group normalisation (`nn.GroupNorm`): weight ones, bias zeros (`affine`), `eps = 1e-5`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{GroupNorm, Module};
/// let gn = GroupNorm::new(2, 6, &Device::Cpu);
/// assert_eq!(gn.num_parameters(), 12);
/// assert_eq!(gn.forward(&Tensor::randn(&[2, 6, 3, 3], DType::F32, &Device::Cpu)).shape(), &[2, 6, 3, 3]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct GroupNorm {
    /// Per-channel scale (`affine`).
    #[param]
    pub weight: Option<Tensor>,
    /// Per-channel shift (`affine`).
    #[param]
    pub bias: Option<Tensor>,
    /// Number of channel groups.
    #[module(skip)]
    pub num_groups: usize,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f64,
}

impl GroupNorm {
    /// `num_channels` channels in `num_groups` groups, with affine parameters.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{GroupNorm, Module};
    /// assert_eq!(GroupNorm::new(4, 8, &Device::Cpu).num_parameters(), 16);
    /// ```
    #[track_caller]
    pub fn new(num_groups: usize, num_channels: usize, device: &Device) -> Self {
        Self::with_options(num_groups, num_channels, 1e-5, true, device)
    }

    /// A layer with every constructor argument of PyTorch's.
    #[track_caller]
    pub fn with_options(
        num_groups: usize,
        num_channels: usize,
        eps: f64,
        affine: bool,
        device: &Device,
    ) -> Self {
        assert!(
            num_groups > 0 && num_channels.is_multiple_of(num_groups),
            "GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
        );
        GroupNorm {
            weight: affine.then(|| filled_param(&[num_channels], 1.0, device)),
            bias: affine.then(|| filled_param(&[num_channels], 0.0, device)),
            num_groups,
            eps,
        }
    }

    /// Normalises `[N, C, ...]` per group.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{GroupNorm, Module};
    /// let y = GroupNorm::new(1, 4, &Device::Cpu).forward(&Tensor::randn(&[2, 4, 3], DType::F64, &Device::Cpu));
    /// assert!(y.mean(&[1, 2], false).abs().max_all().item::<f64>() < 1e-9);
    /// ```
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::group_norm(
            x,
            self.num_groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}

/// Root-mean-square normalisation over the trailing dims (`nn.RMSNorm`): weight ones
/// (`elementwise_affine`); `eps = None` uses the dtype's machine epsilon.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::RMSNorm;
/// let norm = RMSNorm::new(&[4], None, &Device::Cpu);
/// let y = norm.forward(&Tensor::full(&[2, 4], 3.0, DType::F32, &Device::Cpu));
/// assert!((y.max_all().item::<f32>() - 1.0).abs() < 1e-6);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct RMSNorm {
    /// Elementwise scale, shape `normalized_shape`.
    #[param]
    pub weight: Option<Tensor>,
    /// The trailing dims normalised over.
    #[module(skip)]
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square; `None` for the dtype's epsilon.
    #[module(skip)]
    pub eps: Option<f64>,
}

impl RMSNorm {
    /// A layer with a weight (`elementwise_affine=True`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::RMSNorm;
    /// assert_eq!(RMSNorm::new(&[8], Some(1e-6), &Device::Cpu).eps, Some(1e-6));
    /// ```
    pub fn new(normalized_shape: &[usize], eps: Option<f64>, device: &Device) -> Self {
        RMSNorm {
            weight: Some(filled_param(normalized_shape, 1.0, device)),
            normalized_shape: normalized_shape.to_vec(),
            eps,
        }
    }

    /// Normalises the trailing dims of `x`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::RMSNorm;
    /// let y = RMSNorm::new(&[2], Some(0.0), &Device::Cpu).forward(&Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2]));
    /// assert!((y.mul(&y).mean_all().item::<f32>() - 1.0).abs() < 1e-6);
    /// ```
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::rms_norm(x, &self.normalized_shape, self.weight.as_ref(), self.eps)
    }
}
