//! CUDA device queries and memory statistics, as `torch.cuda`.
//!
//! Without the `cuda` feature (or without a driver) there are no devices: the counts and
//! statistics are zero and [`synchronize`] returns an error.
//!
//! Work on a device runs asynchronously: an op queues its kernels and returns, and the
//! host waits only when it reads (`to_vec`, `item`, `to_device`) or calls [`synchronize`].
//! So a mistake only a kernel can see, an index or class target out of bounds, surfaces
//! there, as [`Error::IndexOutOfBounds`](crate::Error::IndexOutOfBounds) with the op's
//! message (a panic from the reading tensor method). Set `CUDA_LAUNCH_BLOCKING=1`, as with
//! PyTorch, to make such ops wait for their kernels and panic themselves.
//!
//! ```
//! use ferrograd_runtime::cuda;
//! if cuda::is_available() {
//!     println!("{} GPU(s); {} bytes in use on cuda:0", cuda::device_count(), cuda::memory_allocated(0));
//! }
//! ```

use crate::memory::MemoryStats;
use crate::storage::cuda as backend;

/// Whether at least one CUDA device can be used.
///
/// ```
/// # #[cfg(not(feature = "cuda"))]
/// assert!(!ferrograd_runtime::cuda::is_available());
/// ```
pub fn is_available() -> bool {
    device_count() > 0 && crate::storage::cuda_device_available(0)
}

/// The number of CUDA devices the driver reports (0 without one).
///
/// ```
/// let n = ferrograd_runtime::cuda::device_count();
/// # #[cfg(not(feature = "cuda"))]
/// assert_eq!(n, 0);
/// ```
pub fn device_count() -> usize {
    backend::device_count()
}

/// Bytes of device `ordinal` held by tensors (`torch.cuda.memory_allocated`).
///
/// ```
/// assert_eq!(ferrograd_runtime::cuda::memory_allocated(7), 0);
/// ```
pub fn memory_allocated(ordinal: usize) -> usize {
    memory_stats(ordinal).allocated
}

/// Bytes of device `ordinal` held by the caching allocator, in use or cached
/// (`torch.cuda.memory_reserved`).
///
/// ```
/// assert_eq!(ferrograd_runtime::cuda::memory_reserved(7), 0);
/// ```
pub fn memory_reserved(ordinal: usize) -> usize {
    memory_stats(ordinal).reserved
}

/// The peak of [`memory_allocated`] since start or [`reset_peak_memory_stats`].
///
/// ```
/// assert_eq!(ferrograd_runtime::cuda::max_memory_allocated(7), 0);
/// ```
pub fn max_memory_allocated(ordinal: usize) -> usize {
    memory_stats(ordinal).max_allocated
}

/// All allocator statistics of device `ordinal`.
///
/// ```
/// let s = ferrograd_runtime::cuda::memory_stats(0);
/// assert!(s.allocated <= s.reserved);
/// ```
pub fn memory_stats(ordinal: usize) -> MemoryStats {
    backend::memory_stats(ordinal)
}

/// Restarts the peaks from the current values (`torch.cuda.reset_peak_memory_stats`).
///
/// ```
/// ferrograd_runtime::cuda::reset_peak_memory_stats(0);
/// ```
pub fn reset_peak_memory_stats(ordinal: usize) {
    backend::reset_peak_memory_stats(ordinal)
}

/// Returns cached, unused device memory to the driver on every device
/// (`torch.cuda.empty_cache`); memory held by tensors is untouched.
///
/// ```
/// ferrograd_runtime::cuda::empty_cache();
/// ```
pub fn empty_cache() {
    backend::empty_cache()
}

/// Waits for all work queued on device `ordinal` (`torch.cuda.synchronize`); an index
/// that a kernel queued since the last wait found out of bounds comes back as
/// [`Error::IndexOutOfBounds`](crate::Error::IndexOutOfBounds).
///
/// ```
/// # #[cfg(not(feature = "cuda"))]
/// assert!(ferrograd_runtime::cuda::synchronize(0).is_err());
/// ```
pub fn synchronize(ordinal: usize) -> crate::Result<()> {
    backend::synchronize(ordinal)
}

pub use crate::storage::cuda_flags::{
    allow_tf32, clear_host_fallbacks, host_fallbacks, set_allow_tf32,
};
