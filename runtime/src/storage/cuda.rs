//! CUDA storage through `cudarc` (libraries loaded at run time, so building needs no CUDA
//! install): device buffers come from a per-device [`CachingAllocator`] over the driver's
//! `cuMemAlloc`; work is queued on the device's stream and the host waits only when it
//! reads. [`launch`] (with `index` and `blas`) launches the NVRTC-compiled kernels and cuBLAS
//! on this storage; `backend` is this storage's side of the boundary.

mod backend;
mod blas;
mod index;
pub(crate) mod launch;

use crate::memory::{Block, CachingAllocator, MemoryStats, OutOfMemory, RawMemory};
use crate::{Device, Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cpu::{CpuStorage, HostBuffer, unary_map};
use ferrograd_kernels::cuda::KernelModule;
use ferrograd_kernels::{DType, Element, Layout, with_dtype};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

/// A contiguous device buffer of `len` elements of `dtype`, in a block of the device's
/// caching allocator (returned to it on drop), and the device (whose stream orders all
/// work on it).
#[derive(Debug)]
pub(crate) struct CudaStorage {
    block: Option<Block>,
    len: usize,
    dtype: DType,
    dev: Arc<GpuDevice>,
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            // Back to the cache, not the device: reuse is ordered by the device's stream.
            with_existing(self.dev.ordinal, |a| a.free(block));
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

/// A new buffer of `len` elements equal to `value` on device `ordinal`.
pub(crate) fn full(ordinal: usize, dtype: DType, len: usize, value: f64) -> Result<CudaStorage> {
    launch::full(&gpu(ordinal)?, dtype, len, value)
}

thread_local! {
    /// How many pieces of work (kernels, cuBLAS calls, copies) this thread has queued on
    /// any device.
    static QUEUED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts a piece of work this thread queues on a device, so that the profiler gives
/// device time only to the ops that queued some (a view queues none and, as in
/// PyTorch, has no CUDA time).
pub(crate) fn note_queued() {
    QUEUED.with(|q| q.set(q.get() + 1));
}

/// A point in the work queued on every device in use (the profiler times ops on the
/// device with a pair of these: CUDA events recorded on each device's stream), with
/// this thread's count of queued work at that point.
pub(crate) struct StreamMarks(Vec<(usize, cudarc::driver::CudaEvent)>, u64);

impl StreamMarks {
    /// Marks every initialised device's stream now (none when no device was used, so a
    /// CPU run creates no CUDA context).
    pub(crate) fn now() -> StreamMarks {
        let guard = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        let Some(map) = guard.as_ref() else {
            return StreamMarks(Vec::new(), 0);
        };
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        StreamMarks(
            map.values()
                .filter_map(|d| Some((d.ordinal, d.stream.record_event(timed).ok()?)))
                .collect(),
            QUEUED.with(|q| q.get()),
        )
    }

    /// Whether this thread queued work on a device between `self` and `end`.
    pub(crate) fn queued_work_before(&self, end: &StreamMarks) -> bool {
        end.1 != self.1
    }

    /// Whether no device was marked.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// For each device marked by both: microseconds of device time from `self` to
    /// `end` (waits until the device reaches `end`).
    pub(crate) fn elapsed_us(&self, end: &StreamMarks) -> Vec<(usize, f64)> {
        self.0
            .iter()
            .filter_map(|(ordinal, start)| {
                let (_, stop) = end.0.iter().find(|(o, _)| o == ordinal)?;
                let ms = start.elapsed_ms(stop).ok()?;
                Some((*ordinal, f64::from(ms) * 1e3))
            })
            .collect()
    }
}

pub(crate) fn synchronize(ordinal: usize) -> Result<()> {
    let dev = gpu(ordinal)?;
    dev.ctx.synchronize().map_err(device_err(ordinal))?;
    dev.take_index_error()
}

/// Whether `CUDA_LAUNCH_BLOCKING=1` asks for errors at the op that caused them (as in
/// PyTorch): then a bounds-checked launch waits for its kernel and reports at once.
fn launch_blocking() -> bool {
    static BLOCKING: OnceLock<bool> = OnceLock::new();
    *BLOCKING.get_or_init(|| std::env::var("CUDA_LAUNCH_BLOCKING").is_ok_and(|v| v == "1"))
}

/// Bounds checks that kernels make on indices living on the device (`IndexCheck` in
/// common.cuh): the report they write on a bad index, and what each launch since the host
/// last looked checked, to word the panic.
#[derive(Default)]
struct IndexChecks {
    /// Device address of the report, two zeroed u64 (launch id, bad value); allocated from
    /// the driver on first use and kept for the process, outside the caching allocator so
    /// it does not show in the memory statistics.
    report: Option<u64>,
    /// The id of the last checked launch (ids start at 1; 0 in the report means clean).
    last: u64,
    /// `(launch id, what it checked)` since the report was last read, oldest first; the
    /// oldest are dropped beyond [`IndexChecks::KEEP`] (a bad index they found is then
    /// reported without their shapes).
    pending: VecDeque<(u64, IndexBounds)>,
}

impl IndexChecks {
    const KEEP: usize = 4096;
}

/// One GPU as the runtime uses it: its context, the stream all its work is queued on,
/// its architecture, the kernels loaded so far and the cuBLAS handle.
pub(crate) struct GpuDevice {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: String,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    blas: Mutex<Option<blas::Blas>>,
    /// Recently uploaded multi-tensor slot tables, newest last (see [`GpuDevice::table`]).
    tables: Mutex<Vec<(Vec<i64>, CudaStorage)>>,
    /// Bounds checks queued on the stream and not yet read back.
    checks: Mutex<IndexChecks>,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuDevice(cuda:{}, {})", self.ordinal, self.arch)
    }
}

impl GpuDevice {
    /// The kernel `name` of `module`, compiled (NVRTC, cached per process) and loaded into
    /// this context on first use.
    pub(crate) fn function(
        &self,
        module: &KernelModule,
        name: &'static str,
    ) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        let loaded = {
            let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            match modules.get(module.name) {
                Some(m) => m.clone(),
                None => {
                    if !ferrograd_kernels::cuda::nvrtc_available() {
                        return Err(Error::CudaLibraryMissing {
                            library: "libnvrtc (CUDA's run-time compiler)",
                        });
                    }
                    let image =
                        module
                            .compile_cached(&self.arch)
                            .map_err(|e| Error::CudaDevice {
                                ordinal: self.ordinal,
                                reason: e.to_string(),
                            })?;
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(image.to_vec()))
                        .map_err(device_err(self.ordinal))?;
                    modules.insert(module.name, m.clone());
                    m
                }
            }
        };
        let f = loaded
            .load_function(name)
            .map_err(device_err(self.ordinal))?;
        functions.insert(name, f.clone());
        Ok(f)
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes this device's context the calling thread's current one (NCCL's
    /// communicators are made and used on the calling thread's context).
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn bind_to_thread(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(device_err(self.ordinal))
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device address of a buffer holding `words`. The last few tables are kept: a
    /// training loop asks for the same table every step (the allocator hands the same
    /// blocks to the same tensors), and a cached one needs no upload, so no host wait. An
    /// evicted table goes back to the allocator; work already queued that reads it runs
    /// before any later work that could reuse the block (one stream, and uploads wait for
    /// the stream).
    pub(crate) fn table(self: &Arc<Self>, words: &[i64]) -> Result<u64> {
        const KEEP: usize = 4;
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = tables.iter().position(|(w, _)| w == words) {
            let entry = tables.remove(i);
            let address = entry.1.address_of(0);
            tables.push(entry);
            return Ok(address);
        }
        let mut buf = self.alloc(DType::I64, words.len())?;
        buf.upload(&CpuStorage::I64(HostBuffer::from_slice(words)))?;
        let address = buf.address_of(0);
        if tables.len() == KEEP {
            tables.remove(0);
        }
        tables.push((words.to_vec(), buf));
        Ok(address)
    }

    /// Registers a bounds check for the next launch: the report's device address and the
    /// launch's id, which the kernel writes on a bad index (see `IndexCheck` in common.cuh).
    pub(crate) fn index_check(&self, bounds: &IndexBounds) -> Result<(u64, u64)> {
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        let report = match checks.report {
            Some(address) => address,
            None => {
                let err = device_err(self.ordinal);
                self.ctx.bind_to_thread().map_err(&err)?;
                // SAFETY: the context is current on this thread; the 16 bytes are zeroed
                // before any kernel can see the address, and never freed (the report lives
                // as long as the context, which the process keeps).
                let address = unsafe {
                    let address = cudarc::driver::result::malloc_sync(16).map_err(&err)?;
                    cudarc::driver::result::memset_d8_sync(address, 0, 16).map_err(&err)?;
                    address
                };
                checks.report = Some(address);
                address
            }
        };
        if checks.pending.len() == IndexChecks::KEEP {
            checks.pending.pop_front();
        }
        checks.last += 1;
        let launch = checks.last;
        checks.pending.push_back((launch, bounds.clone()));
        Ok((report, launch))
    }

    /// After a bounds-checked launch: with `CUDA_LAUNCH_BLOCKING=1`, waits for it and
    /// returns its bad index as an error here, at the op.
    pub(crate) fn after_index_check(&self) -> Result<()> {
        if !launch_blocking() {
            return Ok(());
        }
        self.stream
            .synchronize()
            .map_err(device_err(self.ordinal))?;
        self.take_index_error()
    }

    /// Reads the bounds-check report once the stream is idle: the bad index a kernel found
    /// since the last read, as an error worded by its op (and the report cleared), if any.
    /// Free when no checked launch ran since the last read.
    fn take_index_error(&self) -> Result<()> {
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        let Some(report) = checks.report.filter(|_| !checks.pending.is_empty()) else {
            return Ok(());
        };
        let err = device_err(self.ordinal);
        self.ctx.bind_to_thread().map_err(&err)?;
        let mut found = [0u64; 2];
        // SAFETY: the report holds two u64; the caller waited for the stream, so no kernel
        // writes it meanwhile.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut found, report) }.map_err(&err)?;
        let pending = std::mem::take(&mut checks.pending);
        let [launch, value] = found;
        if launch == 0 {
            return Ok(());
        }
        // SAFETY: as above; clears the report for the launches that follow.
        unsafe { cudarc::driver::result::memcpy_htod_sync(report, &[0u64; 2]) }.map_err(&err)?;
        let value = value as i64;
        let message = match pending.iter().find(|(id, _)| *id == launch) {
            Some((_, bounds)) => bounds.message(value),
            None => format!("index {value} is out of bounds"),
        };
        Err(Error::IndexOutOfBounds {
            device: Device::Cuda(self.ordinal),
            message,
        })
    }

    /// A new buffer of `len` elements of `dtype` on this device (contents undefined).
    pub(crate) fn alloc(self: &Arc<Self>, dtype: DType, len: usize) -> Result<CudaStorage> {
        let block = allocate(self.ordinal, (len * dtype.size_in_bytes()).max(1))?;
        Ok(CudaStorage {
            block: Some(block),
            len,
            dtype,
            dev: self.clone(),
        })
    }
}

static DEVICES: Mutex<Option<HashMap<usize, Arc<GpuDevice>>>> = Mutex::new(None);

/// Device `ordinal`, opened on first use.
pub(crate) fn gpu(ordinal: usize) -> Result<Arc<GpuDevice>> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library and reports
    // whether that worked; it touches no CUDA state.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::CudaLibraryMissing {
            library: "libcuda (the NVIDIA driver)",
        });
    }
    let mut guard = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(dev) = map.get(&ordinal) {
        return Ok(dev.clone());
    }
    let err = device_err(ordinal);
    let ctx = CudaContext::new(ordinal).map_err(&err)?;
    let (major, minor) = ctx.compute_capability().map_err(&err)?;
    let dev = Arc::new(GpuDevice {
        ordinal,
        stream: ctx.default_stream(),
        ctx,
        arch: format!("sm_{major}{minor}"),
        modules: Mutex::new(HashMap::new()),
        functions: Mutex::new(HashMap::new()),
        blas: Mutex::new(None),
        tables: Mutex::new(Vec::new()),
        checks: Mutex::new(IndexChecks::default()),
    });
    map.insert(ordinal, dev.clone());
    Ok(dev)
}

fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    gpu(ordinal).map(|d| d.ctx.clone())
}

pub(crate) fn cuda_device_available(ordinal: usize) -> bool {
    context(ordinal).is_ok()
}

/// `Ok` when device `ordinal` can be used, else why not.
pub(crate) fn cuda_device(ordinal: usize) -> Result<()> {
    context(ordinal).map(|_| ())
}

pub(crate) fn device_err(ordinal: usize) -> impl Fn(cudarc::driver::DriverError) -> Error {
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
        self.dev.ordinal
    }

    /// The number of elements in the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The device address of element `offset`.
    pub(crate) fn address_of(&self, offset: usize) -> u64 {
        let block = self.block.as_ref().expect("live storage has a block");
        block.address + (offset * self.dtype.size_in_bytes()) as u64
    }

    /// The device this buffer lives on.
    pub(crate) fn device(&self) -> &Arc<GpuDevice> {
        &self.dev
    }

    /// The whole buffer in host memory, after the work queued on the stream has finished.
    pub(crate) fn download(&self) -> Result<CpuStorage> {
        let err = device_err(self.dev.ordinal);
        self.dev.stream.synchronize().map_err(&err)?;
        self.dev.take_index_error()?;
        let (len, address) = (self.len, self.address_of(0));
        Ok(with_dtype!(self.dtype, T => {
            let mut host = HostBuffer::<T>::zeroed(len);
            if len > 0 {
                // SAFETY: the block holds `len` initialised elements of `T` written by an
                // upload or a kernel, and the stream is idle, so nothing writes it meanwhile.
                unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, address) }.map_err(&err)?;
                note_queued();
            }
            T::into_storage(host)
        }))
    }

    /// Overwrites the whole buffer with `host` (same dtype and length).
    pub(crate) fn upload(&mut self, host: &CpuStorage) -> Result<()> {
        assert!(
            host.dtype() == self.dtype && host.len() == self.len,
            "upload: host buffer does not match the device buffer"
        );
        let err = device_err(self.dev.ordinal);
        let address = self.address_of(0);
        self.dev.ctx.bind_to_thread().map_err(&err)?;
        with_dtype!(self.dtype, T => {
            let data = host.typed::<T>();
            if !data.is_empty() {
                // SAFETY: the block holds `len` elements of `T`; the copy is synchronous and
                // ordered after the work queued on the (legacy default) stream.
                unsafe { cudarc::driver::result::memcpy_htod_sync(address, data) }.map_err(&err)?;
                note_queued();
            }
        });
        Ok(())
    }

    /// Copies the elements of `layout` (a view of this buffer) to host memory, after the
    /// work queued on the stream has finished.
    pub(crate) fn to_cpu(&self, layout: &Layout) -> Result<CpuStorage> {
        let full = self.download()?;
        Ok(
            with_dtype!(full.dtype(), T => T::into_storage(unary_map(full.typed::<T>(), layout, |x| x))),
        )
    }

    /// Uploads the elements of `layout` (a view of `src`) to `device`, contiguous.
    pub(crate) fn from_cpu(src: &CpuStorage, layout: &Layout, device: Device) -> Result<Self> {
        let Device::Cuda(ordinal) = device else {
            unreachable!("from_cpu called for {device}")
        };
        let dev = gpu(ordinal)?;
        let host = if layout.contiguous_range() == Some(0..src.len()) {
            None
        } else {
            Some(
                with_dtype!(src.dtype(), T => T::into_storage(unary_map(src.typed::<T>(), layout, |x| x))),
            )
        };
        let host = host.as_ref().unwrap_or(src);
        let mut storage = dev.alloc(host.dtype(), host.len())?;
        storage.upload(host)?;
        Ok(storage)
    }
}
