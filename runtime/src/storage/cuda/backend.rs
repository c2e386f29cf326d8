//! The CUDA side of the backend boundary: each op family on [`CudaStorage`] through the
//! launch layer ([`super::launch`], with `index` and `blas`) when the op's kernel family is instantiated for the dtype
//! at hand, else on a host copy through the CPU backend (the host fallback: it waits for
//! the device and is counted in `cuda::host_fallbacks`).

use super::CudaStorage;
use super::{blas, index, launch};
use crate::Result;
use crate::storage::cpu;
use crate::storage::cuda_flags::note_host_fallback;
use crate::storage::op::{BinaryFloatOp, BinaryOp, Cmp, IntMap, ReduceOp, RowOp, UnaryOp};
use ferrograd_kernels::cpu::{Conv2dGeometry, CpuStorage};
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
use ferrograd_kernels::{DType, IndexBounds, Layout};

/// The first element of a contiguous view (the ops make these operands contiguous).
fn start(layout: &Layout) -> usize {
    layout
        .contiguous_range()
        .expect("the op made its input contiguous")
        .start
}

/// The kernel of `family` (out of place: 0, in place: 1) when it covers `dtype`.
fn covering(
    family: Option<[&'static CudaKernel; 2]>,
    which: usize,
    dtype: DType,
) -> Option<&'static CudaKernel> {
    family
        .map(|f| f[which])
        .filter(|k| k.symbol(dtype).is_some())
}

impl CudaStorage {
    /// A new buffer on this storage's device holding `host`.
    fn upload_new(&self, host: &CpuStorage) -> Result<CudaStorage> {
        let mut out = self.device().alloc(host.dtype(), host.len())?;
        out.upload(host)?;
        Ok(out)
    }

    /// The host fallback of an op producing a new buffer: `f` on host copies of the whole
    /// buffers (so layouts stay valid), its result uploaded to this device.
    fn on_host(&self, op: &str, f: impl FnOnce(&CpuStorage) -> CpuStorage) -> Result<CudaStorage> {
        note_host_fallback(op);
        let host = self.download()?;
        self.upload_new(&f(&host))
    }

    /// The host fallback of an in-place op: `f` on a host copy, written back.
    fn on_host_mut(&mut self, op: &str, f: impl FnOnce(&mut CpuStorage)) -> Result<()> {
        note_host_fallback(op);
        let mut host = self.download()?;
        f(&mut host);
        self.upload(&host)
    }

    pub(crate) fn unary<K: UnaryOp>(&self, layout: &Layout, op: &K, name: &str) -> Result<Self> {
        match covering(K::CUDA, 0, self.dtype()) {
            Some(kernel) => {
                let (p0, p1) = op.params();
                launch::unary(kernel, self, layout, p0, p1)
            }
            None => self.on_host(name, |h| cpu::unary(h, layout, op)),
        }
    }

    /// No integer kernels: always the host fallback.
    pub(crate) fn int_map(&self, layout: &Layout, op: IntMap) -> Result<Self> {
        self.on_host(op.name(), |h| cpu::int_map(h, layout, op))
    }

    pub(crate) fn int_map_inplace(&mut self, layout: &Layout, op: IntMap) -> Result<()> {
        self.on_host_mut(op.name(), |h| cpu::int_map_inplace(h, layout, op))
    }

    pub(crate) fn unary_inplace<K: UnaryOp>(
        &mut self,
        layout: &Layout,
        op: &K,
        name: &str,
    ) -> Result<()> {
        match covering(K::CUDA, 1, self.dtype()) {
            Some(kernel) => {
                let (p0, p1) = op.params();
                launch::unary_inplace(kernel, self, layout, p0, p1)
            }
            None => self.on_host_mut(name, |h| cpu::unary_inplace(h, layout, op)),
        }
    }

