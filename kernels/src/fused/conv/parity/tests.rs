//! Tests of `parity`.

use super::*;
use crate::fused::conv::backward::tiled_backward;
use crate::fused::conv::subpixel::tests::each_case;
use crate::fused::conv::tiled_conv2d;

/// The levels this CPU runs (AVX-512 CPUs run the AVX2 kernels too).
fn levels() -> Vec<Level> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            out.push(Level::Avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            out.push(Level::Avx2);
        }
    }
    out
}

/// Forward, input and weight gradient at every level against the im2col tiles in
/// f64: channel counts that are and are not multiples of the blocks (the last block
/// overlapping the one before), rows that are and are not multiples of the row
/// blocks, one and two vectors per row, oblong planes, a bias, whole samples per
/// thread and one sample's blocks split between threads.
#[test]
fn matches_the_tiles() {
    let levels = levels();
    if levels.is_empty() {
        eprintln!("skipping: the parity kernels need AVX-512 or AVX2 + FMA");
        return;
    }
    let cases = [
        (1, 8, 8, [32, 32]),
        (3, 10, 9, [32, 64]),
        (2, 16, 12, [40, 32]),
        (1, 9, 13, [34, 32]),
    ];
    each_case(&cases, |(g, o, x, wt, b, gy)| {
        assert!(super::super::subpixel::applies(g, o, 1), "{g:?}");
        let [oh, ow] = g.output().unwrap();
        let y_ref = tiled_conv2d(x, wt, Some(b), g, o, 1);
        let (dx_ref, dw_ref) = tiled_backward(gy, x, wt, g, o, 1, [true, true]);
        let (dx_ref, dw_ref) = (dx_ref.unwrap(), dw_ref.unwrap());
        let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        let (x32, w32, b32, gy32) = (f(x), f(wt), f(b), f(gy));
        let unbiased: Vec<f64> = y_ref
            .iter()
            .enumerate()
            .map(|(i, v)| v - b[i / (oh * ow) % o])
            .collect();
        for &level in &levels {
            if ow % level.lanes() != 0 {
                continue;
            }
            let close = |a: &[f32], e: &[f64], what: &str| {
                assert_eq!(a.len(), e.len(), "{what}");
                for (i, (&a, &e)) in a.iter().zip(e).enumerate() {
                    assert!(
                        (a as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{what} {level:?} {g:?} {o} at {i}: {a} vs {e}"
                    );
                }
            };
            let y = conv2d_on(level, &x32, &w32, Some(&b32), g, o);
            close(&y, &y_ref, "forward");
            let y = conv2d_on(level, &x32, &w32, None, g, o);
            close(&y, &unbiased, "forward without bias");
            let dx = input_grad_on(level, &gy32, &w32, g, o);
            close(&dx, &dx_ref, "input gradient");
            let dw = weight_grad_on(level, &gy32, &x32, g, o);
            close(&dw, &dw_ref, "weight gradient");
        }
    });
}
