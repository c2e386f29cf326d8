//! The large-block side of the host pool: one reserved range of virtual memory, carved
//! best fit, split and merged like the CUDA caching allocator's segments, but as a
//! single segment that grows at its top (PyTorch's "expandable segments").
//!
//! A network's activations and im2col columns come in dozens of distinct large sizes.
//! With a segment per request, a freed block only serves requests that fit inside it and
//! neighbours in different segments never merge, so the cache grows to several times the
//! peak in use, and every page of it is resident memory the kernel zero-filled. In one
//! range every free neighbour merges, so the pages touched stay close to the peak.
//!
//! Pages of free pieces stay resident (that is the cache); [`Arena::release`] hands
//! them back with `madvise(MADV_DONTNEED)`, keeping the address range, so a later use
//! faults in fresh zero pages.

use std::collections::{BTreeMap, BTreeSet};

/// Large blocks are whole pages, so a free piece can be released page by page.
pub(super) const PAGE: usize = 4096;
/// Huge-page size and the arena's alignment.
const HUGE: usize = 2 << 20;

#[derive(Clone, Copy, Debug)]
struct Piece {
    size: usize,
    free: bool,
    /// Bytes of a free piece whose pages may be resident (an upper bound).
    resident: usize,
}

/// The reserved range.
#[derive(Debug)]
struct Region {
    base: usize,
    len: usize,
}

/// One growable segment of host memory. Not thread-safe by itself: the pool keeps it
/// behind a mutex.
#[derive(Debug)]
pub(super) struct Arena {
    region: Option<Region>,
    /// Whether reserving was tried and failed (then requests fall back to mappings).
    unavailable: bool,
    /// Pieces by offset from `base`; they tile `[0, top)`.
    pieces: BTreeMap<usize, Piece>,
    /// Free pieces by (size, offset): best fit is a range query.
    free: BTreeSet<(usize, usize)>,
    top: usize,
    /// Bytes in pieces handed out.
    pub(super) allocated: usize,
    /// Bytes of free pieces that may be resident: the cache.
    pub(super) resident_free: usize,
    /// Requests served without growing the top.
    pub(super) hits: usize,
    /// Requests that grew the top.
    pub(super) grows: usize,
    huge_pages: bool,
}

/// How much address space to reserve: twice the physical memory, at least 4 GiB and at
/// most 16 TiB (it costs page-table entries only for pages touched).
fn reservation() -> usize {
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: sysconf only reads system configuration.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && size > 0 {
            let phys = (pages as usize).saturating_mul(size as usize);
            return phys.saturating_mul(2).clamp(4 << 30, 16 << 40);
        }
    }
    4 << 30
}

impl Arena {
    pub(super) const fn new(huge_pages: bool) -> Self {
        Arena {
            region: None,
            unavailable: false,
            pieces: BTreeMap::new(),
            free: BTreeSet::new(),
            top: 0,
            allocated: 0,
            resident_free: 0,
            hits: 0,
            grows: 0,
            huge_pages,
        }
    }

    /// Reserves the range on first use.
    fn region(&mut self) -> Option<&Region> {
        if self.region.is_none() && !self.unavailable {
            match reserve(reservation(), self.huge_pages) {
                Some(r) => self.region = Some(r),
                None => self.unavailable = true,
            }
        }
        self.region.as_ref()
    }

    /// Turns transparent huge pages on or off for the whole range (Linux).
    pub(super) fn set_huge_pages(&mut self, on: bool) {
        self.huge_pages = on;
        if let Some(r) = &self.region {
            advise_huge(r.base, r.len, on);
        }
    }

