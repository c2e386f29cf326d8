//! Tests of `pool`.

use super::*;

#[test]
fn size_classes_waste_at_most_an_eighth() {
    for bytes in (1..100_000)
        .step_by(37)
        .chain([1 << 20, (1 << 20) + 1, 3 << 30])
    {
        let c = size_class(bytes);
        assert!(c >= bytes && c.is_multiple_of(64), "{bytes} -> {c}");
        assert!(bytes <= 4096 || c - bytes <= bytes / 8, "{bytes} -> {c}");
    }
    assert_eq!(size_class(MAP_MIN) % 4096, 0);
}

#[test]
fn every_size_class_has_its_own_slot() {
    let mut seen = [false; CLASSES];
    let mut last = 0;
    for bytes in (1..=LARGE)
        .step_by(61)
        .chain([4096, 4097, LARGE - 1, LARGE])
    {
        let class = size_class(bytes);
        let index = class_index(class);
        assert!(
            index < CLASSES,
            "{bytes} bytes: class {class}, slot {index}"
        );
        assert_eq!(class_size(index), class, "{bytes} bytes");
        seen[index] = true;
        if bytes % 61 == 1 {
            assert!(index >= last, "slots follow sizes");
            last = index;
        }
    }
    assert!(seen[0] && seen[CLASSES - 1]);
    // Slot sizes never decrease, so a search upward finds the smallest fitting block
    // (slot 64 repeats 4096 and stays empty: 4096 bytes map to slot 63).
    assert!((1..CLASSES).all(|i| class_size(i) >= class_size(i - 1)));
}

#[test]
fn a_slightly_larger_cached_block_serves_a_request() {
    let pool = HostPool::leaked(1 << 20);
    let a = HostBuffer::<u8>::zeroed_in(pool, 4608);
    let address = a.as_ptr();
    drop(a);
    // 4097 bytes round to 4608 as well; 4096 may take the 4608 block (+12.5 %).
    let b = HostBuffer::<u8>::zeroed_in(pool, 4096);
    assert_eq!(b.as_ptr(), address);
    assert_eq!(pool.stats().cache_hits, 1);
}

#[test]
fn byte_counts_parse_with_binary_suffixes() {
    assert_eq!(parse_bytes("1024"), Some(1024));
    assert_eq!(parse_bytes("512M"), Some(512 << 20));
    assert_eq!(parse_bytes(" 2GiB "), Some(2 << 30));
    assert_eq!(parse_bytes("3 kb"), Some(3 << 10));
    assert_eq!(parse_bytes("lots"), None);
    assert_eq!(parse_bytes("5T"), None);
}

#[test]
fn a_freed_block_of_the_same_class_comes_back() {
    let pool = HostPool::leaked(1 << 30);
    for len in [10usize, 1000, 100_000, 3 << 20] {
        if cfg!(miri) && len * 4 > LARGE {
            continue; // no arena under Miri: large blocks are not cached
        }
        let a = HostBuffer::<f32>::zeroed_in(pool, len);
        let address = a.as_ptr() as usize;
        drop(a);
        let before = pool.stats();
        let b = HostBuffer::<f32>::zeroed_in(pool, len - len / 20);
        assert_eq!(b.as_ptr() as usize, address, "len {len}");
        let after = pool.stats();
        assert_eq!(after.cache_hits, before.cache_hits + 1, "len {len}");
        assert_eq!(after.system_allocations, before.system_allocations);
        // Zeroed even though the block held data before.
        assert!(b.iter().all(|&x| x == 0.0));
    }
}

#[test]
fn blocks_are_aligned_and_zeroed_when_asked() {
    let pool = HostPool::leaked(1 << 30);
    let mut held = Vec::new();
    let lens: &[usize] = if cfg!(miri) {
        &[1, 3, 63, 64, 65, 4097, (1 << 20) + 1]
    } else {
        &[1, 3, 63, 64, 65, 4097, 300_000, (1 << 20) + 1, 5 << 20]
    };
    for &len in lens {
        let mut b = HostBuffer::<u8>::zeroed_in(pool, len);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0, "len {len}");
        assert!(b.iter().all(|&x| x == 0));
        b.fill(0xAB);
        held.push(b);
    }
    drop(held);
    for &len in &lens[1..] {
        let b = HostBuffer::<u8>::zeroed_in(pool, len);
        assert!(
            b.iter().all(|&x| x == 0),
            "reused block of {len} not zeroed"
        );
    }
}

