//! What a bounds check on int64 indices demands, kept to word the panic when an index
//! fails it: on the host at once, or, for indices on a device, when the host next waits
//! for the device (the CUDA kernels check indices as they read them, see `IndexCheck` in
//! common.cuh).

use crate::Dims;

/// The legal range of an op's int64 indices, and how the op words a bad one.
///
/// ```
/// use ferrograd_kernels::IndexBounds;
/// let b = IndexBounds::dim("index_select", 0, &[3, 2], &[2]);
/// assert_eq!(b.size(), 3);
/// assert_eq!(b.first_bad(&[0, 2, 3, -1], None), Some(3));
/// assert!(b.message(3).starts_with("index_select: index 3 is out of bounds for dimension 0 with size 3"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexBounds {
    /// Indices into dim `dim` of an input of shape `input` (a 0-d input counts as size
    /// 1), from an index of shape `index`.
    Dim {
        /// The op, as the user called it.
        op: &'static str,
        /// The indexed dim.
        dim: usize,
        /// The input's shape.
        input: Dims,
        /// The index tensor's shape.
        index: Dims,
    },
    /// Class targets for logits of shape `input` `[N, C, d...]`: in `0..C`.
    Classes {
        /// The op, as the user called it.
        op: &'static str,
        /// The logits' shape.
        input: Dims,
    },
}

impl IndexBounds {
    /// Indices into dim `dim` of an input of shape `input` from an index of shape `index`.
    pub fn dim(op: &'static str, dim: usize, input: &[usize], index: &[usize]) -> Self {
        IndexBounds::Dim {
            op,
            dim,
            input: Dims::from_slice(input),
            index: Dims::from_slice(index),
        }
    }

    /// The op's name.
    pub fn op(&self) -> &'static str {
        match self {
            IndexBounds::Dim { op, .. } | IndexBounds::Classes { op, .. } => op,
        }
    }

    /// Indices must lie in `0..size()`.
    pub fn size(&self) -> usize {
        match self {
            IndexBounds::Dim { dim, input, .. } => input.get(*dim).copied().unwrap_or(1),
            IndexBounds::Classes { input, .. } => input[1],
        }
    }

    /// The first value out of `0..size()` (other than `ignore`), if any.
    pub fn first_bad(&self, values: &[i64], ignore: Option<i64>) -> Option<i64> {
        let size = self.size() as i64;
        values
            .iter()
            .copied()
            .find(|&v| !(0..size).contains(&v) && Some(v) != ignore)
    }

    /// What the op says about the bad index `value`.
    pub fn message(&self, value: i64) -> String {
        match self {
            IndexBounds::Dim {
                op,
                dim,
                input,
                index,
            } => format!(
                "{op}: index {value} is out of bounds for dimension {dim} with size {} (input shape {:?}, index shape {:?})",
                self.size(),
                input.as_slice(),
                index.as_slice()
            ),
            IndexBounds::Classes { op, input } => format!(
                "{op}: target {value} is out of bounds for {} classes (input shape {:?})",
                input[1],
                input.as_slice()
            ),
        }
    }
}
