use super::*;

/// The blocked weight layout element by element, zero past the last channel: small
/// (one thread) and large (the team) layers, tap counts across the transposed tiles'
/// edges, channel counts that do and do not fill the last block.
#[test]
fn weight_blocks_hold_every_weight() {
    for (o, k, block) in [
        (6, 27, 6),
        (8, 27, 6),
        (40, 577, 16),
        (128, 1152, 32),
        (100, 1153, 32),
    ] {
        let w: Vec<f32> = (0..o * k).map(|i| i as f32 + 1.0).collect();
        let packed = pack_weight_blocks(&w, o, k, block);
        assert_eq!(packed.len(), o.div_ceil(block) * k * block);
        for (i, &v) in packed.iter().enumerate() {
            let (b, t, j) = (i / (k * block), i / block % k, i % block);
            let oc = b * block + j;
            let want = if oc < o { w[oc * k + t] } else { 0.0 };
            assert_eq!(v, want, "o {o} k {k} block {block}: [{b}, {t}, {j}]");
        }
    }
}

/// The convolution by its definition, in f64 (also the `pixels` kernel's reference).
pub(in crate::fused::conv) fn reference(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    g: &Conv2dGeometry,
    o: usize,
) -> Vec<f64> {
    let [oh, ow] = g.output().unwrap();
    let [h, wd] = g.input;
    let [kh, kw] = g.kernel;
    let mut out = vec![0.0; g.n * o * oh * ow];
    for n in 0..g.n {
        for oc in 0..o {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = b[oc];
                    for c in 0..g.c {
                        for ki in 0..kh {
                            for kj in 0..kw {
                                let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize
                                    - g.padding[0] as isize;
                                let xx = (ox * g.stride[1] + kj * g.dilation[1]) as isize
                                    - g.padding[1] as isize;
                                if y < 0 || xx < 0 || y >= h as isize || xx >= wd as isize {
                                    continue;
                                }
                                s += w[((oc * g.c + c) * kh + ki) * kw + kj]
                                    * x[((n * g.c + c) * h + y as usize) * wd + xx as usize];
                            }
                        }
                    }
                    out[((n * o + oc) * oh + oy) * ow + ox] = s;
                }
            }
        }
    }
    out
}

#[test]
fn matches_the_definition() {
    // Odd sizes: output channels within and over one block, planes not a multiple of P,
    // stride, padding and dilation per dim.
    check_forward(
        "direct",
        conv2d_direct::<f32>,
        &[
            (3, 6, [14, 14], 16, [5, 5], [1, 1], [0, 0], [1, 1]),
            // Row-aligned blocks: LeNet's second layer (one block per row), and rows of
            // 28 (a last block per row overlapping the one before).
            (2, 6, [12, 12], 16, [5, 5], [1, 1], [0, 0], [1, 1]),
            (2, 1, [28, 28], 12, [5, 5], [1, 1], [2, 2], [1, 1]),
            // Wider blocks on AVX-512: one of 12 per row of 12 (LeNet's 10 above, 14
            // for the rows of 28).
            (2, 3, [14, 14], 20, [3, 3], [1, 1], [0, 0], [1, 1]),
            (2, 3, [11, 9], 19, [3, 2], [2, 1], [1, 0], [1, 2]),
            (1, 2, [7, 8], 32, [3, 3], [3, 2], [2, 1], [2, 1]),
            // The kernel-row loops (3 and 5 wide, unit dilation) at every AVX-512
            // block width, their blocks turned over into rows: 16 per row of 32,
            // two channel blocks (the second partial), padding; blocks spanning
            // rows (4-pixel rows) stored by the scatter.
            (2, 3, [32, 32], 16, [3, 3], [1, 1], [1, 1], [1, 1]),
            (2, 5, [20, 20], 27, [5, 5], [1, 1], [2, 2], [1, 1]),
            (3, 4, [6, 6], 16, [3, 3], [1, 1], [0, 0], [1, 1]),
            (1, 2, [8, 8], 9, [5, 5], [1, 1], [0, 0], [1, 1]),
            (2, 7, [16, 16], 32, [3, 5], [1, 1], [1, 2], [1, 1]),
        ],
    );
}

/// A forward kernel, as `conv2d_direct`.
pub(in crate::fused::conv) type Forward =
    fn(&[f32], &[f32], Option<&[f32]>, &Conv2dGeometry, usize) -> HostBuffer<f32>;

