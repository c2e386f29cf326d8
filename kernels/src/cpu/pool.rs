//! Host memory for tensors: a caching allocator, and [`HostBuffer`], the buffer type
//! every CPU tensor's elements live in.
//!
//! Without a cache every large tensor is a fresh `mmap` from the C allocator, which the
//! kernel zero-fills page by page on first touch and unmaps again on drop: for large
//! batches more time goes to page faults than to the kernels. The pool keeps freed
//! blocks and hands them out again, as the CUDA caching allocator does for device memory:
//!
//! - Requests up to 1 MiB (most of them, and the most frequent) are rounded up to a
//!   *size class* (multiples of 64 bytes up to 4 KiB, then eight classes per power of
//!   two, so at most 12.5% is wasted) and served best fit: the smallest cached block of
//!   that class or up to a quarter larger. These blocks are never split. The cache of
//!   small blocks is sharded: each thread allocates from its own shard (sixteen
//!   mutexes, one per thread slot, so the kernels' helper threads and loader threads do not contend)
//!   and a block goes back to the shard it came from, where the thread that allocates
//!   that size again finds it.
//! - Larger requests take whole pages from an *arena*: one reserved range of address
//!   space carved best fit, split, and merged again on free, the CUDA caching
//!   allocator's design (`ferrograd_runtime::memory`) with a single segment that grows
//!   at its top. A network's activations and im2col columns come in dozens of distinct
//!   large sizes; with a block or segment per size the cache grows to several times the
//!   peak in use, while in one range free neighbours always merge. It sits behind one
//!   mutex, taken once per large tensor (whose kernel then runs far longer). Where no
//!   range can be reserved, large blocks are mappings of their own, not cached.
//! - Every block is aligned to [`ALIGN`] (64) bytes. Fresh pages arrive zeroed from the
//!   kernel without a fill. The arena is 2 MiB aligned and can be marked for transparent
//!   huge pages (`madvise`, Linux; [`HostPool::set_huge_pages`] or
//!   `FERROGRAD_CPU_HUGE_PAGES=1`; off by default, as measured in `bench/memory_compare.py`).
//! - Cached bytes are capped ([`HostPool::set_cache_limit`], or the environment
//!   variable `FERROGRAD_CPU_CACHE_LIMIT`, in bytes or with a `K`/`M`/`G` (binary)
//!   suffix; default 2 GiB): a freed small block that would exceed the cap goes back to
//!   the system, and the arena's free pages beyond it are released
//!   (`madvise(MADV_DONTNEED)`). [`HostPool::empty_cache`] returns all of them.
//!
//! A block is reused only when its [`HostBuffer`] is dropped, and a buffer is dropped
//! only when nothing borrows it (every tensor view holds the storage that owns it).
//!
//! ```
//! use ferrograd_kernels::cpu::{HOST_POOL, HostBuffer};
//! let a = HostBuffer::<f32>::zeroed(100_000);
//! let address = a.as_ptr() as usize;
//! assert_eq!(address % 64, 0);
//! drop(a);
//! // Freed on this thread, it comes back for a request of the same size class.
//! let b = HostBuffer::<f32>::full(100_000, 1.5);
//! assert_eq!(b.as_ptr() as usize, address);
//! assert!(HOST_POOL.stats().allocated >= 400_000);
//! ```

use super::arena::Arena;
use crate::Element;
use std::alloc::{self, Layout};
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicBool, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Mutex, MutexGuard, OnceLock};

mod buffer;

pub use buffer::HostBuffer;

/// Alignment of every block, in bytes (a cache line, and a whole AVX-512 vector).
pub const ALIGN: usize = 64;
/// Blocks this large come straight from the kernel as anonymous mappings.
const MAP_MIN: usize = 256 << 10;
/// Blocks this large are aligned to it and offered transparent huge pages.
const HUGE_PAGE: usize = 2 << 20;
/// Reused blocks this large are zeroed by the thread team together ([`HostBuffer::zeroed`]).
const PARALLEL_ZERO_BYTES: usize = 1 << 20;
/// Requests above this size go to the segment allocator.
const LARGE: usize = 1 << 20;
/// The number of shards of the cache.
const SHARDS: usize = 16;
/// The cap on cached bytes when neither code nor the environment sets one.
pub const DEFAULT_CACHE_LIMIT: usize = 2 << 30;
/// `limit` before the environment was read.
const UNSET: usize = usize::MAX;

