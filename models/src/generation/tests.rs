//! Tests of `generation`.

use super::*;
use ferrograd::prelude::no_grad;

fn step(rows: usize, len: usize, seed: f32) -> (Tensor, Tensor) {
    let n = rows * 2 * len * 3;
    let k: Vec<f32> = (0..n).map(|i| seed + i as f32).collect();
    let v: Vec<f32> = (0..n).map(|i| -seed - i as f32).collect();
    (
        Tensor::from_vec(k, &[rows, 2, len, 3]),
        Tensor::from_vec(v, &[rows, 2, len, 3]),
    )
}

/// The reference the cache must equal: every step concatenated.
fn cat2(a: &Tensor, b: &Tensor) -> Tensor {
    Tensor::cat(&[a, b], 2)
}

fn keys(cache: &KvCache) -> Tensor {
    cache.layers[0].as_ref().unwrap().keys()
}

#[test]
fn the_cache_writes_in_place_and_equals_concatenation() {
    no_grad(|| {
        let mut cache = KvCache::new(1);
        cache.reserve(4, 16);
        let (mut want_k, mut want_v) = step(2, 3, 0.0);
        let slot = cache.layer_slots().next().unwrap();
        slot.append(want_k.clone(), want_v.clone());
        assert_eq!(cache.capacity(), (4, 16));
        let buffer = cache.layers[0].as_ref().unwrap().k.clone();
        for i in 0..5 {
            let (k, v) = step(2, 1, 100.0 * (i + 1) as f32);
            let slot = cache.layer_slots().next().unwrap();
            let (got_k, got_v) = slot.append(k.transpose(0, 0), v.clone());
            want_k = cat2(&want_k, &k);
            want_v = cat2(&want_v, &v);
            assert_eq!(got_k.to_vec::<f32>(), want_k.to_vec::<f32>());
            assert_eq!(got_v.to_vec::<f32>(), want_v.to_vec::<f32>());
        }
        // Within the reservation nothing was reallocated.
        // (The first buffer, read through the handle kept, holds the cache.)
        let in_first = |cache: &KvCache| {
            region(&buffer, cache.batch_size(), 0, cache.len()).to_vec::<f32>()
                == keys(cache).to_vec::<f32>()
        };
        assert!(in_first(&cache));
        assert_eq!((cache.len(), cache.batch_size()), (8, 2));

        // Left padding, trimming, rows leaving and joining: the same as out of place.
        cache.pad_left(2);
        let zeros = Tensor::zeros(&[2, 2, 2, 3], DType::F32, &Device::Cpu);
        want_k = cat2(&zeros, &want_k);
        assert_eq!(keys(&cache).to_vec::<f32>(), want_k.to_vec::<f32>());
        cache.trim_left(3);
        want_k = want_k.narrow(2, 3, 7);
        assert_eq!(keys(&cache).to_vec::<f32>(), want_k.to_vec::<f32>());
        cache.select_rows(&[1]);
        want_k = want_k.narrow(0, 1, 1);
        assert_eq!(keys(&cache).to_vec::<f32>(), want_k.to_vec::<f32>());
        let mut other = KvCache::new(1);
        let (k2, v2) = step(2, 7, 5000.0);
        other.layer_slots().next().unwrap().append(k2.clone(), v2);
        cache.append_rows(other);
        want_k = Tensor::cat(&[&want_k, &k2], 0);
        assert_eq!(keys(&cache).to_vec::<f32>(), want_k.to_vec::<f32>());
        assert_eq!(cache.batch_size(), 3);
        assert!(in_first(&cache));

        // Past the reservation it grows, keeping what it holds.
        let (k3, v3) = step(3, 20, 9000.0);
        cache.layer_slots().next().unwrap().append(k3.clone(), v3);
        want_k = cat2(&want_k, &k3);
        assert_eq!(keys(&cache).to_vec::<f32>(), want_k.to_vec::<f32>());
        assert_eq!(cache.capacity(), (4, 32));

        // Cleared, the buffers stay for the next rows.
        cache.clear();
        assert_eq!(
            (cache.len(), cache.batch_size(), cache.capacity()),
            (0, 0, (4, 32))
        );
        let mut one = KvCache::new(1);
        let (k4, v4) = step(1, 5, 1.0);
        one.layer_slots().next().unwrap().append(k4.clone(), v4);
        cache.append_rows(one);
        assert_eq!(keys(&cache).to_vec::<f32>(), k4.to_vec::<f32>());
    });
}

#[test]
fn gradients_flow_through_a_recorded_cache() {
    let (k, v) = step(1, 2, 0.5);
    let (k, v) = (k.requires_grad(true), v.requires_grad(true));
    let mut cache = KvCache::new(1);
    cache.reserve(1, 8);
    cache
        .layer_slots()
        .next()
        .unwrap()
        .append(k.mul_scalar(2.0), v.clone());
    let (k1, _) = step(1, 1, 3.0);
    let (all_k, _) = cache
        .layer_slots()
        .next()
        .unwrap()
        .append(k1, v.narrow(2, 0, 1));
    all_k.sum_all().backward();
    assert_eq!(k.grad().unwrap().to_vec::<f32>(), vec![2.0; 12]);
}

#[test]
fn positions_follow_transformers() {
    let mask = vec![vec![0, 0, 1, 1], vec![1, 1, 1, 1]];
    assert_eq!(positions_of(&mask, 0, 4), [1, 1, 0, 1, 0, 1, 2, 3]);
    assert_eq!(positions_of(&mask, 3, 1), [1, 3]);
}

#[test]
fn processors_restrict_the_choice() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let c = GenerationConfig {
        do_sample: true,
        top_k: Some(1),
        ..Default::default()
    };
    for _ in 0..20 {
        assert_eq!(choose(&mut [0.1, 3.0, 2.9], &[], &c, &mut rng), 1);
    }
    let c = GenerationConfig {
        do_sample: true,
        top_p: Some(0.5),
        ..Default::default()
    };
    for _ in 0..20 {
        assert_eq!(choose(&mut [0.0, 5.0, 0.0], &[], &c, &mut rng), 1);
    }
    // A repeated token loses to a fresh one under a strong penalty.
    let c = GenerationConfig {
        repetition_penalty: 4.0,
        ..Default::default()
    };
    assert_eq!(choose(&mut [2.0, 1.0], &[0], &c, &mut rng), 1);
    // Sampling covers the support, reproducibly.
    let c = GenerationConfig {
        do_sample: true,
        seed: 3,
        ..Default::default()
    };
    let draw = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..200)
            .map(|_| choose(&mut [0.0, 0.0, 0.0], &[], &c, &mut rng))
            .collect::<Vec<_>>()
    };
    let a = draw(3);
    assert_eq!(a, draw(3));
    assert!((0..3).all(|k| a.contains(&k)));
}
