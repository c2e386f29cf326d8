//! Kernel launches on CUDA storage: the NVRTC-compiled kernels of
//! `ferrograd_kernels::cuda` and cuBLAS for matrix products. Every function queues work
//! on the device's stream and returns without waiting; outputs are new contiguous
//! buffers unless the name ends in `_inplace`. Launch failures come back as `Err`.

use super::{CudaStorage, GpuDevice};
use crate::{Error, Result};
use cudarc::cublas::{CudaBlas, sys as blas};
use cudarc::driver::{DeviceRepr, LaunchConfig};
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel, ELEMENTWISE};
use ferrograd_kernels::{DType, Layout, coalesce};
use std::sync::Arc;

/// The most dims an elementwise launch takes after merging contiguous ones.
pub(crate) const MAX_DIMS: usize = 6;

/// The kernels' `Geometry`: an index space of at most [`MAX_DIMS`] dims and the strides
/// of up to three operands in it, passed by value as a kernel parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Geometry {
    shape: [u64; MAX_DIMS],
    strides: [[u64; MAX_DIMS]; 3],
    rank: u32,
    contiguous: u32,
}

// SAFETY: plain data, `repr(C)` with the same fields in the same order and of the same
// sizes as the CUDA struct `Geometry` in common.cuh (u64 = usize there, u32 = unsigned int).
unsafe impl DeviceRepr for Geometry {}

impl Geometry {
    /// The index space `shape` walked by operands with these layouts (each already
    /// broadcast to `shape`), with contiguous dims merged. `None` when more than
    /// [`MAX_DIMS`] dims remain.
    pub(crate) fn new<const K: usize>(shape: &[usize], layouts: [&Layout; K]) -> Option<Geometry> {
        debug_assert!(K <= 3);
        let strides: [&[usize]; K] = std::array::from_fn(|k| layouts[k].strides());
        let (dims, merged) = coalesce(shape, strides);
        if dims.len() > MAX_DIMS {
            return None;
        }
        let mut g = Geometry {
            rank: dims.len() as u32,
            ..Default::default()
        };
        for (d, &size) in dims.iter().enumerate() {
            g.shape[d] = size as u64;
        }
        for (k, s) in merged.iter().enumerate() {
            for (d, &stride) in s.iter().enumerate() {
                g.strides[k][d] = stride as u64;
            }
            let contiguous = dims.len() == 1 && (s[0] == 1 || dims[0] == 1);
            if contiguous {
                g.contiguous |= 1 << k;
            }
        }
        Some(g)
    }
}

/// Enough 256-thread blocks for `n` elements (grid-stride loops cover the rest).
pub(crate) fn spread(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 1 << 16) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per row, its size a power of two up to 1024 fitted to the row, with
/// `shared_per_thread` bytes of shared memory per thread.
pub(crate) fn per_row(rows: usize, len: usize, shared_per_thread: usize) -> LaunchConfig {
    let threads = len.next_power_of_two().clamp(32, 1024);
    LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: (threads * shared_per_thread) as u32,
    }
}

/// The size of the accumulator type of `dtype` in the kernels (f32 for half types).
pub(crate) fn acc_size(dtype: DType) -> usize {
    if dtype.is_half() {
        4
    } else {
        dtype.size_in_bytes()
    }
}

/// Launches `dev`'s entry point `symbol` of `module` with the given arguments (locals,
/// so that their addresses stay valid until the launch has read them).
macro_rules! launch_symbol {
    ($dev:expr, $module:expr, $symbol:expr, $cfg:expr; $($arg:ident),* $(,)?) => {{
        let dev: &$crate::storage::cuda::GpuDevice = $dev;
        let function = dev.function($module, $symbol)?;
        let mut builder = dev.stream().launch_builder(&function);
        $( cudarc::driver::PushKernelArg::arg(&mut builder, &$arg); )*
        // SAFETY: each kernel's parameter list is the argument list its caller passes here
        // (device addresses as u64, sizes as u64, `Geometry` by value), checked against the
        // `extern "C"` signatures in kernels/src/cuda; every address points into a live block
        // of the device's allocator large enough for the index space, and blocks are reused
        // only by later work on the same stream.
        unsafe { builder.launch($cfg) }
            .map(|_| ())
            .map_err($crate::storage::cuda::device_err(dev.ordinal()))
    }};
}
pub(crate) use launch_symbol;

