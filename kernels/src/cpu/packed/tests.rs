//! Tests of `packed`.

use super::*;

fn data(len: usize, seed: u64) -> Vec<f32> {
    (0..len)
        .map(|i| ((((i as u64 * 2_654_435_761 + seed) % 1000) as f32) / 500.0) - 1.0)
        .collect()
}

#[test]
fn every_isa_and_edge_matches_a_plain_loop() {
    let Some(best) = Isa::detect() else {
        eprintln!("skipped: this CPU has neither AVX2+FMA nor AVX-512");
        return;
    };
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|i| best == Isa::Avx512 || *i == Isa::Avx2)
        .collect();
    for isa in isas {
        for (m, k, n) in [
            (1, 1, 1),
            (3, 5, 7),
            (8, 16, 32),
            (13, 33, 70),
            (32, 64, 100),
        ] {
            for transposed in [false, true] {
                for accumulate in [false, true] {
                    for threads in [1, 3] {
                        // Transposed with columns further apart than their length,
                        // as the heads of a `[len, heads, d]` projection lie.
                        let (rs, cs) = if transposed { (1, k + 3) } else { (n, 1) };
                        let b = data((k - 1) * rs + (n - 1) * cs + 1, 1);
                        let packed = PackedRhs::pack_for(isa, &b, (k, n), (rs, cs));
                        // `a` row-major, or transposed (read down its columns).
                        let (a_rs, a_cs) = if threads == 3 { (1, m + 1) } else { (k + 2, 1) };
                        let a = data((m - 1) * a_rs + (k - 1) * a_cs + 1, 2);
                        let init = data(m * n, 3);
                        let mut dst = init.clone();
                        packed.matmul_into_strided(
                            &mut dst,
                            m,
                            &a,
                            (a_rs, a_cs),
                            accumulate,
                            threads,
                        );
                        for i in 0..m {
                            for j in 0..n {
                                let mut want: f64 = (0..k)
                                    .map(|q| {
                                        a[i * a_rs + q * a_cs] as f64 * b[q * rs + j * cs] as f64
                                    })
                                    .sum();
                                if accumulate {
                                    want += init[i * n + j] as f64;
                                }
                                let got = dst[i * n + j] as f64;
                                assert!(
                                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                    "{isa:?} [{m},{k}]@[{k},{n}] t={transposed} acc={accumulate} ({i},{j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn small_products_match_a_plain_loop_for_every_layout() {
    let Some(best) = Isa::detect() else {
        eprintln!("skipped: this CPU has neither AVX2+FMA nor AVX-512");
        return;
    };
    let isas = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|i| best == Isa::Avx512 || *i == Isa::Avx2);
    for (isa, (m, k, n)) in isas.flat_map(|isa| {
        [
            (1, 1, 1),
            (3, 5, 7),
            (8, 16, 32),
            (13, 33, 70),
            (64, 32, 64),
        ]
        .map(|s| (isa, s))
    }) {
        for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
            let batch = 3;
            // Transposed operands with their major stride wider than the matrix, and
            // matrices spaced apart, as heads of a `[B, T, 3, H, d]` projection lie.
            let (l_rs, l_cs) = if a_t { (1, m + 2) } else { (k + 3, 1) };
            let (r_rs, r_cs) = if b_t { (1, k + 1) } else { (n + 5, 1) };
            let l_span = (m - 1) * l_rs + (k - 1) * l_cs + 1;
            let r_span = (k - 1) * r_rs + (n - 1) * r_cs + 1;
            let l_offs: Vec<usize> = (0..batch).map(|b| b * (l_span + 4)).collect();
            let r_offs: Vec<usize> = (0..batch).map(|b| 7 + b * (r_span + 1)).collect();
            let lhs = data(batch * (l_span + 4), 5);
            let rhs = data(7 + batch * (r_span + 1), 6);
            let mut out = vec![std::mem::MaybeUninit::<f32>::uninit(); batch * m * n];
            assert!(small_products_on(
                isa,
                &mut out,
                (&lhs, &l_offs, (l_rs, l_cs)),
                (&rhs, &r_offs, (r_rs, r_cs)),
                (m, k, n),
            ));
            for b in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|q| {
                                lhs[l_offs[b] + i * l_rs + q * l_cs] as f64
                                    * rhs[r_offs[b] + q * r_rs + j * r_cs] as f64
                            })
                            .sum();
                        // SAFETY: `small_products` wrote every element.
                        let got = unsafe { out[(b * m + i) * n + j].assume_init() } as f64;
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{isa:?} [{m},{k}]@[{k},{n}] a_t={a_t} b_t={b_t} batch {b} ({i},{j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
    // A left operand with no unit stride is declined, untouched.
    let mut out = [std::mem::MaybeUninit::<f32>::uninit(); 4];
    let x = data(16, 1);
    assert!(!small_products(
        &mut out,
        (&x, &[0], (2, 3)),
        (&x, &[0], (2, 1)),
        (2, 2, 2)
    ));
}

#[test]
fn empty_contraction_zeroes_or_keeps() {
    let Some(p) = PackedRhs::pack(&[], (0, 3), (3, 1)) else {
        return;
    };
    let mut dst = [1.0f32; 6];
    p.matmul_into(&mut dst, 2, &[], 0, true, 2);
    assert_eq!(dst, [1.0; 6]);
    p.matmul_into(&mut dst, 2, &[], 0, false, 2);
    assert_eq!(dst, [0.0; 6]);
}
