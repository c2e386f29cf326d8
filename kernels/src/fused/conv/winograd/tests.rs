//! Tests of `winograd`.

use super::super::backward::tiled_backward;
use super::super::tiled_conv2d;
use super::*;

fn data(len: usize, seed: u64) -> Vec<f32> {
    (0..len)
        .map(|i| ((((i as u64 * 2_654_435_761 + seed) % 1000) as f32) / 500.0) - 1.0)
        .collect()
}

/// Blocks turned over as the definition says, on this CPU's path.
#[test]
fn transposes_blocks() {
    let src: Vec<f32> = (0..20 * 18).map(|v| v as f32).collect();
    let mut dst = vec![-1.0f32; 17 * 21];
    // SAFETY: rows of 18 from offset 2 (16 rows: 2 + 15 * 18 + 15 < 360), 21-float
    // rows from offset 3 (3 + 15 * 21 + 15 < 357).
    unsafe { transpose16(src.as_ptr().add(2), 18, dst.as_mut_ptr().add(3), 21) };
    for (k, &v) in dst.iter().enumerate() {
        let (j, i) = ((k - 3.min(k)) / 21, (k.saturating_sub(3)) % 21);
        if k >= 3 && j < 16 && i < 16 {
            assert_eq!(v, src[2 + i * 18 + j], "row {j} column {i}");
        } else {
            assert_eq!(v, -1.0, "{k} outside the block");
        }
    }
}

/// F(4×4) unless its tiles cover over 4/3 of F(2×2)'s pixels, before the wide kernel
/// only up to 32².
#[test]
fn picks_the_tile_by_plane() {
    let at = |side: usize, c: usize| Conv2dGeometry {
        n: 8,
        c,
        input: [side, side],
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
    };
    assert_eq!(forward_tile(&at(28, 128)), Tile::F4);
    assert_eq!(forward_tile(&at(7, 512)), Tile::F4);
    assert_eq!(forward_tile(&at(14, 256)), Tile::F4);
    assert_eq!(forward_tile(&at(9, 256)), Tile::F2);
    assert_eq!(forward_tile(&at(5, 256)), Tile::F2);
    assert!(before_wide::<f32>(&at(28, 128), 128, 1));
    assert!(!before_wide::<f32>(&at(56, 128), 128, 1));
    assert!(before_wide::<f32>(&at(14, 256), 256, 1));
    assert!(!before_wide::<f32>(&at(28, 64), 64, 1));
    assert!(!before_wide::<f64>(&at(28, 128), 128, 1));
}

/// Every padding, odd and even planes, one and several samples, with and without a
/// bias, against im2col + GEMM; the input gradient against the tiled backward.
#[test]
fn matches_im2col_and_its_input_gradient() {
    for (n, c, oc, h, w) in [
        (1, 3, 5, 1, 1),
        (2, 7, 4, 5, 6),
        (3, 16, 9, 8, 7),
        (1, 130, 129, 14, 14),
        (2, 33, 20, 9, 10),
        (1, 32, 17, 18, 35),
        (1, 140, 131, 7, 7),
    ] {
        for p in 0..=2 {
            let g = Conv2dGeometry {
                n,
                c,
                input: [h, w],
                kernel: [3, 3],
                stride: [1, 1],
                padding: [p, p.min(1)],
                dilation: [1, 1],
            };
            let Some([oh, ow]) = g.output() else { continue };
            if oh == 0 || ow == 0 {
                continue;
            }
            let x = data(n * c * h * w, 1);
            let wt = data(oc * c * 9, 2);
            let b = data(oc, 3);
            for (tile, tol) in [(Tile::F2, 2e-5), (Tile::F4, 1e-4)] {
                for bias in [None, Some(&b[..])] {
                    let got = winograd(&x, &wt, bias, &g, oc, false, tile);
                    let want = tiled_conv2d(&x, &wt, bias, &g, oc, 1);
                    assert_eq!(got.len(), want.len());
                    for (i, (a, e)) in got.iter().zip(want.iter()).enumerate() {
                        assert!(
                            (a - e).abs() <= tol * (1.0 + e.abs()) * (c as f32).sqrt(),
                            "{tile:?} {g:?} {oc} bias {}: {i}: {a} vs {e}",
                            bias.is_some()
                        );
                    }
                }
            }
            if p <= 2 {
                let gout = data(n * oc * oh * ow, 4);
                let (_, want) = tiled_backward(&gout, &x, &wt, &g, oc, 1, [false, true]);
                let want = want.expect("asked for");
                let tiles = (n * oh * ow) as f32;
                for (tile, tol) in [(Tile::F2, 2e-5), (Tile::F4, 1e-4)] {
                    let got = weight_grad(&gout, &x, &g, oc, tile);
                    for (i, (a, e)) in got.iter().zip(want.iter()).enumerate() {
                        assert!(
                            (a - e).abs() <= tol * (1.0 + e.abs()) * tiles.sqrt(),
                            "weight grad {tile:?} {g:?} {oc}: {i}: {a} vs {e}"
                        );
                    }
                }
                let (want, _) = tiled_backward(&gout, &x, &wt, &g, oc, 1, [true, false]);
                let want = want.expect("asked for");
                for (tile, tol) in [(Tile::F2, 2e-5), (Tile::F4, 1e-4)] {
                    let got = input_grad(&gout, &wt, &g, oc, Some(tile));
                    assert_eq!(got.len(), want.len());
                    for (i, (a, e)) in got.iter().zip(want.iter()).enumerate() {
                        assert!(
                            (a - e).abs() <= tol * (1.0 + e.abs()) * (oc as f32).sqrt(),
                            "input grad {tile:?} {g:?} {oc}: {i}: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }
}
