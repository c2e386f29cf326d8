//! `SyncBatchNorm`: batch normalisation whose statistics cover every rank's batch, and the
//! differentiable all-reduce it is built on.

use super::{ProcessGroup, ReduceOp};
use crate::autograd::{Function, FunctionCtx, SavedTensors, apply, no_grad};
use crate::nn::{BatchNorm1d, BatchNorm2d};
use crate::{Device, Tensor};

/// The sum of `tensor` over the ranks of `group`, as an op autograd differentiates
/// (`torch.distributed.nn.functional.all_reduce`): its backward all-reduces the gradient,
/// which is the gradient of the sum of every rank's loss.
///
/// Panics when the collective fails (an op has no `Result`); the group's timeout still
/// bounds it.
///
/// ```no_run
/// # use ferrograd_runtime::distributed::*;
/// # use ferrograd_runtime::prelude::*;
/// let world = init_process_group(Backend::Mpi).unwrap();
/// let x = Tensor::ones(&[3], DType::F32, &Device::Cpu).requires_grad(true);
/// let total = all_reduce_sum_differentiable(&x, &world); // world.size() everywhere
/// total.sum_all().backward(); // x.grad() is world.size() too
/// ```
#[track_caller]
pub fn all_reduce_sum_differentiable(tensor: &Tensor, group: &ProcessGroup) -> Tensor {
    apply(AllReduceSum(group.clone()), &[tensor])
}

struct AllReduceSum(ProcessGroup);

impl Function for AllReduceSum {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Tensor {
        let out = inputs[0].contiguous().deep_copy();
        self.0
            .all_reduce(&out, ReduceOp::Sum)
            .unwrap_or_else(|e| panic!("all_reduce_sum_differentiable: {e}"));
        out
    }

    fn backward(&self, _: &SavedTensors, grad: &Tensor) -> Vec<Option<Tensor>> {
        let g = grad.contiguous().deep_copy();
        self.0
            .all_reduce(&g, ReduceOp::Sum)
            .unwrap_or_else(|e| panic!("all_reduce_sum_differentiable (backward): {e}"));
        vec![Some(g)]
    }
}

/// Batch normalisation over the batches of every rank of a group
/// (`torch.nn.SyncBatchNorm`): in training, the per-channel mean and variance are those of
/// the concatenation of all ranks' inputs, forward and backward exact; in eval, or with
/// no group of more than one rank, it is [`BatchNorm2d`]. Parameters and buffers have
/// BatchNorm's names (`weight`, `bias`, `running_mean`, `running_var`,
/// `num_batches_tracked`), so state dicts move between the two.
///
/// Every rank must run the same SyncBatchNorm layers in the same order (each one's
/// forward and backward make two collectives).
///
/// ```no_run
/// # use ferrograd_runtime::distributed::*;
/// # use ferrograd_runtime::nn::BatchNorm2d;
/// # use ferrograd_runtime::prelude::*;
/// let world = init_process_group(Backend::Mpi).unwrap();
/// let bn = SyncBatchNorm::from_batch_norm(BatchNorm2d::new(8, &Device::Cpu), Some(&world));
/// let y = bn.forward(&Tensor::randn(&[4, 8, 5, 5], DType::F32, &Device::Cpu));
/// ```
#[derive(crate::nn::Module)]
#[module(crate = crate)]
pub struct SyncBatchNorm {
    /// Per-channel scale (`affine`).
    #[param]
    pub weight: Option<Tensor>,
    /// Per-channel shift (`affine`).
    #[param]
    pub bias: Option<Tensor>,
    /// Running mean, updated in training over all ranks' batches.
    #[buffer]
    pub running_mean: Option<Tensor>,
    /// Running (unbiased) variance, updated in training.
    #[buffer]
    pub running_var: Option<Tensor>,
    /// Training batches seen (0-d int64).
    #[buffer]
    pub num_batches_tracked: Option<Tensor>,
    /// Update weight of the running statistics; `None` for a cumulative average.
    #[module(skip)]
    pub momentum: Option<f64>,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f64,
    /// The ranks whose batches are normalised together; `None` for the default group
    /// (when one is running).
    #[module(skip)]
    pub process_group: Option<ProcessGroup>,
    /// Batch statistics (true) or running statistics (false).
    #[module(training)]
    pub training: bool,
}

