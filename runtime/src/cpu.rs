//! CPU memory statistics and settings, as [`cuda`](crate::cuda) has for device memory.
//!
//! Every CPU tensor's elements come from a caching allocator: a freed buffer's block is
//! kept and handed to the next tensor of (about) the same size instead of going back to
//! the system, so a training loop stops paying page faults for each batch (see
//! [`HostPool`](ferrograd_kernels::cpu::HostPool) for the design). Settings:
//!
//! | setting | in code | environment (read once, at the first allocation) |
//! | --- | --- | --- |
//! | cap on cached bytes (default 2 GiB); freed blocks beyond it go back to the system | [`set_cache_limit`] | `FERROGRAD_CPU_CACHE_LIMIT=512M` (bytes, or `K`/`M`/`G`, powers of 1024; `0` turns caching off) |
//! | transparent huge pages for blocks of 2 MiB and more (Linux, default on) | [`set_huge_pages`] | `FERROGRAD_CPU_HUGE_PAGES=0` turns them off |
//!
//! ```
//! use ferrograd_runtime::{cpu, prelude::*};
//! let before = cpu::memory_allocated();
//! let t = Tensor::zeros(&[1024, 1024], DType::F32, &Device::Cpu);
//! assert!(cpu::memory_allocated() >= before + 4 << 20);
//! drop(t);
//! cpu::empty_cache(); // cached blocks go back to the system
//! assert!(cpu::memory_reserved() >= cpu::memory_allocated());
//! ```

use crate::memory::MemoryStats;
use ferrograd_kernels::cpu::HOST_POOL;

/// Bytes of host memory held by tensors (and kernel workspaces in use), like
/// `torch.cuda.memory_allocated` for the CPU. Counts whole blocks (requests rounded up
/// to their size class).
///
/// ```
/// use ferrograd_runtime::{cpu, prelude::*};
/// let t = Tensor::ones(&[1000], DType::F64, &Device::Cpu);
/// assert!(cpu::memory_allocated() >= 8000);
/// ```
pub fn memory_allocated() -> usize {
    HOST_POOL.allocated()
}

/// Bytes of host memory held by the caching allocator, in use or cached
/// (`memory_reserved`).
///
/// ```
/// assert!(ferrograd_runtime::cpu::memory_reserved() >= ferrograd_runtime::cpu::memory_allocated());
/// ```
pub fn memory_reserved() -> usize {
    HOST_POOL.stats().reserved
}

/// The peak of [`memory_allocated`] since start or [`reset_peak_memory_stats`].
///
/// ```
/// use ferrograd_runtime::{cpu, prelude::*};
/// cpu::reset_peak_memory_stats();
/// drop(Tensor::zeros(&[1 << 20], DType::F32, &Device::Cpu));
/// assert!(cpu::max_memory_allocated() >= 4 << 20);
/// ```
pub fn max_memory_allocated() -> usize {
    HOST_POOL.stats().max_allocated
}

/// All statistics of the host allocator, in the form [`crate::cuda::memory_stats`] uses:
/// `segments_allocated` counts blocks obtained from the system, `cache_hits` requests
/// served from the cache.
///
/// ```
/// let s = ferrograd_runtime::cpu::memory_stats();
/// assert!(s.allocated <= s.reserved && s.max_allocated >= s.allocated);
/// ```
pub fn memory_stats() -> MemoryStats {
    let s = HOST_POOL.stats();
    MemoryStats {
        allocated: s.allocated,
        reserved: s.reserved,
        max_allocated: s.max_allocated,
        max_reserved: s.max_reserved,
        segments_allocated: s.system_allocations,
        cache_hits: s.cache_hits,
    }
}

/// Restarts the peaks from the current values.
///
/// ```
/// ferrograd_runtime::cpu::reset_peak_memory_stats();
/// ```
pub fn reset_peak_memory_stats() {
    HOST_POOL.reset_peak_stats()
}

/// Returns every cached host block to the system (and, on glibc, trims the C heap), so
/// the process's resident size falls back to what live tensors hold. Tensors are
/// untouched.
///
/// ```
/// ferrograd_runtime::cpu::empty_cache();
/// ```
pub fn empty_cache() {
    HOST_POOL.empty_cache()
}

/// The cap on cached host bytes (the environment's `FERROGRAD_CPU_CACHE_LIMIT`, else 2
/// GiB, until [`set_cache_limit`]).
///
/// ```
/// assert!(ferrograd_runtime::cpu::cache_limit() > 0 || std::env::var_os("FERROGRAD_CPU_CACHE_LIMIT").is_some());
/// ```
pub fn cache_limit() -> usize {
    HOST_POOL.cache_limit()
}

/// Sets the cap on cached host bytes; blocks freed beyond it go back to the system, and
/// cached blocks over a lowered cap are released now. `0` turns caching off.
///
/// ```
/// let old = ferrograd_runtime::cpu::cache_limit();
/// ferrograd_runtime::cpu::set_cache_limit(256 << 20);
/// assert_eq!(ferrograd_runtime::cpu::cache_limit(), 256 << 20);
/// ferrograd_runtime::cpu::set_cache_limit(old);
/// ```
pub fn set_cache_limit(bytes: usize) {
    HOST_POOL.set_cache_limit(bytes)
}

/// Whether new host blocks of 2 MiB and more ask for transparent huge pages (Linux).
///
/// ```
/// let on = ferrograd_runtime::cpu::huge_pages();
/// # let _ = on;
/// ```
pub fn huge_pages() -> bool {
    HOST_POOL.huge_pages()
}

/// Turns transparent huge pages for new large host blocks on or off (the environment's
/// `FERROGRAD_CPU_HUGE_PAGES=0` starts with them off).
///
/// ```
/// let on = ferrograd_runtime::cpu::huge_pages();
/// ferrograd_runtime::cpu::set_huge_pages(false);
/// assert!(!ferrograd_runtime::cpu::huge_pages());
/// ferrograd_runtime::cpu::set_huge_pages(on);
/// ```
pub fn set_huge_pages(on: bool) {
    HOST_POOL.set_huge_pages(on)
}
