//! `HostBuffer`: a tensor's elements in a block of the host pool, returned on drop.

use super::*;

/// A tensor's elements in host memory: a slice of `T` in a block of the caching
/// allocator, returned to it on drop. Dereferences to `[T]`.
///
/// ```
/// use ferrograd_kernels::cpu::HostBuffer;
/// let mut b: HostBuffer<i64> = (0..5).collect();
/// b[0] = 10;
/// assert_eq!(b, vec![10, 1, 2, 3, 4]);
/// assert_eq!(b.iter().sum::<i64>(), 20);
/// ```
pub struct HostBuffer<T> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes of the block, 0 for an empty buffer (no block).
    block: usize,
    shard: usize,
    pool: &'static HostPool,
    _owns: PhantomData<T>,
}

// SAFETY: a HostBuffer owns its elements exclusively, like a Vec<T>.
unsafe impl<T: Send> Send for HostBuffer<T> {}
// SAFETY: shared access only hands out `&[T]`, like a Vec<T>.
unsafe impl<T: Sync> Sync for HostBuffer<T> {}

impl<T: Copy> HostBuffer<T> {
    /// `len` slots of uninitialised memory from `pool` (no fill happens), to be written
    /// and then declared initialised with [`HostBuffer::assume_init`].
    ///
    /// ```
    /// use ferrograd_kernels::cpu::{HOST_POOL, HostBuffer};
    /// let mut b = HostBuffer::<f32>::new_uninit_in(&HOST_POOL, 3);
    /// for (i, slot) in b.iter_mut().enumerate() {
    ///     slot.write(i as f32);
    /// }
    /// // SAFETY: every slot was written above.
    /// let b = unsafe { b.assume_init() };
    /// assert_eq!(b, vec![0.0, 1.0, 2.0]);
    /// ```
    pub fn new_uninit_in(pool: &'static HostPool, len: usize) -> HostBuffer<MaybeUninit<T>> {
        Self::raw_in(pool, len).0
    }

    /// [`HostBuffer::new_uninit_in`] from the global pool.
    pub fn new_uninit(len: usize) -> HostBuffer<MaybeUninit<T>> {
        Self::new_uninit_in(&HOST_POOL, len)
    }

    /// A buffer for `len` elements and whether its memory is fresh from the system
    /// (all zero bytes).
    fn raw_in(pool: &'static HostPool, len: usize) -> (HostBuffer<MaybeUninit<T>>, bool) {
        assert!(size_of::<T>() > 0, "HostBuffer of a zero-sized type");
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize)
            .unwrap_or_else(|| {
                panic!(
                    "capacity overflow: {len} elements of {} bytes",
                    size_of::<T>()
                )
            });
        if bytes == 0 {
            return (
                HostBuffer {
                    ptr: NonNull::dangling(),
                    len: 0,
                    block: 0,
                    shard: 0,
                    pool,
                    _owns: PhantomData,
                },
                true,
            );
        }
        let (ptr, block, shard, fresh) = pool.allocate(bytes);
        (
            HostBuffer {
                ptr: ptr.cast(),
                len,
                block,
                shard,
                pool,
                _owns: PhantomData,
            },
            fresh,
        )
    }

    /// A copy of `src`.
    ///
    /// ```
    /// let b = ferrograd_kernels::cpu::HostBuffer::from_slice(&[1u8, 2, 3]);
    /// assert_eq!(&b[..], &[1, 2, 3]);
    /// ```
    pub fn from_slice(src: &[T]) -> Self {
        let mut out = HostBuffer::<T>::new_uninit(src.len());
        // SAFETY: `out` has room for exactly `src.len()` elements and is a fresh block,
        // so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr().cast::<T>(), src.len());
            out.assume_init()
        }
    }

    /// `len` copies of `value`.
    ///
    /// ```
    /// let b = ferrograd_kernels::cpu::HostBuffer::full(3, 7i64);
    /// assert_eq!(b, vec![7, 7, 7]);
    /// ```
    pub fn full(len: usize, value: T) -> Self {
        let mut out = HostBuffer::<T>::new_uninit(len);
        for slot in out.iter_mut() {
            slot.write(value);
        }
        // SAFETY: every slot was written.
        unsafe { out.assume_init() }
    }

    /// The elements as a `Vec` (a copy).
    pub fn to_vec(&self) -> Vec<T> {
        self.deref().to_vec()
    }
}