/// `SyncBatchNorm::from(bn)`: the batch norm's very tensors, options and mode, over the
/// default group.
macro_rules! from_bn {
    ($($bn:ty),*) => {$(
        impl From<$bn> for SyncBatchNorm {
            fn from(bn: $bn) -> Self {
                SyncBatchNorm {
                    weight: bn.weight,
                    bias: bn.bias,
                    running_mean: bn.running_mean,
                    running_var: bn.running_var,
                    num_batches_tracked: bn.num_batches_tracked,
                    momentum: bn.momentum,
                    eps: bn.eps,
                    process_group: None,
                    training: bn.training,
                }
            }
        }
    )*};
}
from_bn!(BatchNorm1d, BatchNorm2d);

impl SyncBatchNorm {
    /// A layer over `channels` channels with PyTorch's defaults, synchronised over the
    /// default group.
    pub fn new(channels: usize, device: &Device) -> Self {
        SyncBatchNorm::from_batch_norm(BatchNorm2d::new(channels, device), None)
    }

    /// The batch norm `bn` (its very tensors, options and mode), synchronised over
    /// `group` (`None`: the default group): `convert_sync_batchnorm` for one layer.
    pub fn from_batch_norm(bn: impl Into<SyncBatchNorm>, group: Option<&ProcessGroup>) -> Self {
        SyncBatchNorm {
            process_group: group.cloned(),
            ..bn.into()
        }
    }

    /// Normalises `x` of shape `[N, C, ...]`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        synchronized_batch_norm(
            "SyncBatchNorm",
            x,
            self.weight.as_ref(),
            self.bias.as_ref(),
            (
                self.running_mean.as_ref(),
                self.running_var.as_ref(),
                self.num_batches_tracked.as_ref(),
            ),
            (self.momentum, self.eps, self.training),
            self.process_group.as_ref(),
        )
    }
}

