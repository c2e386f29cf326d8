//! Regression, probabilistic and embedding losses: `l1_loss`, `smooth_l1_loss`,
//! `huber_loss`, `binary_cross_entropy` (and the weighted logits form), `kl_div`,
//! `margin_ranking_loss`, `hinge_embedding_loss`, `cosine_embedding_loss`,
//! `triplet_margin_loss`, with the distance helpers `cosine_similarity` and
//! `pairwise_distance`. Composed from differentiable ops, so their gradients are exact and
//! they run on every device.

use super::Reduction;
use crate::Tensor;

/// Applies `reduction` to elementwise losses (`Mean` over every element).
pub(super) fn reduce(losses: Tensor, reduction: Reduction) -> Tensor {
    match reduction {
        Reduction::None => losses,
        Reduction::Sum => losses.sum_all(),
        Reduction::Mean => losses.mean_all(),
    }
}

#[track_caller]
fn same_shape(op: &str, input: &Tensor, target: &Tensor) {
    assert!(
        input.shape() == target.shape(),
        "{op}: input shape {:?} and target shape {:?} must match",
        input.shape(),
        target.shape()
    );
}

/// Mean absolute error (`F.l1_loss`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
/// let b = Tensor::from_vec(vec![0.0f32, 4.0], &[2]);
/// assert_eq!(F::l1_loss(&a, &b, F::Reduction::Mean).item::<f32>(), 1.5);
/// ```
#[track_caller]
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("l1_loss", [input, target]) {
        return l1_loss(&x, &t, reduction);
    }
    let _profiled = crate::dispatch::opaque("l1_loss", &[input, target]);
    same_shape("l1_loss", input, target);
    reduce(input.sub(target).abs(), reduction)
}

/// Smooth L1 (`F.smooth_l1_loss`): `0.5 d² / beta` where `|d| < beta`, else
/// `|d| - 0.5 beta`; `beta = 0` is the L1 loss.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![0.5f32, 3.0], &[2]);
/// let b = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
/// assert_eq!(F::smooth_l1_loss(&a, &b, F::Reduction::None, 1.0).to_vec::<f32>(), vec![0.125, 2.5]);
/// ```
#[track_caller]
pub fn smooth_l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction, beta: f64) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("smooth_l1_loss", [input, target]) {
        return smooth_l1_loss(&x, &t, reduction, beta);
    }
    let _profiled = crate::dispatch::opaque("smooth_l1_loss", &[input, target]);
    same_shape("smooth_l1_loss", input, target);
    assert!(
        beta >= 0.0,
        "smooth_l1_loss: beta must be non-negative, got {beta}"
    );
    if beta == 0.0 {
        return l1_loss(input, target, reduction);
    }
    // Smooth L1 with `beta` is the Huber loss with `delta = beta`, divided by `beta`.
    huber_loss(input, target, reduction, beta).div_scalar(beta)
}

/// Huber loss (`F.huber_loss`): `0.5 d²` where `|d| <= delta`, else
/// `delta (|d| - 0.5 delta)`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![0.5f32, 3.0], &[2]);
/// let b = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
/// assert_eq!(F::huber_loss(&a, &b, F::Reduction::None, 2.0).to_vec::<f32>(), vec![0.125, 4.0]);
/// ```
#[track_caller]
pub fn huber_loss(input: &Tensor, target: &Tensor, reduction: Reduction, delta: f64) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("huber_loss", [input, target]) {
        return huber_loss(&x, &t, reduction, delta);
    }
    let _profiled = crate::dispatch::opaque("huber_loss", &[input, target]);
    same_shape("huber_loss", input, target);
    assert!(
        delta > 0.0,
        "huber_loss: delta must be positive, got {delta}"
    );
    let d = input.sub(target).abs();
    let quadratic = d.mul(&d).mul_scalar(0.5);
    let linear = d.sub_scalar(0.5 * delta).mul_scalar(delta);
    reduce(
        Tensor::where_cond(&d.le_scalar(delta), &quadratic, &linear),
        reduction,
    )
}

