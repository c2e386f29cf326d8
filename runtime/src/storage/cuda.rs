//! CUDA storage through `cudarc` (libraries loaded at run time, so building needs no CUDA
//! install): device buffers come from a per-device [`CachingAllocator`] over the driver's
//! `cuMemAlloc`. Kernels for ops on this storage arrive with the CUDA backend; for now
//! tensors move to and from the GPU.

use crate::memory::{Block, CachingAllocator, MemoryStats, OutOfMemory, RawMemory};
use crate::{Device, Error, Result};
use cudarc::driver::{CudaContext, CudaStream};
use ferrograd_kernels::cpu::{CpuStorage, unary_map};
use ferrograd_kernels::{DType, Element, Layout, with_dtype};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A contiguous device buffer of `len` elements of `dtype`, in a block of the device's
/// caching allocator (returned to it on drop), and the stream that orders work on it.
#[derive(Debug)]
pub(crate) struct CudaStorage {
    block: Option<Block>,
    len: usize,
    dtype: DType,
    stream: Arc<CudaStream>,
    ordinal: usize,
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            // Back to the cache, not the device: reuse is ordered by the device's stream.
            with_existing(self.ordinal, |a| a.free(block));
        }
    }
}

/// The driver's allocator under the cache of one device.
#[derive(Debug)]
struct DriverMemory {
    ctx: Arc<CudaContext>,
}

impl RawMemory for DriverMemory {
    fn malloc(&mut self, bytes: usize) -> std::result::Result<u64, OutOfMemory> {
        let oom = |e: cudarc::driver::DriverError| OutOfMemory::device(bytes, e.to_string());
        self.ctx.bind_to_thread().map_err(oom)?;
        // SAFETY: the context is current on this thread; the segment belongs to the caching
        // allocator until it hands it back through `free`.
        unsafe { cudarc::driver::result::malloc_sync(bytes) }.map_err(oom)
    }

    fn free(&mut self, address: u64, _bytes: usize) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        // Work queued earlier may still use blocks of this segment: wait for it.
        let _ = self.ctx.synchronize();
        // SAFETY: `address` came from `malloc_sync` in this context, and the allocator only
        // frees segments none of whose blocks is in use.
        let _ = unsafe { cudarc::driver::result::free_sync(address) };
    }
}

type Allocators = HashMap<usize, CachingAllocator<DriverMemory>>;
static ALLOCATORS: Mutex<Option<Allocators>> = Mutex::new(None);

/// A block of `bytes` from device `ordinal`'s caching allocator (created on first use).
fn allocate(ordinal: usize, bytes: usize) -> Result<Block> {
    let ctx = context(ordinal)?;
    let mut guard = ALLOCATORS.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .get_or_insert_with(HashMap::new)
        .entry(ordinal)
        .or_insert_with(|| CachingAllocator::new(DriverMemory { ctx }))
        .allocate(bytes)
        .map_err(|source| Error::OutOfMemory {
            device: Device::Cuda(ordinal),
            source,
        })
}

/// Runs `f` on device `ordinal`'s allocator if it exists (it does once a block was
/// handed out), without touching the driver.
fn with_existing<R>(
    ordinal: usize,
    f: impl FnOnce(&mut CachingAllocator<DriverMemory>) -> R,
) -> Option<R> {
    let mut guard = ALLOCATORS.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_mut()?.get_mut(&ordinal).map(f)
}

/// Statistics of device `ordinal`'s allocator (all zero before its first allocation).
pub(crate) fn memory_stats(ordinal: usize) -> MemoryStats {
    with_existing(ordinal, |a| a.stats()).unwrap_or_default()
}

pub(crate) fn reset_peak_memory_stats(ordinal: usize) {
    with_existing(ordinal, CachingAllocator::reset_peak_stats);
}

pub(crate) fn empty_cache() {
    let mut guard = ALLOCATORS.lock().unwrap_or_else(|e| e.into_inner());
    for a in guard.iter_mut().flat_map(|m| m.values_mut()) {
        a.empty_cache();
    }
}

pub(crate) fn device_count() -> usize {
    // SAFETY: only tries to dlopen the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

pub(crate) fn synchronize(ordinal: usize) -> Result<()> {
    context(ordinal)?.synchronize().map_err(device_err(ordinal))
}

static CONTEXTS: Mutex<Option<HashMap<usize, Arc<CudaContext>>>> = Mutex::new(None);

fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library and reports
    // whether that worked; it touches no CUDA state.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::CudaLibraryMissing {
            library: "libcuda (the NVIDIA driver)",
        });
    }
    let mut guard = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(ctx) = map.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| Error::CudaDevice {
        ordinal,
        reason: e.to_string(),
    })?;
    map.insert(ordinal, ctx.clone());
    Ok(ctx)
}

pub(crate) fn cuda_device_available(ordinal: usize) -> bool {
    context(ordinal).is_ok()
}

/// `Ok` when device `ordinal` can be used, else why not.
pub(crate) fn cuda_device(ordinal: usize) -> Result<()> {
    context(ordinal).map(|_| ())
}

fn device_err(ordinal: usize) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::CudaDevice {
        ordinal,
        reason: e.to_string(),
    }
}

impl CudaStorage {
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn address(&self) -> u64 {
        self.block
            .as_ref()
            .expect("live storage has a block")
            .address
    }

    /// Copies the elements of `layout` (a view of this buffer) to host memory, after the
    /// work queued on the stream has finished.
    pub(crate) fn to_cpu(&self, layout: &Layout) -> Result<CpuStorage> {
        let err = device_err(self.ordinal);
        self.stream.synchronize().map_err(&err)?;
        let (len, address) = (self.len, self.address());
        let full = with_dtype!(self.dtype, T => {
            let mut host = vec![T::default(); len];
            // SAFETY: the block holds `len` initialised elements of `T` written by an upload
            // or a kernel, and the stream is idle, so nothing writes it during the copy.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, address) }.map_err(&err)?;
            T::into_storage(host)
        });
        Ok(
            with_dtype!(full.dtype(), T => T::into_storage(unary_map(full.typed::<T>(), layout, |x| x))),
        )
    }

    /// Uploads the elements of `layout` (a view of `src`) to `device`, contiguous.
    pub(crate) fn from_cpu(src: &CpuStorage, layout: &Layout, device: Device) -> Result<Self> {
        let Device::Cuda(ordinal) = device else {
            unreachable!("from_cpu called for {device}")
        };
        let ctx = context(ordinal)?;
        let stream = ctx.default_stream();
        let err = device_err(ordinal);
        let dtype = src.dtype();
        with_dtype!(dtype, T => {
            let host: Vec<T> = unary_map(src.typed::<T>(), layout, |x| x);
            let bytes = host.len() * std::mem::size_of::<T>();
            let block = allocate(ordinal, bytes)?;
            let storage = CudaStorage {
                len: host.len(),
                block: Some(block),
                dtype,
                stream,
                ordinal,
            };
            ctx.bind_to_thread().map_err(&err)?;
            // SAFETY: the block is at least `bytes` long and owned by `storage`; the copy is
            // synchronous, so `host` outlives it.
            unsafe { cudarc::driver::result::memcpy_htod_sync(storage.address(), &host) }
                .map_err(&err)?;
            Ok(storage)
        })
    }
}
