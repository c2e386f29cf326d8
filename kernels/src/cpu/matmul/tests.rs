//! Tests of `matmul`.

use super::*;

#[test]
fn linear_adds_the_bias_in_every_block() {
    // Threaded by rows (tall), by columns, with a split contraction, on one thread;
    // contiguous and transposed inputs and weights; f32 and f64.
    for (m, k, n) in [
        (2, 3, 5),
        (600, 40, 70),
        (64, 96, 300),
        (8, 1024, 16),
        (9, 7, 1),
    ] {
        for (x_t, w_t) in [(false, false), (true, true)] {
            let xl = if x_t {
                Layout::contiguous(&[k, m]).transpose(0, 1)
            } else {
                Layout::contiguous(&[m, k])
            };
            let wl = if w_t {
                Layout::contiguous(&[k, n]).transpose(0, 1)
            } else {
                Layout::contiguous(&[n, k])
            };
            let x: Vec<f64> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f64 - 50.0) / 64.0)
                .collect();
            let w: Vec<f64> = (0..n * k)
                .map(|i| ((i * 53 % 97) as f64 - 48.0) / 64.0)
                .collect();
            let b: Vec<f64> = (0..n).map(|j| j as f64 * 0.25 - 3.0).collect();
            let want: Vec<f64> = (0..m * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    b[c] + (0..k)
                        .map(|q| at(&x, &xl, &[r, q]) * at(&w, &wl, &[c, q]))
                        .sum::<f64>()
                })
                .collect();
            let got = linear(&x, &xl, &w, &wl, Some(&b));
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-9 * (1.0 + e.abs()),
                    "f64 [{m},{k},{n}] {i}: {g} vs {e}"
                );
            }
            let f = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let got = linear(&f(&x), &xl, &f(&w), &wl, Some(&f(&b)));
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (*g as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "f32 [{m},{k},{n}] {i}: {g} vs {e}"
                );
            }
        }
    }
}

/// Element `idx` of a strided view.
fn at<T: Copy>(data: &[T], l: &Layout, idx: &[usize]) -> T {
    data[l.offset()
        + idx
            .iter()
            .zip(l.strides())
            .map(|(i, s)| i * s)
            .sum::<usize>()]
}

/// Batch dims that do not merge into one stride (attention's heads split from
/// `[B, T, H, D]`, and a broadcast dim of stride 0) are multiplied in place, equal to
/// a plain loop over the views, in every dtype path (gemm, matrix-vector, bf16,
/// integers).
#[test]
fn unmergeable_batch_dims_multiply_in_place() {
    fn check<T: NumElement + std::fmt::Debug>(m: usize) {
        let (b, t, h, d) = (2, m, 3, 5);
        let q: Vec<T> = (0..b * t * h * d)
            .map(|i| T::from_f64(((i * 7) % 13) as f64 - 6.0))
            .collect();
        let k: Vec<T> = (0..b * 4 * h * d)
            .map(|i| T::from_f64(((i * 5) % 11) as f64 - 5.0))
            .collect();
        // q: [B, H, T, D] from [B, T, H, D]; k^T: [B, H, D, 4] from [B, 4, H, D].
        let lq = Layout::contiguous(&[b, t, h, d]).transpose(1, 2);
        let lk = Layout::contiguous(&[b, 4, h, d]).permute(&[0, 2, 3, 1]);
        // And a broadcast batch dim: one [H, 4, D] key set for every batch row.
        let lk1 = Layout::contiguous(&[1, 4, h, d])
            .permute(&[0, 2, 3, 1])
            .broadcast_to(&[b, h, d, 4]);
        for lk in [lk, lk1] {
            let out = matmul(&q, &lq, &k, &lk);
            assert_eq!(out.len(), b * h * t * 4);
            for (o, v) in out.iter().enumerate() {
                let (bi, hi, ti, j) = (o / (h * t * 4), o / (t * 4) % h, o / 4 % t, o % 4);
                let want: f64 = (0..d)
                    .map(|p| {
                        at(&q, &lq, &[bi, hi, ti, p]).to_f64()
                            * at(&k, &lk, &[bi, hi, p, j]).to_f64()
                    })
                    .sum();
                assert_eq!(v.to_f64(), want, "{:?} at {o}", T::DTYPE);
            }
        }
    }
    for m in [1, 6] {
        check::<f32>(m);
        check::<f64>(m);
        check::<bf16>(m);
        check::<i64>(m);
    }
}

