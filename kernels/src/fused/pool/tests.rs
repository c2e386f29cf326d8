//! Tests of `pool`.

use super::*;

fn geometry(
    n: usize,
    c: usize,
    input: [usize; 2],
    k: usize,
    s: usize,
    p: usize,
    d: usize,
) -> Conv2dGeometry {
    Conv2dGeometry {
        n,
        c,
        input,
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
        dilation: [d, d],
    }
}

/// Pseudo-random values with some ties.
fn values(len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 7919 + 13) % 23) as f64 - 11.0)
        .collect()
}

/// The window's input positions of output `(plane, oy, ox)`, from the definition.
fn window(g: &Conv2dGeometry, oy: usize, ox: usize) -> Vec<usize> {
    let mut taps = Vec::new();
    for ki in 0..g.kernel[0] {
        for kj in 0..g.kernel[1] {
            let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize - g.padding[0] as isize;
            let x = (ox * g.stride[1] + kj * g.dilation[1]) as isize - g.padding[1] as isize;
            if y >= 0 && x >= 0 && (y as usize) < g.input[0] && (x as usize) < g.input[1] {
                taps.push(y as usize * g.input[1] + x as usize);
            }
        }
    }
    taps
}

const CASES: [(usize, usize, usize, usize); 5] = [
    (2, 2, 0, 1),
    (3, 2, 1, 1),
    (3, 1, 1, 1),
    (2, 1, 0, 2),
    (3, 3, 1, 1),
];

/// Every geometry of `CASES` with each ceil mode and divisor rule.
fn geometries(n: usize, c: usize, hw: [usize; 2]) -> Vec<PoolGeometry> {
    let mut out = Vec::new();
    for (k, s, p, d) in CASES {
        for ceil in [false, true] {
            for divisor in [AvgDivisor::Padded, AvgDivisor::Valid, AvgDivisor::Fixed(3)] {
                let g = geometry(n, c, hw, k, s, p, d);
                out.push(PoolGeometry::new(g, ceil, divisor).unwrap());
            }
        }
    }
    out
}

/// PyTorch's divisor of output `(oy, ox)`, from the window's taps.
fn divisor(pg: &PoolGeometry, oy: usize, ox: usize) -> f64 {
    let g = &pg.window;
    let inside = |o: usize, d: usize, lo: i64, hi: i64| {
        (0..g.kernel[d])
            .filter(|&k| {
                let at = (o * g.stride[d] + k) as i64 - g.padding[d] as i64;
                at >= lo && at < hi
            })
            .count()
    };
    let (p0, p1) = (g.padding[0] as i64, g.padding[1] as i64);
    let (h, w) = (g.input[0] as i64, g.input[1] as i64);
    match pg.divisor {
        AvgDivisor::Fixed(v) => v as f64,
        AvgDivisor::Padded => (inside(oy, 0, -p0, h + p0) * inside(ox, 1, -p1, w + p1)) as f64,
        AvgDivisor::Valid => (inside(oy, 0, 0, h) * inside(ox, 1, 0, w)) as f64,
    }
}

#[test]
fn ceil_mode_output_sizes_follow_pytorch() {
    // (input, kernel, stride, padding) -> PyTorch's output with ceil_mode=True.
    for (input, k, s, p, want) in [
        (5, 2, 2, 0, 3),
        (6, 3, 2, 1, 4),
        (7, 3, 3, 1, 3),
        (4, 2, 2, 1, 3),
    ] {
        let g = geometry(1, 1, [input, input], k, s, p, 1);
        let pg = PoolGeometry::new(g, true, AvgDivisor::Padded).unwrap();
        assert_eq!(pg.output, [want, want], "input {input} k {k} s {s} p {p}");
    }
}

