//! A caching allocator for device memory, after PyTorch's CUDA caching allocator.
//!
//! Device `malloc`/`free` are slow and synchronise the device, so freed blocks are kept
//! in size-ordered free lists and handed out again. Requests are rounded up to 512
//! bytes; those up to 1 MiB come from 2 MiB segments (the *small* pool), larger ones from
//! segments of 20 MiB or their own size rounded to 2 MiB (the *large* pool). A request
//! takes the smallest cached block that fits (best fit), split when the rest is worth
//! keeping; a freed block merges with free neighbours of its segment. When the device is
//! out of memory the cache is emptied and the request retried once. [`CachingAllocator::empty_cache`]
//! returns whole free segments to the device.
//!
//! The allocator is generic over [`RawMemory`], the device's own malloc/free, so its
//! bookkeeping is tested on any machine; the CUDA backend plugs in the driver.
//! Blocks are reused in stream order: all work on a device runs on one stream, so a block
//! freed after a kernel was queued and handed to a later kernel is only touched after
//! the first one finished (PyTorch's rule for single-stream use).

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Requests are rounded up to a multiple of this many bytes.
pub const MIN_BLOCK: usize = 512;
/// Requests up to this size are served from the small pool.
pub const SMALL_REQUEST: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_SEGMENT: usize = 2 << 20;
/// Segment size for large requests under [`MIN_LARGE_ALLOC`].
pub const LARGE_SEGMENT: usize = 20 << 20;
/// Large requests at least this big get a segment of their own size (rounded to 2 MiB).
pub const MIN_LARGE_ALLOC: usize = 10 << 20;

/// The device's raw allocator, which the cache sits on.
///
/// ```
/// use ferrograd_runtime::memory::{OutOfMemory, RawMemory};
/// /// Hands out fake addresses, as the tests do.
/// struct Fake(u64);
/// impl RawMemory for Fake {
///     fn malloc(&mut self, bytes: usize) -> Result<u64, OutOfMemory> {
///         self.0 += bytes as u64;
///         Ok(self.0 - bytes as u64)
///     }
///     fn free(&mut self, _address: u64, _bytes: usize) {}
/// }
/// ```
pub trait RawMemory {
    /// Allocates `bytes` of device memory, returning its address.
    fn malloc(&mut self, bytes: usize) -> Result<u64, OutOfMemory>;
    /// Returns a segment obtained from [`RawMemory::malloc`] with the same size.
    fn free(&mut self, address: u64, bytes: usize);
}

/// The device could not supply a segment, even after the cache was emptied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "out of device memory: tried to allocate {requested} bytes ({allocated} bytes allocated, {reserved} bytes reserved by the caching allocator){}",
    detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
)]
pub struct OutOfMemory {
    /// The request, in bytes.
    pub requested: usize,
    /// Bytes in use at the time.
    pub allocated: usize,
    /// Bytes held by the allocator at the time.
    pub reserved: usize,
    /// What the device said, if anything.
    pub detail: Option<String>,
}

impl OutOfMemory {
    /// The error a [`RawMemory`] backend reports; the allocator fills in its statistics.
    ///
    /// ```
    /// let e = ferrograd_runtime::memory::OutOfMemory::device(1024, "CUDA_ERROR_OUT_OF_MEMORY");
    /// assert_eq!(e.requested, 1024);
    /// ```
    pub fn device(requested: usize, detail: impl Into<String>) -> Self {
        OutOfMemory {
            requested,
            allocated: 0,
            reserved: 0,
            detail: Some(detail.into()),
        }
    }
}

/// A block handed out by [`CachingAllocator::allocate`]; give it back with
/// [`CachingAllocator::free`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a block not given back to the allocator stays allocated"]
pub struct Block {
    /// Device address of the first byte.
    pub address: u64,
    /// Usable size in bytes (the request rounded up to [`MIN_BLOCK`], or more when the
    /// remainder was too small to split off).
    pub size: usize,
}

