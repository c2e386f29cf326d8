//! Shapes, strides and the strided views a tensor is made of.

use smallvec::SmallVec;

/// A small inline vector of dimensions (shape or strides); no heap allocation up to 6-D.
pub type Dims = SmallVec<[usize; 6]>;

/// Where a tensor's elements sit in its storage: a shape, element strides and an offset.
/// Views (transpose, narrow, expand, ...) only make a new `Layout`; no data moves.
///
/// ```
/// use ferrograd_kernels::Layout;
/// let l = Layout::contiguous(&[2, 3]).transpose(0, 1);
/// assert_eq!(l.shape(), &[3, 2]);
/// assert_eq!(l.strides(), &[1, 3]);
/// assert!(!l.is_contiguous());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Dims,
    strides: Dims,
    offset: usize,
}

/// Row-major strides of a shape.
fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut strides: Dims = smallvec::smallvec![0; shape.len()];
    let mut acc = 1;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        acc *= dim.max(1);
    }
    strides
}

/// The broadcast of two shapes under NumPy/PyTorch rules, or the first dim (counted from
/// the right, as a negative index) where they clash.
///
/// ```
/// use ferrograd_kernels::broadcast_shapes;
/// assert_eq!(broadcast_shapes(&[4, 1, 3], &[5, 1]).unwrap().as_slice(), &[4, 5, 3]);
/// assert_eq!(broadcast_shapes(&[2, 3], &[4]), Err(-1));
/// ```
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Dims, isize> {
    let rank = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; rank];
    for i in 0..rank {
        let da = if i < a.len() { a[a.len() - 1 - i] } else { 1 };
        let db = if i < b.len() { b[b.len() - 1 - i] } else { 1 };
        out[rank - 1 - i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(-(i as isize) - 1);
        };
    }
    Ok(out)
}