/// Launches the instantiation for `dtype` of the kernel family `kernel` (a
/// [`CudaKernel`] constant) with the given arguments.
macro_rules! launch {
    ($dev:expr, $kernel:expr, $dtype:expr, $cfg:expr; $($arg:ident),* $(,)?) => {{
        let kernel: &ferrograd_kernels::cuda::CudaKernel = $kernel;
        let symbol = $crate::storage::cuda::launch::symbol(kernel, $dtype, $dev)?;
        $crate::storage::cuda::launch::launch_symbol!($dev, kernel.module(), symbol, $cfg; $($arg),*)
    }};
}
pub(crate) use launch;

/// `kernel`'s entry point for `dtype`, or an error when the family has none (callers
/// check [`CudaKernel::symbol`] before choosing the device path, so this is a bug).
pub(crate) fn symbol(kernel: &CudaKernel, dtype: DType, dev: &GpuDevice) -> Result<&'static str> {
    kernel.symbol(dtype).ok_or_else(|| Error::CudaDevice {
        ordinal: dev.ordinal(),
        reason: format!("no `{}` kernel for {dtype:?}", kernel.base()),
    })
}

/// A contiguous output of `len` elements, or an empty one without a launch.
pub(crate) fn output(dev: &Arc<GpuDevice>, dtype: DType, len: usize) -> Result<CudaStorage> {
    dev.alloc(dtype, len)
}

/// The launch geometry of `shape` over `layouts`, or an error naming `op` when too many
/// dims remain.
fn geometry<const K: usize>(
    dev: &GpuDevice,
    op: &str,
    shape: &[usize],
    layouts: [&Layout; K],
) -> Result<Geometry> {
    Geometry::new(shape, layouts).ok_or_else(|| too_many_dims(op, shape, dev))
}

/// For an op writing a new contiguous output of `dtype` over `shape`: the device, the
/// output, and the geometry (`None` for an empty output: nothing to launch).
fn prepare<'a, const K: usize>(
    src: &'a CudaStorage,
    dtype: DType,
    op: &str,
    shape: &[usize],
    layouts: [&Layout; K],
) -> Result<(&'a Arc<GpuDevice>, CudaStorage, Option<Geometry>)> {
    let dev = src.device();
    let n = shape.iter().product();
    let out = output(dev, dtype, n)?;
    let g = if n == 0 {
        None
    } else {
        Some(geometry(dev, op, shape, layouts)?)
    };
    Ok((dev, out, g))
}

fn too_many_dims(op: &str, shape: &[usize], dev: &GpuDevice) -> Error {
    Error::CudaDevice {
        ordinal: dev.ordinal(),
        reason: format!(
            "{op}: {} dims remain after merging contiguous ones (shape {shape:?}); the CUDA kernels take at most {MAX_DIMS}",
            shape.len()
        ),
    }
}

/// `out = f(src)` for a unary kernel (`exp`, `affine`, ...) with its two scalar
/// parameters; float dtypes.
pub(crate) fn unary(
    kernel: &CudaKernel,
    src: &CudaStorage,
    layout: &Layout,
    p0: f64,
    p1: f64,
) -> Result<CudaStorage> {
    let (dev, out, g) = prepare(src, src.dtype(), kernel.base(), layout.shape(), [layout])?;
    let Some(g) = g else { return Ok(out) };
    let n = layout.numel();
    let (nn, a, o) = (n as u64, src.address_of(layout.offset()), out.address_of(0));
    launch!(dev, kernel, src.dtype(), spread(n); nn, g, a, o, p0, p1)?;
    Ok(out)
}

/// `dst = f(dst)` in place through `layout` (`kernel` an `_INPLACE` family).
pub(crate) fn unary_inplace(
    kernel: &CudaKernel,
    dst: &CudaStorage,
    layout: &Layout,
    p0: f64,
    p1: f64,
) -> Result<()> {
    let n = layout.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = dst.device();
    let g = geometry(dev, kernel.base(), layout.shape(), [layout])?;
    let (nn, d) = (n as u64, dst.address_of(layout.offset()));
    launch!(dev, kernel, dst.dtype(), spread(n); nn, g, d, p0, p1)
}

