//! The CPU backend: each op family of the boundary as one function over [`CpuStorage`],
//! dispatching on the dtype once and running the generic kernels of
//! `ferrograd_kernels::cpu`. Also the host fallback of the CUDA backend, which runs these
//! on a host copy. Outputs are new contiguous buffers unless the name ends in `_inplace`.

use super::op::{BinaryFloatOp, BinaryOp, Cmp, IntMap, ReduceOp, RowOp, UnaryOp};
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cpu::{
    Conv2dGeometry, CpuStorage, HostBuffer, arg_reduce_dim, binary_inplace as binary_inplace_map,
    binary_map, cast as cast_map, cumsum_dim, fill_strided, fold2d, gather as gather_map,
    index_select as index_select_map, log_softmax_rows, matmul as matmul_map, reduce_dim,
    scatter_add as scatter_add_map, simd_has_fma, softmax_rows, sum_dim, ternary_map,
    unary_inplace as unary_inplace_map, unary_map, unfold2d,
};
use ferrograd_kernels::{
    DType, Element, Layout, NumElement, with_dtype, with_float_dtype, with_num_dtype,
};

/// `op(x)` over the view `layout` of float storage `src`.
pub(crate) fn unary<K: UnaryOp>(src: &CpuStorage, layout: &Layout, op: &K) -> CpuStorage {
    // The op by value in the closure: read through a reference, its parameters would be
    // reloaded per element (the output might alias them), and the loop stay scalar.
    let op = *op;
    if K::FMA && simd_has_fma() {
        return with_float_dtype!(src.dtype(), T => T::into_storage(unary_map(src.typed::<T>(), layout,
            #[inline(always)] move |x: T| T::from_acc(op.apply_fma::<_, true>(x.to_acc())))),
            else unreachable!("unary ops take float storage, got {:?}", src.dtype()));
    }
    with_float_dtype!(src.dtype(), T => T::into_storage(unary_map(src.typed::<T>(), layout,
        #[inline(always)] move |x: T| T::from_acc(op.apply(x.to_acc())))),
        else unreachable!("unary ops take float storage, got {:?}", src.dtype()))
}

/// `op(x)` through f64 over the view `layout` (integer storage).
pub(crate) fn int_map(src: &CpuStorage, layout: &Layout, op: IntMap) -> CpuStorage {
    with_dtype!(src.dtype(), T => T::into_storage(unary_map(src.typed::<T>(), layout, |x: T| T::from_f64(op.apply(x.to_f64())))))
}

/// `x = op(x)` through f64, in place through the view `layout` (integer storage).
pub(crate) fn int_map_inplace(dst: &mut CpuStorage, layout: &Layout, op: IntMap) {
    with_dtype!(dst.dtype(), T => unary_inplace_map(dst.typed_mut::<T>(), layout, |x: T| T::from_f64(op.apply(x.to_f64()))))
}

/// `x = op(x)` through the view `layout` of float storage `dst`.
pub(crate) fn unary_inplace<K: UnaryOp>(dst: &mut CpuStorage, layout: &Layout, op: &K) {
    let op = *op;
    with_float_dtype!(dst.dtype(), T => unary_inplace_map(dst.typed_mut::<T>(), layout,
        move |x: T| T::from_acc(op.apply(x.to_acc()))),
        else unreachable!("unary ops take float storage, got {:?}", dst.dtype()))
}

/// `op(a, b)` over the common shape of the views `la` and `lb` (same numeric dtype).
pub(crate) fn binary<K: BinaryOp>(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    op: &K,
) -> CpuStorage {
    with_num_dtype!(a.dtype(), T => T::into_storage(binary_map(a.typed::<T>(), la, b.typed::<T>(), lb,
        |x: T, y: T| T::from_acc(op.apply(x.to_acc(), y.to_acc())))),
        else unreachable!("arithmetic on bool storage is rejected by the op"))
}

/// `op(a, b)` for float storages.
pub(crate) fn binary_float<K: BinaryFloatOp>(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    op: &K,
) -> CpuStorage {
    // Forced inline so that the op's body is compiled into each CPU-level copy of the loop
    // (a large closure called from several places stays out of line, at baseline width).
    if K::FMA && simd_has_fma() {
        return with_float_dtype!(a.dtype(), T => T::into_storage(binary_map(a.typed::<T>(), la, b.typed::<T>(), lb,
            #[inline(always)] |x: T, y: T| T::from_acc(op.apply_fma::<_, true>(x.to_acc(), y.to_acc())))),
            else unreachable!("float ops take float storage, got {:?}", a.dtype()));
    }
    with_float_dtype!(a.dtype(), T => T::into_storage(binary_map(a.typed::<T>(), la, b.typed::<T>(), lb,
        #[inline(always)] |x: T, y: T| T::from_acc(op.apply(x.to_acc(), y.to_acc())))),
        else unreachable!("float ops take float storage, got {:?}", a.dtype()))
}

/// `dst = op(dst, src)` through the region `ldst` of `dst` (`lsrc` broadcast to it; two
/// different buffers).
pub(crate) fn binary_inplace<K: BinaryOp>(
    dst: &mut CpuStorage,
    ldst: &Layout,
    src: &CpuStorage,
    lsrc: &Layout,
    op: &K,
) {
    with_num_dtype!(dst.dtype(), T => binary_inplace_map(dst.typed_mut::<T>(), ldst, src.typed::<T>(), lsrc,
        |x: T, y: T| T::from_acc(op.apply(x.to_acc(), y.to_acc()))),
        else unreachable!("arithmetic on bool storage is rejected by the op"))
}

/// `dst[region] = src` (any dtype; `lsrc` broadcast to the region; another buffer).
pub(crate) fn assign(dst: &mut CpuStorage, region: &Layout, src: &CpuStorage, lsrc: &Layout) {
    with_dtype!(dst.dtype(), T => binary_inplace_map(dst.typed_mut::<T>(), region, src.typed::<T>(), lsrc, |_, v: T| v))
}

/// `a cmp b` to bool over the common shape of the views.
pub(crate) fn compare(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    cmp: Cmp,
) -> CpuStorage {
    with_dtype!(a.dtype(), T => bool::into_storage(binary_map(a.typed::<T>(), la, b.typed::<T>(), lb,
        |x: T, y: T| cmp.eval(x, y))))
}

/// `a && b` of bool storages.
pub(crate) fn logical_and(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> CpuStorage {
    bool::into_storage(binary_map(
        a.typed::<bool>(),
        la,
        b.typed::<bool>(),
        lb,
        |x, y| x && y,
    ))
}

/// `cond ? a : b` over the common shape of the views (`cond` bool).
pub(crate) fn where_cond(
    (c, lc): (&CpuStorage, &Layout),
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
) -> CpuStorage {
    with_dtype!(a.dtype(), T => T::into_storage(ternary_map(c.typed::<bool>(), lc, a.typed::<T>(), la, b.typed::<T>(), lb,
        |c: bool, x: T, y: T| if c { x } else { y })))
}

/// The view `layout` as a new contiguous buffer of `dtype` (a copy when the dtypes agree).
pub(crate) fn cast(src: &CpuStorage, layout: &Layout, dtype: DType) -> CpuStorage {
    if dtype == src.dtype() {
        return with_dtype!(dtype, T => T::into_storage(unary_map(src.typed::<T>(), layout, |x| x)));
    }
    with_dtype!(src.dtype(), T => with_dtype!(dtype, U => U::into_storage(cast_map::<T, U>(src.typed::<T>(), layout))))
}

/// Writes `value` (converted as `from_f64`) to every element of the view `layout`.
pub(crate) fn fill(dst: &mut CpuStorage, layout: &Layout, value: f64) {
    with_dtype!(dst.dtype(), T => fill_strided(dst.typed_mut::<T>(), layout, T::from_f64(value)))
}

/// The contiguous elements of `layout` (checked by the caller).
fn contiguous<'a, T: Element>(src: &'a CpuStorage, layout: &Layout) -> &'a [T] {
    let range = layout
        .contiguous_range()
        .expect("the op made its input contiguous");
    &src.typed::<T>()[range]
}

/// Sum or product of the middle dim of contiguous `[outer, r, inner]` (numeric dtypes).
pub(crate) fn reduce(
    src: &CpuStorage,
    layout: &Layout,
    op: ReduceOp,
    [outer, r, inner]: [usize; 3],
) -> CpuStorage {
    with_num_dtype!(src.dtype(), T => {
        let x = contiguous::<T>(src, layout);
        T::into_storage(match op {
            ReduceOp::Sum => sum_dim(x, outer, r, inner),
            ReduceOp::Prod => reduce_dim(x, outer, r, inner, <T as NumElement>::Acc::ONE,
                |a, v: T| a * v.to_acc(), T::from_acc),
        })
    }, else unreachable!("bool storage is converted to int64 before reducing"))
}

/// Max (`is_max`) or min of the middle dim of contiguous `[outer, r, inner]`, with the
/// index of the first occurrence (NaN wins): values and int64 indices.
// One comparison for every dtype, bool (false < true) included.
#[allow(clippy::bool_comparison)]
pub(crate) fn arg_reduce(
    src: &CpuStorage,
    layout: &Layout,
    is_max: bool,
    [outer, r, inner]: [usize; 3],
) -> (CpuStorage, CpuStorage) {
    with_dtype!(src.dtype(), T => {
        let x = contiguous::<T>(src, layout);
        let (v, i) = if is_max {
            arg_reduce_dim(x, outer, r, inner, |c: T, b: T| c > b)
        } else {
            arg_reduce_dim(x, outer, r, inner, |c: T, b: T| c < b)
        };
        (T::into_storage(v), CpuStorage::I64(i))
    })
}

/// Softmax or log-softmax of each row of contiguous float `[rows, len]`.
pub(crate) fn rows(
    src: &CpuStorage,
    layout: &Layout,
    op: RowOp,
    rows: usize,
    len: usize,
) -> CpuStorage {
    with_float_dtype!(src.dtype(), T => {
        let x = contiguous::<T>(src, layout);
        T::into_storage(match op {
            RowOp::Softmax => softmax_rows(x, rows, len),
            RowOp::LogSoftmax => log_softmax_rows(x, rows, len),
        })
    }, else unreachable!("softmax takes float storage"))
}

/// Contiguous pieces `[outer, sizes[i], inner]` (one dtype) concatenated along the middle
/// dim.
pub(crate) fn cat(
    pieces: &[(&CpuStorage, &Layout)],
    sizes: &[usize],
    outer: usize,
    inner: usize,
) -> CpuStorage {
    let dtype = pieces[0].0.dtype();
    with_dtype!(dtype, T => {
        let slices: Vec<(&[T], usize)> = pieces
            .iter()
            .zip(sizes)
            .map(|(&(s, layout), &len)| {
                // An empty piece has no range in its buffer.
                let values = if outer * len * inner == 0 { &[][..] } else { contiguous::<T>(s, layout) };
                (values, len)
            })
            .collect();
        T::into_storage(ferrograd_kernels::cpu::cat_dim(&slices, outer, inner))
    })
}

/// `op`'s input gradient of each row of contiguous float `[rows, len]`, from the output
/// `y` and its gradient `g` (same dtype).
pub(crate) fn rows_backward(
    y: &CpuStorage,
    y_layout: &Layout,
    g: &CpuStorage,
    g_layout: &Layout,
    op: RowOp,
    rows: usize,
    len: usize,
) -> CpuStorage {
    with_float_dtype!(y.dtype(), T => {
        T::into_storage(ferrograd_kernels::cpu::softmax_backward_rows(
            contiguous::<T>(y, y_layout),
            contiguous::<T>(g, g_layout),
            rows,
            len,
            matches!(op, RowOp::LogSoftmax),
        ))
    }, else unreachable!("softmax takes float storage"))
}

/// The indices a stable sort or running extreme picks along the middle dim of
/// `[outer, r, inner]` (int64).
pub(crate) fn dim_indices(
    src: &CpuStorage,
    layout: &Layout,
    dims: [usize; 3],
    op: ferrograd_kernels::cpu::DimIndexOp,
) -> CpuStorage {
    with_dtype!(src.dtype(), T => CpuStorage::I64(ferrograd_kernels::cpu::dim_indices(
        contiguous::<T>(src, layout),
        dims,
        op,
    )))
}

/// Inclusive prefix sums along the middle dim of contiguous `[outer, r, inner]`.
pub(crate) fn cumsum(
    src: &CpuStorage,
    layout: &Layout,
    [outer, r, inner]: [usize; 3],
) -> CpuStorage {
    with_num_dtype!(src.dtype(), T => T::into_storage(cumsum_dim(contiguous::<T>(src, layout), outer, r, inner)),
        else unreachable!("bool storage is converted to int64 before cumsum"))
}

/// The int64 values of the view `layout` of `index`, panicking with `bounds`' message at
/// the first one out of range (except `ignore`).
#[track_caller]
pub(crate) fn index_values(
    index: &CpuStorage,
    layout: &Layout,
    bounds: &IndexBounds,
    ignore: Option<i64>,
) -> HostBuffer<i64> {
    let values = unary_map(index.typed::<i64>(), layout, |v| v);
    if let Some(bad) = bounds.first_bad(&values, ignore) {
        panic!("{}", bounds.message(bad));
    }
    values
}

/// `out[o, j, i] = src[o, index[j], i]` over contiguous `[outer, r, inner]`.
#[track_caller]
pub(crate) fn index_select(
    (src, layout): (&CpuStorage, &Layout),
    [outer, r, inner]: [usize; 3],
    (index, index_layout): (&CpuStorage, &Layout),
    bounds: &IndexBounds,
) -> CpuStorage {
    let idx = index_values(index, index_layout, bounds, None);
    with_dtype!(src.dtype(), T => T::into_storage(index_select_map(contiguous::<T>(src, layout), outer, r, inner, &idx)))
}

/// `torch.gather` of the view `layout` along `dim` at `index` (of its own shape).
#[track_caller]
pub(crate) fn gather(
    (src, layout): (&CpuStorage, &Layout),
    (index, index_layout): (&CpuStorage, &Layout),
    bounds: &IndexBounds,
    dim: usize,
) -> CpuStorage {
    let idx = index_values(index, index_layout, bounds, None);
    with_dtype!(src.dtype(), T => T::into_storage(gather_map(src.typed::<T>(), layout, &idx, index_layout.shape(), dim)))
}

/// `dst[index] += src` along `dim` (`dst` contiguous of `dst_shape`, numeric).
#[track_caller]
pub(crate) fn scatter_add(
    (dst, dst_shape): (&mut CpuStorage, &[usize]),
    (index, index_layout): (&CpuStorage, &Layout),
    bounds: &IndexBounds,
    (src, src_view): (&CpuStorage, &Layout),
    dim: usize,
) {
    let idx = index_values(index, index_layout, bounds, None);
    with_num_dtype!(src.dtype(), T => scatter_add_map(dst.typed_mut::<T>(), dst_shape, &idx, src.typed::<T>(), src_view, dim),
        else unreachable!("bool rejected by scatter_add"))
}

/// im2col (`fold` false) of contiguous `[n, c, h, w]`, or its adjoint of the columns.
pub(crate) fn conv_columns(
    src: &CpuStorage,
    layout: &Layout,
    fold: bool,
    g: &Conv2dGeometry,
) -> CpuStorage {
    with_num_dtype!(src.dtype(), T => {
        let x = contiguous::<T>(src, layout);
        T::into_storage(if fold { fold2d(x, g) } else { unfold2d(x, g) })
    }, else unreachable!("bool rejected by unfold"))
}

/// `[batch, m, k] x [batch, k, n]` of any strides.
pub(crate) fn matmul(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> CpuStorage {
    with_num_dtype!(a.dtype(), T => T::into_storage(matmul_map(a.typed::<T>(), la, b.typed::<T>(), lb)),
        else unreachable!("bool rejected by matmul"))
}
