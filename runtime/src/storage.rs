//! Storage shared by a tensor and all its views, with the version counter that guards
//! tensors saved for backward against in-place modification.

use crate::Device;
use ferrograd_kernels::DType;
use ferrograd_kernels::cpu::CpuStorage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(not(feature = "cuda"))]
pub(crate) mod dummy_cuda;
#[cfg(not(feature = "cuda"))]
pub(crate) use dummy_cuda as cuda;

pub(crate) use cuda::{CudaStorage, cuda_device, cuda_device_available};

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
