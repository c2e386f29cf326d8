//! Index-producing scans along a dim: stable sorts (`sort`, `argsort`, `topk`, ...) and
//! running extremes (`cummax`, `cummin`). Each returns, per output position, the index
//! along the dim of the element to take, so values come from one gather (which is also
//! the gradient's path). Rows run in parallel above the threshold.

use super::PARALLEL_THRESHOLD;
use super::par::for_each_chunk_mut;
use super::pool::HostBuffer;
use std::cmp::Ordering;

/// What an index scan computes along the dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimIndexOp {
    /// A stable sort; NaN counts as larger than every number (PyTorch: last ascending,
    /// first descending).
    Sort {
        /// Largest first.
        descending: bool,
    },
    /// The index of the running maximum (`cummax`): ties and NaN take the latest index,
    /// and a NaN stays the maximum once seen, as PyTorch.
    CumMax,
    /// The index of the running minimum (`cummin`), with the same rules.
    CumMin,
}

/// Total order with NaN above everything (`v != v` detects NaN for any element type).
#[inline]
fn nan_last<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    #[allow(clippy::eq_op)]
    a.partial_cmp(b).unwrap_or_else(|| (a != a).cmp(&(b != b)))
}

/// The indices of `op` along the middle dim of contiguous `[outer, r, inner]`.
///
/// ```
/// use ferrograd_kernels::cpu::{dim_indices, DimIndexOp};
/// let x = [3.0f32, 1.0, f32::NAN, 2.0];
/// assert_eq!(dim_indices(&x, [1, 4, 1], DimIndexOp::Sort { descending: false }), vec![1, 3, 0, 2]);
/// assert_eq!(dim_indices(&x, [1, 4, 1], DimIndexOp::CumMax), vec![0, 0, 2, 2]);
/// ```
pub fn dim_indices<T: PartialOrd + Copy + Send + Sync>(
    src: &[T],
    [outer, r, inner]: [usize; 3],
    op: DimIndexOp,
) -> HostBuffer<i64> {
    assert_eq!(src.len(), outer * r * inner, "dim_indices: input length");
    let mut out = HostBuffer::<i64>::zeroed(src.len());
    if out.is_empty() {
        return out;
    }
    let lines = outer * inner;
    let per_task = if src.len() < PARALLEL_THRESHOLD {
        lines
    } else {
        lines.div_ceil(super::num_threads() * 4).max(1)
    };
    // Tasks own whole `[r, inner]` blocks when inner > 1, else runs of rows.
    let block = r * inner;
    let lines_per_block = inner;
    let blocks_per_task = per_task.div_ceil(lines_per_block).max(1);
    for_each_chunk_mut(&mut out, blocks_per_task * block, |t, chunk| {
        // Per-task scratch: one line of values and its order, reused for every line.
        let mut line = Vec::with_capacity(r);
        let mut idx: Vec<usize> = Vec::with_capacity(r);
        for (b, dst) in chunk.chunks_mut(block).enumerate() {
            let o = t * blocks_per_task + b;
            let base = &src[o * block..(o + 1) * block];
            for i in 0..inner {
                line.clear();
                line.extend((0..r).map(|j| base[j * inner + i]));
                match op {
                    DimIndexOp::Sort { descending } => {
                        idx.clear();
                        idx.extend(0..r);
                        if descending {
                            idx.sort_by(|&a, &b| nan_last(&line[b], &line[a]));
                        } else {
                            idx.sort_by(|&a, &b| nan_last(&line[a], &line[b]));
                        }
                        for (j, &k) in idx.iter().enumerate() {
                            dst[j * inner + i] = k as i64;
                        }
                    }
                    DimIndexOp::CumMax | DimIndexOp::CumMin => {
                        let max = op == DimIndexOp::CumMax;
                        let mut best = 0usize;
                        for j in 0..r {
                            let (v, b) = (line[j], line[best]);
                            #[allow(clippy::eq_op)]
                            let take = if b != b {
                                v != v
                            } else {
                                v != v || if max { v >= b } else { v <= b }
                            };
                            if take {
                                best = j;
                            }
                            dst[j * inner + i] = best as i64;
                        }
                    }
                }
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_sorts_along_inner_and_outer_dims() {
        // [2, 3, 2]: sort along the middle dim.
        let x = [1.0, 5.0, 1.0, 4.0, 0.0, 5.0, 2.0, 2.0, 2.0, 1.0, 2.0, 3.0];
        let asc = dim_indices(&x, [2, 3, 2], DimIndexOp::Sort { descending: false });
        assert_eq!(asc, vec![2, 1, 0, 0, 1, 2, 0, 1, 1, 0, 2, 2]);
        let desc = dim_indices(&x, [2, 3, 2], DimIndexOp::Sort { descending: true });
        assert_eq!(desc, vec![0, 0, 1, 2, 2, 1, 0, 2, 1, 0, 2, 1]);
    }

    #[test]
    fn nan_is_largest_and_sticks_in_cummax() {
        let x = [1.0, f64::NAN, 0.0, f64::NAN, 3.0];
        let asc = dim_indices(&x, [1, 5, 1], DimIndexOp::Sort { descending: false });
        assert_eq!(asc, vec![2, 0, 4, 1, 3]);
        let desc = dim_indices(&x, [1, 5, 1], DimIndexOp::Sort { descending: true });
        assert_eq!(desc, vec![1, 3, 4, 0, 2]);
        assert_eq!(
            dim_indices(&x, [1, 5, 1], DimIndexOp::CumMax),
            vec![0, 1, 1, 3, 3]
        );
        assert_eq!(
            dim_indices(&x, [1, 5, 1], DimIndexOp::CumMin),
            vec![0, 1, 1, 3, 3]
        );
        let y = [2i64, 2, 1, 3];
        assert_eq!(
            dim_indices(&y, [1, 4, 1], DimIndexOp::CumMax),
            vec![0, 1, 1, 3]
        );
        assert_eq!(
            dim_indices(&y, [1, 4, 1], DimIndexOp::CumMin),
            vec![0, 1, 2, 2]
        );
    }

    #[test]
    fn parallel_matches_serial() {
        let x: Vec<f32> = (0..200_000).map(|i| ((i * 7919) % 1000) as f32).collect();
        let par = dim_indices(&x, [400, 500, 1], DimIndexOp::Sort { descending: false });
        for row in 0..400 {
            let line = &x[row * 500..(row + 1) * 500];
            let idx = &par[row * 500..(row + 1) * 500];
            assert!(idx.windows(2).all(|w| {
                let (a, b) = (line[w[0] as usize], line[w[1] as usize]);
                a < b || (a == b && w[0] < w[1])
            }));
        }
    }
}