/// `kernel` (named `name`) against [`reference`] with and without a bias, for cases
/// `(n, c, [h, w], out channels, kernel, stride, padding, dilation)`; skipped (said so)
/// on CPUs without a level the direct kernels are built for.
#[allow(clippy::type_complexity)]
pub(in crate::fused::conv) fn check_forward(
    name: &str,
    kernel: Forward,
    cases: &[(
        usize,
        usize,
        [usize; 2],
        usize,
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
    )],
) {
    if level().is_none() {
        eprintln!(
            "skipping: the {name} kernel needs AVX-512 or AVX2 + FMA (the tiled path serves this CPU)"
        );
        return;
    }
    for &(n, c, hw, o, k, stride, pad, dil) in cases {
        let g = Conv2dGeometry {
            n,
            c,
            input: hw,
            kernel: k,
            stride,
            padding: pad,
            dilation: dil,
        };
        let lcg = |i: usize, s: f64| ((i * 7919 + 13) % 97) as f64 / 97.0 - s;
        let x: Vec<f64> = (0..n * c * hw[0] * hw[1]).map(|i| lcg(i, 0.5)).collect();
        let w: Vec<f64> = (0..o * c * k[0] * k[1]).map(|i| lcg(i * 3, 0.4)).collect();
        let b: Vec<f64> = (0..o).map(|i| lcg(i * 5, 0.3)).collect();
        let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let wf: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        let bf: Vec<f32> = b.iter().map(|&v| v as f32).collect();
        for (bias, bias64) in [(Some(&bf[..]), b.clone()), (None, vec![0.0; o])] {
            let got = kernel(&xf, &wf, bias, &g, o);
            let want = reference(&x, &w, &bias64, &g, o);
            assert_eq!(got.len(), want.len());
            for (a, e) in got.iter().zip(&want) {
                assert!((*a as f64 - e).abs() < 1e-4, "{name}: {a} vs {e} for {g:?}");
            }
        }
    }
}

/// The weight gradient against its definition, `dW[o, c, ki, kj] = Σ gy · x`.
#[test]
fn weight_gradient_matches_the_definition() {
    if level().is_none() {
        eprintln!(
            "skipping: the direct kernel needs AVX-512 or AVX2 + FMA (the tiled path serves this CPU)"
        );
        return;
    }
    for (n, c, hw, o, k, pad, dil) in [
        (5, 6, [14, 14], 16, [5, 5], [0, 0], [1, 1]),
        (3, 1, [28, 28], 12, [5, 5], [2, 2], [1, 1]),
        (4, 1, [28, 28], 6, [5, 5], [2, 2], [1, 1]),
        (2, 3, [9, 11], 19, [3, 2], [1, 0], [2, 1]),
    ] {
        let g = Conv2dGeometry {
            n,
            c,
            input: hw,
            kernel: k,
            stride: [1, 1],
            padding: pad,
            dilation: dil,
        };
        let [oh, ow] = g.output().unwrap();
        let lcg = |i: usize, s: f64| ((i * 7919 + 13) % 97) as f64 / 97.0 - s;
        let x: Vec<f64> = (0..n * c * hw[0] * hw[1]).map(|i| lcg(i, 0.5)).collect();
        let gy: Vec<f64> = (0..n * o * oh * ow).map(|i| lcg(i * 7, 0.45)).collect();
        let mut want = vec![0.0; o * c * k[0] * k[1]];
        for b in 0..n {
            for oc in 0..o {
                for ci in 0..c {
                    for ki in 0..k[0] {
                        for kj in 0..k[1] {
                            let mut s = 0.0;
                            for oy in 0..oh {
                                for ox in 0..ow {
                                    let y = (oy + ki * dil[0]) as isize - pad[0] as isize;
                                    let xx = (ox + kj * dil[1]) as isize - pad[1] as isize;
                                    if y < 0
                                        || xx < 0
                                        || y >= hw[0] as isize
                                        || xx >= hw[1] as isize
                                    {
                                        continue;
                                    }
                                    s += gy[((b * o + oc) * oh + oy) * ow + ox]
                                        * x[((b * c + ci) * hw[0] + y as usize) * hw[1]
                                            + xx as usize];
                                }
                            }
                            want[((oc * c + ci) * k[0] + ki) * k[1] + kj] += s;
                        }
                    }
                }
            }
        }
        let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let gf: Vec<f32> = gy.iter().map(|&v| v as f32).collect();
        assert!(backward_weight_applies::<f32>(&g, o, 1));
        let got = conv2d_direct_backward_weight(&gf, &xf, &g, o);
        assert_eq!(got.len(), want.len());
        for (a, e) in got.iter().zip(&want) {
            assert!(
                (*a as f64 - e).abs() < 1e-3 * (1.0 + e.abs()),
                "{a} vs {e} for {g:?}"
            );
        }
    }
}
