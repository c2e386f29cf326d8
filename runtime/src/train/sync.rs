//! The [`Trainer`](super::Trainer)'s values summed over a data-parallel group's ranks.

use super::config::TrainError;
use super::metrics::Mean;
use crate::Tensor;

/// Reduces `values` over the group's ranks with `op`.
pub(super) fn all_reduce_values<const N: usize>(
    group: &crate::distributed::ProcessGroup,
    values: [f64; N],
    op: crate::distributed::ReduceOp,
) -> Result<[f64; N], TrainError> {
    let t = Tensor::from_vec(values.to_vec(), &[N]);
    group.all_reduce(&t, op)?;
    let v = t.to_vec::<f64>();
    Ok(std::array::from_fn(|i| v[i]))
}

/// Adds `values` up over the group's ranks.
pub(super) fn all_reduce_sums<const N: usize>(
    group: &crate::distributed::ProcessGroup,
    values: [f64; N],
) -> Result<[f64; N], TrainError> {
    all_reduce_values(group, values, crate::distributed::ReduceOp::Sum)
}

/// Every rank's `values` (of any length), in rank order: the lengths' maximum first,
/// then each rank's values behind their length, padded to it.
pub(super) fn all_gather_varlen(
    group: &crate::distributed::ProcessGroup,
    values: &[f64],
) -> Result<Vec<Vec<f64>>, TrainError> {
    let [longest] = all_reduce_values(
        group,
        [values.len() as f64],
        crate::distributed::ReduceOp::Max,
    )?;
    let longest = longest as usize;
    let mut padded = Vec::with_capacity(longest + 1);
    padded.push(values.len() as f64);
    padded.extend_from_slice(values);
    padded.resize(longest + 1, 0.0);
    let parts = group.all_gather(&Tensor::from_vec(padded, &[longest + 1]))?;
    Ok(parts
        .iter()
        .map(|p| {
            let p = p.to_vec::<f64>();
            let n = (p[0] as usize).min(longest);
            p[1..1 + n].to_vec()
        })
        .collect())
}

/// A mean's weighted sum (0 when nothing was added).
pub(super) fn mean_sum(m: &Mean) -> f64 {
    if m.weight() == 0.0 {
        0.0
    } else {
        m.value() * m.weight()
    }
}