impl Layout {
    /// A row-major layout of `shape` at offset 0.
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            strides: contiguous_strides(shape),
            shape: Dims::from_slice(shape),
            offset: 0,
        }
    }

    /// A layout from raw parts. The caller guarantees every index stays in its storage.
    pub fn from_parts(shape: Dims, strides: Dims, offset: usize) -> Self {
        debug_assert_eq!(shape.len(), strides.len());
        Layout {
            shape,
            strides,
            offset,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The offset of element `[0, 0, ...]` in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether elements are laid out row-major without gaps (offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        // An empty view is contiguous whatever its strides (PyTorch's rule): there is no
        // element to be out of order.
        if self.shape.contains(&0) {
            return true;
        }
        let mut expected = 1;
        for (&dim, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if dim != 1 && stride != expected {
                return false;
            }
            expected *= dim;
        }
        true
    }

    /// The contiguous range of storage this layout covers, when it is contiguous.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        if self.numel() == 0 {
            return Some(0..0);
        }
        self.is_contiguous()
            .then(|| self.offset..self.offset + self.numel())
    }

    /// One past the largest storage index this layout touches (0 when empty).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// Swaps two dims.
    pub fn transpose(&self, d0: usize, d1: usize) -> Self {
        let mut out = self.clone();
        out.shape.swap(d0, d1);
        out.strides.swap(d0, d1);
        out
    }

    /// Reorders dims: dim `i` of the result is dim `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Self {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Keeps `len` indices of `dim` from `start`, every `step`-th.
    pub fn slice(&self, dim: usize, start: usize, len: usize, step: usize) -> Self {
        let mut out = self.clone();
        out.offset += start * self.strides[dim];
        out.shape[dim] = len;
        out.strides[dim] *= step;
        out
    }

    /// The leading corner of this view with the (no larger) `shape`: every dim `d` keeps
    /// its first `shape[d]` indices.
    pub fn slice_to(&self, shape: &[usize]) -> Self {
        debug_assert!(
            shape.len() == self.rank() && shape.iter().zip(&self.shape).all(|(a, b)| a <= b)
        );
        Layout {
            shape: Dims::from_slice(shape),
            strides: self.strides.clone(),
            offset: self.offset,
        }
    }

    /// Fixes `dim` at `index`, removing the dim.
    pub fn select(&self, dim: usize, index: usize) -> Self {
        let mut out = self.clone();
        out.offset += index * self.strides[dim];
        out.shape.remove(dim);
        out.strides.remove(dim);
        out
    }

    /// Inserts a dim of size 1 at `dim`.
    pub fn unsqueeze(&self, dim: usize) -> Self {
        let mut out = self.clone();
        let stride = if dim < self.rank() {
            self.strides[dim] * self.shape[dim]
        } else {
            1
        };
        out.shape.insert(dim, 1);
        out.strides.insert(dim, stride);
        out
    }

    /// Removes dim `dim`, which must have size 1.
    pub fn squeeze(&self, dim: usize) -> Self {
        debug_assert_eq!(self.shape[dim], 1);
        let mut out = self.clone();
        out.shape.remove(dim);
        out.strides.remove(dim);
        out
    }

    /// A view of this layout broadcast to `shape` (stride 0 on broadcast dims). The caller
    /// has checked that the shapes are compatible.
    pub fn broadcast_to(&self, shape: &[usize]) -> Self {
        let extra = shape.len() - self.rank();
        let mut strides: Dims = smallvec::smallvec![0; shape.len()];
        for i in 0..self.rank() {
            strides[extra + i] = if self.shape[i] == 1 && shape[extra + i] != 1 {
                0
            } else {
                self.strides[i]
            };
        }
        Layout {
            shape: Dims::from_slice(shape),
            strides,
            offset: self.offset,
        }
    }

    /// The layout of a reshape that needs no copy, if there is one (as PyTorch's `view`):
    /// each run of mutually contiguous dims may be split or merged, nothing else.
    pub fn reshape(&self, shape: &[usize]) -> Option<Self> {
        if self.is_contiguous() {
            let mut out = Layout::contiguous(shape);
            out.offset = self.offset;
            return Some(out);
        }
        let mut strides: Dims = smallvec::smallvec![1; shape.len()];
        let mut view_d = shape.len() as isize - 1;
        let mut chunk_base_stride = *self.strides.last()?;
        let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
        for tensor_d in (0..self.rank()).rev() {
            tensor_numel *= self.shape[tensor_d];
            let chunk_ends = tensor_d == 0
                || (self.shape[tensor_d - 1] != 1
                    && self.strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
            if chunk_ends {
                while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                    strides[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = self.strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(Layout {
            shape: Dims::from_slice(shape),
            strides,
            offset: self.offset,
        })
    }

    /// Iterates over the storage offsets of every element, in row-major order.
    pub fn offsets(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.numel();
        let rank = self.rank();
        let mut index: Dims = smallvec::smallvec![0; rank];
        let mut offset = self.offset;
        (0..n).map(move |i| {
            if i > 0 {
                for d in (0..rank).rev() {
                    index[d] += 1;
                    offset += self.strides[d];
                    if index[d] < self.shape[d] {
                        break;
                    }
                    offset -= self.strides[d] * self.shape[d];
                    index[d] = 0;
                }
            }
            offset
        })
    }
}

/// Merges adjacent dims that are contiguous with each other in every operand, so that
/// strided loops run over as few, as long rows as possible. Size-1 dims are dropped; an
/// index space of one element becomes `[1]` with stride 0.
///
/// ```
/// use ferrograd_kernels::coalesce;
/// // a contiguous [2, 3] operand and a broadcast row: the first merges, the second can't
/// let (shape, [a, b]) = coalesce(&[2, 3], [&[3, 1], &[0, 1]]);
/// assert_eq!((shape.as_slice(), a.as_slice(), b.as_slice()), (&[2, 3][..], &[3, 1][..], &[0, 1][..]));
/// let (shape, [a]) = coalesce(&[2, 3], [&[3, 1]]);
/// assert_eq!((shape.as_slice(), a.as_slice()), (&[6][..], &[1][..]));
/// ```
pub fn coalesce<const K: usize>(shape: &[usize], strides: [&[usize]; K]) -> (Dims, [Dims; K]) {
    let mut out_shape = Dims::new();
    let mut out_strides: [Dims; K] = std::array::from_fn(|_| Dims::new());
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && (0..K).all(|k| *out_strides[k].last().unwrap() == strides[k][d] * shape[d]);
        if mergeable {
            *out_shape.last_mut().unwrap() *= shape[d];
            for k in 0..K {
                *out_strides[k].last_mut().unwrap() = strides[k][d];
            }
        } else {
            out_shape.push(shape[d]);
            for k in 0..K {
                out_strides[k].push(strides[k][d]);
            }
        }
    }
    if out_shape.is_empty() {
        out_shape.push(1);
        for s in out_strides.iter_mut() {
            s.push(0);
        }
    }
    (out_shape, out_strides)
}

/// Calls `f(row, offsets)` for each row in `rows` of a coalesced index space: `offsets[k]`
/// is where operand `k`'s row starts. A row is the innermost dim.
pub(crate) fn for_each_row<const K: usize>(
    shape: &[usize],
    strides: &[Dims; K],
    base: [usize; K],
    rows: std::ops::Range<usize>,
    mut f: impl FnMut(usize, [usize; K]),
) {
    // No rows (a zero-length dim, PyTorch's empty tensors): nothing to visit, and the
    // decomposition below would divide by that zero.
    if rows.is_empty() {
        return;
    }
    let outer = &shape[..shape.len() - 1];
    let rank = outer.len();
    let mut index: Dims = smallvec::smallvec![0; rank];
    let mut offsets = base;
    // Decompose the first row index.
    let mut rem = rows.start;
    for d in (0..rank).rev() {
        index[d] = rem % outer[d];
        rem /= outer[d];
        for k in 0..K {
            offsets[k] += index[d] * strides[k][d];
        }
    }
    for row in rows {
        f(row, offsets);
        for d in (0..rank).rev() {
            index[d] += 1;
            for k in 0..K {
                offsets[k] += strides[k][d];
            }
            if index[d] < outer[d] {
                break;
            }
            for k in 0..K {
                offsets[k] -= strides[k][d] * outer[d];
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_of_transposed_needs_copy() {
        let l = Layout::contiguous(&[2, 3]).transpose(0, 1);
        assert!(l.reshape(&[6]).is_none());
        // A size-1 dim may take any stride: only the others are determined.
        assert_eq!(&l.reshape(&[3, 2, 1]).unwrap().strides()[..2], &[1, 3]);
    }

    #[test]
    fn reshape_splits_strided_dim() {
        // [4, 6] narrowed to every row but contiguous rows: shape [2, 6] strides [12, 1]
        let l = Layout::contiguous(&[4, 6]).slice(0, 0, 2, 2);
        let r = l.reshape(&[2, 2, 3]).unwrap();
        assert_eq!(r.strides(), &[12, 3, 1]);
        assert!(l.reshape(&[12]).is_none());
    }

    #[test]
    fn offsets_walk_row_major() {
        let l = Layout::contiguous(&[2, 3]).transpose(0, 1);
        assert_eq!(l.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn coalesce_merges_contiguous_dims() {
        let l = Layout::contiguous(&[2, 3, 4]);
        let (shape, strides) = coalesce(l.shape(), [l.strides()]);
        assert_eq!(shape.as_slice(), &[24]);
        assert_eq!(strides[0].as_slice(), &[1]);
    }
}