/// Rounds a request up to its size class.
///
/// ```
/// use ferrograd_kernels::cpu::size_class;
/// assert_eq!(size_class(1), 64);
/// assert_eq!(size_class(4096), 4096);
/// assert_eq!(size_class(4097), 4608);
/// assert_eq!(size_class(1 << 20), 1 << 20);
/// assert!(size_class(1_000_001) <= 1_000_001 * 9 / 8);
/// ```
pub fn size_class(bytes: usize) -> usize {
    let b = bytes.max(1);
    if b <= 4096 {
        return b.div_ceil(64) * 64;
    }
    let log2 = usize::BITS - 1 - b.leading_zeros();
    let step = 1usize << (log2 - 3);
    b.div_ceil(step) * step
}

/// Allocator statistics, as for the CUDA caching allocator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Bytes in blocks held by buffers (`memory_allocated`).
    pub allocated: usize,
    /// Bytes held from the system, in use or cached (`memory_reserved`).
    pub reserved: usize,
    /// The highest `allocated` since start or the last peak reset.
    pub max_allocated: usize,
    /// The highest `reserved` since start or the last peak reset.
    pub max_reserved: usize,
    /// Blocks obtained from the system.
    pub system_allocations: usize,
    /// Requests served from the cache.
    pub cache_hits: usize,
}

/// A block's address, movable between threads (it is only ever owned by one buffer or
/// one free list).
struct Raw(NonNull<u8>);
// SAFETY: a `Raw` is a plain address of memory no one else references while it sits in
// a free list; the list's mutex orders its hand-over between threads.
unsafe impl Send for Raw {}

/// The number of small size classes: 64-byte steps to 4 KiB (64), then eight per power
/// of two up to [`LARGE`] (8 × 8), and `LARGE` itself.
const CLASSES: usize = 64 + 8 * 8 + 1;

/// The slot of a size class (a value [`size_class`] returns, at most [`LARGE`]).
#[inline]
fn class_index(size: usize) -> usize {
    if size <= 4096 {
        return size / 64 - 1;
    }
    let log2 = (usize::BITS - 1 - size.leading_zeros()) as usize;
    64 + (log2 - 12) * 8 + (size >> (log2 - 3)) - 8
}

/// The size class of slot `index` (the inverse of [`class_index`]; slots that no class
/// maps to give sizes no request rounds to, and stay empty).
#[inline]
fn class_size(index: usize) -> usize {
    if index < 64 {
        return (index + 1) * 64;
    }
    let (log2, m) = (12 + (index - 64) / 8, 8 + (index - 64) % 8);
    m << (log2 - 3)
}

/// One shard's cached blocks, a free list per size class (lists are kept when empty,
/// so caching a block never allocates once its class has been seen).
struct Lists {
    free: [Vec<Raw>; CLASSES],
    /// Requests this shard served from its lists (counted under its lock, not with an
    /// atomic on the hot path).
    hits: usize,
}

/// One shard, padded to its own cache line.
#[repr(align(64))]
struct Shard(Mutex<Lists>);

/// The caching allocator for host memory. The runtime uses the one global instance,
/// [`HOST_POOL`]; tests build their own to see exact statistics.
pub struct HostPool {
    shards: [Shard; SHARDS],
    large: Mutex<Arena>,
    limit: AtomicUsize,
    huge_pages: AtomicBool,
    allocated: AtomicUsize,
    /// Bytes of small blocks held from the system.
    reserved: AtomicUsize,
    /// The large pool's reserved bytes, mirrored outside its lock.
    large_reserved: AtomicUsize,
    /// Bytes of small blocks cached.
    cached: AtomicUsize,
    /// The large pool's free resident bytes, mirrored outside its lock, so that the
    /// cap holds for both pools together.
    large_cached: AtomicUsize,
    max_allocated: AtomicUsize,
    max_reserved: AtomicUsize,
    system_allocations: AtomicUsize,
    /// Whether `limit`/`huge_pages` come from the environment on first use.
    from_env: bool,
}