impl<T: Element> HostBuffer<T> {
    /// `len` zeros from `pool`: memory fresh from the system is zero already and is not
    /// filled again.
    pub fn zeroed_in(pool: &'static HostPool, len: usize) -> Self {
        let (mut out, fresh) = Self::raw_in(pool, len);
        if !fresh {
            // A large block is zeroed on the thread team, a piece per thread (one thread
            // fills memory at a fraction of what the cores together do, while the
            // others wait for the kernel that needs the zeros).
            let chunk = if len * std::mem::size_of::<T>() >= PARALLEL_ZERO_BYTES {
                len.div_ceil(crate::cpu::num_threads())
            } else {
                len
            };
            crate::cpu::for_each_chunk_mut(&mut out[..], chunk, |_, piece| {
                // SAFETY: the piece is writable memory of `piece.len()` elements; zero
                // bytes are a valid value of every element type (0, 0.0, false).
                unsafe { std::ptr::write_bytes(piece.as_mut_ptr(), 0, piece.len()) };
            });
        }
        // SAFETY: every byte is zero, a valid `T`.
        unsafe { out.assume_init() }
    }

    /// `len` zeros from the global pool.
    ///
    /// ```
    /// let b = ferrograd_kernels::cpu::HostBuffer::<f64>::zeroed(4);
    /// assert_eq!(b, vec![0.0; 4]);
    /// ```
    pub fn zeroed(len: usize) -> Self {
        Self::zeroed_in(&HOST_POOL, len)
    }
}

impl<T: Copy> HostBuffer<MaybeUninit<T>> {
    /// Declares every slot written.
    ///
    /// # Safety
    /// Every one of the `len` slots must hold an initialised `T`.
    pub unsafe fn assume_init(self) -> HostBuffer<T> {
        let this = ManuallyDrop::new(self);
        HostBuffer {
            ptr: this.ptr.cast(),
            len: this.len,
            block: this.block,
            shard: this.shard,
            pool: this.pool,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        if self.block != 0 {
            self.pool.free(self.ptr.cast(), self.block, self.shard);
        }
    }
}

impl<T> Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is valid for `len` elements of `T` (dangling only for len 0),
        // owned by this buffer and initialised (the only way to a `HostBuffer<T>` of a
        // non-MaybeUninit `T` writes every element first).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Clone for HostBuffer<T> {
    fn clone(&self) -> Self {
        HostBuffer::from_slice(self)
    }
}

impl<T: fmt::Debug> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.deref().fmt(f)
    }
}

impl<T: PartialEq> PartialEq for HostBuffer<T> {
    fn eq(&self, other: &Self) -> bool {
        self.deref() == other.deref()
    }
}

impl<T: PartialEq> PartialEq<Vec<T>> for HostBuffer<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self.deref() == other.as_slice()
    }
}

impl<T: PartialEq> PartialEq<[T]> for HostBuffer<T> {
    fn eq(&self, other: &[T]) -> bool {
        self.deref() == other
    }
}

impl<T: Copy> From<Vec<T>> for HostBuffer<T> {
    /// Copies the elements into a pooled block.
    fn from(v: Vec<T>) -> Self {
        HostBuffer::from_slice(&v)
    }
}

impl<T: Copy> From<&[T]> for HostBuffer<T> {
    fn from(v: &[T]) -> Self {
        HostBuffer::from_slice(v)
    }
}

impl<'a, T> IntoIterator for &'a HostBuffer<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.deref().iter()
    }
}

impl<'a, T> IntoIterator for &'a mut HostBuffer<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.deref_mut().iter_mut()
    }
}

impl<T: Copy> FromIterator<T> for HostBuffer<T> {
    /// Writes straight into a pooled block when the iterator knows its length, else
    /// collects into a `Vec` first.
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let (lower, upper) = iter.size_hint();
        if upper != Some(lower) {
            return HostBuffer::from_slice(&iter.collect::<Vec<T>>());
        }
        let mut out = HostBuffer::<T>::new_uninit(lower);
        let mut written = 0;
        for (slot, x) in out.iter_mut().zip(&mut iter) {
            slot.write(x);
            written += 1;
        }
        if written == lower {
            if let Some(next) = iter.next() {
                // The size hint was wrong: keep what was written and the rest.
                // SAFETY: all `lower` slots were written.
                let head = unsafe { out.assume_init() };
                let all: Vec<T> = head.iter().copied().chain(Some(next)).chain(iter).collect();
                return HostBuffer::from_slice(&all);
            }
            // SAFETY: all `lower` slots were written.
            return unsafe { out.assume_init() };
        }
        // Fewer than promised: copy out the written prefix.
        // SAFETY: the first `written` slots were written.
        let prefix: Vec<T> = out[..written]
            .iter()
            .map(|s| unsafe { s.assume_init() })
            .collect();
        HostBuffer::from_slice(&prefix)
    }
}

impl<T> HostBuffer<T> {
    /// The address of the first element.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The mutable address of the first element.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// The bytes of the block behind this buffer (its size class), 0 when empty.
    pub fn block_size(&self) -> usize {
        self.block
    }
}