    /// Runs a two-operand op: `launch` when `kernel` covers the dtype, else `host` on host
    /// copies of both buffers.
    fn two_operand(
        &self,
        rhs: &CudaStorage,
        name: &str,
        kernel: Option<&'static CudaKernel>,
        launch: impl FnOnce(&'static CudaKernel) -> Result<CudaStorage>,
        host: impl FnOnce(&CpuStorage, &CpuStorage) -> CpuStorage,
    ) -> Result<CudaStorage> {
        match kernel {
            Some(kernel) => launch(kernel),
            None => {
                let rhs = rhs.download()?;
                self.on_host(name, |h| host(h, &rhs))
            }
        }
    }

    pub(crate) fn binary<K: BinaryOp>(
        &self,
        la: &Layout,
        rhs: &CudaStorage,
        lb: &Layout,
        op: &K,
        name: &str,
    ) -> Result<Self> {
        self.two_operand(
            rhs,
            name,
            covering(K::CUDA, 0, self.dtype()),
            |k| launch::binary(k, self, la, rhs, lb, op.alpha(), self.dtype()),
            |a, b| cpu::binary(a, la, b, lb, op),
        )
    }

    pub(crate) fn binary_float<K: BinaryFloatOp>(
        &self,
        la: &Layout,
        rhs: &CudaStorage,
        lb: &Layout,
        op: &K,
        name: &str,
    ) -> Result<Self> {
        self.two_operand(
            rhs,
            name,
            covering(K::CUDA, 0, self.dtype()),
            |k| launch::binary(k, self, la, rhs, lb, 1.0, self.dtype()),
            |a, b| cpu::binary_float(a, la, b, lb, op),
        )
    }

    pub(crate) fn binary_inplace<K: BinaryOp>(
        &mut self,
        ldst: &Layout,
        src: &CudaStorage,
        lsrc: &Layout,
        op: &K,
        name: &str,
    ) -> Result<()> {
        match covering(K::CUDA, 1, self.dtype()) {
            Some(kernel) => launch::binary_inplace(kernel, self, ldst, src, lsrc, op.alpha()),
            None => {
                let src = src.download()?;
                self.on_host_mut(name, |h| cpu::binary_inplace(h, ldst, &src, lsrc, op))
            }
        }
    }

    pub(crate) fn assign(
        &mut self,
        region: &Layout,
        src: &CudaStorage,
        lsrc: &Layout,
    ) -> Result<()> {
        launch::binary_inplace(&kernels::ASSIGN_INPLACE, self, region, src, lsrc, 1.0)
    }

    pub(crate) fn compare(
        &self,
        la: &Layout,
        rhs: &CudaStorage,
        lb: &Layout,
        cmp: Cmp,
        name: &str,
    ) -> Result<Self> {
        let kernel = Some(cmp.cuda()).filter(|k| k.symbol(self.dtype()).is_some());
        self.two_operand(
            rhs,
            name,
            kernel,
            |k| launch::binary(k, self, la, rhs, lb, 1.0, DType::Bool),
            |a, b| cpu::compare(a, la, b, lb, cmp),
        )
    }

    pub(crate) fn logical_and(&self, la: &Layout, rhs: &CudaStorage, lb: &Layout) -> Result<Self> {
        launch::binary(&kernels::LOGICAL_AND, self, la, rhs, lb, 1.0, DType::Bool)
    }

    pub(crate) fn where_cond(
        &self,
        lc: &Layout,
        (a, la): (&CudaStorage, &Layout),
        (b, lb): (&CudaStorage, &Layout),
    ) -> Result<Self> {
        launch::where_(self, lc, a, la, b, lb)
    }

    pub(crate) fn cast(&self, layout: &Layout, dtype: DType) -> Result<Self> {
        launch::cast(self, layout, dtype)
    }

    pub(crate) fn fill(&mut self, layout: &Layout, value: f64) -> Result<()> {
        launch::fill(self, layout, value)
    }

    pub(crate) fn reduce(&self, layout: &Layout, op: ReduceOp, dims: [usize; 3]) -> Result<Self> {
        let kernels = op.cuda();
        if kernels.rows.symbol(self.dtype()).is_none() {
            return self.on_host(op.name(), |h| cpu::reduce(h, layout, op, dims));
        }
        launch::reduce(&kernels, self, start(layout), dims)
    }

    pub(crate) fn arg_reduce(
        &self,
        layout: &Layout,
        is_max: bool,
        dims: [usize; 3],
    ) -> Result<(Self, Self)> {
        launch::arg_reduce(is_max, self, start(layout), dims)
    }

    pub(crate) fn rows(&self, layout: &Layout, op: RowOp, rows: usize, len: usize) -> Result<Self> {
        launch::softmax_rows(op.cuda(), self, start(layout), rows, len)
    }

    /// `op`'s input gradient from its contiguous output (`self`) and output gradient.
    pub(crate) fn rows_backward(
        &self,
        layout: &Layout,
        (g, g_layout): (&Self, &Layout),
        op: RowOp,
        rows: usize,
        len: usize,
    ) -> Result<Self> {
        launch::softmax_backward_rows(
            op.cuda_backward(),
            (self, start(layout)),
            (g, start(g_layout)),
            rows,
            len,
        )
    }

    /// Sorts and running extremes run on the host (data-dependent control flow; a device
    /// sort is future work), counted as a host fallback.
    pub(crate) fn dim_indices(
        &self,
        layout: &Layout,
        dims: [usize; 3],
        op: ferrograd_kernels::cpu::DimIndexOp,
    ) -> Result<Self> {
        self.on_host("sort", |h| cpu::dim_indices(h, layout, dims, op))
    }

    pub(crate) fn cumsum(&self, layout: &Layout, dims: [usize; 3]) -> Result<Self> {
        if kernels::CUMSUM_COLS.symbol(self.dtype()).is_none() {
            return self.on_host("cumsum", |h| cpu::cumsum(h, layout, dims));
        }
        launch::cumsum(self, start(layout), dims)
    }

    pub(crate) fn index_select(
        &self,
        layout: &Layout,
        dims: [usize; 3],
        (index, index_layout): (&CudaStorage, &Layout),
        bounds: &IndexBounds,
    ) -> Result<Self> {
        let index = ((index, start(index_layout)), index_layout.numel());
        index::index_select((self, start(layout)), dims, index, bounds)
    }

    pub(crate) fn gather(
        &self,
        layout: &Layout,
        (index, index_layout): (&CudaStorage, &Layout),
        bounds: &IndexBounds,
        dim: usize,
    ) -> Result<Self> {
        let shape = index_layout.shape();
        index::gather(
            self,
            layout,
            (index, start(index_layout)),
            shape,
            dim,
            bounds,
        )
    }

    pub(crate) fn scatter_add(
        &mut self,
        dst_shape: &[usize],
        (index, index_layout): (&CudaStorage, &Layout),
        bounds: &IndexBounds,
        (src, src_view): (&CudaStorage, &Layout),
        dim: usize,
    ) -> Result<()> {
        if crate::are_deterministic_algorithms_enabled() && self.dtype().is_float() {
            // The kernel adds with atomics in whatever order the threads race: in
            // floating point, the sequential host kernel is the deterministic one.
            let (index_host, src_host) = (index.download()?, src.download()?);
            return self.on_host_mut("scatter_add (deterministic)", |h| {
                cpu::scatter_add(
                    (h, dst_shape),
                    (&index_host, index_layout),
                    bounds,
                    (&src_host, src_view),
                    dim,
                )
            });
        }
        let index = (index, start(index_layout));
        index::scatter_add(self, dst_shape, index, bounds, src, src_view, dim)
    }

    pub(crate) fn conv_columns(
        &self,
        layout: &Layout,
        fold: bool,
        g: &Conv2dGeometry,
    ) -> Result<Self> {
        index::conv_columns(fold, self, start(layout), g)
    }

    /// `[batch, m, k] x [batch, k, n]` through cuBLAS, or on the host for dtypes and
    /// strides cuBLAS does not take.
    pub(crate) fn matmul(&self, la: &Layout, rhs: &CudaStorage, lb: &Layout) -> Result<Self> {
        match blas::matmul(self, la, rhs, lb)? {
            Some(out) => Ok(out),
            None => {
                let rhs = rhs.download()?;
                self.on_host("matmul", |h| cpu::matmul(h, la, &rhs, lb))
            }
        }
    }
}
