//! The backend boundary. [`Storage`] is a tensor's elements on some device; its methods
//! are the op families every backend implements (`unary`, `binary`, `compare`, `cast`,
//! ...), each taking an op descriptor from [`op`] that carries the CPU function and the
//! CUDA kernels. Ops above this module never name a device, and nothing here imports
//! `ops`, `nn` or `optim`: the CPU backend is [`cpu`], the CUDA one `cuda` (with its
//! host fallback), `dummy_cuda` stands in without the `cuda` feature.
//!
//! Also [`StorageCell`]: storage shared by a tensor and all its views, with the version
//! counter that guards tensors saved for backward against in-place modification.

use crate::{Device, Result};
use ferrograd_kernels::cpu::{Conv2dGeometry, CpuStorage};
use ferrograd_kernels::{DType, IndexBounds, Layout};
use op::{BinaryFloatOp, BinaryOp, Cmp, IntMap, ReduceOp, RowOp, UnaryOp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod cuda_flags;
#[cfg(not(feature = "cuda"))]
pub(crate) mod dummy_cuda;
pub(crate) mod op;
#[cfg(not(feature = "cuda"))]
pub(crate) use dummy_cuda as cuda;

pub(crate) use cuda::{CudaStorage, cuda_device, cuda_device_available};
pub(crate) use cuda_flags::note_host_fallback;

/// Elements on some device.
#[derive(Debug)]
pub(crate) enum Storage {
    Cpu(CpuStorage),
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Cuda(CudaStorage),
}

impl Storage {
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Cuda(s) => s.dtype(),
        }
    }

    pub(crate) fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Cuda(s) => Device::Cuda(s.ordinal()),
        }
    }
}

/// Panics for operands on different devices: every op checks its operands' devices
/// first (naming both shapes), so reaching this is a bug in the op.
#[track_caller]
fn mixed(op: &str, a: &Storage, b: &Storage) -> ! {
    panic!(
        "{op}: operands on different devices ({} and {})",
        a.device(),
        b.device()
    )
}