    /// A block of `bytes` rounded up to whole pages: its address and size; `None` when
    /// no range could be reserved or it is full (the caller maps the block itself).
    ///
    /// Also says whether every page of the block is fresh: never handed out, or given
    /// back with `MADV_DONTNEED` since (so it reads as zeros and is not resident until
    /// touched).
    pub(super) fn allocate(&mut self, bytes: usize) -> Option<(usize, usize, bool)> {
        let size = bytes.checked_next_multiple_of(PAGE)?;
        let (base, len) = {
            let r = self.region()?;
            (r.base, r.len)
        };
        let mut fresh = true;
        let offset = if let Some(&(found, offset)) = self.free.range((size, 0)..).next() {
            self.hits += 1;
            fresh = self.pieces[&offset].resident == 0;
            self.take(offset, found, size);
            offset
        } else {
            // Grow at the top, starting inside the last piece when it is free.
            let start = match self.pieces.last_key_value() {
                Some((&o, p)) if p.free => o,
                _ => self.top,
            };
            if start.checked_add(size)? > len {
                return None;
            }
            if start < self.top {
                let last = self.pieces[&start];
                fresh = last.resident == 0;
                self.free.remove(&(last.size, start));
                self.resident_free -= last.resident;
            }
            self.grows += 1;
            self.top = start + size;
            self.pieces.insert(
                start,
                Piece {
                    size,
                    free: false,
                    resident: 0,
                },
            );
            start
        };
        self.allocated += size;
        Some((base + offset, size, fresh))
    }

    /// Hands out the first `size` bytes of the free piece at `offset` (of `found` bytes),
    /// keeping the rest free.
    fn take(&mut self, offset: usize, found: usize, size: usize) {
        self.free.remove(&(found, offset));
        let piece = self.pieces[&offset];
        let rest = found - size;
        // The rest keeps what it can of the resident estimate.
        let rest_resident = piece.resident.min(rest);
        self.resident_free -= piece.resident - rest_resident;
        if rest > 0 {
            self.pieces.insert(
                offset + size,
                Piece {
                    size: rest,
                    free: true,
                    resident: rest_resident,
                },
            );
            self.free.insert((rest, offset + size));
        }
        self.pieces.insert(
            offset,
            Piece {
                size,
                free: false,
                resident: 0,
            },
        );
    }

    /// Takes back the block at `address` of `size` bytes, merging it with free
    /// neighbours. Its pages are resident (they were handed out), so they join the cache.
    ///
    /// # Panics
    /// When the block is not one this arena handed out (an internal bug).
    pub(super) fn free(&mut self, address: usize, size: usize) {
        let base = self
            .region
            .as_ref()
            .expect("arena block without a region")
            .base;
        let mut offset = address - base;
        match self.pieces.get(&offset) {
            Some(p) if !p.free && p.size == size => {}
            other => panic!("internal: arena free of {address:#x}+{size} found {other:?}"),
        }
        self.allocated -= size;
        let mut merged = Piece {
            size,
            free: true,
            resident: size,
        };
        if let Some(next) = self.pieces.get(&(offset + size)).copied()
            && next.free
        {
            self.free.remove(&(next.size, offset + size));
            self.pieces.remove(&(offset + size));
            merged.size += next.size;
            merged.resident += next.resident;
            self.resident_free -= next.resident;
        }
        if let Some((&prev_offset, &prev)) = self.pieces.range(..offset).next_back()
            && prev.free
        {
            self.free.remove(&(prev.size, prev_offset));
            self.pieces.remove(&offset);
            offset = prev_offset;
            merged.size += prev.size;
            merged.resident += prev.resident;
            self.resident_free -= prev.resident;
        }
        self.resident_free += merged.resident;
        self.pieces.insert(offset, merged);
        self.free.insert((merged.size, offset));
    }

    /// Returns the pages of free pieces to the system, largest first, until at most
    /// `keep` bytes of them may be resident. The address ranges stay in the arena.
    pub(super) fn release(&mut self, keep: usize) {
        if self.resident_free <= keep {
            return;
        }
        let Some(base) = self.region.as_ref().map(|r| r.base) else {
            return;
        };
        let candidates: Vec<(usize, usize)> = self.free.iter().rev().copied().collect();
        for (size, offset) in candidates {
            if self.resident_free <= keep {
                break;
            }
            let piece = self.pieces.get_mut(&offset).expect("free piece");
            if piece.resident == 0 {
                continue;
            }
            discard(base + offset, size);
            self.resident_free -= piece.resident;
            piece.resident = 0;
        }
    }
}

/// Reserves `len` bytes of address space, 2 MiB aligned, readable and writable but not
/// committed (`MAP_NORESERVE`: pages exist once touched).
#[cfg(all(unix, not(miri)))]
fn reserve(len: usize, huge: bool) -> Option<Region> {
    let base = map_aligned(len, HUGE, true)?;
    if huge {
        advise_huge(base, len, true);
    }
    Some(Region { base, len })
}