/// `out = a op (alpha * b)` over `la`'s shape (`lb` already broadcast to it); `compare`
/// kernels produce bool and ignore `alpha`.
pub(crate) fn binary(
    kernel: &CudaKernel,
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
    alpha: f64,
    out_dtype: DType,
) -> Result<CudaStorage> {
    let (dev, out, g) = prepare(a, out_dtype, kernel.base(), la.shape(), [la, lb])?;
    let Some(g) = g else { return Ok(out) };
    let n = la.numel();
    let (nn, pa, pb, o) = (
        n as u64,
        a.address_of(la.offset()),
        b.address_of(lb.offset()),
        out.address_of(0),
    );
    launch!(dev, kernel, a.dtype(), spread(n); nn, g, pa, pb, o, alpha)?;
    Ok(out)
}

/// `dst = dst op (alpha * src)` in place through `ldst` (`src`'s layout broadcast to it;
/// `src` is another buffer; `kernel` an `_INPLACE` family). `ASSIGN_INPLACE` copies.
pub(crate) fn binary_inplace(
    kernel: &CudaKernel,
    dst: &CudaStorage,
    ldst: &Layout,
    src: &CudaStorage,
    lsrc: &Layout,
    alpha: f64,
) -> Result<()> {
    let n = ldst.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = dst.device();
    let g = geometry(dev, kernel.base(), ldst.shape(), [ldst, lsrc])?;
    let (nn, d, s) = (
        n as u64,
        dst.address_of(ldst.offset()),
        src.address_of(lsrc.offset()),
    );
    launch!(dev, kernel, dst.dtype(), spread(n); nn, g, d, s, alpha)
}

/// `out = cond ? a : b` over `lc.shape()`.
pub(crate) fn where_(
    c: &CudaStorage,
    lc: &Layout,
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
) -> Result<CudaStorage> {
    let (dev, out, g) = prepare(a, a.dtype(), "where", lc.shape(), [lc, la, lb])?;
    let Some(g) = g else { return Ok(out) };
    let n = lc.numel();
    let (nn, pc, pa, pb, o) = (
        n as u64,
        c.address_of(lc.offset()),
        a.address_of(la.offset()),
        b.address_of(lb.offset()),
        out.address_of(0),
    );
    launch!(dev, &kernels::WHERE, a.dtype(), spread(n); nn, g, pc, pa, pb, o)?;
    Ok(out)
}

/// The view `layout` of `src` as a new contiguous buffer of `dtype` (a copy when the
/// dtypes agree, else the CPU's conversion).
pub(crate) fn cast(src: &CudaStorage, layout: &Layout, dtype: DType) -> Result<CudaStorage> {
    let (dev, out, g) = prepare(src, dtype, "cast", layout.shape(), [layout])?;
    let Some(g) = g else { return Ok(out) };
    let n = layout.numel();
    let (nn, s, o) = (n as u64, src.address_of(layout.offset()), out.address_of(0));
    if dtype == src.dtype() {
        launch!(dev, &kernels::COPY, dtype, spread(n); nn, g, s, o)?;
    } else {
        let symbol = kernels::cast_symbol(src.dtype(), dtype);
        launch_symbol!(dev, &ELEMENTWISE, symbol, spread(n); nn, g, s, o)?;
    }
    Ok(out)
}

/// Writes `value` (converted as `from_f64`) to every element of the view `layout`.
pub(crate) fn fill(dst: &CudaStorage, layout: &Layout, value: f64) -> Result<()> {
    let n = layout.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = dst.device();
    let g = geometry(dev, "fill", layout.shape(), [layout])?;
    let (nn, d) = (n as u64, dst.address_of(layout.offset()));
    launch!(dev, &kernels::FILL, dst.dtype(), spread(n); nn, g, d, value)
}

/// A new buffer of `len` elements all equal to `value`.
pub(crate) fn full(
    dev: &Arc<GpuDevice>,
    dtype: DType,
    len: usize,
    value: f64,
) -> Result<CudaStorage> {
    let out = output(dev, dtype, len)?;
    fill(&out, &Layout::contiguous(&[len]), value)?;
    Ok(out)
}

