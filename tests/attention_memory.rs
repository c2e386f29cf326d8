//! The fused attention forward keeps no [T, T] matrix: at T = 1024, d = 64 (one head,
//! f32) its peak extra memory, measured by a counting allocator, stays within a small
//! multiple of T·d (the output, and a 64 x T score tile per thread; measured on one
//! thread), far below one dense score matrix (T² floats, 4 MiB).

use ferrograd::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to the system allocator unchanged; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: the caller's layout is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn the_forward_uses_o_of_t_times_d_memory() {
    let (t, d) = (1024usize, 64usize);
    let q = Tensor::randn(&[1, 1, t, d], DType::F32, &Device::Cpu);
    let k = Tensor::randn(&[1, 1, t, d], DType::F32, &Device::Cpu);
    let v = Tensor::randn(&[1, 1, t, d], DType::F32, &Device::Cpu);
    // One thread, so the tiles in flight (one per thread) do not depend on the machine;
    // the least of three runs, so that nothing else the process allocates meanwhile counts.
    ferrograd::set_num_threads(1);
    let mut extra = usize::MAX;
    let mut y = None;
    for _ in 0..3 {
        let before = LIVE.load(Ordering::SeqCst);
        PEAK.store(before, Ordering::SeqCst);
        let out = no_grad(|| F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None));
        extra = extra.min(PEAK.load(Ordering::SeqCst) - before);
        y = Some(out);
    }
    let y = y.expect("ran");
    let td = t * d * 4;
    println!(
        "peak extra memory of the forward: {extra} bytes = {:.2} x T*d*4 (a dense score matrix is {} bytes)",
        extra as f64 / td as f64,
        t * t * 4
    );
    // The output is T*d and the one score tile (64 x T) is T*d here.
    assert!(extra <= 4 * td, "{extra} bytes");
    assert_eq!(y.shape(), &[1, 1, t, d]);
}