/// Binary cross-entropy of probabilities (`F.binary_cross_entropy`): `-w (t log x + (1 - t)
/// log(1 - x))`, each log clamped at -100 as PyTorch, with optional elementwise weights
/// broadcast to the input.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let p = Tensor::from_vec(vec![0.5f64, 1.0], &[2]);
/// let t = Tensor::from_vec(vec![1.0f64, 0.0], &[2]);
/// let l = F::binary_cross_entropy(&p, &t, None, F::Reduction::None).to_vec::<f64>();
/// assert!((l[0] - 2f64.ln()).abs() < 1e-12 && l[1] == 100.0);
/// ```
#[track_caller]
pub fn binary_cross_entropy(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("binary_cross_entropy", [input, target]) {
        return binary_cross_entropy(&x, &t, weight, reduction);
    }
    let _profiled = crate::dispatch::opaque("binary_cross_entropy", &[input, target]);
    same_shape("binary_cross_entropy", input, target);
    let log_p = input.log().clamp_min(-100.0);
    let log_q = input.rsub_scalar(1.0).log().clamp_min(-100.0);
    let mut losses = target
        .mul(&log_p)
        .add(&target.rsub_scalar(1.0).mul(&log_q))
        .neg();
    if let Some(w) = weight {
        losses = losses.mul(w);
    }
    reduce(losses, reduction)
}

/// [`binary_cross_entropy_with_logits`](super::binary_cross_entropy_with_logits) with
/// PyTorch's `weight` (elementwise, broadcast) and `pos_weight` (per class, broadcast over
/// the last dim): `(1 - t) x + (1 + (pw - 1) t) (log(1 + e^-|x|) + max(-x, 0))`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![0.0f64], &[1]);
/// let t = Tensor::from_vec(vec![1.0f64], &[1]);
/// let pw = Tensor::from_vec(vec![3.0f64], &[1]);
/// let l = F::binary_cross_entropy_with_logits_weighted(&x, &t, None, Some(&pw), F::Reduction::Sum);
/// assert!((l.item::<f64>() - 3.0 * 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn binary_cross_entropy_with_logits_weighted(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    pos_weight: Option<&Tensor>,
    reduction: Reduction,
) -> Tensor {
    let _profiled = crate::dispatch::opaque(
        "binary_cross_entropy_with_logits_weighted",
        &[input, target],
    );
    if let Some([x, t]) = crate::dispatch::cast("binary_cross_entropy_with_logits", [input, target])
    {
        return binary_cross_entropy_with_logits_weighted(&x, &t, weight, pos_weight, reduction);
    }
    same_shape("binary_cross_entropy_with_logits", input, target);
    let softplus_neg = input
        .abs()
        .neg()
        .exp()
        .add_scalar(1.0)
        .log()
        .add(&input.neg().relu());
    let log_weight = match pos_weight {
        Some(pw) => pw.sub_scalar(1.0).mul(target).add_scalar(1.0),
        None => Tensor::ones_like(target),
    };
    let mut losses = target
        .rsub_scalar(1.0)
        .mul(input)
        .add(&log_weight.mul(&softplus_neg));
    if let Some(w) = weight {
        losses = losses.mul(w);
    }
    reduce(losses, reduction)
}

/// How [`kl_div`] reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KlReduction {
    /// Elementwise.
    None,
    /// Mean over every element (PyTorch's default, which is not the KL divergence).
    #[default]
    Mean,
    /// The sum divided by the batch size: the KL divergence per sample.
    BatchMean,
    /// The sum.
    Sum,
}