/// Reduces the middle dim of the contiguous `[outer, r, inner]` elements starting at
/// `offset` with the kernel pair `(rows, cols)` (`SUM_ROWS`/`SUM_COLS`, ...): `[outer,
/// inner]` results.
pub(crate) fn reduce(
    (rows_kernel, cols_kernel): (&CudaKernel, &CudaKernel),
    src: &CudaStorage,
    offset: usize,
    [outer, r, inner]: [usize; 3],
) -> Result<CudaStorage> {
    let dev = src.device();
    let dtype = src.dtype();
    let out = output(dev, dtype, outer * inner)?;
    if outer * inner == 0 {
        return Ok(out);
    }
    let (s, o) = (src.address_of(offset), out.address_of(0));
    if inner == 1 {
        let len = r as u64;
        launch!(dev, rows_kernel, dtype, per_row(outer, r, acc_size(dtype)); len, s, o)?;
    } else {
        let (a, b, c) = (outer as u64, r as u64, inner as u64);
        launch!(dev, cols_kernel, dtype, spread(outer * inner); a, b, c, s, o)?;
    }
    Ok(out)
}

/// Max (`is_max`) or min of the middle dim of contiguous `[outer, r, inner]` (r ≥ 1), with
/// the index of the first occurrence (the first NaN wins): values and i64 indices.
pub(crate) fn arg_reduce(
    is_max: bool,
    src: &CudaStorage,
    offset: usize,
    [outer, r, inner]: [usize; 3],
) -> Result<(CudaStorage, CudaStorage)> {
    let dev = src.device();
    let dtype = src.dtype();
    let values = output(dev, dtype, outer * inner)?;
    let indices = output(dev, DType::I64, outer * inner)?;
    if outer * inner == 0 {
        return Ok((values, indices));
    }
    let (rows_kernel, cols_kernel) = if is_max {
        (&kernels::ARGMAX_ROWS, &kernels::ARGMAX_COLS)
    } else {
        (&kernels::ARGMIN_ROWS, &kernels::ARGMIN_COLS)
    };
    let (s, v, i) = (
        src.address_of(offset),
        values.address_of(0),
        indices.address_of(0),
    );
    if inner == 1 {
        let len = r as u64;
        // values, 8-byte alignment padding, then the indices
        let mut cfg = per_row(outer, r, acc_size(dtype) + 8);
        cfg.shared_mem_bytes += 8;
        launch!(dev, rows_kernel, dtype, cfg; len, s, v, i)?;
    } else {
        let (a, b, c) = (outer as u64, r as u64, inner as u64);
        launch!(dev, cols_kernel, dtype, spread(outer * inner); a, b, c, s, v, i)?;
    }
    Ok((values, indices))
}

/// Softmax or log-softmax (`kernel`: `SOFTMAX_ROWS`, `LOG_SOFTMAX_ROWS`) of each row of
/// the contiguous `[rows, len]` elements starting at `offset`.
pub(crate) fn softmax_rows(
    kernel: &CudaKernel,
    src: &CudaStorage,
    offset: usize,
    rows: usize,
    len: usize,
) -> Result<CudaStorage> {
    let dev = src.device();
    let dtype = src.dtype();
    let out = output(dev, dtype, rows * len)?;
    if rows * len == 0 {
        return Ok(out);
    }
    let (l, s, o) = (len as u64, src.address_of(offset), out.address_of(0));
    launch!(dev, kernel, dtype, per_row(rows, len, acc_size(dtype)); l, s, o)?;
    Ok(out)
}

/// A contiguous operand: a buffer and the element offset where it starts.
pub(crate) type Operand<'a> = (&'a CudaStorage, usize);

/// The device address of an optional operand (0, a null pointer, when absent).
pub(crate) fn address(o: Option<Operand<'_>>) -> u64 {
    o.map_or(0, |(s, offset)| s.address_of(offset))
}

/// The accumulator dtype of `dtype` in the kernels (f32 for the half types).
pub(crate) fn acc_dtype(dtype: DType) -> DType {
    if dtype.is_half() { DType::F32 } else { dtype }
}

