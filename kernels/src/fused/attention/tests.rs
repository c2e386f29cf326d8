//! Tests of `attention`.

use super::*;

/// The unfused computation in f64.
fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    s: AttentionShape,
    causal: bool,
    scale: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; s.bh * s.tq * s.dv];
    for b in 0..s.bh {
        for i in 0..s.tq {
            let scores: Vec<f64> = (0..s.tk)
                .map(|j| {
                    if causal && j > i {
                        f64::NEG_INFINITY
                    } else {
                        (0..s.d)
                            .map(|c| q[(b * s.tq + i) * s.d + c] * k[(b * s.tk + j) * s.d + c])
                            .sum::<f64>()
                            * scale
                    }
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..s.dv {
                out[(b * s.tq + i) * s.dv + c] = (0..s.tk)
                    .map(|j| e[j] / z * v[(b * s.tk + j) * s.dv + c])
                    .sum();
            }
        }
    }
    out
}

#[test]
fn tiles_match_the_unfused_formula() {
    let s = AttentionShape {
        bh: 3,
        tq: 150,
        tk: 130,
        d: 8,
        dv: 5,
    };
    let make = |n: usize, seed: f64| {
        (0..n)
            .map(|i| ((i as f64 + seed) * 0.37).sin())
            .collect::<Vec<f64>>()
    };
    let (q, k, v) = (
        make(s.bh * s.tq * s.d, 1.0),
        make(s.bh * s.tk * s.d, 2.0),
        make(s.bh * s.tk * s.dv, 3.0),
    );
    for causal in [false, true] {
        let mask = if causal { Mask::Causal } else { Mask::None };
        let (out, _) = attention_forward(&q, &k, &v, s, &mask, 0.3, None);
        let expected = reference(&q, &k, &v, s, causal, 0.3);
        for (a, b) in out.iter().zip(&expected) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }
}

/// The f32 path (keys and values packed for the microkernel where the CPU has one,
/// a problem's query tiles sharing a piece when there are many problems) against
/// the formula in f64: heads read in place from `[batch, len, heads, d]`, widths
/// off the microkernel's, several tiles per problem, every mask kind (a key-padding
/// mask through strides, a full boolean mask read along its rows, an additive one,
/// causal), rows with no key, and scales of either sign.
#[test]
fn f32_problems_match_the_formula_in_f64() {
    let (batch, heads, tq, tk, d, dv) = (3, 4, 140, 75, 20, 13);
    let bh = batch * heads;
    let make = |n: usize, seed: f64| {
        (0..n)
            .map(|i| ((i as f64 + seed) * 0.37).sin() as f32)
            .collect::<Vec<f32>>()
    };
    // [batch, len, heads, width] storage: problem (n, h) starts at n * len * heads *
    // width + h * width, rows are heads * width apart.
    let (q, k, v) = (
        make(batch * tq * heads * d, 1.0),
        make(batch * tk * heads * d, 2.0),
        make(batch * tk * heads * dv, 3.0),
    );
    let offsets = |len: usize, w: usize| {
        (0..bh)
            .map(|p| (p / heads) * len * heads * w + (p % heads) * w)
            .collect::<Vec<usize>>()
    };
    let (qo, ko, vo) = (offsets(tq, d), offsets(tk, d), offsets(tk, dv));
    // Key padding `[batch, 1, 1, tk]`: batch 1 keeps its first 40 keys, batch 2 none.
    let padding: Vec<bool> = (0..batch * tk)
        .map(|i| match i / tk {
            0 => true,
            1 => i % tk < 40,
            _ => false,
        })
        .collect();
    let pad_offsets: Vec<usize> = (0..bh).map(|p| (p / heads) * tk).collect();
    // A full `[tk, tq]` boolean mask read transposed (keys 1 apart along its columns).
    let full: Vec<bool> = (0..tk * tq).map(|i| (i * 7 + i / tq) % 5 != 0).collect();
    let additive: Vec<f32> = (0..tq * tk)
        .map(|i| ((i % 11) as f32 - 5.0) * 0.3)
        .collect();
    let zeros = vec![0usize; bh];
    let masks: [(&str, Mask<'_, f32>); 5] = [
        ("none", Mask::None),
        ("causal", Mask::Causal),
        (
            "padding",
            Mask::Bool(MaskView {
                data: &padding,
                batch_offsets: &pad_offsets,
                strides: [0, 1],
            }),
        ),
        (
            "full, transposed",
            Mask::Bool(MaskView {
                data: &full,
                batch_offsets: &zeros,
                strides: [1, tq],
            }),
        ),
        (
            "additive",
            Mask::Float(MaskView {
                data: &additive,
                batch_offsets: &zeros,
                strides: [tk, 1],
            }),
        ),
    ];
    let shape = AttentionShape { bh, tq, tk, d, dv };
    for (name, mask) in &masks {
        for scale in [0.45f32, -0.3] {
            let (out, lse) = attention_forward_strided(
                Operand::new(&q, &qo, heads * d, 1),
                Operand::new(&k, &ko, heads * d, 1),
                Operand::new(&v, &vo, heads * dv, 1),
                shape,
                mask,
                scale,
                None,
            );
            for p in 0..bh {
                for i in 0..tq {
                    let scores: Vec<f64> = (0..tk)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|c| {
                                    q[qo[p] + i * heads * d + c] as f64
                                        * k[ko[p] + j * heads * d + c] as f64
                                })
                                .sum();
                            let s = dot * scale as f64;
                            match mask {
                                Mask::None => s,
                                Mask::Causal if j > i => f64::NEG_INFINITY,
                                Mask::Causal => s,
                                Mask::Bool(m) if !m.at(p, i, j) => f64::NEG_INFINITY,
                                Mask::Bool(_) => s,
                                Mask::Float(m) => s + m.at(p, i, j) as f64,
                            }
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let row = &out[(p * tq + i) * dv..][..dv];
                    if max == f64::NEG_INFINITY {
                        assert!(row.iter().all(|&x| x == 0.0), "{name}: empty row {p} {i}");
                        assert_eq!(lse[p * tq + i], f32::NEG_INFINITY);
                        continue;
                    }
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let z: f64 = e.iter().sum();
                    let want_lse = max + z.ln();
                    assert!(
                        (lse[p * tq + i] as f64 - want_lse).abs() < 1e-4 * (1.0 + want_lse.abs()),
                        "{name}, scale {scale}: lse ({p}, {i}) {} vs {want_lse}",
                        lse[p * tq + i]
                    );
                    for (c, &got) in row.iter().enumerate() {
                        let want: f64 = (0..tk)
                            .map(|j| e[j] / z * v[vo[p] + j * heads * dv + c] as f64)
                            .sum();
                        assert!(
                            (got as f64 - want).abs() < 1e-5,
                            "{name}, scale {scale}: ({p}, {i}, {c}) {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// The f32 backward (the scores, dP and dQ products through the packed microkernel
/// where a tile sees every key) against the same backward in f64 (`gemm` only):
/// several tiles, a causal mask (whose early tiles see fewer keys), a boolean mask
/// and dropout.
#[test]
fn f32_backward_matches_f64() {
    let shape = AttentionShape {
        bh: 3,
        tq: 150,
        tk: 70,
        d: 20,
        dv: 13,
    };
    let AttentionShape { bh, tq, tk, d, dv } = shape;
    let make = |n: usize, seed: f64| {
        (0..n)
            .map(|i| ((i as f64 + seed) * 0.37).sin())
            .collect::<Vec<f64>>()
    };
    let (q, k, v, g) = (
        make(bh * tq * d, 1.0),
        make(bh * tk * d, 2.0),
        make(bh * tk * dv, 3.0),
        make(bh * tq * dv, 4.0),
    );
    let keep: Vec<bool> = (0..tq * tk).map(|i| i % 7 != 3).collect();
    let zeros = vec![0usize; bh];
    let narrow = |x: &[f64]| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let (qf, kf, vf, gf) = (narrow(&q), narrow(&k), narrow(&v), narrow(&g));
    for (name, causal, boolean, dropout) in [
        ("none", false, false, None),
        ("causal", true, false, None),
        ("bool", false, true, None),
        (
            "dropout",
            false,
            false,
            Some(AttnDropout { p: 0.2, seed: 9 }),
        ),
    ] {
        let m64 = if causal {
            Mask::Causal
        } else if boolean {
            Mask::Bool(MaskView {
                data: &keep,
                batch_offsets: &zeros,
                strides: [tk, 1],
            })
        } else {
            Mask::None
        };
        let m32 = match m64 {
            Mask::Causal => Mask::Causal,
            Mask::Bool(view) => Mask::Bool(view),
            _ => Mask::None,
        };
        let (o64, l64) = attention_forward(&q, &k, &v, shape, &m64, 0.3, dropout);
        let want = attention_backward(&q, &k, &v, &o64, &l64, &g, shape, &m64, 0.3, dropout);
        let (o32, l32) = attention_forward(&qf, &kf, &vf, shape, &m32, 0.3, dropout);
        let got = attention_backward(&qf, &kf, &vf, &o32, &l32, &gf, shape, &m32, 0.3, dropout);
        for (which, a, e) in [
            ("dq", &got.0, &want.0),
            ("dk", &got.1, &want.1),
            ("dv", &got.2, &want.2),
        ] {
            for (i, (&x, &y)) in a.iter().zip(e.iter()).enumerate() {
                assert!(
                    (x as f64 - y).abs() < 1e-4 * (1.0 + y.abs()),
                    "{name}: {which}[{i}] {x} vs {y}"
                );
            }
        }
    }
}