/// Kullback-Leibler divergence (`F.kl_div`): `input` holds log-probabilities, `target`
/// probabilities (or log-probabilities with `log_target`); elementwise
/// `target (log target - input)`, zero where `target` is zero.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logq = Tensor::from_vec(vec![0.5f64.ln(), 0.5f64.ln()], &[1, 2]);
/// let p = Tensor::from_vec(vec![1.0f64, 0.0], &[1, 2]);
/// let kl = F::kl_div(&logq, &p, F::KlReduction::BatchMean, false);
/// assert!((kl.item::<f64>() - 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn kl_div(input: &Tensor, target: &Tensor, reduction: KlReduction, log_target: bool) -> Tensor {
    if let Some([x, t]) = crate::dispatch::cast("kl_div", [input, target]) {
        return kl_div(&x, &t, reduction, log_target);
    }
    let _profiled = crate::dispatch::opaque("kl_div", &[input, target]);
    same_shape("kl_div", input, target);
    let losses = if log_target {
        target.exp().mul(&target.sub(input))
    } else {
        // xlogy(t, t) - t * input, with 0 log 0 = 0 and finite gradients there.
        let positive = target.gt_scalar(0.0);
        let safe = Tensor::where_cond(&positive, target, &Tensor::ones_like(target));
        target.mul(&safe.log()).sub(&target.mul(input))
    };
    match reduction {
        KlReduction::None => losses,
        KlReduction::Sum => losses.sum_all(),
        KlReduction::Mean => losses.mean_all(),
        KlReduction::BatchMean => {
            let n = input.shape().first().copied().unwrap_or(1).max(1);
            losses.sum_all().div_scalar(n as f64)
        }
    }
}

/// `max(0, -y (x1 - x2) + margin)` (`F.margin_ranking_loss`), `y` in {1, -1}.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 0.0], &[2]);
/// let b = Tensor::from_vec(vec![0.0f32, 1.0], &[2]);
/// let y = Tensor::from_vec(vec![1.0f32, 1.0], &[2]);
/// assert_eq!(F::margin_ranking_loss(&a, &b, &y, 0.5, F::Reduction::None).to_vec::<f32>(), vec![0.0, 1.5]);
/// ```
#[track_caller]
pub fn margin_ranking_loss(
    input1: &Tensor,
    input2: &Tensor,
    target: &Tensor,
    margin: f64,
    reduction: Reduction,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("margin_ranking_loss", &[input1, input2, target]);
    same_shape("margin_ranking_loss", input1, input2);
    let losses = target
        .neg()
        .mul(&input1.sub(input2))
        .add_scalar(margin)
        .relu();
    reduce(losses, reduction)
}

/// `x` where `y = 1`, `max(0, margin - x)` where `y = -1` (`F.hinge_embedding_loss`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![0.3f32, 0.3], &[2]);
/// let y = Tensor::from_vec(vec![1.0f32, -1.0], &[2]);
/// assert_eq!(F::hinge_embedding_loss(&x, &y, 1.0, F::Reduction::None).to_vec::<f32>(), vec![0.3, 0.7]);
/// ```
#[track_caller]
pub fn hinge_embedding_loss(
    input: &Tensor,
    target: &Tensor,
    margin: f64,
    reduction: Reduction,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("hinge_embedding_loss", &[input, target]);
    same_shape("hinge_embedding_loss", input, target);
    let zeros = Tensor::zeros_like(input);
    let margin_part = Tensor::where_cond(
        &target.ne_scalar(1.0),
        &input.rsub_scalar(margin).relu(),
        &zeros,
    );
    let self_part = Tensor::where_cond(&target.ne_scalar(-1.0), input, &zeros);
    reduce(margin_part.add(&self_part), reduction)
}

/// Cosine similarity along `dim` (`F.cosine_similarity`): `x1·x2 / max(|x1| |x2|, eps)`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f64, 0.0, 1.0, 1.0], &[2, 2]);
/// let b = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 2.0], &[2, 2]);
/// let c = F::cosine_similarity(&a, &b, 1, 1e-8).to_vec::<f64>();
/// assert!(c[0].abs() < 1e-12 && (c[1] - 1.0).abs() < 1e-12);
/// ```
#[track_caller]
pub fn cosine_similarity(x1: &Tensor, x2: &Tensor, dim: isize, eps: f64) -> Tensor {
    let _profiled = crate::dispatch::opaque("cosine_similarity", &[x1, x2]);
    let dot = x1.mul(x2).sum(&[dim], false);
    let n1 = x1.mul(x1).sum(&[dim], false);
    let n2 = x2.mul(x2).sum(&[dim], false);
    dot.div(&n1.mul(&n2).sqrt().clamp_min(eps))
}