/// The pool every CPU tensor allocates from.
pub static HOST_POOL: HostPool = HostPool::build(UNSET, false, true);

thread_local! {
    static SHARD_OF_THREAD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's shard: threads take slots round-robin on first use.
fn current_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD_OF_THREAD.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT.fetch_add(1, Relaxed) % SHARDS);
        }
        s.get()
    })
}

/// Parses a byte count: digits with an optional `K`, `M` or `G` (powers of 1024,
/// optionally followed by `iB` or `B`).
fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: usize = t[..digits].parse().ok()?;
    let shift = match t[digits..].trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

impl HostPool {
    const fn build(limit: usize, huge_pages: bool, from_env: bool) -> Self {
        HostPool {
            shards: [const {
                Shard(Mutex::new(Lists {
                    free: [const { Vec::new() }; CLASSES],
                    hits: 0,
                }))
            }; SHARDS],
            large: Mutex::new(Arena::new(huge_pages)),
            limit: AtomicUsize::new(limit),
            huge_pages: AtomicBool::new(huge_pages),
            allocated: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            large_reserved: AtomicUsize::new(0),
            cached: AtomicUsize::new(0),
            large_cached: AtomicUsize::new(0),
            max_allocated: AtomicUsize::new(0),
            max_reserved: AtomicUsize::new(0),
            system_allocations: AtomicUsize::new(0),
            from_env,
        }
    }