#[test]
#[cfg_attr(miri, ignore = "needs the arena, which Miri cannot reserve")]
fn statistics_add_up() {
    let pool = HostPool::leaked(1 << 30);
    let a = HostBuffer::<f64>::zeroed_in(pool, 100); // 800 -> 832 bytes
    let b = HostBuffer::<f64>::zeroed_in(pool, 1 << 18); // 2 MiB: the arena
    let s = pool.stats();
    assert_eq!(s.allocated, 832 + (2 << 20));
    assert_eq!(s.reserved, s.allocated);
    assert_eq!(s.max_allocated, s.allocated);
    assert_eq!(s.system_allocations, 2);
    drop(a);
    drop(b);
    let s = pool.stats();
    assert_eq!(s.allocated, 0);
    assert_eq!(s.reserved, 832 + (2 << 20)); // cached
    assert_eq!(s.max_allocated, 832 + (2 << 20));
    pool.reset_peak_stats();
    assert_eq!(pool.stats().max_allocated, 0);
    assert_eq!(pool.stats().max_reserved, 832 + (2 << 20));
    pool.empty_cache();
    let s = pool.stats();
    assert_eq!((s.allocated, s.reserved), (0, 0));
    // Empty buffers take no block.
    let e = HostBuffer::<f32>::zeroed_in(pool, 0);
    assert_eq!((e.len(), e.block_size(), pool.stats().allocated), (0, 0, 0));
}

#[test]
#[cfg_attr(miri, ignore = "needs the arena, which Miri cannot reserve")]
fn the_cap_sends_freed_blocks_back_to_the_system() {
    let pool = HostPool::leaked(10_000);
    let a = HostBuffer::<u8>::zeroed_in(pool, 6000);
    let b = HostBuffer::<u8>::zeroed_in(pool, 6000);
    let c = HostBuffer::<u8>::zeroed_in(pool, 3 << 20);
    let class = size_class(6000);
    drop(a); // cached: 6144 <= 10_000
    assert_eq!(pool.stats().reserved, 2 * class + (3 << 20));
    drop(b); // would make 12_288 cached: released
    assert_eq!(pool.stats().reserved, class + (3 << 20));
    drop(c); // its pages are released at once
    assert_eq!(pool.stats().reserved, class);
    pool.set_cache_limit(0);
    assert_eq!(pool.stats().reserved, 0);
    assert_eq!(pool.cache_limit(), 0);
}

#[test]
fn many_threads_allocate_and_free_at_once() {
    let pool = HostPool::leaked(64 << 20);
    // Under Miri, fewer and smaller: it interprets every step.
    let (tasks, rounds, max_len) = if cfg!(miri) {
        (8usize, 12usize, 600usize)
    } else {
        (64, 200, 300_000)
    };
    let work = |task: usize| {
        let mut held = Vec::new();
        for round in 0..rounds {
            let len = 1 + (task * 7919 + round * 104_729) % max_len;
            let mut b = HostBuffer::<u32>::new_uninit_in(pool, len);
            for (i, slot) in b.iter_mut().enumerate() {
                slot.write((task * 1_000_003 + i) as u32);
            }
            // SAFETY: every slot was written.
            let b = unsafe { b.assume_init() };
            held.push(b);
            if held.len() > 3 {
                let old = held.remove(0);
                // Nobody else wrote into the block while this thread held it.
                assert!(
                    old.iter()
                        .enumerate()
                        .all(|(i, &v)| v == (task * 1_000_003 + i) as u32)
                );
            }
        }
    };
    std::thread::scope(|s| {
        for task in 0..tasks {
            s.spawn(move || work(task));
        }
    });
    let s = pool.stats();
    assert_eq!(s.allocated, 0);
    assert!(s.cache_hits > 0 && s.reserved <= 64 << 20, "{s:?}");
    pool.empty_cache();
    assert_eq!(pool.stats().reserved, 0);
}

#[test]
fn collecting_trusts_no_size_hint() {
    struct Liar(usize, usize);
    impl Iterator for Liar {
        type Item = u8;
        fn next(&mut self) -> Option<u8> {
            (self.0 < self.1).then(|| {
                self.0 += 1;
                self.0 as u8
            })
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (3, Some(3))
        }
    }
    let more: HostBuffer<u8> = Liar(0, 5).collect();
    assert_eq!(more, vec![1, 2, 3, 4, 5]);
    let fewer: HostBuffer<u8> = Liar(0, 2).collect();
    assert_eq!(fewer, vec![1, 2]);
    let unknown: HostBuffer<i64> = (0..10).filter(|x| x % 2 == 0).collect();
    assert_eq!(unknown, vec![0, 2, 4, 6, 8]);
}
