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
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::{DType, Layout};
use op::{BinaryFloatOp, BinaryOp, Cmp, UnaryOp};
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
    /// A new contiguous buffer of `len` elements equal to `value` on `device`.
    pub(crate) fn full(device: Device, dtype: DType, len: usize, value: f64) -> Result<Storage> {
        Ok(match device {
            Device::Cpu => Storage::Cpu(CpuStorage::full(dtype, len, value)),
            Device::Cuda(ordinal) => Storage::Cuda(cuda::full(ordinal, dtype, len, value)?),
        })
    }

    /// `op(x)` over the view `layout` (float storage), a new contiguous buffer.
    pub(crate) fn unary<K: UnaryOp>(&self, layout: &Layout, op: &K, name: &str) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => Storage::Cpu(cpu::unary(s, layout, op)),
            Storage::Cuda(s) => Storage::Cuda(s.unary(layout, op, name)?),
        })
    }

    /// `x = op(x)` through the view `layout` (float storage).
    pub(crate) fn unary_inplace<K: UnaryOp>(
        &mut self,
        layout: &Layout,
        op: &K,
        name: &str,
    ) -> Result<()> {
        match self {
            Storage::Cpu(s) => {
                cpu::unary_inplace(s, layout, op);
                Ok(())
            }
            Storage::Cuda(s) => s.unary_inplace(layout, op, name),
        }
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
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Storage::Cpu(cpu::binary(a, la, b, lb, op)),
            (Storage::Cuda(a), Storage::Cuda(b)) => Storage::Cuda(a.binary(la, b, lb, op, name)?),
            _ => mixed(name, self, rhs),
        })
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
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Storage::Cpu(cpu::binary_float(a, la, b, lb, op)),
            (Storage::Cuda(a), Storage::Cuda(b)) => {
                Storage::Cuda(a.binary_float(la, b, lb, op, name)?)
            }
            _ => mixed(name, self, rhs),
        })
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
        match (&mut *self, src) {
            (Storage::Cpu(d), Storage::Cpu(s)) => {
                cpu::binary_inplace(d, ldst, s, lsrc, op);
                Ok(())
            }
            (Storage::Cuda(d), Storage::Cuda(s)) => d.binary_inplace(ldst, s, lsrc, op, name),
            _ => mixed(name, self, src),
        }
    }

    /// `dst[region] = src` for any dtype (`lsrc` broadcast to the region; another buffer).
    #[track_caller]
    pub(crate) fn assign(&mut self, region: &Layout, src: &Storage, lsrc: &Layout) -> Result<()> {
        match (&mut *self, src) {
            (Storage::Cpu(d), Storage::Cpu(s)) => {
                cpu::assign(d, region, s, lsrc);
                Ok(())
            }
            (Storage::Cuda(d), Storage::Cuda(s)) => d.assign(region, s, lsrc),
            _ => mixed("copy", self, src),
        }
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
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Storage::Cpu(cpu::compare(a, la, b, lb, cmp)),
            (Storage::Cuda(a), Storage::Cuda(b)) => Storage::Cuda(a.compare(la, b, lb, cmp, name)?),
            _ => mixed(name, self, rhs),
        })
    }

    /// `a && b` of bool storages.
    #[track_caller]
    pub(crate) fn logical_and(&self, la: &Layout, rhs: &Storage, lb: &Layout) -> Result<Storage> {
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Storage::Cpu(cpu::logical_and(a, la, b, lb)),
            (Storage::Cuda(a), Storage::Cuda(b)) => Storage::Cuda(a.logical_and(la, b, lb)?),
            _ => mixed("logical_and", self, rhs),
        })
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
        Ok(match self {
            Storage::Cpu(s) => Storage::Cpu(cpu::cast(s, layout, dtype)),
            Storage::Cuda(s) => Storage::Cuda(s.cast(layout, dtype)?),
        })
    }

    /// Writes `value` to every element of the view `layout`.
    pub(crate) fn fill(&mut self, layout: &Layout, value: f64) -> Result<()> {
        match self {
            Storage::Cpu(s) => {
                cpu::fill(s, layout, value);
                Ok(())
            }
            Storage::Cuda(s) => s.fill(layout, value),
        }
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