impl Storage {
    /// A one-operand op producing a new buffer: `cpu` or `cuda` by where `self` lives.
    fn map_one(
        &self,
        cpu: impl FnOnce(&CpuStorage) -> CpuStorage,
        cuda: impl FnOnce(&CudaStorage) -> Result<CudaStorage>,
    ) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => Storage::Cpu(cpu(s)),
            Storage::Cuda(s) => Storage::Cuda(cuda(s)?),
        })
    }

    /// A two-operand op producing a new buffer; both operands on one device.
    #[track_caller]
    fn map_two(
        &self,
        rhs: &Storage,
        op: &str,
        cpu: impl FnOnce(&CpuStorage, &CpuStorage) -> CpuStorage,
        cuda: impl FnOnce(&CudaStorage, &CudaStorage) -> Result<CudaStorage>,
    ) -> Result<Storage> {
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Storage::Cpu(cpu(a, b)),
            (Storage::Cuda(a), Storage::Cuda(b)) => Storage::Cuda(cuda(a, b)?),
            _ => mixed(op, self, rhs),
        })
    }

    /// An op writing into `self` from `src` (another buffer on the same device).
    #[track_caller]
    fn write_two(
        &mut self,
        src: &Storage,
        op: &str,
        cpu: impl FnOnce(&mut CpuStorage, &CpuStorage),
        cuda: impl FnOnce(&mut CudaStorage, &CudaStorage) -> Result<()>,
    ) -> Result<()> {
        match (&mut *self, src) {
            (Storage::Cpu(d), Storage::Cpu(s)) => {
                cpu(d, s);
                Ok(())
            }
            (Storage::Cuda(d), Storage::Cuda(s)) => cuda(d, s),
            _ => mixed(op, self, src),
        }
    }

    /// An op writing into `self` alone.
    fn write_one(
        &mut self,
        cpu: impl FnOnce(&mut CpuStorage),
        cuda: impl FnOnce(&mut CudaStorage) -> Result<()>,
    ) -> Result<()> {
        match self {
            Storage::Cpu(s) => {
                cpu(s);
                Ok(())
            }
            Storage::Cuda(s) => cuda(s),
        }
    }

    /// A new contiguous buffer of `len` elements equal to `value` on `device`.
    pub(crate) fn full(device: Device, dtype: DType, len: usize, value: f64) -> Result<Storage> {
        Ok(match device {
            Device::Cpu => Storage::Cpu(CpuStorage::full(dtype, len, value)),
            Device::Cuda(ordinal) => Storage::Cuda(cuda::full(ordinal, dtype, len, value)?),
        })
    }

    // ---- elementwise -----------------------------------------------------------------------

    /// `op(x)` over the view `layout` (float storage), a new contiguous buffer.
    pub(crate) fn unary<K: UnaryOp>(&self, layout: &Layout, op: &K, name: &str) -> Result<Storage> {
        self.map_one(|s| cpu::unary(s, layout, op), |s| s.unary(layout, op, name))
    }

    /// `op(x)` through f64 over the view `layout` (integer or bool storage).
    pub(crate) fn int_map(&self, layout: &Layout, op: IntMap) -> Result<Storage> {
        self.map_one(|s| cpu::int_map(s, layout, op), |s| s.int_map(layout, op))
    }

    /// `x = op(x)` through f64, in place (integer or bool storage).
    pub(crate) fn int_map_inplace(&mut self, layout: &Layout, op: IntMap) -> Result<()> {
        self.write_one(
            |s| cpu::int_map_inplace(s, layout, op),
            |s| s.int_map_inplace(layout, op),
        )
    }

    /// Whether scalar operands of float ops on `device` should go inside the kernel
    /// (`affine`) rather than as a 0-d tensor: on a GPU, where a 0-d tensor costs an upload.
    pub(crate) fn scalar_in_kernel(device: Device) -> bool {
        device.is_cuda()
    }

    /// Checks int64 `index` values against `bounds` now where the elements are on the host
    /// (a panic with the op's message); on a device the kernel that reads them checks.
    #[track_caller]
    pub(crate) fn check_indices(&self, layout: &Layout, bounds: &IndexBounds, ignore: Option<i64>) {
        if let Storage::Cpu(s) = self {
            cpu::index_values(s, layout, bounds, ignore);
        }
    }

    /// `x = op(x)` through the view `layout` (float storage).
    pub(crate) fn unary_inplace<K: UnaryOp>(
        &mut self,
        layout: &Layout,
        op: &K,
        name: &str,
    ) -> Result<()> {
        self.write_one(
            |s| cpu::unary_inplace(s, layout, op),
            |s| s.unary_inplace(layout, op, name),
        )
    }

    /// `op(a, b)` over the common shape of `la` and `lb` (both broadcast to it; one numeric
    /// dtype), a new contiguous buffer.
    #[track_caller]
    pub(crate) fn binary<K: BinaryOp>(
        &self,
        la: &Layout,
        rhs: &Storage,
        lb: &Layout,
        op: &K,
        name: &str,
    ) -> Result<Storage> {
        self.map_two(
            rhs,
            name,
            |a, b| cpu::binary(a, la, b, lb, op),
            |a, b| a.binary(la, b, lb, op, name),
        )
    }

    /// [`Storage::binary`] for float-only ops.
    #[track_caller]
    pub(crate) fn binary_float<K: BinaryFloatOp>(
        &self,
        la: &Layout,
        rhs: &Storage,
        lb: &Layout,
        op: &K,
        name: &str,
    ) -> Result<Storage> {
        self.map_two(
            rhs,
            name,
            |a, b| cpu::binary_float(a, la, b, lb, op),
            |a, b| a.binary_float(la, b, lb, op, name),
        )
    }

    /// `dst = op(dst, src)` through the region `ldst` (`lsrc` broadcast to it); `src` is
    /// another buffer.
    #[track_caller]
    pub(crate) fn binary_inplace<K: BinaryOp>(
        &mut self,
        ldst: &Layout,
        src: &Storage,
        lsrc: &Layout,
        op: &K,
        name: &str,
    ) -> Result<()> {
        self.write_two(
            src,
            name,
            |d, s| cpu::binary_inplace(d, ldst, s, lsrc, op),
            |d, s| d.binary_inplace(ldst, s, lsrc, op, name),
        )
    }

    /// `dst[region] = src` for any dtype (`lsrc` broadcast to the region; another buffer).
    #[track_caller]
    pub(crate) fn assign(&mut self, region: &Layout, src: &Storage, lsrc: &Layout) -> Result<()> {
        self.write_two(
            src,
            "copy",
            |d, s| cpu::assign(d, region, s, lsrc),
            |d, s| d.assign(region, s, lsrc),
        )
    }

    /// `a cmp b` to bool over the common shape of the layouts.
    #[track_caller]
    pub(crate) fn compare(
        &self,
        la: &Layout,
        rhs: &Storage,
        lb: &Layout,
        cmp: Cmp,
        name: &str,
    ) -> Result<Storage> {
        self.map_two(
            rhs,
            name,
            |a, b| cpu::compare(a, la, b, lb, cmp),
            |a, b| a.compare(la, b, lb, cmp, name),
        )
    }

    /// `a && b` of bool storages.
    #[track_caller]
    pub(crate) fn logical_and(&self, la: &Layout, rhs: &Storage, lb: &Layout) -> Result<Storage> {
        self.map_two(
            rhs,
            "logical_and",
            |a, b| cpu::logical_and(a, la, b, lb),
            |a, b| a.logical_and(la, b, lb),
        )
    }

    /// `cond ? a : b` over the common shape (`self` is the bool condition).
    #[track_caller]
    pub(crate) fn where_cond(
        &self,
        lc: &Layout,
        (a, la): (&Storage, &Layout),
        (b, lb): (&Storage, &Layout),
    ) -> Result<Storage> {
        Ok(match (self, a, b) {
            (Storage::Cpu(c), Storage::Cpu(x), Storage::Cpu(y)) => {
                Storage::Cpu(cpu::where_cond((c, lc), (x, la), (y, lb)))
            }
            (Storage::Cuda(c), Storage::Cuda(x), Storage::Cuda(y)) => {
                Storage::Cuda(c.where_cond(lc, (x, la), (y, lb))?)
            }
            _ => mixed(
                "where",
                self,
                if a.device() != self.device() { a } else { b },
            ),
        })
    }

    /// The view `layout` as a new contiguous buffer of `dtype` (a copy when the dtypes agree).
    pub(crate) fn cast(&self, layout: &Layout, dtype: DType) -> Result<Storage> {
        self.map_one(|s| cpu::cast(s, layout, dtype), |s| s.cast(layout, dtype))
    }

    /// Writes `value` to every element of the view `layout`.
    pub(crate) fn fill(&mut self, layout: &Layout, value: f64) -> Result<()> {
        self.write_one(|s| cpu::fill(s, layout, value), |s| s.fill(layout, value))
    }

    // ---- along a dim (inputs contiguous, seen as [outer, r, inner]) -------------------------

    /// Sum or product of the middle dim: `[outer, inner]` results.
    pub(crate) fn reduce(
        &self,
        layout: &Layout,
        op: ReduceOp,
        dims: [usize; 3],
    ) -> Result<Storage> {
        self.map_one(
            |s| cpu::reduce(s, layout, op, dims),
            |s| s.reduce(layout, op, dims),
        )
    }

    /// Max or min of the middle dim with the first index of it: values and int64 indices.
    pub(crate) fn arg_reduce(
        &self,
        layout: &Layout,
        is_max: bool,
        dims: [usize; 3],
    ) -> Result<(Storage, Storage)> {
        Ok(match self {
            Storage::Cpu(s) => {
                let (v, i) = cpu::arg_reduce(s, layout, is_max, dims);
                (Storage::Cpu(v), Storage::Cpu(i))
            }
            Storage::Cuda(s) => {
                let (v, i) = s.arg_reduce(layout, is_max, dims)?;
                (Storage::Cuda(v), Storage::Cuda(i))
            }
        })
    }

    /// Softmax or log-softmax of each contiguous row `[rows, len]` (float storage).
    pub(crate) fn rows(
        &self,
        layout: &Layout,
        op: RowOp,
        rows: usize,
        len: usize,
    ) -> Result<Storage> {
        self.map_one(
            |s| cpu::rows(s, layout, op, rows, len),
            |s| s.rows(layout, op, rows, len),
        )
    }

    /// `op`'s input gradient from its output (`self`, rows of `len` in `layout`'s
    /// contiguous elements) and the output's gradient `g` (contiguous, same dtype).
    #[track_caller]
    pub(crate) fn rows_backward(
        &self,
        layout: &Layout,
        g: &Storage,
        g_layout: &Layout,
        op: RowOp,
        rows: usize,
        len: usize,
    ) -> Result<Storage> {
        self.map_two(
            g,
            "softmax_backward",
            |y, g| cpu::rows_backward(y, layout, g, g_layout, op, rows, len),
            |y, g| y.rows_backward(layout, (g, g_layout), op, rows, len),
        )
    }

    /// Per position of contiguous `[outer, r, inner]`, the int64 index along the middle dim
    /// that `op` (a stable sort, a running max or min) picks.
    pub(crate) fn dim_indices(
        &self,
        layout: &Layout,
        dims: [usize; 3],
        op: ferrograd_kernels::cpu::DimIndexOp,
    ) -> Result<Storage> {
        self.map_one(
            |s| cpu::dim_indices(s, layout, dims, op),
            |s| s.dim_indices(layout, dims, op),
        )
    }

    /// Inclusive prefix sums along the middle dim.
    pub(crate) fn cumsum(&self, layout: &Layout, dims: [usize; 3]) -> Result<Storage> {
        self.map_one(|s| cpu::cumsum(s, layout, dims), |s| s.cumsum(layout, dims))
    }

    // ---- indexing (int64 index operands; a bad index panics with `bounds`' message) ----------

    /// `out[o, j, i] = self[o, index[j], i]` over contiguous `[outer, r, inner]`.
    #[track_caller]
    pub(crate) fn index_select(
        &self,
        layout: &Layout,
        dims: [usize; 3],
        (index, index_layout): (&Storage, &Layout),
        bounds: &IndexBounds,
    ) -> Result<Storage> {
        self.map_two(
            index,
            bounds.op(),
            |s, i| cpu::index_select((s, layout), dims, (i, index_layout), bounds),
            |s, i| s.index_select(layout, dims, (i, index_layout), bounds),
        )
    }

    /// `torch.gather` of the view `layout` along `dim` at `index` (contiguous).
    #[track_caller]
    pub(crate) fn gather(
        &self,
        layout: &Layout,
        (index, index_layout): (&Storage, &Layout),
        bounds: &IndexBounds,
        dim: usize,
    ) -> Result<Storage> {
        self.map_two(
            index,
            bounds.op(),
            |s, i| cpu::gather((s, layout), (i, index_layout), bounds, dim),
            |s, i| s.gather(layout, (i, index_layout), bounds, dim),
        )
    }

    /// `self[index] += src` along `dim`; `self` is contiguous of `shape`, `src_view` a view
    /// of `src` of the index's shape, and `index` contiguous.
    #[track_caller]
    pub(crate) fn scatter_add(
        &mut self,
        shape: &[usize],
        (index, index_layout): (&Storage, &Layout),
        bounds: &IndexBounds,
        (src, src_view): (&Storage, &Layout),
        dim: usize,
    ) -> Result<()> {
        match (&mut *self, index, src) {
            (Storage::Cpu(d), Storage::Cpu(i), Storage::Cpu(s)) => {
                cpu::scatter_add((d, shape), (i, index_layout), bounds, (s, src_view), dim);
                Ok(())
            }
            (Storage::Cuda(d), Storage::Cuda(i), Storage::Cuda(s)) => {
                d.scatter_add(shape, (i, index_layout), bounds, (s, src_view), dim)
            }
            _ => mixed("scatter_add", self, src),
        }
    }

    // ---- convolution columns and matrix products ------------------------------------------

    /// im2col (`fold` false) of contiguous `[n, c, h, w]`, or its adjoint of the columns.
    pub(crate) fn conv_columns(
        &self,
        layout: &Layout,
        fold: bool,
        g: &Conv2dGeometry,
    ) -> Result<Storage> {
        self.map_one(
            |s| cpu::conv_columns(s, layout, fold, g),
            |s| s.conv_columns(layout, fold, g),
        )
    }

    /// `[batch, m, k] x [batch, k, n]` of 3-D views (batch stride 0 broadcasts).
    #[track_caller]
    pub(crate) fn matmul(&self, la: &Layout, rhs: &Storage, lb: &Layout) -> Result<Storage> {
        self.map_two(
            rhs,
            "matmul",
            |a, b| cpu::matmul(a, la, b, lb),
            |a, b| a.matmul(la, b, lb),
        )
    }
}

/// A storage behind a lock, shared by views, plus its version (bumped by every in-place
/// write, as PyTorch's `_version`).
#[derive(Debug)]
pub(crate) struct StorageCell {
    data: RwLock<Storage>,
    version: AtomicU64,
}

impl StorageCell {
    pub(crate) fn new(storage: Storage) -> Self {
        StorageCell {
            data: RwLock::new(storage),
            version: AtomicU64::new(0),
        }
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Storage> {
        // A panic while holding the lock cannot leave elements half-typed, so poisoning
        // carries no information here.
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Storage> {
        self.version.fetch_add(1, Ordering::Relaxed);
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }
}

// Defined here, in the backend layer that can ask the driver, so that `device` (below
// it) imports nothing from above.
impl crate::Device {
    /// `Cuda(ordinal)` when that GPU can be used, else `Cpu`.
    ///
    /// ```
    /// use ferrograd_runtime::Device;
    /// let dev = Device::cuda_if_available(0);
    /// assert!(dev == Device::Cpu || dev == Device::Cuda(0));
    /// ```
    pub fn cuda_if_available(ordinal: usize) -> Device {
        if cuda_device_available(ordinal) {
            Device::Cuda(ordinal)
        } else {
            Device::Cpu
        }
    }
}