/// The batch norm of `x` (`[N, C, ...]`) with statistics over every rank of `group`
/// (`None`: the default group) in training: [`SyncBatchNorm`]'s forward, and a batch
/// norm's after [`convert_sync_batchnorm`]. One rank, or eval, is a plain batch norm.
#[track_caller]
#[allow(clippy::type_complexity)]
pub(crate) fn synchronized_batch_norm(
    name: &str,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    (running_mean, running_var, num_batches_tracked): (
        Option<&Tensor>,
        Option<&Tensor>,
        Option<&Tensor>,
    ),
    (momentum, eps, training): (Option<f64>, f64, bool),
    group: Option<&ProcessGroup>,
) -> Tensor {
    let group = group.cloned().or_else(|| super::world().ok());
    let group = match group {
        Some(g) if training && g.size() > 1 => g,
        _ => {
            // One rank, or eval: BatchNorm's own forward.
            return crate::nn::batch_norm_layer_forward(
                name,
                x,
                weight,
                bias,
                (running_mean, running_var, num_batches_tracked),
                momentum,
                eps,
                training,
            );
        }
    };
    assert!(
        x.dim() >= 2,
        "{name}: expected input of shape [N, C, ...], got {:?}",
        x.shape()
    );
    let c = x.shape()[1];
    let dims: Vec<isize> = (0..x.dim() as isize).filter(|&d| d != 1).collect();
    let mut stat_shape = vec![1usize; x.dim()];
    stat_shape[1] = c;
    let local = (x.numel() / c.max(1)) as f64;
    // Pass 1: the global mean (the count travels with the sums).
    let count = Tensor::full(&[1], local, x.dtype(), &x.device());
    let sums =
        all_reduce_sum_differentiable(&Tensor::cat(&[&x.sum(&dims, false), &count], 0), &group);
    let total = sums
        .narrow(0, c, 1)
        .detach()
        .to_dtype(crate::DType::F64)
        .to_vec::<f64>()[0];
    assert!(
        total > 1.0,
        "{name}: expected more than 1 value per channel over all ranks when training, got {total}"
    );
    let mean = sums.narrow(0, 0, c).div_scalar(total);
    // Pass 2: the global biased variance, around the global mean.
    let centered = x.sub(&mean.reshape(&stat_shape));
    let sq = all_reduce_sum_differentiable(&centered.mul(&centered).sum(&dims, false), &group);
    let var = sq.div_scalar(total);
    let factor = match num_batches_tracked {
        Some(count) => crate::nn::norm_step_factor(count, momentum),
        None => 0.0,
    };
    no_grad(|| {
        if let Some(rm) = running_mean {
            rm.mul_scalar_(1.0 - factor)
                .add_scaled_(&mean.to_dtype(rm.dtype()), factor);
        }
        if let Some(rv) = running_var {
            let unbiased = var.mul_scalar(total / (total - 1.0));
            rv.mul_scalar_(1.0 - factor)
                .add_scaled_(&unbiased.to_dtype(rv.dtype()), factor);
        }
    });
    let mut out = centered.mul(&var.add_scalar(eps).rsqrt().reshape(&stat_shape));
    if let Some(w) = weight {
        out = out.mul(&w.reshape(&stat_shape));
    }
    if let Some(b) = bias {
        out = out.add(&b.reshape(&stat_shape));
    }
    out
}

impl<'a> crate::nn::Forward<&'a Tensor> for SyncBatchNorm {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        SyncBatchNorm::forward(self, x)
    }
}

/// Turns every `BatchNorm1d`/`BatchNorm2d` inside `module` into a synchronised one
/// (`nn.SyncBatchNorm.convert_sync_batchnorm`): in training their statistics come from
/// the batches of every rank of `group` (`None`: the default group), exactly as
/// [`SyncBatchNorm`]'s. The layers keep their type, tensors and state-dict keys (Rust
/// cannot swap a field's type; the flag `sync_stats` does it). Returns how many it
/// converted. Works through `#[derive(Module)]` structs, `network!` models, the
/// containers, `Option`, `Box` and tuples.
///
/// ```
/// use ferrograd_runtime::distributed::convert_sync_batchnorm;
/// use ferrograd_runtime::nn::{BatchNorm2d, Linear, Module};
/// use ferrograd_runtime::Device;
/// #[derive(Module)]
/// #[module(crate = ferrograd_runtime)]
/// struct Net {
///     fc: Linear,
///     bn: BatchNorm2d,
/// }
/// let mut net = Net { fc: Linear::new(4, 4, &Device::Cpu), bn: BatchNorm2d::new(4, &Device::Cpu) };
/// assert_eq!(convert_sync_batchnorm(&mut net, None), 1);
/// assert!(net.bn.sync_stats);
/// ```
pub fn convert_sync_batchnorm(
    module: &mut dyn crate::nn::Module,
    group: Option<&ProcessGroup>,
) -> usize {
    use crate::nn::BatchNorm1d;
    let mut converted = 0;
    module.for_each_module_mut(&mut |m| {
        let fields = match m.downcast_mut::<BatchNorm2d>() {
            Some(bn) => Some((&mut bn.sync_stats, &mut bn.process_group)),
            None => m
                .downcast_mut::<BatchNorm1d>()
                .map(|bn| (&mut bn.sync_stats, &mut bn.process_group)),
        };
        if let Some((sync_stats, process_group)) = fields {
            *sync_stats = true;
            *process_group = group.cloned();
            converted += 1;
        }
    });
    converted
}
