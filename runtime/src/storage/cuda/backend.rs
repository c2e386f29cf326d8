//! The CUDA side of the backend boundary: each op family on [`CudaStorage`] through the
//! launch layer ([`super::ops`]) when the op's kernel family is instantiated for the dtype
//! at hand, else on a host copy through the CPU backend (the host fallback: it waits for
//! the device and is counted in `cuda::host_fallbacks`).

use super::CudaStorage;
use super::ops as launch;
use crate::Result;
use crate::storage::cpu;
use crate::storage::cuda_flags::note_host_fallback;
use crate::storage::op::{BinaryFloatOp, BinaryOp, Cmp, UnaryOp};
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
use ferrograd_kernels::{DType, Layout};

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
}
