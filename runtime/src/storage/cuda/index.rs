//! Launches of the index kernels (`index.cu`): index_select, gather, scatter_add with
//! device-side bounds checks, and the im2col pair behind convolutions.

use super::launch::{Operand, address, geometry, launch, output, spread};
use super::{CudaStorage, GpuDevice};
use crate::Result;
use cudarc::driver::DeviceRepr;
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::Layout;
use ferrograd_kernels::cuda as kernels;

/// The kernels' `IndexCheck` (common.cuh): the device's report address, the launch's id and
/// the bound an index must stay under.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct IndexCheck([u64; 3]);

// SAFETY: three u64 in the field order of the CUDA struct `IndexCheck` (a pointer and two
// sizes) in common.cuh.
unsafe impl DeviceRepr for IndexCheck {}

/// Registers a bounds check of indices under `size` for the next launch on `dev`.
pub(crate) fn index_check(
    dev: &GpuDevice,
    bounds: &IndexBounds,
    size: usize,
) -> Result<IndexCheck> {
    let (report, launch) = dev.index_check(bounds)?;
    Ok(IndexCheck([report, launch, size as u64]))
}

/// `out[o, j, i] = src[o, index[j], i]` over contiguous `[outer, r, inner]`, for the `m`
/// contiguous int64 indices `index` on the device (checked against `r` as they are read).
pub(crate) fn index_select(
    (src, offset): Operand<'_>,
    [outer, r, inner]: [usize; 3],
    (index, m): (Operand<'_>, usize),
    bounds: &IndexBounds,
) -> Result<CudaStorage> {
    let dev = src.device();
    let out = output(dev, src.dtype(), outer * m * inner)?;
    if outer * m * inner == 0 {
        return Ok(out);
    }
    let check = index_check(dev, bounds, r)?;
    let (a, c, mm) = (outer as u64, inner as u64, m as u64);
    let (pi, s, o) = (
        address(Some(index)),
        src.address_of(offset),
        out.address_of(0),
    );
    launch!(dev, &kernels::INDEX_SELECT, src.dtype(), spread(outer * m * inner); a, c, mm, pi, check, s, o)?;
    dev.after_index_check()?;
    Ok(out)
}

/// Operand 0 of gather/scatter: `layout`'s strides over the index's shape with `dim`'s
/// stride zeroed (the index supplies that coordinate), and `dim`'s stride.
fn index_walk(
    layout_strides: &[usize],
    index_shape: &[usize],
    dim: usize,
    offset: usize,
) -> (Layout, u64) {
    let mut strides = ferrograd_kernels::Dims::from_slice(layout_strides);
    let dim_stride = strides[dim] as u64;
    strides[dim] = 0;
    (
        Layout::from_parts(
            ferrograd_kernels::Dims::from_slice(index_shape),
            strides,
            offset,
        ),
        dim_stride,
    )
}

/// `out[p] = src[p with p[dim] = index[p]]` for every position of `index_shape`; `index`
/// is contiguous int64 on the device, checked against `layout`'s size along `dim`.
pub(crate) fn gather(
    src: &CudaStorage,
    layout: &Layout,
    index: Operand<'_>,
    index_shape: &[usize],
    dim: usize,
    bounds: &IndexBounds,
) -> Result<CudaStorage> {
    let dev = src.device();
    let n: usize = index_shape.iter().product();
    let out = output(dev, src.dtype(), n)?;
    if n == 0 {
        return Ok(out);
    }
    let (walk, dim_stride) = index_walk(layout.strides(), index_shape, dim, layout.offset());
    let g = geometry(dev, "gather", index_shape, [&walk])?;
    let check = index_check(dev, bounds, layout.shape()[dim])?;
    let (nn, pi, s, o) = (
        n as u64,
        address(Some(index)),
        src.address_of(walk.offset()),
        out.address_of(0),
    );
    launch!(dev, &kernels::GATHER, src.dtype(), spread(n); nn, g, pi, check, dim_stride, s, o)?;
    dev.after_index_check()?;
    Ok(out)
}

/// `dst[p with p[dim] = index[p]] += src[p]` for every position of the index's shape;
/// `dst` is contiguous with `dst_shape`, `src_view` has the index's shape, `index` is
/// contiguous int64 on the device, checked against `dst_shape[dim]`.
pub(crate) fn scatter_add(
    dst: &CudaStorage,
    dst_shape: &[usize],
    index: Operand<'_>,
    bounds: &IndexBounds,
    src: &CudaStorage,
    src_view: &Layout,
    dim: usize,
) -> Result<()> {
    let shape = src_view.shape();
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let dev = dst.device();
    let contiguous = Layout::contiguous(dst_shape);
    let (walk, dim_stride) = index_walk(contiguous.strides(), shape, dim, 0);
    let g = geometry(dev, "scatter_add", shape, [&walk, src_view])?;
    let check = index_check(dev, bounds, dst_shape[dim])?;
    let (nn, pi, d, s) = (
        n as u64,
        address(Some(index)),
        dst.address_of(0),
        src.address_of(src_view.offset()),
    );
    launch!(dev, &kernels::SCATTER_ADD, dst.dtype(), spread(n); nn, g, pi, check, dim_stride, d, s)?;
    dev.after_index_check()
}

/// The kernels' `Conv2d` geometry.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvGeometry([u64; 14]);

// SAFETY: fourteen u64 in the field order of the CUDA struct `Conv2d` in index.cu.
unsafe impl DeviceRepr for ConvGeometry {}

impl ConvGeometry {
    pub(crate) fn new(g: &ferrograd_kernels::cpu::Conv2dGeometry) -> Option<Self> {
        Some(Self::with_output(g, g.output()?))
    }

    /// The geometry with an explicit output size (pooling's `ceil_mode`).
    pub(crate) fn with_output(
        g: &ferrograd_kernels::cpu::Conv2dGeometry,
        [oh, ow]: [usize; 2],
    ) -> Self {
        let v = [
            g.n,
            g.c,
            g.input[0],
            g.input[1],
            g.kernel[0],
            g.kernel[1],
            g.stride[0],
            g.stride[1],
            g.padding[0],
            g.padding[1],
            g.dilation[0],
            g.dilation[1],
            oh,
            ow,
        ];
        ConvGeometry(v.map(|x| x as u64))
    }
}

/// im2col (`unfold2d`) or its adjoint (`fold2d`) of the contiguous elements at `offset`.
pub(crate) fn conv_columns(
    fold: bool,
    src: &CudaStorage,
    offset: usize,
    g: &ferrograd_kernels::cpu::Conv2dGeometry,
) -> Result<CudaStorage> {
    let dev = src.device();
    let [oh, ow] = g.output().unwrap_or([0, 0]);
    let (kernel, len) = if fold {
        (&kernels::FOLD2D, g.n * g.c * g.input[0] * g.input[1])
    } else {
        (
            &kernels::UNFOLD2D,
            g.c * g.kernel[0] * g.kernel[1] * g.n * oh * ow,
        )
    };
    let out = output(dev, src.dtype(), len)?;
    let Some(geometry) = ConvGeometry::new(g) else {
        return Ok(out);
    };
    if len == 0 {
        return Ok(out);
    }
    let (s, o) = (src.address_of(offset), out.address_of(0));
    launch!(dev, kernel, src.dtype(), spread(len); geometry, s, o)?;
    Ok(out)
}