#[test]
fn pools_match_their_definition_serial_and_parallel() {
    for (n, c, hw) in [(2, 3, [7, 6]), (8, 16, [40, 36])] {
        for pg in geometries(n, c, hw) {
            let g = pg.window;
            let [oh, ow] = pg.output;
            let x = values(n * c * hw[0] * hw[1]);
            let (out, idx) = max_pool2d(&x, &pg);
            let avg = avg_pool2d(&x, &pg);
            let plane = hw[0] * hw[1];
            for q in 0..n * c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let o = (q * oh + oy) * ow + ox;
                        let taps = window(&g, oy, ox);
                        let vals: Vec<f64> = taps.iter().map(|&t| x[q * plane + t]).collect();
                        let max = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let first = taps[vals.iter().position(|&v| v == max).unwrap()];
                        assert_eq!((out[o], idx[o]), (max, first as i64), "max {pg:?} at {o}");
                        if g.dilation == [1, 1] {
                            let mean = vals.iter().sum::<f64>() / divisor(&pg, oy, ox);
                            assert!((avg[o] - mean).abs() < 1e-12, "avg {pg:?} at {o}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn nan_wins_the_window() {
    let g = geometry(1, 1, [2, 2], 2, 2, 0, 1);
    let g = PoolGeometry::new(g, false, AvgDivisor::Padded).unwrap();
    let (out, idx) = max_pool2d(&[1.0f32, f32::NAN, 3.0, f32::NAN], &g);
    assert!(out[0].is_nan());
    assert_eq!(idx, vec![3], "the last NaN, as PyTorch");
}

/// Backward passes are the adjoints of the forward maps: <pool(x), y> = <x, pool'(y)>.
#[test]
fn backward_passes_are_adjoints() {
    for (n, c, hw) in [(2, 3, [7, 6]), (8, 16, [40, 36])] {
        for g in geometries(n, c, hw) {
            let x = values(n * c * hw[0] * hw[1]);
            let (out, idx) = max_pool2d(&x, &g);
            let y: Vec<f64> = values(out.len() + 5)[5..].to_vec();
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
            // max: out = x at the indices, linear in x once they are fixed.
            let dx = max_pool2d_backward(&y, &idx, &g);
            assert!((dot(&out, &y) - dot(&x, &dx)).abs() < 1e-9);
            let avg = avg_pool2d(&x, &g);
            let dx = avg_pool2d_backward(&y, &g);
            assert!((dot(&avg, &y) - dot(&x, &dx)).abs() < 1e-9 * (1.0 + dot(&avg, &y).abs()));
        }
    }
}

#[test]
fn the_2x2_path_matches_the_window_scan_with_ties_and_nans() {
    let (n, c, h, w) = (3, 2, 7, 9);
    let x: Vec<f32> = (0..n * c * h * w)
        .map(|i| match i % 11 {
            3 => f32::NAN,
            5 | 6 => 2.0,
            k => (k as f32 * 0.7).sin(),
        })
        .collect();
    let window = Conv2dGeometry {
        n,
        c,
        input: [h, w],
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
    };
    let pg = PoolGeometry::new(window, false, AvgDivisor::Padded).unwrap();
    assert!(is_2x2(&pg));
    let (out, idx) = max_pool2d(&x, &pg);
    let len = n * c * pg.output[0] * pg.output[1];
    let (want, want_idx) = max_pool_scan(&x, &pg, HostBuffer::zeroed(len), 0);
    assert_eq!(idx.to_vec(), want_idx.to_vec());
    for (a, b) in out.iter().zip(want.iter()) {
        assert!(a == b || (a.is_nan() && b.is_nan()), "{a} vs {b}");
    }
    // The backward is zeros plus each gradient at its argmax, bit for bit (-0.0
    // gradients and the uncovered last row and column included).
    let grad: Vec<f32> = (0..len)
        .map(|i| if i % 4 == 1 { -0.0 } else { i as f32 - 7.5 })
        .collect();
    let dx = max_pool2d_backward(&grad, &idx, &pg);
    let plane_out = pg.output[0] * pg.output[1];
    let mut want = vec![0.0f32; n * c * h * w];
    for (o, (&gv, &i)) in grad.iter().zip(idx.iter()).enumerate() {
        let at = o / plane_out * h * w + i as usize;
        want[at] += gv;
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&dx), bits(&want));
}

#[test]
fn the_separable_path_matches_the_window_scan() {
    let mut checked = 0;
    for (k, stride, pad, ceil) in [
        ([3, 3], [2, 2], [1, 1], false),
        ([3, 3], [1, 1], [1, 1], false),
        ([3, 2], [2, 1], [1, 0], true),
        ([2, 3], [3, 2], [0, 1], true),
        ([4, 4], [2, 3], [2, 2], false),
        ([1, 1], [2, 2], [0, 0], false),
    ] {
        let (n, c, h, w) = (2, 3, 9, 11);
        // Ties (repeated values, zeros as after a ReLU) and NaNs.
        let x: Vec<f64> = (0..n * c * h * w)
            .map(|i| match i % 13 {
                4 => f64::NAN,
                2 | 3 | 7 => 0.0,
                8 | 9 => 1.5,
                j => (j as f64 * 0.9).sin(),
            })
            .collect();
        let window = Conv2dGeometry {
            n,
            c,
            input: [h, w],
            kernel: k,
            stride,
            padding: pad,
            dilation: [1, 1],
        };
        let pg = PoolGeometry::new(window, ceil, AvgDivisor::Padded).unwrap();
        let len = n * c * pg.output[0] * pg.output[1];
        let (mut out, mut idx) = (HostBuffer::new_uninit(len), HostBuffer::new_uninit(len));
        max_pool_separable(&x, &pg, &mut out, &mut idx);
        // SAFETY: every plane of both was written (as in `max_pool2d`).
        let (out, idx) = unsafe { (out.assume_init(), idx.assume_init()) };
        let idx = idx.to_vec();
        let (want, want_idx) = max_pool_scan(&x, &pg, HostBuffer::zeroed(len), 0);
        assert_eq!(idx, want_idx.to_vec(), "{window:?}");
        for (a, b) in out.iter().zip(want.iter()) {
            assert!(a == b || (a.is_nan() && b.is_nan()), "{a} vs {b}");
        }
        checked += 1;
    }
    assert_eq!(checked, 6);
}
