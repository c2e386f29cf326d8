//! Kernel launches on CUDA storage: the NVRTC-compiled kernels of
//! `ferrograd_kernels::cuda` and cuBLAS for matrix products. Every function queues work
//! on the device's stream and returns without waiting; outputs are new contiguous
//! buffers unless the name ends in `_inplace`. Launch failures come back as `Err`.

pub(crate) use super::index::{ConvGeometry, index_check};
use super::{CudaStorage, GpuDevice};
use crate::storage::op::ReduceKernels;
use crate::{Error, Result};
use cudarc::driver::{DeviceRepr, LaunchConfig};
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
    /// Per dim, the multiplier and shift that divide a 32-bit index by its size
    /// ([`Divisor`]); used when `narrow` is 1 (the index space is below 2^31).
    magic: [u32; MAX_DIMS],
    shift: [u32; MAX_DIMS],
    narrow: u32,
    reserved: u32,
}

/// Division by a fixed `d` in `1..2^31` of any `n < 2^31` as `(umulhi(n, magic) + n) >>
/// shift` (Granlund and Montgomery's round-up method): with `shift = ceil(log2 d)` and
/// `magic = floor(2^32 (2^shift - d) / d) + 1`, the 33-bit product `n (2^32 + magic)`
/// divided by `2^(32 + shift)` floors to `n / d`, and `umulhi(n, magic) + n < 2^32`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Divisor {
    pub(crate) magic: u32,
    pub(crate) shift: u32,
}

impl Divisor {
    /// The multiplier and shift of `d` (`1 <= d < 2^31`).
    pub(crate) fn new(d: u64) -> Divisor {
        debug_assert!((1..1 << 31).contains(&d));
        let shift = 64 - (d - 1).leading_zeros();
        let magic = (((1u128 << 32) * ((1u128 << shift) - d as u128)) / d as u128 + 1) as u32;
        Divisor { magic, shift }
    }

