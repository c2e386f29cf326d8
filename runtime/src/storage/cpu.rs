//! The CPU backend: each op family of the boundary as one function over [`CpuStorage`],
//! dispatching on the dtype once and running the generic kernels of
//! `ferrograd_kernels::cpu`. Also the host fallback of the CUDA backend, which runs these
//! on a host copy. Outputs are new contiguous buffers unless the name ends in `_inplace`.

use super::op::{BinaryFloatOp, BinaryOp, Cmp, UnaryOp};
use ferrograd_kernels::cpu::{
    CpuStorage, binary_inplace as binary_inplace_map, binary_map, cast as cast_map, fill_strided,
    ternary_map, unary_inplace as unary_inplace_map, unary_map,
};
use ferrograd_kernels::{
    DType, Element, Layout, NumElement, with_dtype, with_float_dtype, with_num_dtype,
};

/// `op(x)` over the view `layout` of float storage `src`.
pub(crate) fn unary<K: UnaryOp>(src: &CpuStorage, layout: &Layout, op: &K) -> CpuStorage {
    with_float_dtype!(src.dtype(), T => T::into_storage(unary_map(src.typed::<T>(), layout,
        |x: T| T::from_acc(op.apply(x.to_acc())))),
        else unreachable!("unary ops take float storage, got {:?}", src.dtype()))
}

/// `x = op(x)` through the view `layout` of float storage `dst`.
pub(crate) fn unary_inplace<K: UnaryOp>(dst: &mut CpuStorage, layout: &Layout, op: &K) {
    with_float_dtype!(dst.dtype(), T => unary_inplace_map(dst.typed_mut::<T>(), layout,
        |x: T| T::from_acc(op.apply(x.to_acc()))),
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
    with_float_dtype!(a.dtype(), T => T::into_storage(binary_map(a.typed::<T>(), la, b.typed::<T>(), lb,
        |x: T, y: T| T::from_acc(op.apply(x.to_acc(), y.to_acc())))),
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
