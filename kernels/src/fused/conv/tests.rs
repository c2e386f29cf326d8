//! Tests of `conv`.

use super::*;

/// The textbook definition, one output pixel at a time.
fn reference(x: &[f64], w: &[f64], g: &Conv2dGeometry, oc_total: usize) -> Vec<f64> {
    let [oh, ow] = g.output().unwrap();
    let [h, wd] = g.input;
    let [kh, kw] = g.kernel;
    let m = oc_total / g.c;
    let mut out = vec![0.0; g.n * oc_total * oh * ow];
    for n in 0..g.n {
        for oc in 0..oc_total {
            let c = oc / m;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = 0.0;
                    for ki in 0..kh {
                        for kj in 0..kw {
                            let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize
                                - g.padding[0] as isize;
                            let xx = (ox * g.stride[1] + kj * g.dilation[1]) as isize
                                - g.padding[1] as isize;
                            if y >= 0 && xx >= 0 && (y as usize) < h && (xx as usize) < wd {
                                s += w[(oc * kh + ki) * kw + kj]
                                    * x[((n * g.c + c) * h + y as usize) * wd + xx as usize];
                            }
                        }
                    }
                    out[((n * oc_total + oc) * oh + oy) * ow + ox] = s;
                }
            }
        }
    }
    out
}

pub(in crate::fused::conv) fn values(len: usize, seed: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((i * 7919 + seed * 104_729) % 211) as f64) / 50.0 - 2.0)
        .collect()
}

/// [`values`] in f32 (the direct kernels' tests).
pub(in crate::fused::conv) fn values_f32(len: usize, seed: usize) -> Vec<f32> {
    values(len, seed).into_iter().map(|v| v as f32).collect()
}

/// Forward against the definition, and both gradients as the adjoints of the forward
/// (`<conv(x, w), g> = <x, dx(g)> = <w, dw(g, x)>`, exact for a bilinear map), over
/// strides, paddings, dilations, multipliers and odd sizes.
#[test]
fn matches_the_definition_and_its_adjoints() {
    let cases = [
        ([7, 9], [3, 3], [1, 1], [1, 1], [1, 1], 1),
        ([8, 8], [3, 3], [2, 2], [1, 1], [1, 1], 1),
        ([9, 7], [3, 2], [2, 1], [0, 2], [1, 2], 2),
        ([5, 11], [5, 5], [1, 3], [2, 2], [1, 1], 3),
        ([6, 6], [3, 3], [1, 1], [2, 2], [2, 2], 1),
        ([3, 3], [1, 1], [1, 1], [0, 0], [1, 1], 2),
        // Column stride 2 with a dilated kernel (even taps only), and with a padded
        // odd-width plane and a dilated row.
        ([7, 10], [3, 3], [1, 2], [1, 0], [1, 2], 1),
        ([6, 9], [2, 3], [2, 2], [0, 1], [2, 1], 2),
        // A one-column plane at column stride 2: no odd columns at all.
        ([5, 1], [3, 1], [1, 2], [1, 0], [1, 1], 1),
    ];
    for (input, kernel, stride, padding, dilation, m) in cases {
        let g = Conv2dGeometry {
            n: 2,
            c: 3,
            input,
            kernel,
            stride,
            padding,
            dilation,
        };
        let oc = g.c * m;
        let [oh, ow] = g.output().unwrap();
        let x = values(g.n * g.c * input[0] * input[1], 1);
        let w = values(oc * kernel[0] * kernel[1], 2);
        let b = values(oc, 3);
        let y = depthwise_conv2d(&x, &w, Some(&b), &g, oc);
        let want = reference(&x, &w, &g, oc);
        for (i, (&a, &r)) in y.iter().zip(&want).enumerate() {
            let r = r + b[(i / (oh * ow)) % oc];
            assert!((a - r).abs() < 1e-12, "{g:?} m {m}: y[{i}] {a} vs {r}");
        }
        let gout = values(y.len(), 4);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
        let lhs = dot(&want, &gout);
        let dx = depthwise_conv2d_backward_input(&gout, &w, &g, oc);
        let dw = depthwise_conv2d_backward_weight(&gout, &x, &g, oc);
        assert!(
            (dot(&x, &dx) - lhs).abs() < 1e-9 * lhs.abs().max(1.0),
            "{g:?}: dx"
        );
        assert!(
            (dot(&w, &dw) - lhs).abs() < 1e-9 * lhs.abs().max(1.0),
            "{g:?}: dw"
        );
        // The adjoint identity alone would not pin dx/dw down: check them entrywise
        // against the definition's derivative (unit perturbations of a linear map).
        for i in (0..x.len()).step_by(5) {
            let mut e = vec![0.0; x.len()];
            e[i] = 1.0;
            let want = dot(&reference(&e, &w, &g, oc), &gout);
            assert!(
                (dx[i] - want).abs() < 1e-9,
                "{g:?}: dx[{i}] {} vs {want}",
                dx[i]
            );
        }
        for i in 0..w.len() {
            let mut e = vec![0.0; w.len()];
            e[i] = 1.0;
            let want = dot(&reference(&x, &e, &g, oc), &gout);
            assert!(
                (dw[i] - want).abs() < 1e-9,
                "{g:?}: dw[{i}] {} vs {want}",
                dw[i]
            );
        }
    }
}