/// Maps `len` bytes (a page multiple) of zeroed anonymous memory at a multiple of
/// `align` (a power of two; 1 for any page), without committing them when `noreserve`.
#[cfg(all(unix, not(miri)))]
pub(super) fn map_aligned(len: usize, align: usize, noreserve: bool) -> Option<usize> {
    let span = if align > PAGE { len + align } else { len };
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    #[cfg(target_os = "linux")]
    if noreserve {
        flags |= libc::MAP_NORESERVE;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = noreserve;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches
    // no existing memory; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let base = start.next_multiple_of(align.max(1));
    let head = base - start;
    let tail = span - head - len;
    // SAFETY: the head and tail are whole pages of the mapping just made (the mapping
    // and `len` are page multiples), outside the range kept; nothing refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        if tail > 0 {
            libc::munmap((base + len) as *mut libc::c_void, tail);
        }
    }
    Some(base)
}

/// No arena without mmap (and none under Miri, which cannot model the reservation):
/// large blocks are then allocations of their own.
#[cfg(any(not(unix), miri))]
fn reserve(_len: usize, _huge: bool) -> Option<Region> {
    None
}

pub(super) fn advise_huge(base: usize, len: usize, on: bool) {
    #[cfg(target_os = "linux")]
    // SAFETY: madvise only changes how pages of our own mapping are backed.
    unsafe {
        let advice = if on {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        libc::madvise(base as *mut libc::c_void, len, advice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (base, len, on);
}

/// Drops the pages of `[address, address + len)` (whole pages of a free piece): the
/// memory goes back to the system and reads as zeros when touched again.
fn discard(address: usize, len: usize) {
    #[cfg(all(unix, not(miri)))]
    // SAFETY: the range is a free piece of the arena's mapping: no buffer refers to it.
    unsafe {
        libc::madvise(address as *mut libc::c_void, len, libc::MADV_DONTNEED);
    }
    #[cfg(any(not(unix), miri))]
    let _ = (address, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot reserve the arena")]
    fn pieces_split_merge_and_grow_at_the_top() {
        let mut a = Arena::new(false);
        let (x, sx, _) = a.allocate(3 * PAGE + 1).unwrap();
        assert_eq!(sx, 4 * PAGE);
        let (y, _, _) = a.allocate(2 * PAGE).unwrap();
        let (z, _, _) = a.allocate(PAGE).unwrap();
        assert_eq!((y - x, z - y), (4 * PAGE, 2 * PAGE));
        a.free(x, sx);
        a.free(y, 2 * PAGE);
        // x and y merged: a request for 6 pages fits without growing.
        assert_eq!(a.resident_free, 6 * PAGE);
        let (w, _, _) = a.allocate(6 * PAGE).unwrap();
        assert_eq!((w, a.grows, a.hits), (x, 3, 1));
        assert_eq!(a.resident_free, 0);
        // Free the top piece; a bigger request grows from inside it.
        a.free(z, PAGE);
        let (v, sv, _) = a.allocate(5 * PAGE).unwrap();
        assert_eq!((v, sv, a.top), (z, 5 * PAGE, 11 * PAGE));
        a.free(v, sv);
        a.free(w, 6 * PAGE);
        assert_eq!(
            (a.allocated, a.resident_free, a.pieces.len()),
            (0, 11 * PAGE, 1)
        );
        a.release(0);
        assert_eq!(a.resident_free, 0);
        // Released pages read as zero again.
        let (u, su, fresh) = a.allocate(PAGE).unwrap();
        assert!(fresh, "released pages are fresh");
        // SAFETY: the block is ours, PAGE bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(u as *const u8, su) };
        assert!(bytes.iter().all(|&b| b == 0));
        // A block handed out and given back is not fresh until released.
        a.free(u, su);
        let (u2, su2, fresh) = a.allocate(PAGE).unwrap();
        assert!(!fresh);
        a.free(u2, su2);
        // Growing past the top is fresh; growing from inside a resident free last
        // piece is not.
        let (_, _, fresh) = a.allocate(20 * PAGE).unwrap();
        assert!(!fresh);
        let (_, _, fresh) = a.allocate(3 * PAGE).unwrap();
        assert!(fresh);
    }
}