/// Memory statistics, as `torch.cuda.memory_stats` reports the main ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in blocks handed out and not yet freed (`memory_allocated`).
    pub allocated: usize,
    /// Bytes held from the device, in use or cached (`memory_reserved`).
    pub reserved: usize,
    /// The highest `allocated` since creation or the last peak reset.
    pub max_allocated: usize,
    /// The highest `reserved` since creation or the last peak reset.
    pub max_reserved: usize,
    /// Device `malloc` calls made (segments obtained).
    pub segments_allocated: usize,
    /// Requests served from the cache without a device `malloc`.
    pub cache_hits: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Pool {
    Small,
    Large,
}

/// One contiguous piece of a segment, free or in use.
#[derive(Clone, Copy, Debug)]
struct Piece {
    size: usize,
    free: bool,
    pool: Pool,
    /// Address of the segment this piece belongs to.
    segment: u64,
}

/// The cache for one device. Not thread-safe by itself: the runtime keeps one per
/// device behind a mutex.
///
/// ```
/// use ferrograd_runtime::memory::{CachingAllocator, OutOfMemory, RawMemory};
/// struct Fake(u64);
/// impl RawMemory for Fake {
///     fn malloc(&mut self, bytes: usize) -> Result<u64, OutOfMemory> {
///         self.0 += bytes as u64;
///         Ok(self.0 - bytes as u64)
///     }
///     fn free(&mut self, _: u64, _: usize) {}
/// }
/// let mut cache = CachingAllocator::new(Fake(1 << 40));
/// let a = cache.allocate(1000).unwrap();
/// assert_eq!(a.size, 1024);
/// let address = a.address;
/// cache.free(a);
/// // The same block comes back without asking the device again.
/// assert_eq!(cache.allocate(800).unwrap().address, address);
/// assert_eq!(cache.stats().segments_allocated, 1);
/// ```
#[derive(Debug)]
pub struct CachingAllocator<M: RawMemory> {
    raw: M,
    /// Every piece of every segment, ordered by address (neighbours are adjacent keys).
    pieces: BTreeMap<u64, Piece>,
    /// Segment sizes by segment address.
    segments: HashMap<u64, usize>,
    /// Free pieces ordered by (pool, size, address): best fit is a range query.
    free: BTreeSet<(Pool, usize, u64)>,
    stats: MemoryStats,
}