/// The p-norm distance `|x1 - x2 + eps|_p` along the last dim (`F.pairwise_distance`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2]);
/// let b = Tensor::from_vec(vec![3.0f64, 4.0], &[1, 2]);
/// assert!((F::pairwise_distance(&a, &b, 2.0, 0.0).item::<f64>() - 5.0).abs() < 1e-12);
/// ```
#[track_caller]
pub fn pairwise_distance(x1: &Tensor, x2: &Tensor, p: f64, eps: f64) -> Tensor {
    let _profiled = crate::dispatch::opaque("pairwise_distance", &[x1, x2]);
    x1.sub(x2).add_scalar(eps).norm(p, &[-1], false)
}

/// `1 - cos(x1, x2)` where `y = 1`, `max(0, cos(x1, x2) - margin)` where `y = -1`
/// (`F.cosine_embedding_loss`), over the last dim of `[N, D]` or `[D]` inputs.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f64, 0.0], &[1, 2]);
/// let y = Tensor::from_vec(vec![-1.0f64], &[1]);
/// let l = F::cosine_embedding_loss(&a, &a, &y, 0.5, F::Reduction::Sum);
/// assert!((l.item::<f64>() - 0.5).abs() < 1e-9);
/// ```
#[track_caller]
pub fn cosine_embedding_loss(
    input1: &Tensor,
    input2: &Tensor,
    target: &Tensor,
    margin: f64,
    reduction: Reduction,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("cosine_embedding_loss", &[input1, input2, target]);
    same_shape("cosine_embedding_loss", input1, input2);
    assert!(
        input1.dim() >= 1 && target.shape() == &input1.shape()[..input1.dim() - 1],
        "cosine_embedding_loss: expected target of shape {:?} for inputs of shape {:?}, got {:?}",
        &input1.shape()[..input1.dim().saturating_sub(1)],
        input1.shape(),
        target.shape()
    );
    // PyTorch's form: EPSILON = 1e-12 added to each squared norm.
    const EPSILON: f64 = 1e-12;
    let dot = input1.mul(input2).sum(&[-1], false);
    let m1 = input1.mul(input1).sum(&[-1], false).add_scalar(EPSILON);
    let m2 = input2.mul(input2).sum(&[-1], false).add_scalar(EPSILON);
    let cos = dot.div(&m1.mul(&m2).sqrt());
    let zeros = Tensor::zeros_like(&cos);
    let pos = Tensor::where_cond(&target.eq_scalar(1.0), &cos.rsub_scalar(1.0), &zeros);
    let neg = Tensor::where_cond(
        &target.eq_scalar(-1.0),
        &cos.sub_scalar(margin).relu(),
        &zeros,
    );
    reduce(pos.add(&neg), reduction)
}

/// `max(d(a, p) - d(a, n) + margin, 0)` with `d` the p-norm [`pairwise_distance`]
/// (`F.triplet_margin_loss`); with `swap`, `d(a, n)` is replaced by `min(d(a, n),
/// d(p, n))`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2]);
/// let p = Tensor::from_vec(vec![0.0f64, 1.0], &[1, 2]);
/// let n = Tensor::from_vec(vec![0.0f64, 3.0], &[1, 2]);
/// let l = F::triplet_margin_loss(&a, &p, &n, 1.0, 2.0, 0.0, false, F::Reduction::Sum);
/// assert_eq!(l.item::<f64>(), 0.0);
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn triplet_margin_loss(
    anchor: &Tensor,
    positive: &Tensor,
    negative: &Tensor,
    margin: f64,
    p: f64,
    eps: f64,
    swap: bool,
    reduction: Reduction,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("triplet_margin_loss", &[anchor, positive, negative]);
    same_shape("triplet_margin_loss", anchor, positive);
    same_shape("triplet_margin_loss", anchor, negative);
    let d_ap = pairwise_distance(anchor, positive, p, eps);
    let mut d_an = pairwise_distance(anchor, negative, p, eps);
    if swap {
        d_an = d_an.minimum(&pairwise_distance(positive, negative, p, eps));
    }
    reduce(d_ap.sub(&d_an).add_scalar(margin).relu(), reduction)
}