/// Inclusive prefix sums along the middle dim of contiguous `[outer, r, inner]`.
pub(crate) fn cumsum(
    src: &CudaStorage,
    offset: usize,
    [outer, r, inner]: [usize; 3],
) -> Result<CudaStorage> {
    let dev = src.device();
    let dtype = src.dtype();
    let out = output(dev, dtype, outer * r * inner)?;
    if outer * r * inner == 0 {
        return Ok(out);
    }
    let (a, b, c, s, o) = (
        outer as u64,
        r as u64,
        inner as u64,
        src.address_of(offset),
        out.address_of(0),
    );
    launch!(dev, &kernels::CUMSUM_COLS, dtype, spread(outer * inner); a, b, c, s, o).map(|_| out)
}

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
        let [oh, ow] = g.output()?;
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
        Some(ConvGeometry(v.map(|x| x as u64)))
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

// ---- matrix products through cuBLAS ---------------------------------------------------------

/// A device's cuBLAS handle, bound to its stream.
pub(crate) struct Blas(CudaBlas);

/// How cuBLAS (column-major) sees one row-major operand of `rows x cols` with strides
/// `(sr, sc)`: whether it is transposed relative to row-major, and its leading dimension.
/// `None` when neither dim is unit-stride (copy it first).
fn blas_operand(rows: usize, cols: usize, sr: usize, sc: usize) -> Option<(bool, usize)> {
    if cols == 1 || sc == 1 {
        let ld = if rows == 1 { cols.max(1) } else { sr };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if rows == 1 || sr == 1 {
        let ld = if cols == 1 { rows.max(1) } else { sc };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// `[batch, m, k] x [batch, k, n]` for float dtypes; layouts are 3-D views (batch stride 0
/// broadcasts). `Ok(None)` for dtypes cuBLAS does not take (the caller falls back).
pub(crate) fn matmul(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
) -> Result<Option<CudaStorage>> {
    let dtype = a.dtype();
    use blas::cublasComputeType_t as Compute;
    use blas::cudaDataType as Data;
    let (data_type, compute) = match dtype {
        DType::F32 if crate::storage::cuda_flags::allow_tf32() => {
            (Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F_FAST_TF32)
        }
        DType::F32 => (Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F),
        DType::F64 => (Data::CUDA_R_64F, Compute::CUBLAS_COMPUTE_64F),
        DType::F16 => (Data::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F),
        DType::BF16 => (Data::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F),
        _ => return Ok(None),
    };
    let (sa, sb) = (la.shape(), lb.shape());
    let (batch, m, k, n) = (sa[0], sa[1], sa[2], sb[2]);
    let dev = a.device();
    let out = output(dev, dtype, batch * m * n)?;
    if batch * m * n == 0 {
        return Ok(Some(out));
    }
    if k == 0 {
        fill(&out, &Layout::contiguous(&[batch * m * n]), 0.0)?;
        return Ok(Some(out));
    }
    // Operands that cuBLAS cannot read as they are become contiguous first.
    let owned_a;
    let (a, la) = match blas_operand(m, k, la.strides()[1], la.strides()[2]) {
        Some(_) => (a, la.clone()),
        None => {
            owned_a = cast(a, la, dtype)?;
            (&owned_a, Layout::contiguous(sa))
        }
    };
    let owned_b;
    let (b, lb) = match blas_operand(k, n, lb.strides()[1], lb.strides()[2]) {
        Some(_) => (b, lb.clone()),
        None => {
            owned_b = cast(b, lb, dtype)?;
            (&owned_b, Layout::contiguous(sb))
        }
    };
    let (ta, lda) =
        blas_operand(m, k, la.strides()[1], la.strides()[2]).expect("usable after copy");
    let (tb, ldb) =
        blas_operand(k, n, lb.strides()[1], lb.strides()[2]).expect("usable after copy");
    let batch_stride = |l: &Layout| if batch == 1 { 0 } else { l.strides()[0] as i64 };
    let int = |v: usize| i32::try_from(v).ok();
    let (Some(mi), Some(ni), Some(ki), Some(bi), Some(lda), Some(ldb)) =
        (int(m), int(n), int(k), int(batch), int(lda), int(ldb))
    else {
        return Ok(None);
    };
    let op = |t: bool| {
        if t {
            blas::cublasOperation_t::CUBLAS_OP_T
        } else {
            blas::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let mut guard = dev.blas.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { blas::is_culib_present() } {
            return Err(Error::CudaLibraryMissing {
                library: "libcublas",
            });
        }
        let handle = CudaBlas::new(dev.stream().clone()).map_err(|e| Error::CudaDevice {
            ordinal: dev.ordinal(),
            reason: e.to_string(),
        })?;
        *guard = Some(Blas(handle));
    }
    let handle = *guard.as_ref().expect("created above").0.handle();
    let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) = if dtype == DType::F64 {
        (
            (&one64 as *const f64).cast(),
            (&zero64 as *const f64).cast(),
        )
    } else {
        (
            (&one32 as *const f32).cast(),
            (&zero32 as *const f32).cast(),
        )
    };
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first.
    // SAFETY: the handle is bound to this device's stream; the pointers address live
    // blocks holding the operands as described by (trans, ld, batch stride), the output
    // holds batch*m*n elements, and alpha/beta live on this stack frame through the call.
    unsafe {
        cudarc::cublas::result::gemm_strided_batched_ex(
            handle,
            op(tb),
            op(ta),
            ni,
            mi,
            ki,
            alpha,
            b.address_of(lb.offset()) as *const std::ffi::c_void,
            data_type,
            ldb,
            batch_stride(&lb),
            a.address_of(la.offset()) as *const std::ffi::c_void,
            data_type,
            lda,
            batch_stride(&la),
            beta,
            out.address_of(0) as *mut std::ffi::c_void,
            data_type,
            ni,
            (m * n) as i64,
            bi,
            compute,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| Error::CudaDevice {
        ordinal: dev.ordinal(),
        reason: format!("cuBLAS gemm: {e}"),
    })?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_merges_contiguous_dims_and_marks_fast_operands() {
        let a = Layout::contiguous(&[4, 5, 6]);
        let b = Layout::contiguous(&[1, 5, 6]).broadcast_to(&[4, 5, 6]);
        let g = Geometry::new(&[4, 5, 6], [&a, &b]).unwrap();
        assert_eq!(g.rank, 2);
        assert_eq!(&g.shape[..2], &[4, 30]);
        assert_eq!(&g.strides[0][..2], &[30, 1]);
        assert_eq!(&g.strides[1][..2], &[0, 1]);
        assert_eq!(g.contiguous, 0);
        let g = Geometry::new(&[4, 5, 6], [&a, &a]).unwrap();
        assert_eq!((g.rank, g.shape[0], g.contiguous), (1, 120, 0b11));
        let t = Layout::contiguous(&[5, 6]).transpose(0, 1);
        let g = Geometry::new(&[6, 5], [&t]).unwrap();
        assert_eq!((g.rank, g.contiguous), (2, 0));
        assert_eq!(std::mem::size_of::<Geometry>(), 200);
    }

    #[test]
    fn geometry_refuses_more_dims_than_the_kernels_take() {
        let shape = [2usize; 8];
        let l = Layout::contiguous(&shape).permute(&[7, 6, 5, 4, 3, 2, 1, 0]);
        assert!(Geometry::new(&shape, [&l]).is_none());
    }

    #[test]
    fn blas_operand_reads_row_and_column_major_views() {
        // row-major [3, 4]
        assert_eq!(blas_operand(3, 4, 4, 1), Some((false, 4)));
        // its transpose, a [4, 3] view with strides (1, 4)
        assert_eq!(blas_operand(4, 3, 1, 4), Some((true, 4)));
        // a row of a wider matrix: leading dim is the parent's row length
        assert_eq!(blas_operand(2, 3, 10, 1), Some((false, 10)));
        // neither dim unit-stride
        assert_eq!(blas_operand(2, 3, 6, 2), None);
        // single rows and columns take any stride
        assert_eq!(blas_operand(1, 5, 0, 1), Some((false, 5)));
        assert_eq!(blas_operand(5, 1, 1, 0), Some((false, 1)));
    }
}
