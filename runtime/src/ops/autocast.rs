//! The autocast cast policy the ops apply (see [`crate::amp`] for the user's side): which
//! inputs an op casts down to the autocast dtype or up to f32. It lives with the ops, so
//! the ops layer reads only the per-thread autocast state below it.

use crate::autocast_state::autocast_dtype;
use crate::{DType, Tensor};

/// For ops that run in low precision under autocast: `t` cast to the autocast dtype when
/// autocast is on and `t` is an f32/f16/bf16 tensor of another dtype, else `None`.
pub(crate) fn low_precision(t: &Tensor) -> Option<Tensor> {
    let target = autocast_dtype()?;
    let eligible = t.dtype() == DType::F32 || t.dtype().is_half();
    (eligible && t.dtype() != target).then(|| t.to_dtype(target))
}

/// For ops that run in f32 under autocast: `t` cast to f32 when autocast is on and `t`
/// is f16/bf16, else `None`.
pub(crate) fn full_precision(t: &Tensor) -> Option<Tensor> {
    autocast_dtype()?;
    t.dtype().is_half().then(|| t.to_dtype(DType::F32))
}

/// Applies [`low_precision`] to every tensor, or `None` when none needs a cast (so the
/// op proceeds as written).
pub(crate) fn low_precision_all<const N: usize>(ts: [&Tensor; N]) -> Option<[Tensor; N]> {
    cast_all(ts, low_precision)
}

/// Applies [`full_precision`] to every tensor, or `None` when none needs a cast.
pub(crate) fn full_precision_all<const N: usize>(ts: [&Tensor; N]) -> Option<[Tensor; N]> {
    cast_all(ts, full_precision)
}

/// [`low_precision`] for `linear`/`conv`: input, weight and optional bias, or `None`
/// when none of them needs a cast.
pub(crate) fn low_precision_with_bias(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Option<(Tensor, Tensor, Option<Tensor>)> {
    autocast_dtype()?;
    let (x, w, b) = (
        low_precision(input),
        low_precision(weight),
        bias.and_then(low_precision),
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

fn cast_all<const N: usize>(
    ts: [&Tensor; N],
    cast: impl Fn(&Tensor) -> Option<Tensor>,
) -> Option<[Tensor; N]> {
    autocast_dtype()?;
    let cast: [Option<Tensor>; N] = ts.map(cast);
    if cast.iter().all(Option::is_none) {
        return None;
    }
    Some(std::array::from_fn(|i| {
        cast[i].clone().unwrap_or_else(|| ts[i].clone())
    }))
}