/// Rounds a request up to the block granularity.
fn round_size(bytes: usize) -> usize {
    bytes.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

fn pool_of(size: usize) -> Pool {
    if size <= SMALL_REQUEST {
        Pool::Small
    } else {
        Pool::Large
    }
}

fn segment_size(size: usize) -> usize {
    if size <= SMALL_REQUEST {
        SMALL_SEGMENT
    } else if size < MIN_LARGE_ALLOC {
        LARGE_SEGMENT
    } else {
        size.div_ceil(SMALL_SEGMENT) * SMALL_SEGMENT
    }
}

/// Whether the rest of a block after taking `size` is worth keeping as a free block.
fn should_split(pool: Pool, remaining: usize) -> bool {
    match pool {
        Pool::Small => remaining >= MIN_BLOCK,
        Pool::Large => remaining > SMALL_REQUEST,
    }
}

impl<M: RawMemory> CachingAllocator<M> {
    /// An empty cache over `raw`.
    pub fn new(raw: M) -> Self {
        CachingAllocator {
            raw,
            pieces: BTreeMap::new(),
            segments: HashMap::new(),
            free: BTreeSet::new(),
            stats: MemoryStats::default(),
        }
    }

    /// A block of at least `bytes` bytes: a cached one when one fits, else carved from a
    /// new segment. On a device out-of-memory error the cache is emptied and the device
    /// asked once more.
    pub fn allocate(&mut self, bytes: usize) -> Result<Block, OutOfMemory> {
        let size = round_size(bytes);
        let pool = pool_of(size);
        let address = match self.best_fit(pool, size) {
            Some(address) => {
                self.stats.cache_hits += 1;
                address
            }
            None => self.new_segment(pool, size)?,
        };
        let mut piece = self.pieces[&address];
        self.free.remove(&(pool, piece.size, address));
        if should_split(pool, piece.size - size) {
            let rest = Piece {
                size: piece.size - size,
                free: true,
                ..piece
            };
            let rest_address = address + size as u64;
            self.pieces.insert(rest_address, rest);
            self.free.insert((pool, rest.size, rest_address));
            piece.size = size;
        }
        piece.free = false;
        self.pieces.insert(address, piece);
        self.stats.allocated += piece.size;
        self.stats.max_allocated = self.stats.max_allocated.max(self.stats.allocated);
        Ok(Block {
            address,
            size: piece.size,
        })
    }

    fn best_fit(&self, pool: Pool, size: usize) -> Option<u64> {
        let &(found_pool, found, address) = self.free.range((pool, size, 0)..).next()?;
        if found_pool != pool {
            return None;
        }
        // A large request never takes a whole oversized segment meant for a much bigger
        // one (PyTorch's max_split_size idea, fixed here): keep waste under one segment.
        (found - size <= LARGE_SEGMENT.max(size)).then_some(address)
    }

    fn new_segment(&mut self, pool: Pool, size: usize) -> Result<u64, OutOfMemory> {
        let bytes = segment_size(size);
        let address = match self.raw.malloc(bytes) {
            Ok(a) => a,
            Err(_) => {
                self.empty_cache();
                self.raw.malloc(bytes).map_err(|e| OutOfMemory {
                    requested: size,
                    allocated: self.stats.allocated,
                    reserved: self.stats.reserved,
                    detail: e.detail,
                })?
            }
        };
        self.stats.segments_allocated += 1;
        self.stats.reserved += bytes;
        self.stats.max_reserved = self.stats.max_reserved.max(self.stats.reserved);
        self.segments.insert(address, bytes);
        self.pieces.insert(
            address,
            Piece {
                size: bytes,
                free: true,
                pool,
                segment: address,
            },
        );
        self.free.insert((pool, bytes, address));
        Ok(address)
    }

    /// Returns a block to the cache (the device memory stays reserved), merging it with
    /// free neighbours in its segment.
    ///
    /// # Panics
    /// When `block` was not handed out by this allocator or was freed already.
    pub fn free(&mut self, block: Block) {
        let piece = match self.pieces.get(&block.address) {
            Some(p) if !p.free && p.size == block.size => *p,
            _ => panic!(
                "CachingAllocator::free: {block:?} is not an allocated block of this allocator"
            ),
        };
        self.stats.allocated -= piece.size;
        let (mut address, mut size) = (block.address, piece.size);
        // Merge with the next piece when it is free and in the same segment.
        let next = address + size as u64;
        if let Some(n) = self.pieces.get(&next).copied()
            && n.free
            && n.segment == piece.segment
        {
            self.free.remove(&(n.pool, n.size, next));
            self.pieces.remove(&next);
            size += n.size;
        }
        // Merge with the previous piece when it is free and in the same segment.
        if let Some((&prev, &p)) = self.pieces.range(..address).next_back()
            && p.free
            && p.segment == piece.segment
        {
            self.free.remove(&(p.pool, p.size, prev));
            self.pieces.remove(&address);
            address = prev;
            size += p.size;
        }
        self.pieces.insert(
            address,
            Piece {
                size,
                free: true,
                ..piece
            },
        );
        self.free.insert((piece.pool, size, address));
    }

    /// Returns every segment with no block in use to the device (`torch.cuda.empty_cache`).
    pub fn empty_cache(&mut self) {
        let whole: Vec<(u64, usize)> = self
            .segments
            .iter()
            .filter(|&(a, &bytes)| {
                self.pieces
                    .get(a)
                    .is_some_and(|p| p.free && p.size == bytes)
            })
            .map(|(&a, &b)| (a, b))
            .collect();
        for (address, bytes) in whole {
            let piece = self.pieces.remove(&address).expect("segment head");
            self.free.remove(&(piece.pool, bytes, address));
            self.segments.remove(&address);
            self.stats.reserved -= bytes;
            self.raw.free(address, bytes);
        }
    }

    /// The current statistics.
    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// Starts the peaks over from the current values (`reset_peak_memory_stats`).
    pub fn reset_peak_stats(&mut self) {
        self.stats.max_allocated = self.stats.allocated;
        self.stats.max_reserved = self.stats.reserved;
    }

    /// The raw allocator underneath.
    pub fn raw(&self) -> &M {
        &self.raw
    }
}

impl<M: RawMemory> Drop for CachingAllocator<M> {
    fn drop(&mut self) {
        // Blocks still out keep their segments; everything else goes back.
        self.empty_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device with a byte budget that records live segments and never reuses addresses.
    #[derive(Debug, Default)]
    struct FakeDevice {
        next: u64,
        budget: usize,
        live: HashMap<u64, usize>,
        mallocs: usize,
        /// Bytes returned with `free`, shared so a test can read it after a drop.
        freed: std::rc::Rc<std::cell::Cell<usize>>,
    }

    impl FakeDevice {
        fn with_budget(budget: usize) -> Self {
            FakeDevice {
                next: 1 << 32,
                budget,
                ..Default::default()
            }
        }
        fn used(&self) -> usize {
            self.live.values().sum()
        }
    }

    impl RawMemory for FakeDevice {
        fn malloc(&mut self, bytes: usize) -> Result<u64, OutOfMemory> {
            if self.used() + bytes > self.budget {
                return Err(OutOfMemory::device(bytes, "fake device is full"));
            }
            self.mallocs += 1;
            let a = self.next;
            self.next += bytes as u64 + 4096;
            self.live.insert(a, bytes);
            Ok(a)
        }
        fn free(&mut self, address: u64, bytes: usize) {
            assert_eq!(self.live.remove(&address), Some(bytes), "bad free");
            self.freed.set(self.freed.get() + bytes);
        }
    }

    fn alloc(budget: usize) -> CachingAllocator<FakeDevice> {
        CachingAllocator::new(FakeDevice::with_budget(budget))
    }

    #[test]
    fn sizes_round_up_and_small_requests_share_a_segment() {
        let mut a = alloc(1 << 30);
        let x = a.allocate(1).unwrap();
        let y = a.allocate(513).unwrap();
        assert_eq!((x.size, y.size), (512, 1024));
        assert_eq!(
            y.address,
            x.address + 512,
            "carved from the same 2 MiB segment"
        );
        let s = a.stats();
        assert_eq!(
            (s.allocated, s.reserved, s.segments_allocated),
            (1536, SMALL_SEGMENT, 1)
        );
        a.free(x);
        a.free(y);
    }

    #[test]
    fn freed_blocks_are_reused_and_merge_back_into_the_segment() {
        let mut a = alloc(1 << 30);
        let blocks: Vec<Block> = (0..8).map(|_| a.allocate(4096).unwrap()).collect();
        let first = blocks[0].address;
        // Free in an order that needs merging on both sides.
        let mut blocks = blocks;
        for i in [3, 1, 2, 0, 7, 5, 6, 4] {
            let b = std::mem::replace(
                &mut blocks[i],
                Block {
                    address: 0,
                    size: 0,
                },
            );
            a.free(b);
        }
        assert_eq!(a.stats().allocated, 0);
        // One free piece again: a request for the whole segment fits without a malloc.
        let whole = a.allocate(SMALL_REQUEST).unwrap();
        assert_eq!(whole.address, first);
        assert_eq!(a.raw().mallocs, 1);
        assert!(a.stats().cache_hits >= 1);
        a.free(whole);
    }

    #[test]
    fn large_requests_use_their_own_pool_and_segment_sizes() {
        let mut a = alloc(1 << 30);
        let small = a.allocate(SMALL_REQUEST).unwrap();
        let mid = a.allocate(SMALL_REQUEST + 1).unwrap();
        let big = a.allocate(50 << 20).unwrap();
        assert_eq!(
            a.stats().reserved,
            SMALL_SEGMENT + LARGE_SEGMENT + (50 << 20)
        );
        assert_eq!(a.raw().mallocs, 3);
        // A second mid-size request is carved from the rest of the 20 MiB segment.
        let mid2 = a.allocate(3 << 20).unwrap();
        assert_eq!(mid2.address, mid.address + mid.size as u64);
        assert_eq!(a.raw().mallocs, 3);
        for b in [small, mid, big, mid2] {
            a.free(b);
        }
    }

    #[test]
    fn peak_statistics_and_reset() {
        let mut a = alloc(1 << 30);
        let x = a.allocate(1 << 20).unwrap();
        let y = a.allocate(1 << 20).unwrap();
        a.free(x);
        let s = a.stats();
        assert_eq!((s.allocated, s.max_allocated), (1 << 20, 2 << 20));
        a.reset_peak_stats();
        assert_eq!(a.stats().max_allocated, 1 << 20);
        a.free(y);
        assert_eq!(a.stats().max_allocated, 1 << 20);
    }

    #[test]
    fn empty_cache_releases_only_unused_segments() {
        let mut a = alloc(1 << 30);
        let keep = a.allocate(100).unwrap();
        let fill = a.allocate(SMALL_REQUEST).unwrap(); // same segment as `keep`
        let drop_small = a.allocate(SMALL_REQUEST).unwrap(); // does not fit: a second one
        let big = a.allocate(30 << 20).unwrap();
        a.free(drop_small);
        a.free(big);
        assert_eq!(a.raw().live.len(), 3);
        a.empty_cache();
        assert_eq!(a.raw().live.len(), 1, "the segment holding `keep` stays");
        assert_eq!(a.stats().reserved, SMALL_SEGMENT);
        a.free(keep);
        a.free(fill);
        a.empty_cache();
        assert!(a.raw().live.is_empty());
        assert_eq!(a.stats().reserved, 0);
    }

    #[test]
    fn out_of_memory_empties_the_cache_and_retries_then_reports() {
        let mut a = alloc(60 << 20);
        let x = a.allocate(40 << 20).unwrap();
        a.free(x); // cached, still reserved
        // 50 MiB does not fit next to the cached 40 MiB: the cache is emptied, then it fits.
        let y = a.allocate(50 << 20).unwrap();
        assert_eq!(a.stats().reserved, 50 << 20);
        let err = a.allocate(30 << 20).unwrap_err();
        assert_eq!(err.allocated, 50 << 20);
        assert!(err.to_string().contains("out of device memory"), "{err}");
        assert!(err.to_string().contains("fake device is full"), "{err}");
        a.free(y);
    }

    #[test]
    fn random_workload_keeps_blocks_disjoint_and_stats_exact() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(7);
        let mut a = alloc(1 << 34);
        let mut live: Vec<Block> = Vec::new();
        for step in 0..5000 {
            if live.is_empty() || rng.random_bool(0.55) {
                let bytes = match rng.random_range(0..10) {
                    0 => rng.random_range(SMALL_REQUEST..40 << 20),
                    _ => rng.random_range(1..64 << 10),
                };
                let b = a.allocate(bytes).unwrap();
                assert!(b.size >= bytes);
                live.push(b);
            } else {
                let i = rng.random_range(0..live.len());
                a.free(live.swap_remove(i));
            }
            if step % 500 == 0 {
                let mut spans: Vec<(u64, u64)> = live
                    .iter()
                    .map(|b| (b.address, b.address + b.size as u64))
                    .collect();
                spans.sort();
                assert!(
                    spans.windows(2).all(|w| w[0].1 <= w[1].0),
                    "overlap at {step}"
                );
                let total: usize = live.iter().map(|b| b.size).sum();
                assert_eq!(a.stats().allocated, total);
            }
        }
        assert!(a.stats().cache_hits > 1000, "{:?}", a.stats());
        for b in live.drain(..) {
            a.free(b);
        }
        // Everything merged back: every segment is whole again and goes back.
        a.empty_cache();
        assert!(a.raw().live.is_empty());
        assert_eq!(a.stats().reserved, 0);
    }

    #[test]
    #[should_panic(expected = "not an allocated block")]
    fn double_free_panics() {
        let mut a = alloc(1 << 30);
        let x = a.allocate(10).unwrap();
        let copy = Block {
            address: x.address,
            size: x.size,
        };
        a.free(x);
        a.free(copy);
    }

    #[test]
    fn dropping_the_allocator_returns_free_segments() {
        let mut a = alloc(1 << 30);
        let freed = a.raw().freed.clone();
        let x = a.allocate(5 << 20).unwrap();
        a.free(x);
        assert_eq!(freed.get(), 0);
        drop(a);
        assert_eq!(freed.get(), LARGE_SEGMENT);
    }
}
