//! Losses: cross-entropy (fused for class indices), NLL, MSE and BCE with logits.

use crate::ops::check_same_device;
use crate::{DType, Tensor};
use ferrograd_kernels::Dims;
use ferrograd_kernels::IndexBounds;

/// How a loss reduces over the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// One loss per element.
    None,
    /// The (weighted) mean.
    #[default]
    Mean,
    /// The sum.
    Sum,
}

/// Options of [`cross_entropy_with`] and [`nll_loss_with`], with PyTorch's defaults.
///
/// ```
/// use ferrograd_runtime::nn::functional::{CrossEntropyArgs, Reduction};
/// let args = CrossEntropyArgs::default();
/// assert_eq!((args.ignore_index, args.reduction, args.label_smoothing), (-100, Reduction::Mean, 0.0));
/// ```
#[derive(Clone, Debug)]
pub struct CrossEntropyArgs {
    /// Per-class weights `[C]`.
    pub weight: Option<Tensor>,
    /// Targets equal to this are skipped.
    pub ignore_index: i64,
    /// How to reduce.
    pub reduction: Reduction,
    /// Mixes the target with the uniform distribution (cross-entropy only).
    pub label_smoothing: f64,
}

impl Default for CrossEntropyArgs {
    fn default() -> Self {
        CrossEntropyArgs {
            weight: None,
            ignore_index: -100,
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
        }
    }
}

/// Moves the class dim (1) of `[N, C, d...]` last and flattens: `[M, C]`.
fn classes_last(input: &Tensor) -> Tensor {
    if input.dim() == 2 {
        return input.clone();
    }
    let c = input.shape()[1];
    input
        .movedim_to_last(1)
        .reshape(&[input.numel() / c.max(1), c])
}

impl Tensor {
    fn movedim_to_last(&self, d: usize) -> Tensor {
        let mut perm: Vec<isize> = (0..self.dim() as isize)
            .filter(|&i| i != d as isize)
            .collect();
        perm.push(d as isize);
        self.permute(&perm)
    }
}

/// Negative log-likelihood of log-probabilities `[N, C]` (or `[N, C, d...]`) at int64
/// class targets `[N]` (or `[N, d...]`) (`F.nll_loss`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logp = Tensor::from_vec(vec![-0.5f32, -1.0, -2.0, -0.1], &[2, 2]);
/// let target = Tensor::from_vec(vec![0i64, 1], &[2]);
/// assert!((F::nll_loss(&logp, &target).item::<f32>() - 0.3).abs() < 1e-6);
/// ```
#[track_caller]
pub fn nll_loss(input: &Tensor, target: &Tensor) -> Tensor {
    nll_loss_with(input, target, &CrossEntropyArgs::default())
}

/// [`nll_loss`] with class weights, `ignore_index` and reduction.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let logp = Tensor::from_vec(vec![-0.5f32, -1.5, -2.0, -0.2], &[2, 2]);
/// let target = Tensor::from_vec(vec![1i64, -100], &[2]);
/// assert_eq!(F::nll_loss_with(&logp, &target, &F::CrossEntropyArgs::default()).item::<f32>(), 1.5);
/// ```
#[track_caller]
pub fn nll_loss_with(input: &Tensor, target: &Tensor, args: &CrossEntropyArgs) -> Tensor {
    if let Some([x]) = crate::dispatch::cast("nll_loss", [input]) {
        return nll_loss_with(&x, target, args);
    }
    let _profiled = crate::dispatch::opaque("nll_loss", &[input, target]);
    let (picked, weights, target_shape) = pick_targets("nll_loss", input, target, args);
    let losses = picked.neg().mul(&weights);
    reduce_loss(losses, &weights, args.reduction, &target_shape)
}