    /// A pool of its own caching at most `limit` bytes (huge pages off), leaked so that
    /// buffers can point at it; for tests and tools that need exact statistics.
    ///
    /// ```
    /// use ferrograd_kernels::cpu::{HostBuffer, HostPool};
    /// let pool = HostPool::leaked(1 << 20);
    /// let a = HostBuffer::<u8>::zeroed_in(pool, 1000);
    /// assert_eq!(pool.stats().allocated, 1024);
    /// drop(a);
    /// assert_eq!((pool.stats().allocated, pool.stats().reserved), (0, 1024));
    /// ```
    pub fn leaked(limit: usize) -> &'static HostPool {
        Box::leak(Box::new(HostPool::build(limit, false, false)))
    }

    /// Reads `FERROGRAD_CPU_CACHE_LIMIT` and `FERROGRAD_CPU_HUGE_PAGES` once.
    fn settle_env(&self) {
        static READ: OnceLock<()> = OnceLock::new();
        if !self.from_env {
            return;
        }
        READ.get_or_init(|| {
            let limit = std::env::var("FERROGRAD_CPU_CACHE_LIMIT")
                .ok()
                .and_then(|v| parse_bytes(&v))
                .unwrap_or(DEFAULT_CACHE_LIMIT);
            let _ = self.limit.compare_exchange(UNSET, limit, Relaxed, Relaxed);
            if let Ok(v) = std::env::var("FERROGRAD_CPU_HUGE_PAGES") {
                self.store_huge_pages(!matches!(v.trim(), "0" | "" | "false" | "off"));
            }
        });
    }

    /// The cap on cached (freed, kept) bytes.
    ///
    /// ```
    /// use ferrograd_kernels::cpu::HostPool;
    /// assert_eq!(HostPool::leaked(4096).cache_limit(), 4096);
    /// ```
    pub fn cache_limit(&self) -> usize {
        self.settle_env();
        self.limit.load(Relaxed)
    }

    /// Sets the cap on cached bytes; cached blocks beyond it go back to the system now.
    ///
    /// ```
    /// use ferrograd_kernels::cpu::{HostBuffer, HostPool};
    /// let pool = HostPool::leaked(1 << 30);
    /// drop(HostBuffer::<f64>::zeroed_in(pool, 1 << 20));
    /// assert_eq!(pool.stats().reserved, 8 << 20);
    /// pool.set_cache_limit(0);
    /// assert_eq!(pool.stats().reserved, 0);
    /// ```
    pub fn set_cache_limit(&self, bytes: usize) {
        self.settle_env();
        self.limit.store(bytes, Relaxed);
        self.trim_to(bytes);
        let small_cached = self.cached.load(Relaxed);
        let mut large = lock_large(&self.large);
        large.release(bytes.saturating_sub(small_cached));
        self.sync_large(&large);
    }

    /// Whether blocks of 2 MiB and more are offered transparent huge pages.
    pub fn huge_pages(&self) -> bool {
        self.settle_env();
        self.huge_pages.load(Relaxed)
    }

    /// Turns transparent huge pages for new large blocks on or off.
    ///
    /// ```
    /// let pool = ferrograd_kernels::cpu::HostPool::leaked(0);
    /// pool.set_huge_pages(false);
    /// assert!(!pool.huge_pages());
    /// ```
    pub fn set_huge_pages(&self, on: bool) {
        self.settle_env();
        self.store_huge_pages(on);
    }

    fn store_huge_pages(&self, on: bool) {
        self.huge_pages.store(on, Relaxed);
        lock_large(&self.large).set_huge_pages(on);
    }

    /// Bytes in blocks held by buffers: [`HostStats::allocated`] without taking the
    /// large pool's lock (a profiler reads it around every op).
    ///
    /// ```
    /// use ferrograd_kernels::cpu::HOST_POOL;
    /// assert_eq!(HOST_POOL.allocated(), HOST_POOL.stats().allocated);
    /// ```
    pub fn allocated(&self) -> usize {
        self.allocated.load(Relaxed)
    }

    /// The current statistics of both pools. The peaks are tracked over the total.
    pub fn stats(&self) -> HostStats {
        let (grows, hits) = {
            let large = lock_large(&self.large);
            (large.grows, large.hits)
        };
        HostStats {
            allocated: self.allocated.load(Relaxed),
            reserved: self.reserved.load(Relaxed) + self.large_reserved.load(Relaxed),
            max_allocated: self.max_allocated.load(Relaxed),
            max_reserved: self.max_reserved.load(Relaxed),
            system_allocations: self.system_allocations.load(Relaxed) + grows,
            cache_hits: hits + self.shards.iter().map(|s| lock(s).hits).sum::<usize>(),
        }
    }

    /// Restarts the peaks from the current values.
    pub fn reset_peak_stats(&self) {
        self.max_allocated
            .store(self.allocated.load(Relaxed), Relaxed);
        self.max_reserved.store(
            self.reserved.load(Relaxed) + self.large_reserved.load(Relaxed),
            Relaxed,
        );
    }

    /// A block of more than [`LARGE`] bytes from the arena, or a mapping of its own
    /// where the arena has no room: its address, size, shard marker, and whether its
    /// pages are fresh (zero, not yet resident).
    fn allocate_large(&self, bytes: usize) -> (NonNull<u8>, usize, usize, bool) {
        self.settle_env();
        let mut large = lock_large(&self.large);
        let found = large.allocate(bytes);
        self.sync_large(&large);
        drop(large);
        if let Some((address, size, fresh)) = found {
            self.note_allocated(size);
            let ptr = NonNull::new(address as *mut u8).expect("arena address 0");
            return (ptr, size, ARENA_SHARD, fresh);
        }
        let size = bytes.next_multiple_of(4096);
        (
            self.system_block(size, self.huge_pages()),
            size,
            MAPPED_SHARD,
            true,
        )
    }

    /// A fresh block of `size` bytes from the system, counted as reserved and allocated.
    /// When the system refuses, the cache goes back first and the request is retried
    /// once (as on a device); a second refusal is the usual allocation-failure abort.
    fn system_block(&self, size: usize, huge: bool) -> NonNull<u8> {
        let ptr = system_allocate(size, huge).unwrap_or_else(|| {
            self.empty_cache();
            system_allocate(size, false).unwrap_or_else(|| {
                alloc::handle_alloc_error(Layout::from_size_align(size, ALIGN).unwrap())
            })
        });
        self.system_allocations.fetch_add(1, Relaxed);
        self.reserved.fetch_add(size, Relaxed);
        self.note_reserved();
        self.note_allocated(size);
        ptr
    }

    /// Takes back an arena block; free pages beyond the cap go back to the system.
    fn free_large(&self, ptr: NonNull<u8>, size: usize) {
        self.allocated.fetch_sub(size, Relaxed);
        let limit = self.cache_limit();
        let mut large = lock_large(&self.large);
        large.free(ptr.as_ptr() as usize, size);
        // Publish the grown free bytes before reading the small pool's: a small free
        // racing with this one then sees them (and trims itself), or this free sees
        // its bytes. Either way the cap holds for both pools together.
        self.large_cached.store(large.resident_free, SeqCst);
        let small_cached = self.cached.load(SeqCst);
        if large.resident_free + small_cached > limit {
            large.release(limit.saturating_sub(small_cached));
        }
        self.sync_large(&large);
    }

    /// Mirrors the arena's resident bytes (read under its lock) and updates the peak.
    fn sync_large(&self, large: &Arena) {
        self.large_reserved
            .store(large.allocated + large.resident_free, Relaxed);
        self.large_cached.store(large.resident_free, SeqCst);
        self.note_reserved();
    }

    fn note_reserved(&self) {
        let total = self.reserved.load(Relaxed) + self.large_reserved.load(Relaxed);
        self.max_reserved.fetch_max(total, Relaxed);
    }

    /// Returns every cached block to the system; blocks held by buffers stay. On glibc
    /// the C heap is trimmed too, so the process's resident size drops.
    pub fn empty_cache(&self) {
        self.trim_to(0);
        let mut large = lock_large(&self.large);
        large.release(0);
        self.sync_large(&large);
        drop(large);
        #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
        // SAFETY: malloc_trim only releases free heap memory; it takes no pointers.
        unsafe {
            libc::malloc_trim(0);
        }
    }

    /// Releases cached small blocks, largest first in each shard, until at most `keep`
    /// bytes of them are cached.
    fn trim_to(&self, keep: usize) {
        for shard in &self.shards {
            if self.cached.load(Relaxed) <= keep {
                return;
            }
            let mut released = Vec::new();
            {
                let mut lists = lock(shard);
                'classes: for index in (0..CLASSES).rev() {
                    let size = class_size(index);
                    while let Some(raw) = lists.free[index].pop() {
                        self.cached.fetch_sub(size, Relaxed);
                        released.push((raw, size));
                        if self.cached.load(Relaxed) <= keep {
                            break 'classes;
                        }
                    }
                    lists.free[index] = Vec::new();
                }
            }
            for (raw, size) in released {
                self.release_to_system(raw.0, size);
            }
        }
    }

    /// A block of at least `bytes` bytes: its address, its size, and whether it is
    /// fresh from the system (and so zeroed).
    fn allocate(&self, bytes: usize) -> (NonNull<u8>, usize, usize, bool) {
        if bytes > LARGE {
            return self.allocate_large(bytes);
        }
        let class = size_class(bytes);
        let shard = current_shard();
        let hit = {
            // The smallest cached block of this class or up to 25 % larger.
            let mut lists = lock(&self.shards[shard]);
            let first = class_index(class);
            (first..CLASSES)
                .take_while(|&i| class_size(i) <= class + class / 4)
                .find_map(|i| lists.free[i].pop().map(|r| (r.0, class_size(i))))
                .inspect(|_| lists.hits += 1)
        };
        if let Some((ptr, size)) = hit {
            self.cached.fetch_sub(size, Relaxed);
            self.note_allocated(size);
            return (ptr, size, shard, false);
        }
        (self.system_block(class, false), class, shard, true)
    }

    fn note_allocated(&self, size: usize) {
        let now = self.allocated.fetch_add(size, Relaxed) + size;
        // A plain load first: at a steady peak no read-modify-write is needed.
        if now > self.max_allocated.load(Relaxed) {
            self.max_allocated.fetch_max(now, Relaxed);
        }
    }

    /// Takes back a block from a dropped buffer: cached in `shard` unless that would
    /// exceed the cap.
    fn free(&self, ptr: NonNull<u8>, size: usize, shard: usize) {
        if shard == ARENA_SHARD {
            return self.free_large(ptr, size);
        }
        if shard == MAPPED_SHARD {
            self.allocated.fetch_sub(size, Relaxed);
            return self.release_to_system(ptr, size);
        }
        self.allocated.fetch_sub(size, Relaxed);
        let limit = self.cache_limit();
        let admitted = self
            .cached
            .fetch_update(SeqCst, SeqCst, |c| {
                (c + size + self.large_cached.load(SeqCst) <= limit).then_some(c + size)
            })
            .is_ok();
        if admitted {
            lock(&self.shards[shard]).free[class_index(size)].push(Raw(ptr));
            // A large free may have published its bytes after the check above.
            let large = self.large_cached.load(SeqCst);
            if self.cached.load(SeqCst) + large > limit {
                self.trim_to(limit.saturating_sub(large));
            }
        } else {
            self.release_to_system(ptr, size);
        }
    }

    fn release_to_system(&self, ptr: NonNull<u8>, size: usize) {
        self.reserved.fetch_sub(size, Relaxed);
        system_free(ptr, size);
    }
}

