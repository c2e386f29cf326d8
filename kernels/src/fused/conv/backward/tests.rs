//! Tests of `backward`.

use super::*;

/// Both gradients from the definition, one product at a time.
fn reference(
    gout: &[f64],
    x: &[f64],
    w: &[f64],
    g: &Conv2dGeometry,
    o: usize,
    groups: usize,
) -> (Vec<f64>, Vec<f64>) {
    let [oh, ow] = g.output().unwrap();
    let [h, wd] = g.input;
    let [kh, kw] = g.kernel;
    let (cg, og) = (g.c / groups, o / groups);
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; w.len()];
    for n in 0..g.n {
        for oc in 0..o {
            let gi = oc / og;
            for oy in 0..oh {
                for ox in 0..ow {
                    let go = gout[((n * o + oc) * oh + oy) * ow + ox];
                    for ci in 0..cg {
                        for ki in 0..kh {
                            for kj in 0..kw {
                                let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize
                                    - g.padding[0] as isize;
                                let xx = (ox * g.stride[1] + kj * g.dilation[1]) as isize
                                    - g.padding[1] as isize;
                                if y < 0 || xx < 0 || y >= h as isize || xx >= wd as isize {
                                    continue;
                                }
                                let xi =
                                    ((n * g.c + gi * cg + ci) * h + y as usize) * wd + xx as usize;
                                let wi = ((oc * cg + ci) * kh + ki) * kw + kj;
                                dx[xi] += go * w[wi];
                                dw[wi] += go * x[xi];
                            }
                        }
                    }
                }
            }
        }
    }
    (dx, dw)
}

fn close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
            "{what} [{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn both_gradients_match_the_definition() {
    let _threads = crate::cpu::thread_count_lock();
    let mut checked = 0;
    // (n, c, o, groups, input, kernel, stride, padding, dilation)
    let cases = [
        (2, 3, 4, 1, [7, 6], [3, 3], [1, 1], [1, 1], [1, 1]),
        (3, 4, 6, 2, [6, 7], [3, 2], [2, 1], [1, 0], [1, 2]),
        (2, 4, 4, 1, [5, 5], [1, 1], [1, 1], [0, 0], [1, 1]),
        (2, 4, 8, 1, [9, 9], [1, 1], [2, 2], [0, 0], [1, 1]),
        (1, 2, 3, 1, [11, 10], [5, 5], [1, 1], [2, 2], [1, 1]),
        (5, 3, 2, 1, [4, 4], [3, 3], [1, 1], [1, 1], [1, 1]),
        (4, 6, 6, 3, [8, 5], [3, 3], [2, 2], [2, 1], [2, 1]),
        (3, 64, 8, 1, [40, 40], [3, 3], [1, 1], [1, 1], [1, 1]),
        // pointwise, one sample per task at three threads: the GEMMs run on the planes
        (3, 4, 8, 1, [30, 30], [1, 1], [1, 1], [0, 0], [1, 1]),
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
        let x: Vec<f64> = (0..n * c * input[0] * input[1])
            .map(|i| (i as f64 * 0.37).sin())
            .collect();
        let w: Vec<f64> = (0..o * c / groups * kernel[0] * kernel[1])
            .map(|i| (i as f64 * 0.23).cos())
            .collect();
        let gout: Vec<f64> = (0..n * o * oh * ow)
            .map(|i| (i as f64 * 0.11).sin())
            .collect();
        let (rdx, rdw) = reference(&gout, &x, &w, &g, o, groups);
        for threads in [1, 2, 3] {
            crate::cpu::set_num_threads(threads);
            for want in [[true, true], [true, false], [false, true]] {
                let mut runs = vec![(
                    "dispatched",
                    conv2d_backward(&gout, &x, &w, &g, o, groups, want),
                )];
                runs.push((
                    "tiles",
                    scheduled_backward(&gout, &x, &w, &g, o, groups, want, Schedule::Tiles),
                ));
                if groups == 1 {
                    let blocks = Schedule::ChannelBlocks;
                    runs.push((
                        "channel blocks",
                        scheduled_backward(&gout, &x, &w, &g, o, groups, want, blocks),
                    ));
                }
                for (how, (dx, dw)) in runs {
                    assert_eq!(dx.is_some(), want[0]);
                    assert_eq!(dw.is_some(), want[1]);
                    let what = format!("{g:?} groups {groups} threads {threads} ({how})");
                    if let Some(dx) = dx {
                        close(&dx, &rdx, &format!("dx {what}"));
                    }
                    if let Some(dw) = dw {
                        close(&dw, &rdw, &format!("dw {what}"));
                    }
                }
                checked += 1;
            }
        }
        crate::cpu::set_num_threads(0);
    }
    assert_eq!(checked, 9 * 3 * 3);
}

#[test]
fn tiles_cover_every_pixel_once() {
    for (samples, [oh, ow], cols) in [
        (0..5, [3, 4], 30),
        (2..9, [7, 7], 10),
        (0..1, [56, 56], 500),
        (0..4, [5, 5], 25),
    ] {
        let mut seen = vec![0; samples.end * oh];
        for t in tiles(samples.clone(), [oh, ow], cols) {
            assert!(t.samples.len() * t.rows.len() * ow <= cols.max(ow));
            for n in t.samples.clone() {
                for r in t.rows.clone() {
                    seen[n * oh + r] += 1;
                }
            }
        }
        for n in samples.clone() {
            assert!(seen[n * oh..(n + 1) * oh].iter().all(|&s| s == 1));
        }
    }
}
