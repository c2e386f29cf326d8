//! Resampling an image to a new size, as torchvision's tensor path
//! (`transforms.functional.resize` on a tensor, which is `torch.nn.functional.interpolate`
//! with `align_corners=False`): every mode is separable, so each is one `[out, in]`
//! weight matrix per axis, built with PyTorch's index arithmetic (in f32, as its kernels
//! compute for f32 images), and applied as two small GEMMs.

use crate::{DType, Tensor};

/// How [`resize_with`] computes a pixel (`torchvision.transforms.InterpolationMode`).
///
/// ```
/// use ferrograd_runtime::data::transforms::InterpolationMode;
/// assert_eq!(InterpolationMode::default(), InterpolationMode::Bilinear);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InterpolationMode {
    /// The input pixel at `floor(out * scale)` (PyTorch's `"nearest"`, which is not
    /// centred: kept for parity with models trained with it).
    Nearest,
    /// The input pixel at `floor((out + 0.5) * scale)` (`"nearest-exact"`, PIL's
    /// nearest).
    NearestExact,
    /// Linear in each axis; with antialias a triangle filter widened by the scale when
    /// shrinking (PIL's bilinear).
    #[default]
    Bilinear,
    /// Cubic convolution in each axis (Keys' `a = -0.75` without antialias, PIL's
    /// `a = -0.5` filter widened by the scale with it).
    Bicubic,
}

/// A `[C, H, W]` image resized to `[C, h, w]` with `mode`; `antialias` applies to the
/// bilinear and bicubic modes (ignored for the nearest ones, as torchvision ignores it).
/// A float image keeps its dtype and values (bicubic may overshoot its range, as
/// torchvision's does); a u8 image is resampled in f32, clamped to 0..=255 and rounded
/// half to even, as torchvision does. Matches torchvision's tensor path to f32 rounding
/// (within one step of 255 for u8 images).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{InterpolationMode, resize_with};
/// let x = Tensor::arange(0.0, 4.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 4]);
/// let y = resize_with(&x, [1, 2], InterpolationMode::Nearest, false);
/// assert_eq!(y.to_vec::<f32>(), vec![0.0, 2.0]);
/// let y = resize_with(&x, [1, 2], InterpolationMode::Bilinear, false);
/// assert_eq!(y.to_vec::<f32>(), vec![0.5, 2.5]);
/// ```
///
/// # Panics
/// When `image` is not `[C, H, W]` or the size has a zero.
#[track_caller]
pub fn resize_with(
    image: &Tensor,
    [h, w]: [usize; 2],
    mode: InterpolationMode,
    antialias: bool,
) -> Tensor {
    assert!(
        image.dim() == 3 && h > 0 && w > 0 && image.numel() > 0,
        "resize: expected a non-empty [C, H, W] image and a positive size, got shape {:?} and size {:?}",
        image.shape(),
        [h, w]
    );
    let (c, ih, iw) = (image.shape()[0], image.shape()[1], image.shape()[2]);
    let x = image.to_dtype(DType::F32);
    let rows = weights(ih, h, mode, antialias);
    let cols = weights(iw, w, mode, antialias);
    // [c, ih, iw] -> [c, ih, w] -> [c, h, w]
    let x = x
        .reshape(&[c * ih, iw])
        .matmul(&cols.t())
        .reshape(&[c, ih, w]);
    let y = rows.matmul(&x);
    match image.dtype() {
        DType::U8 => {
            let bytes: Vec<u8> = y
                .to_vec::<f32>()
                .into_iter()
                .map(|v| v.clamp(0.0, 255.0).round_ties_even() as u8)
                .collect();
            Tensor::from_vec(bytes, &[c, h, w])
        }
        dtype => y.to_dtype(dtype),
    }
}