/// The `shard` of a buffer whose block belongs to the arena.
const ARENA_SHARD: usize = usize::MAX;
/// The `shard` of a large buffer with a mapping of its own (no arena room).
const MAPPED_SHARD: usize = usize::MAX - 1;

/// Zeroed memory of `size` bytes (a size class or segment size): an anonymous mapping
/// from [`MAP_MIN`] on (huge-page aligned and advised with `huge`), else the C heap.
fn system_allocate(size: usize, huge: bool) -> Option<NonNull<u8>> {
    #[cfg(all(unix, not(miri)))]
    if size >= MAP_MIN {
        return map_anonymous(size, huge && size >= HUGE_PAGE);
    }
    let _ = huge;
    // SAFETY: `size` is non-zero (classes start at 64) and the alignment a power of two.
    NonNull::new(unsafe { alloc::alloc_zeroed(Layout::from_size_align_unchecked(size, ALIGN)) })
}

fn lock_large(large: &Mutex<Arena>) -> MutexGuard<'_, Arena> {
    // The arena's methods panic only on an internal bug, before changing anything, so
    // a poisoned lock is still consistent.
    large.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock(shard: &Shard) -> MutexGuard<'_, Lists> {
    // A panic while a shard was held leaves the map consistent (every update is one
    // call), so a poisoned lock is still usable.
    shard.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// Maps `size` bytes (a multiple of the page size) of zeroed anonymous memory; with
/// `huge`, aligned to 2 MiB and advised to use transparent huge pages.
#[cfg(all(unix, not(miri)))]
fn map_anonymous(size: usize, huge: bool) -> Option<NonNull<u8>> {
    let address = super::arena::map_aligned(size, if huge { HUGE_PAGE } else { 1 }, false)?;
    if huge {
        super::arena::advise_huge(address, size, true);
    }
    NonNull::new(address as *mut u8)
}

fn system_free(ptr: NonNull<u8>, size: usize) {
    #[cfg(all(unix, not(miri)))]
    if size >= MAP_MIN {
        // SAFETY: blocks of this size class were mapped by `map_anonymous` with exactly
        // this length at this address, and no buffer refers to them any more.
        unsafe { libc::munmap(ptr.as_ptr().cast(), size) };
        return;
    }
    // SAFETY: smaller blocks came from `alloc_zeroed` with this size and alignment.
    unsafe { alloc::dealloc(ptr.as_ptr(), Layout::from_size_align_unchecked(size, ALIGN)) }
}

#[cfg(test)]
mod tests;
