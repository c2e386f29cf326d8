//! The CPU caching allocator seen from tensors: statistics, the cap, `empty_cache`
//! lowering the resident size, and no block handed out again while a view of it lives.
//! One test function: the statistics are process-wide, so the steps run in order.

use ferrograd::cpu;
use ferrograd::prelude::*;

/// Resident set size in bytes (Linux), else `None`.
fn rss() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn full(n: usize, value: f64) -> Tensor {
    Tensor::full(&[n], value, DType::F32, &Device::Cpu)
}

#[test]
fn cpu_caching_allocator_from_tensors() {
    // --- Statistics follow tensors.
    let base = cpu::memory_allocated();
    let t = full(1 << 20, 1.0); // 4 MiB
    assert!(cpu::memory_allocated() >= base + (4 << 20));
    assert!(cpu::memory_reserved() >= cpu::memory_allocated());
    cpu::reset_peak_memory_stats();
    let peak_start = cpu::max_memory_allocated();
    let u = &t + 1.0;
    assert!(cpu::max_memory_allocated() >= peak_start + (4 << 20));
    drop((t, u));
    assert!(cpu::memory_allocated() <= base + (1 << 20), "tensors freed");

    // --- A freed block serves the next tensor of its size without a system allocation.
    let warm = full(300_000, 2.0);
    drop(warm);
    let before = cpu::memory_stats();
    let again = full(300_000, 3.0);
    let after = cpu::memory_stats();
    assert!(after.cache_hits > before.cache_hits);
    assert_eq!(after.segments_allocated, before.segments_allocated);
    assert_eq!(again.to_vec::<f32>()[299_999], 3.0);
    drop(again);

    // --- No block is reused while a view of it is alive.
    for n in [1000usize, 200_000, 2_000_000] {
        let owner = full(n, 7.0);
        let view = owner.narrow(0, n / 2, 10);
        drop(owner);
        // Many tensors of the same size, written with other values, while the view lives.
        let others: Vec<Tensor> = (0..8).map(|i| full(n, i as f64)).collect();
        assert_eq!(view.to_vec::<f32>(), vec![7.0; 10], "size {n}");
        drop(others);
        assert_eq!(view.to_vec::<f32>(), vec![7.0; 10], "size {n}");
    }

    // --- empty_cache returns cached memory: reserved falls to what is held, and RSS drops.
    let held = full(1000, 0.0);
    let big: Vec<Tensor> = (0..4).map(|_| full(25 << 20, 1.0)).collect(); // 4 x 100 MiB
    let rss_full = rss();
    drop(big);
    let cached = cpu::memory_reserved() - cpu::memory_allocated();
    assert!(
        cached >= 400 << 20,
        "freed tensors stay cached ({cached} bytes)"
    );
    cpu::empty_cache();
    let s = cpu::memory_stats();
    assert!(
        s.reserved - s.allocated < 8 << 20,
        "after empty_cache {} bytes stay cached",
        s.reserved - s.allocated
    );
    if let (Some(before), Some(after)) = (rss_full, rss()) {
        assert!(
            after + (300 << 20) < before,
            "RSS {before} -> {after} after empty_cache"
        );
    }
    drop(held);

    // --- The cap: with 0, freed blocks go straight back.
    let old = cpu::cache_limit();
    cpu::set_cache_limit(0);
    let t = full(3 << 20, 1.0);
    drop(t);
    let s = cpu::memory_stats();
    assert!(s.reserved - s.allocated < 1 << 20, "{s:?}");
    cpu::set_cache_limit(old);

    // --- Huge pages can be switched off and on; tensors still work either way.
    let on = cpu::huge_pages();
    cpu::set_huge_pages(!on);
    let x = full(4 << 20, 2.0).sum_all().item::<f32>();
    assert_eq!(x, 8.0 * (1 << 20) as f32);
    cpu::set_huge_pages(on);
}