/// Checks int64 class targets against `input` `[N, C, d...]`: returns the target shape
/// `[N, d...]` and the bound every target must meet (in `0..C` or the ignore index),
/// checked here for host targets; kernels check targets on a device as they read them.
#[track_caller]
fn check_targets(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    ignore_index: i64,
) -> (Dims, IndexBounds) {
    assert!(
        input.dim() >= 2,
        "{op}: expected input of shape [N, C] or [N, C, d...], got {:?}",
        input.shape()
    );
    assert!(
        target.dtype() == DType::I64,
        "{op}: expected int64 class targets, got {:?} (shape {:?})",
        target.dtype(),
        target.shape()
    );
    check_same_device(op, &[input, target]);
    let mut expected = Dims::from_slice(input.shape());
    expected.remove(1);
    assert!(
        target.shape() == expected.as_slice(),
        "{op}: expected target of shape {:?} for input of shape {:?}, got target shape {:?}",
        expected.as_slice(),
        input.shape(),
        target.shape()
    );
    let bounds = IndexBounds::Classes {
        op,
        input: Dims::from_slice(input.shape()),
    };
    target
        .read_storage()
        .check_indices(target.layout(), &bounds, Some(ignore_index));
    (expected, bounds)
}

/// The class weights `[C]` in the input's dtype, contiguous and detached (constants).
#[track_caller]
fn class_weights(op: &str, input: &Tensor, args: &CrossEntropyArgs) -> Option<Tensor> {
    let c = input.shape()[1];
    args.weight.as_ref().map(|w| {
        assert!(
            w.shape() == [c],
            "{op}: weight should have shape [{c}], got {:?}",
            w.shape()
        );
        w.detach().to_dtype(input.dtype()).contiguous()
    })
}

/// Gathers `input[i, target[i]]` over `[M, C]`, with the per-row weight (0 where ignored).
#[track_caller]
fn pick_targets(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    args: &CrossEntropyArgs,
) -> (Tensor, Tensor, Dims) {
    let (expected, bounds) = check_targets(op, input, target, args.ignore_index);
    let flat = classes_last(input);
    let t = target.reshape(&[target.numel()]);
    let valid = t.ne_scalar(args.ignore_index as f64);
    let safe = Tensor::where_cond(&valid, &t, &Tensor::zeros(&[], DType::I64, &t.device()));
    let picked = flat
        .gather_checked(1, &safe.unsqueeze(1), bounds)
        .squeeze(1);
    let mut weights = valid.to_dtype(input.dtype());
    if let Some(w) = class_weights(op, input, args) {
        weights = weights.mul(&w.index_select(0, &safe));
    }
    (picked, weights, expected)
}

fn reduce_loss(losses: Tensor, weights: &Tensor, reduction: Reduction, shape: &[usize]) -> Tensor {
    match reduction {
        Reduction::None => losses.reshape(shape),
        Reduction::Sum => losses.sum_all(),
        Reduction::Mean => losses.sum_all().div(&weights.sum_all()),
    }
}

/// Cross-entropy of logits `[N, C]` (or `[N, C, d...]`) against int64 class targets,
/// fused with log-softmax for stability (`F.cross_entropy`). Float targets of the input's
/// shape are treated as class probabilities.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2]);
/// let target = Tensor::from_vec(vec![1i64], &[1]);
/// assert!((F::cross_entropy(&logits, &target).item::<f64>() - 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn cross_entropy(input: &Tensor, target: &Tensor) -> Tensor {
    cross_entropy_with(input, target, &CrossEntropyArgs::default())
}