/// Planes wide enough that the stride-1 forward runs in several chunks of rows (the
/// last one short), and column stride 2 from each parity of padding, against the
/// definition (f64) within f32 rounding.
#[test]
fn wide_planes_run_in_row_chunks() {
    for (input, stride, padding, dilation) in [
        ([23, 300], [1, 1], [1, 1], [1, 1]),
        ([19, 500], [1, 1], [2, 3], [2, 1]),
        ([9, 2100], [1, 1], [1, 1], [1, 1]),
        ([17, 301], [2, 2], [1, 1], [1, 1]),
        ([16, 302], [1, 2], [0, 2], [1, 2]),
    ] {
        let g = Conv2dGeometry {
            n: 1,
            c: 2,
            input,
            kernel: [3, 3],
            stride,
            padding,
            dilation,
        };
        let x = values(g.c * input[0] * input[1], 1);
        let w = values(g.c * 9, 2);
        let (xf, wf): (Vec<f32>, Vec<f32>) = (
            x.iter().map(|&v| v as f32).collect(),
            w.iter().map(|&v| v as f32).collect(),
        );
        let y = depthwise_conv2d(&xf, &wf, None, &g, g.c);
        let want = reference(&x, &w, &g, g.c);
        assert_eq!(y.len(), want.len());
        for (i, (&a, &r)) in y.iter().zip(&want).enumerate() {
            assert!(
                (a as f64 - r).abs() < 1e-5 * (1.0 + r.abs()),
                "{g:?}: y[{i}] {a} vs {r}"
            );
        }
    }
}

/// The general (grouped, any kernel) forward against the definition, across tile
/// boundaries (a map tall enough for several row tiles), pointwise convs, odd strides,
/// paddings and dilations, with and without bias, by each GEMM path (row tiles, and
/// several samples' planes per GEMM, including a last group of one sample).
#[test]
fn tiled_gemm_conv_matches_the_definition() {
    let cases = [
        // (n, c, o, groups, input, kernel, stride, padding, dilation)
        (2, 3, 4, 1, [9, 7], [3, 3], [1, 1], [1, 1], [1, 1]),
        (3, 4, 6, 2, [8, 9], [3, 2], [2, 1], [0, 2], [1, 2]),
        (2, 5, 3, 1, [6, 6], [1, 1], [1, 1], [0, 0], [1, 1]),
        (1, 2, 2, 1, [5, 5], [1, 1], [2, 2], [1, 1], [1, 1]),
        // 64 channels x 3x3 = K 576: tiles of a few rows over 40 output rows.
        (2, 64, 8, 1, [40, 40], [3, 3], [1, 1], [1, 1], [1, 1]),
        // Batch 1: the threads take whole tiles (4 of 10 rows; 4 of 12, 12, 12 and 9
        // rows per group, strided).
        (1, 64, 8, 1, [40, 40], [3, 3], [1, 1], [1, 1], [1, 1]),
        (1, 128, 4, 2, [45, 31], [3, 3], [1, 1], [1, 1], [1, 1]),
        (1, 64, 8, 1, [81, 61], [3, 3], [2, 2], [1, 1], [1, 1]),
        // Batch-1 pointwise: one tile per thread.
        (1, 96, 24, 1, [31, 29], [1, 1], [1, 1], [0, 0], [1, 1]),
    ];
    for (n, c, o, groups, input, kernel, stride, padding, dilation) in cases {
        let g = Conv2dGeometry {
            n,
            c,
            input,
            kernel,
            stride,
            padding,
            dilation,
        };
        let [oh, ow] = g.output().unwrap();
        let (cg, og) = (c / groups, o / groups);
        let x = values(n * c * input[0] * input[1], 1);
        let w = values(o * cg * kernel[0] * kernel[1], 2);
        let b = values(o, 3);
        for (bias, path) in [None, Some(&b[..])]
            .into_iter()
            .flat_map(|b| (0..4).map(move |p| (b, p)))
        {
            // The dispatching entry, and each GEMM path whatever the dispatch picks:
            // a tile of rows per GEMM, and several samples per GEMM (two, or all).
            let y = match path {
                0 => conv2d(&x, &w, bias, &g, o, groups),
                1 => tiled_conv2d(&x, &w, bias, &g, o, groups),
                p => grouped_conv2d(&x, &w, bias, &g, o, groups, if p == 2 { 2 } else { n }),
            };
            for (i, &got) in y.iter().enumerate() {
                let (ni, oc, oy, ox) = (
                    i / (o * oh * ow),
                    (i / (oh * ow)) % o,
                    (i / ow) % oh,
                    i % ow,
                );
                let mut want = bias.map_or(0.0, |b| b[oc]);
                for ci in 0..cg {
                    let cin = (oc / og) * cg + ci;
                    for ki in 0..kernel[0] {
                        for kj in 0..kernel[1] {
                            let y =
                                (oy * stride[0] + ki * dilation[0]) as isize - padding[0] as isize;
                            let xx =
                                (ox * stride[1] + kj * dilation[1]) as isize - padding[1] as isize;
                            if y >= 0
                                && xx >= 0
                                && (y as usize) < input[0]
                                && (xx as usize) < input[1]
                            {
                                want += w[((oc * cg + ci) * kernel[0] + ki) * kernel[1] + kj]
                                    * x[((ni * c + cin) * input[0] + y as usize) * input[1]
                                        + xx as usize];
                            }
                        }
                    }
                }
                assert!(
                    (got - want).abs() < 1e-10,
                    "{g:?} groups {groups} path {path}: y[{i}] {got} vs {want}"
                );
            }
        }
    }
}
