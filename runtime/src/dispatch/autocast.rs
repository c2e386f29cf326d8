//! Autocast at the seam: one table says, per op, how its inputs are cast inside
//! [`autocast`](crate::amp::autocast) — PyTorch's autocast op lists (`lower_precision_fp`
//! and `fp32`). An op asks the seam with its name ([`cast`], [`cast_with_bias`]); whether
//! and how it casts is decided here and nowhere else. Ops not in the table run in the
//! widest dtype of their inputs (ordinary promotion).

use crate::autocast_state::autocast_dtype;
use crate::{DType, Tensor};

/// How autocast casts an op's floating-point inputs (see [`autocast_policy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastPolicy {
    /// f32 inputs are cast down to the autocast dtype (matrix products, convolutions:
    /// PyTorch's `lower_precision_fp` list).
    LowerPrecision,
    /// f16/bf16 inputs are cast up to f32 (reductions, normalisations, losses and the
    /// functions that lose accuracy in 16 bits: PyTorch's `fp32` list).
    Float32,
}

use CastPolicy::{Float32, LowerPrecision};

/// Every op autocast touches, by the name it runs under at the seam.
const POLICIES: &[(&str, CastPolicy)] = &[
    ("matmul", LowerPrecision),
    ("linear", LowerPrecision),
    ("conv2d", LowerPrecision),
    ("conv_transpose2d", LowerPrecision),
    ("sum", Float32),
    ("prod", Float32),
    ("cumsum", Float32),
    ("logsumexp", Float32),
    ("softmax", Float32),
    ("norm", Float32),
    ("pow", Float32),
    ("atan2", Float32),
    ("exp", Float32),
    ("log", Float32),
    ("rsqrt", Float32),
    ("layer_norm", Float32),
    ("group_norm", Float32),
    ("rms_norm", Float32),
    ("nll_loss", Float32),
    ("cross_entropy", Float32),
    ("mse_loss", Float32),
    ("l1_loss", Float32),
    ("smooth_l1_loss", Float32),
    ("huber_loss", Float32),
    ("binary_cross_entropy", Float32),
    ("binary_cross_entropy_with_logits", Float32),
    ("kl_div", Float32),
];

/// How autocast casts the inputs of the op `name` (`"matmul"`, `"softmax"`,
/// `"mse_loss"`, ...), or `None` for an op it leaves alone.
///
/// ```
/// use ferrograd_runtime::amp::{CastPolicy, autocast_policy};
/// assert_eq!(autocast_policy("matmul"), Some(CastPolicy::LowerPrecision));
/// assert_eq!(autocast_policy("softmax"), Some(CastPolicy::Float32));
/// assert_eq!(autocast_policy("relu"), None);
/// ```
pub fn autocast_policy(name: &str) -> Option<CastPolicy> {
    POLICIES.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

/// Every op autocast casts, with its policy: the whole table.
///
/// ```
/// use ferrograd_runtime::amp::{CastPolicy, autocast_ops};
/// assert!(autocast_ops().any(|(op, p)| op == "linear" && p == CastPolicy::LowerPrecision));
/// ```
pub fn autocast_ops() -> impl Iterator<Item = (&'static str, CastPolicy)> {
    POLICIES.iter().copied()
}

#[track_caller]
fn policy(name: &'static str) -> CastPolicy {
    match autocast_policy(name) {
        Some(p) => p,
        None => panic!("dispatch::cast: `{name}` has no autocast policy"),
    }
}

/// `t` as the op's policy casts it, or `None` when it stays as it is.
fn cast_one(t: &Tensor, policy: CastPolicy, target: DType) -> Option<Tensor> {
    match policy {
        LowerPrecision => {
            let eligible = t.dtype() == DType::F32 || t.dtype().is_half();
            (eligible && t.dtype() != target).then(|| t.to_dtype(target))
        }
        Float32 => t.dtype().is_half().then(|| t.to_dtype(DType::F32)),
    }
}

/// The inputs of op `name` cast by its autocast policy, or `None` when autocast is off
/// or none of them needs a cast (the op proceeds as written). One relaxed thread-local
/// read when autocast is off.
#[inline]
#[track_caller]
pub(crate) fn cast<const N: usize>(name: &'static str, ts: [&Tensor; N]) -> Option<[Tensor; N]> {
    let target = autocast_dtype()?;
    let policy = policy(name);
    let cast: [Option<Tensor>; N] = ts.map(|t| cast_one(t, policy, target));
    if cast.iter().all(Option::is_none) {
        return None;
    }
    Some(std::array::from_fn(|i| {
        cast[i].clone().unwrap_or_else(|| ts[i].clone())
    }))
}

/// [`cast`] for ops with an optional bias (`linear`, the convolutions).
#[inline]
#[track_caller]
pub(crate) fn cast_with_bias(
    name: &'static str,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Option<(Tensor, Tensor, Option<Tensor>)> {
    let target = autocast_dtype()?;
    let policy = policy(name);
    let (x, w, b) = (
        cast_one(input, policy, target),
        cast_one(weight, policy, target),
        bias.and_then(|b| cast_one(b, policy, target)),
    );
    if x.is_none() && w.is_none() && b.is_none() {
        return None;
    }
    Some((
        x.unwrap_or_else(|| input.clone()),
        w.unwrap_or_else(|| weight.clone()),
        b.or_else(|| bias.cloned()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_follow_pytorch() {
        // torch/csrc/autograd/autocast_mode.cpp: matmul-like ops in lower precision,
        // reductions, normalisations, pointwise functions that lose accuracy and
        // losses in fp32.
        for n in ["matmul", "linear", "conv2d", "conv_transpose2d"] {
            assert_eq!(autocast_policy(n), Some(LowerPrecision), "{n}");
        }
        for n in [
            "sum",
            "softmax",
            "layer_norm",
            "exp",
            "pow",
            "mse_loss",
            "kl_div",
        ] {
            assert_eq!(autocast_policy(n), Some(Float32), "{n}");
        }
        for n in ["relu", "add", "cat", "max"] {
            assert_eq!(autocast_policy(n), None, "{n}");
        }
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = autocast_ops().map(|(n, _)| n).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