/// [`cross_entropy`] with class weights, `ignore_index`, reduction and label smoothing.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logits = Tensor::from_vec(vec![2.0f64, 0.0], &[1, 2]);
/// let target = Tensor::from_vec(vec![0i64], &[1]);
/// let args = F::CrossEntropyArgs { label_smoothing: 0.2, ..Default::default() };
/// let l = F::cross_entropy_with(&logits, &target, &args).item::<f64>();
/// let logp = logits.log_softmax(1).to_vec::<f64>();
/// assert!((l - (-(0.9 * logp[0] + 0.1 * logp[1]))).abs() < 1e-12);
/// ```
#[track_caller]
pub fn cross_entropy_with(input: &Tensor, target: &Tensor, args: &CrossEntropyArgs) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("cross_entropy", [input, target]) {
        return cross_entropy_with(&x, &t, args);
    }
    let _profiled = crate::dispatch::opaque("cross_entropy", &[input, target]);
    if target.dtype().is_float() {
        assert!(
            target.shape() == input.shape(),
            "cross_entropy: probability targets must have the input's shape {:?}, got {:?}",
            input.shape(),
            target.shape()
        );
        let logp = input.log_softmax(1);
        let c = input.shape()[1] as f64;
        let t = target
            .mul_scalar(1.0 - args.label_smoothing)
            .add_scalar(args.label_smoothing / c);
        let mut per_class = logp.mul(&t);
        if let Some(w) = &args.weight {
            let mut shape = vec![1usize; input.dim()];
            shape[1] = input.shape()[1];
            per_class = per_class.mul(&w.reshape(&shape));
        }
        let losses = per_class.sum(&[1], false).neg();
        return match args.reduction {
            Reduction::None => losses,
            Reduction::Sum => losses.sum_all(),
            // PyTorch averages over every sample and position: numel / C.
            Reduction::Mean => losses
                .sum_all()
                .div_scalar((input.numel() / input.shape()[1].max(1)) as f64),
        };
    }
    // Class-index targets: one fused kernel per pass over the logits.
    let (target_shape, bounds) = check_targets("cross_entropy", input, target, args.ignore_index);
    let flat = classes_last(input);
    let opts = crate::nn::fused::CrossEntropyOpts {
        weight: class_weights("cross_entropy", input, args),
        ignore_index: args.ignore_index,
        smoothing: args.label_smoothing,
    };
    let (losses, weights) =
        crate::nn::fused::cross_entropy(&flat, &target.reshape(&[target.numel()]), &opts, &bounds);
    reduce_loss(losses, &weights, args.reduction, &target_shape)
}

/// Mean squared error (`F.mse_loss`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
/// let b = Tensor::from_vec(vec![1.0f32, 4.0], &[2]);
/// assert_eq!(F::mse_loss(&a, &b, F::Reduction::Mean).item::<f32>(), 2.0);
/// ```
#[track_caller]
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("mse_loss", [input, target]) {
        return mse_loss(&x, &t, reduction);
    }
    let _profiled = crate::dispatch::opaque("mse_loss", &[input, target]);
    assert!(
        input.shape() == target.shape(),
        "mse_loss: input shape {:?} and target shape {:?} must match",
        input.shape(),
        target.shape()
    );
    let d = input.sub(target);
    let sq = d.mul(&d);
    match reduction {
        Reduction::None => sq,
        Reduction::Sum => sq.sum_all(),
        Reduction::Mean => sq.mean_all(),
    }
}

/// Binary cross-entropy on logits, computed stably (`F.binary_cross_entropy_with_logits`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![0.0f64], &[1]);
/// let t = Tensor::from_vec(vec![1.0f64], &[1]);
/// assert!((F::binary_cross_entropy_with_logits(&x, &t, F::Reduction::Mean).item::<f64>() - 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn binary_cross_entropy_with_logits(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("binary_cross_entropy_with_logits", &[input, target]);
    if let Some([x, t]) = crate::dispatch::cast("binary_cross_entropy_with_logits", [input, target])
    {
        return binary_cross_entropy_with_logits(&x, &t, reduction);
    }
    assert!(
        input.shape() == target.shape(),
        "binary_cross_entropy_with_logits: input shape {:?} and target shape {:?} must match",
        input.shape(),
        target.shape()
    );
    // max(x, 0) - x * t + log(1 + exp(-|x|))
    let losses = input
        .relu()
        .sub(&input.mul(target))
        .add(&input.abs().neg().exp().add_scalar(1.0).log());
    match reduction {
        Reduction::None => losses,
        Reduction::Sum => losses.sum_all(),
        Reduction::Mean => losses.mean_all(),
    }
}