    /// `n / d` the way the kernels compute it (`n < 2^31`).
    #[cfg(test)]
    pub(crate) fn divide(self, n: u32) -> u32 {
        let hi = ((n as u64 * self.magic as u64) >> 32) as u32;
        (hi + n) >> self.shift
    }
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
        let total: usize = dims.iter().product();
        if total < 1 << 31 {
            g.narrow = 1;
            for (d, &size) in dims.iter().enumerate() {
                let Divisor { magic, shift } = Divisor::new(size.max(1) as u64);
                (g.magic[d], g.shift[d]) = (magic, shift);
            }
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

/// A row kernel's launch: one warp per row of up to 1024 elements (a (32, k) block of k
/// rows, k the largest of 8, 4, 2, 1 dividing `rows`; reductions by shuffles alone, the
/// row's loads in flight together), else one block per row ([`per_row`]).
pub(crate) fn per_row_or_warp(rows: usize, len: usize, shared_per_thread: usize) -> LaunchConfig {
    if len > 1024 {
        return per_row(rows, len, shared_per_thread);
    }
    let k = [8, 4, 2, 1]
        .into_iter()
        .find(|k| rows.is_multiple_of(*k))
        .unwrap_or(1);
    LaunchConfig {
        grid_dim: ((rows / k) as u32, 1, 1),
        block_dim: (32, k as u32, 1),
        shared_mem_bytes: (32 * k * shared_per_thread) as u32,
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
            .map(|_| $crate::storage::cuda::note_queued())
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
pub(crate) fn geometry<const K: usize>(
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
    kernels: &ReduceKernels,
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
    match reduce_plan([outer, r, inner]) {
        ReducePlan::Rows => {
            let len = r as u64;
            launch!(dev, kernels.rows, dtype, per_row(outer, r, acc_size(dtype)); len, s, o)?;
        }
        ReducePlan::Cols => {
            let (a, b, c) = (outer as u64, r as u64, inner as u64);
            launch!(dev, kernels.cols, dtype, spread(outer * inner); a, b, c, s, o)?;
        }
        ReducePlan::RowChunks { chunk, splits } => {
            let partials = output(dev, acc_dtype(dtype), outer * splits)?;
            let (len, chunk_len, p) = (r as u64, chunk as u64, partials.address_of(0));
            let cfg = LaunchConfig {
                grid_dim: (splits as u32, outer as u32, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: (256 * acc_size(dtype)) as u32,
            };
            launch!(dev, kernels.row_chunks, dtype, cfg; len, chunk_len, s, p)?;
            finish_reduce(kernels, &partials, [outer, splits, 1], &out)?;
        }
        ReducePlan::Tiles { chunk, splits } => {
            // One chunk writes `out` directly; the partials pointer is then unused (null).
            let partials = if splits > 1 {
                Some(output(dev, acc_dtype(dtype), outer * splits * inner)?)
            } else {
                None
            };
            let (a, b, c, chunk_len) = (outer as u64, r as u64, inner as u64, chunk as u64);
            let p = partials.as_ref().map_or(0, |p| p.address_of(0));
            let cfg = LaunchConfig {
                grid_dim: (inner.div_ceil(32) as u32, outer as u32, splits as u32),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            launch!(dev, kernels.cols_tiled, dtype, cfg; a, b, c, chunk_len, s, o, p)?;
            if let Some(partials) = &partials {
                finish_reduce(kernels, partials, [outer, splits, inner], &out)?;
            }
        }
    }
    Ok(out)
}

/// Combines the accumulator partials `[outer, splits, inner]` of a split reduction into
/// `out` (`[outer, inner]`).
fn finish_reduce(
    kernels: &ReduceKernels,
    partials: &CudaStorage,
    [outer, splits, inner]: [usize; 3],
    out: &CudaStorage,
) -> Result<()> {
    let dev = out.device();
    let (a, b, c) = (outer as u64, splits as u64, inner as u64);
    let (p, o) = (partials.address_of(0), out.address_of(0));
    launch!(dev, kernels.finish, out.dtype(), spread(outer * inner); a, b, c, p, o)
}

/// How a reduction of contiguous `[outer, r, inner]` over `r` is launched.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ReducePlan {
    /// One block per row (`inner == 1`, enough rows or short ones).
    Rows,
    /// One thread per output walking `r` (enough outputs to fill the device).
    Cols,
    /// Few long rows: each row in `splits` chunks of `chunk`, one block each.
    RowChunks { chunk: usize, splits: usize },
    /// Few outputs along a strided dim: 32-column tiles, `r` in `splits` chunks.
    Tiles { chunk: usize, splits: usize },
}

/// Blocks that keep every SM of a large GPU busy (132 SMs on an H100, a few blocks each).
const FILL_BLOCKS: usize = 512;

/// The launch of a reduction over `r` of contiguous `[outer, r, inner]`: rows and
/// columns by one block or thread each when there are enough of them, else split along
/// `r` so that about [`FILL_BLOCKS`] blocks share the work.
pub(crate) fn reduce_plan([outer, r, inner]: [usize; 3]) -> ReducePlan {
    let split = |units: usize, min_chunk: usize| {
        let splits = FILL_BLOCKS
            .div_ceil(units.max(1))
            .clamp(1, (r / min_chunk).max(1));
        let chunk = r.div_ceil(splits).max(1);
        (chunk, r.div_ceil(chunk).max(1))
    };
    if inner == 1 {
        if outer >= FILL_BLOCKS / 4 || r < 1 << 15 || outer > u16::MAX as usize {
            return ReducePlan::Rows;
        }
        let (chunk, splits) = split(outer, 1 << 13);
        return ReducePlan::RowChunks { chunk, splits };
    }
    if outer * inner >= 1 << 16 {
        return ReducePlan::Cols;
    }
    let (chunk, splits) = split(outer * inner.div_ceil(32), 128);
    ReducePlan::Tiles { chunk, splits }
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
    launch!(dev, kernel, dtype, per_row_or_warp(rows, len, acc_size(dtype)); l, s, o)?;
    Ok(out)
}

/// The softmax or log-softmax input gradient (`kernel`: `SOFTMAX_BACKWARD_ROWS`,
/// `LOG_SOFTMAX_BACKWARD_ROWS`) of each row of the contiguous `[rows, len]` output `y` and
/// its gradient `g`.
pub(crate) fn softmax_backward_rows(
    kernel: &CudaKernel,
    (y, y_offset): Operand<'_>,
    (g, g_offset): Operand<'_>,
    rows: usize,
    len: usize,
) -> Result<CudaStorage> {
    let dev = y.device();
    let dtype = y.dtype();
    let out = output(dev, dtype, rows * len)?;
    if rows * len == 0 {
        return Ok(out);
    }
    let (l, ys, gs, o) = (
        len as u64,
        y.address_of(y_offset),
        g.address_of(g_offset),
        out.address_of(0),
    );
    launch!(dev, kernel, dtype, per_row_or_warp(rows, len, acc_size(dtype)); l, ys, gs, o)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Reductions with outputs enough to fill the device keep one block or thread each;
    /// few long rows and few strided columns split along `r`, every chunk non-empty and
    /// the chunks covering `r` exactly.
    #[test]
    fn reductions_split_only_when_too_few_outputs_fill_the_device() {
        assert_eq!(reduce_plan([4096, 512, 1]), ReducePlan::Rows);
        assert_eq!(reduce_plan([4, 1000, 1]), ReducePlan::Rows);
        assert_eq!(reduce_plan([512, 64, 1024]), ReducePlan::Cols);
        for dims in [
            [1, 4_194_304, 1],
            [2, 40_000, 1],
            [1, 8192, 512],
            [1, 4096, 48],
            [3, 300, 20],
            [1, 40, 3],
            [1, 1, 7],
        ] {
            let r = dims[1];
            let (chunk, splits) = match reduce_plan(dims) {
                ReducePlan::RowChunks { chunk, splits } => {
                    assert_eq!(dims[2], 1);
                    (chunk, splits)
                }
                ReducePlan::Tiles { chunk, splits } => (chunk, splits),
                other => panic!("{dims:?}: {other:?}"),
            };
            assert!(
                splits <= FILL_BLOCKS && (splits - 1) * chunk < r && splits * chunk >= r,
                "{dims:?}: {chunk} x {splits}"
            );
        }
        // sum_all of 4M elements: a few hundred blocks, not one.
        assert!(
            matches!(reduce_plan([1, 4_194_304, 1]), ReducePlan::RowChunks { splits, .. } if splits >= 256)
        );
        // A bias gradient, [8192, 512] summed over the batch: 16 tiles in 32 chunks each.
        assert_eq!(
            reduce_plan([1, 8192, 512]),
            ReducePlan::Tiles {
                chunk: 256,
                splits: 32
            }
        );
    }

    /// The kernels' 32-bit division by multiplication equals `/` for divisors across the
    /// range (powers of two and their neighbours, small, large, 2^31 - 1) at the ends of
    /// the numerator range and at every multiple's edges.
    #[test]
    fn magic_division_equals_integer_division() {
        let mut divisors: Vec<u64> = (1..=300).collect();
        for p in 1..31 {
            divisors.extend([(1u64 << p) - 1, 1 << p, (1 << p) + 1]);
        }
        divisors.extend([3 * 1536, 12_582_912, 1_000_003, (1 << 31) - 1]);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for d in divisors.into_iter().filter(|&d| d < 1 << 31) {
            let div = Divisor::new(d);
            let check = |n: u64| {
                if n < 1 << 31 {
                    assert_eq!(div.divide(n as u32) as u64, n / d, "{n} / {d} ({div:?})");
                }
            };
            for n in [0, 1, (1 << 31) - 1, (1 << 31) - 2, d - 1, d, d + 1] {
                check(n);
            }
            let top = ((1u64 << 31) - 1) / d;
            for q in [1, 2, top / 2, top.saturating_sub(1), top] {
                check((q * d).saturating_sub(1));
                check(q * d);
            }
            for _ in 0..2000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                check(state % (1 << 31));
            }
        }
    }

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
        assert_eq!(
            (g.narrow, g.magic[1], g.shift[1]),
            (1, Divisor::new(5).magic, 3)
        );
        // The CUDA struct: 6 sizes, 3 x 6 strides, rank and flags, 6 + 6 divisors, narrow.
        assert_eq!(std::mem::size_of::<Geometry>(), 256);
    }

    #[test]
    fn geometry_refuses_more_dims_than_the_kernels_take() {
        let shape = [2usize; 8];
        let l = Layout::contiguous(&shape).permute(&[7, 6, 5, 4, 3, 2, 1, 0]);
        assert!(Geometry::new(&shape, [&l]).is_none());
    }
}