/// `dst = alpha * dst + beta * A @ B` through [`gemm`] for every shape, in every
/// operand layout (`A`, `B` as laid out or transposed) and both destination layouts,
/// on 1–3 threads, against a plain loop (integer values, so the sums are exact in
/// f32 too); returns how many of the cases [`scratch_orientation`] turned around.
fn check_products<T: NumElement + std::fmt::Debug>(
    shapes: &[(usize, usize, usize)],
    alpha: f64,
    beta: f64,
) -> usize {
    let _lock = crate::cpu::par::thread_count_lock();
    let mut turned = 0;
    for &(m, n, k) in shapes {
        let a: Vec<T> = (0..m * k)
            .map(|i| T::from_f64(((i * 7) % 13) as f64 - 6.0))
            .collect();
        let b: Vec<T> = (0..k * n)
            .map(|i| T::from_f64(((i * 5) % 11) as f64 - 5.0))
            .collect();
        for (a_t, b_t) in [(false, false), (false, true), (true, false), (true, true)] {
            // `a` holds A [m, k] row-major, or A^T's storage [k, m]; `b` likewise.
            let (lcs, lrs) = if a_t { (m, 1) } else { (1, k) };
            let (rcs, rrs) = if b_t { (k, 1) } else { (1, n) };
            let at = |i: usize, p: usize| a[i * lrs + p * lcs].to_f64();
            let bt = |p: usize, j: usize| b[p * rrs + j * rcs].to_f64();
            for row_major in [true, false] {
                let (cs, rs) = if row_major { (1, n) } else { (m, 1) };
                turned += scratch_orientation::<T>(
                    m,
                    n,
                    k,
                    cs as isize,
                    rs as isize,
                    lrs as isize,
                    rcs as isize,
                )
                .is_some() as usize;
                for threads in [1, 2, 3] {
                    crate::cpu::set_num_threads(threads);
                    let mut dst = vec![T::ONE; m * n];
                    // SAFETY: `dst` is m x n with strides (cs, rs); `a` and `b` hold
                    // m * k and k * n elements reached exactly by their strides.
                    unsafe {
                        gemm(
                            m,
                            n,
                            k,
                            dst.as_mut_ptr(),
                            cs as isize,
                            rs as isize,
                            true,
                            a.as_ptr(),
                            lcs as isize,
                            lrs as isize,
                            b.as_ptr(),
                            rcs as isize,
                            rrs as isize,
                            T::from_f64(alpha),
                            T::from_f64(beta),
                            Parallelism::Threads(threads),
                        );
                    }
                    for i in 0..m {
                        for j in 0..n {
                            let want =
                                alpha + beta * (0..k).map(|p| at(i, p) * bt(p, j)).sum::<f64>();
                            assert_eq!(
                                dst[i * rs + j * cs].to_f64(),
                                want,
                                "{:?} {m}x{n}x{k}, A^T {a_t}, B^T {b_t}, row-major {row_major}, {threads} threads, ({i}, {j})",
                                T::DTYPE
                            );
                        }
                    }
                }
            }
        }
    }
    crate::cpu::set_num_threads(0);
    turned
}

/// f32 products with a long contracted dim, cut along it on 2 and 3 threads (evenly
/// or not), every layout, `dst = 2 * dst + 3 * A @ B`.
#[test]
fn products_split_along_k_equal_the_plain_loop() {
    let shapes = [(5, 7, 600), (33, 17, 1100), (1, 200, 513), (40, 3, 2000)];
    for &(m, n, k) in &shapes {
        assert!(split_contraction::<f32>(m, n, k, 2, 1, n as isize));
        assert!(!split_contraction::<f64>(m, n, k, 2, 1, n as isize));
    }
    check_products::<f32>(&shapes, 2.0, 3.0);
}

/// Cut by rows or columns, blocks of any remainder, `dst = 0 * dst + 1 * A @ B`.
#[test]
fn threaded_blocks_equal_one_product() {
    let shapes = [
        (1, 1, 1),
        (5, 70, 3),
        (70, 5, 9),
        (33, 47, 20),
        (100, 64, 17),
    ];
    assert_eq!(check_products::<f64>(&shapes, 0.0, 1.0), 0);
    assert_eq!(check_products::<f32>(&shapes, 0.0, 1.0), 0);
}

/// f32 products that [`scratch_orientation`] turns around (and ones it leaves), with
/// `dst = 2 * dst + 3 * A @ B`.
#[test]
fn turned_around_products_equal_the_plain_loop() {
    assert_eq!(
        scratch_orientation::<f32>(32, 300, 256, 1, 300, 256, 256),
        Some(true),
        "x @ W^T with few rows turns column-major"
    );
    assert_eq!(
        scratch_orientation::<f32>(300, 32, 256, 1, 32, 1, 1),
        Some(true),
        "a tall weight gradient turns column-major"
    );
    assert_eq!(
        scratch_orientation::<f64>(32, 300, 256, 1, 300, 256, 256),
        None
    );
    assert_eq!(
        scratch_orientation::<f32>(32, 300, 64, 1, 300, 64, 64),
        None
    );
    let shapes = [
        (32, 300, 256),
        (300, 32, 260),
        (7, 130, 257),
        (130, 7, 300),
        (200, 200, 256),
    ];
    let turned = check_products::<f32>(&shapes, 2.0, 3.0);
    assert!(
        turned >= 8,
        "only {turned} cases went through the scratch matrix"
    );
    assert_eq!(check_products::<f64>(&shapes[..2], 2.0, 3.0), 0);
}
