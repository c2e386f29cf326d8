//! Indexing kernels. Indices are validated by the runtime (which names the op in its
//! panic); slice indexing here still bounds-checks, so a bad index can never be UB.

use super::pool::HostBuffer;
use crate::{Element, Layout, NumElement};

/// Picks rows `index` along the middle dim of a contiguous `[outer, r, inner]` buffer.
///
/// ```
/// use ferrograd_kernels::cpu::index_select;
/// let x = [1i64, 2, 3, 4, 5, 6]; // [3, 2]
/// assert_eq!(index_select(&x, 1, 3, 2, &[2, 0]), vec![5, 6, 1, 2]);
/// ```
pub fn index_select<T: Element>(
    src: &[T],
    outer: usize,
    r: usize,
    inner: usize,
    index: &[i64],
) -> HostBuffer<T> {
    let mut out = HostBuffer::<T>::new_uninit(outer * index.len() * inner);
    if inner > 0 {
        for (dst, (o, &i)) in out
            .chunks_exact_mut(inner)
            .zip((0..outer).flat_map(|o| index.iter().map(move |i| (o, i))))
        {
            let start = (o * r + i as usize) * inner;
            for (d, &s) in dst.iter_mut().zip(&src[start..start + inner]) {
                d.write(s);
            }
        }
    }
    // SAFETY: the chunks of `inner` slots tile the buffer (outer * index.len() of them)
    // and each was written from a source row of the same length.
    unsafe { out.assume_init() }
}

/// `out[p] = src[p with p[dim] = index[p]]` for every position `p` of `index_shape`.
/// `src_layout` is the source view; `index` is contiguous.
///
/// ```
/// use ferrograd_kernels::{cpu::gather, Layout};
/// let src = [1i64, 2, 3, 4]; // [[1, 2], [3, 4]]
/// let out = gather(&src, &Layout::contiguous(&[2, 2]), &[0, 0, 1, 0], &[2, 2], 1);
/// assert_eq!(out, vec![1, 1, 4, 3]);
/// ```
pub fn gather<T: Element>(
    src: &[T],
    src_layout: &Layout,
    index: &[i64],
    index_shape: &[usize],
    dim: usize,
) -> HostBuffer<T> {
    let dim_stride = src_layout.strides()[dim];
    let mut strides = crate::Dims::from_slice(src_layout.strides());
    strides[dim] = 0;
    let walk = Layout::from_parts(
        crate::Dims::from_slice(index_shape),
        strides,
        src_layout.offset(),
    );
    walk.offsets()
        .zip(index)
        .map(|(base, &i)| src[base + i as usize * dim_stride])
        .collect()
}

/// `dst[p with p[dim] = index[p]] += src[p]` for every position `p` of the index's shape.
/// `dst` is contiguous with shape `dst_shape`; `src_layout` has the index's shape.
///
/// ```
/// use ferrograd_kernels::{cpu::scatter_add, Layout};
/// let mut dst = vec![0.0f32; 3];
/// scatter_add(&mut dst, &[3], &[0, 2, 0], &[1.0, 2.0, 3.0], &Layout::contiguous(&[3]), 0);
/// assert_eq!(dst, vec![4.0, 0.0, 2.0]);
/// ```
pub fn scatter_add<T: NumElement>(
    dst: &mut [T],
    dst_shape: &[usize],
    index: &[i64],
    src: &[T],
    src_layout: &Layout,
    dim: usize,
) {
    let dst_layout = Layout::contiguous(dst_shape);
    let dim_stride = dst_layout.strides()[dim];
    let mut strides = crate::Dims::from_slice(dst_layout.strides());
    strides[dim] = 0;
    let walk = Layout::from_parts(crate::Dims::from_slice(src_layout.shape()), strides, 0);
    for ((base, &i), s) in walk.offsets().zip(index).zip(src_layout.offsets()) {
        let d = &mut dst[base + i as usize * dim_stride];
        *d = *d + src[s];
    }
}

/// Concatenation along the middle dim: contiguous pieces `[outer, len_i, inner]` (each
/// given with its `len_i`) into a new `[outer, Σ len_i, inner]` buffer, every element
/// written once (no zero fill first), outer rows in parallel when large.
///
/// ```
/// use ferrograd_kernels::cpu::cat_dim;
/// // [2, 1] and [2, 2] along dim 1
/// let out = cat_dim(&[(&[1.0f32, 2.0][..], 1), (&[3.0, 4.0, 5.0, 6.0][..], 2)], 2, 1);
/// assert_eq!(out, vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
/// ```
pub fn cat_dim<T: Element>(pieces: &[(&[T], usize)], outer: usize, inner: usize) -> HostBuffer<T> {
    let total: usize = pieces.iter().map(|&(_, len)| len).sum();
    for &(src, len) in pieces {
        assert_eq!(
            src.len(),
            outer * len * inner,
            "cat_dim: a piece of {len} along the dim has {} elements, not {outer} x {len} x {inner}",
            src.len()
        );
    }
    let mut out = HostBuffer::<T>::new_uninit(outer * total * inner);
    super::reduce::for_each_outer(&mut out, outer, total * inner, |o, dst| {
        let mut at = 0;
        for &(src, len) in pieces {
            let n = len * inner;
            for (d, &v) in dst[at..at + n].iter_mut().zip(&src[o * n..(o + 1) * n]) {
                d.write(v);
            }
            at += n;
        }
    });
    // SAFETY: `for_each_outer` hands each of the `outer` rows of `Σ len_i · inner` slots to
    // the body once (none when the output is empty), and the pieces' lengths add up to the
    // row, so every slot was written.
    unsafe { out.assume_init() }
}