/// The `[output, input]` matrix of one axis' resampling.
fn weights(input: usize, output: usize, mode: InterpolationMode, antialias: bool) -> Tensor {
    let mut m = vec![0.0f32; output * input];
    // PyTorch's `area_pixel_compute_scale` for a given size: input / output, in f32.
    let scale = input as f32 / output as f32;
    let last = input - 1;
    let mut taps: Vec<(usize, f32)> = Vec::new();
    for o in 0..output {
        taps.clear();
        match (mode, antialias) {
            (InterpolationMode::Nearest, _) => {
                taps.push((((o as f32 * scale).floor() as usize).min(last), 1.0));
            }
            (InterpolationMode::NearestExact, _) => {
                let i = ((o as f32 + 0.5) * scale).floor() as usize;
                taps.push((i.min(last), 1.0));
            }
            (InterpolationMode::Bilinear, false) => {
                let src = (scale * (o as f32 + 0.5) - 0.5).max(0.0);
                let i0 = src as usize;
                let i1 = if i0 < last { i0 + 1 } else { i0 };
                let t = src - i0 as f32;
                taps.extend([(i0, 1.0 - t), (i1, t)]);
            }
            (InterpolationMode::Bicubic, false) => {
                let src = scale * (o as f32 + 0.5) - 0.5;
                let i = src.floor();
                let t = src - i;
                let a = -0.75;
                let coeffs = [
                    cubic_outer(t + 1.0, a),
                    cubic_inner(t, a),
                    cubic_inner(1.0 - t, a),
                    cubic_outer(2.0 - t, a),
                ];
                for (k, c) in coeffs.into_iter().enumerate() {
                    let at = (i as isize - 1 + k as isize).clamp(0, last as isize) as usize;
                    taps.push((at, c));
                }
            }
            (InterpolationMode::Bilinear, true) => antialiased(
                input,
                scale,
                o,
                1.0,
                |x| (1.0 - x.abs()).max(0.0),
                &mut taps,
            ),
            (InterpolationMode::Bicubic, true) => {
                antialiased(input, scale, o, 2.0, |x| pil_bicubic(x.abs()), &mut taps)
            }
        }
        for &(i, weight) in &taps {
            m[o * input + i] += weight;
        }
    }
    Tensor::from_vec(m, &[output, input])
}

/// One output's taps of PyTorch's antialiased (PIL-style) resampling: the filter of
/// half-width `support` (1 bilinear, 2 bicubic) is widened by the scale when shrinking,
/// centred on the output pixel's centre, and its weights normalised to sum to 1.
fn antialiased(
    input: usize,
    scale: f32,
    o: usize,
    support: f32,
    filter: fn(f32) -> f32,
    taps: &mut Vec<(usize, f32)>,
) {
    let (support, inv_scale) = if scale >= 1.0 {
        (support * scale, 1.0 / scale)
    } else {
        (support, 1.0)
    };
    let center = scale * (o as f32 + 0.5);
    // C++'s int64 conversion truncates towards zero; the max clamps negatives anyway.
    let lo = ((center - support + 0.5) as i64).max(0) as usize;
    let hi = ((center + support + 0.5) as i64).clamp(0, input as i64) as usize;
    taps.extend((lo..hi).map(|i| (i, filter((i as f32 - center + 0.5) * inv_scale))));
    let total: f32 = taps.iter().map(|&(_, w)| w).sum();
    for (_, w) in taps.iter_mut() {
        *w = if total != 0.0 { *w / total } else { 0.0 };
    }
}

/// Keys' cubic convolution kernel for `|x| <= 1`.
fn cubic_inner(x: f32, a: f32) -> f32 {
    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
}

/// Keys' cubic convolution kernel for `1 < |x| < 2`.
fn cubic_outer(x: f32, a: f32) -> f32 {
    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
}

/// PIL's bicubic filter (`a = -0.5`) at `x >= 0`.
fn pil_bicubic(x: f32) -> f32 {
    if x < 1.0 {
        cubic_inner(x, -0.5)
    } else if x < 2.0 {
        cubic_outer(x, -0.5)
    } else {
        0.0
    }
}
