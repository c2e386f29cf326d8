//! Resampling and rearranging spatial dims: `interpolate` (nearest, linear, bilinear) and
//! `pixel_shuffle` / `pixel_unshuffle`. Built on differentiable gathers, so the gradient
//! of each is its adjoint on every device.

use crate::{DType, Tensor};

/// How [`interpolate`] computes the new samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InterpolateMode {
    /// The nearest input sample (`'nearest'`, PyTorch's default: `floor(i * in / out)`).
    #[default]
    Nearest,
    /// Linear along each spatial dim (`'linear'` for `[N, C, L]`, `'bilinear'` for
    /// `[N, C, H, W]`), with or without `align_corners`.
    Linear {
        /// Map the corner samples of input and output onto each other.
        align_corners: bool,
    },
}

/// The target of [`interpolate`]: an output size or a scale factor per spatial dim.
#[derive(Clone, Debug, PartialEq)]
pub enum InterpolateSize {
    /// The spatial output size (`size=`).
    Size(Vec<usize>),
    /// The scale per spatial dim (`scale_factor=`); the output size is `floor(in * s)` and
    /// the sampling grid uses `1 / s`, as PyTorch without `recompute_scale_factor`.
    Scale(Vec<f64>),
}

/// Resizes the spatial dims of `[N, C, L]` or `[N, C, H, W]` (`F.interpolate`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
/// let up = F::interpolate(&x, &F::InterpolateSize::Scale(vec![2.0, 2.0]), F::InterpolateMode::Nearest);
/// assert_eq!(up.shape(), &[1, 1, 4, 4]);
/// assert_eq!(up.to_vec::<f32>()[..4], [1.0, 1.0, 2.0, 2.0]);
/// let lin = F::interpolate(&x, &F::InterpolateSize::Size(vec![3, 3]), F::InterpolateMode::Linear { align_corners: true });
/// assert_eq!(lin.to_vec::<f32>()[4], 2.5);
/// ```
#[track_caller]
pub fn interpolate(input: &Tensor, size: &InterpolateSize, mode: InterpolateMode) -> Tensor {
    let _profiled = crate::dispatch::opaque("interpolate", &[input]);
    let spatial = input.dim().saturating_sub(2);
    assert!(
        (1..=2).contains(&spatial) && input.dtype().is_float(),
        "interpolate: expected a float [N, C, L] or [N, C, H, W] input, got shape {:?} ({:?})",
        input.shape(),
        input.dtype()
    );
    let (sizes, scales): (Vec<usize>, Vec<Option<f64>>) = match size {
        InterpolateSize::Size(s) => {
            assert!(
                s.len() == spatial && s.iter().all(|&v| v > 0),
                "interpolate: size {s:?} must give {spatial} positive spatial sizes for input shape {:?}",
                input.shape()
            );
            (s.clone(), vec![None; spatial])
        }
        InterpolateSize::Scale(f) => {
            assert!(
                f.len() == spatial && f.iter().all(|&v| v > 0.0),
                "interpolate: scale_factor {f:?} must give {spatial} positive scales for input shape {:?}",
                input.shape()
            );
            let sizes = f
                .iter()
                .zip(&input.shape()[2..])
                .map(|(&s, &n)| (n as f64 * s).floor() as usize)
                .collect();
            (sizes, f.iter().map(|&s| Some(s)).collect())
        }
    };
    let mut out = input.clone();
    for (i, (&size, &scale)) in sizes.iter().zip(&scales).enumerate() {
        out = resample(&out, 2 + i, size, scale, mode);
    }
    out
}

/// One spatial dim of [`interpolate`].
fn resample(
    x: &Tensor,
    dim: usize,
    out: usize,
    scale: Option<f64>,
    mode: InterpolateMode,
) -> Tensor {
    let n = x.shape()[dim];
    let index = |v: Vec<i64>| crate::ops::index_on(x, v);
    // PyTorch's `compute_scales_value`: 1 / scale_factor when given, else in / out, in
    // the input's precision (f32 arithmetic for f32 tensors).
    let ratio = scale.map_or(n as f64 / out as f64, |s| 1.0 / s);
    let f32_math = x.dtype() != DType::F64;
    let round = |v: f64| if f32_math { v as f32 as f64 } else { v };
    match mode {
        InterpolateMode::Nearest => {
            // PyTorch's `nearest_idx`, in f32 whatever the dtype.
            let r = ratio as f32;
            let idx = (0..out)
                .map(|o| ((o as f32 * r).floor() as i64).min(n as i64 - 1))
                .collect();
            x.index_select(dim as isize, &index(idx))
        }
        InterpolateMode::Linear { align_corners } => {
            let mut lo = Vec::with_capacity(out);
            let mut hi = Vec::with_capacity(out);
            let mut w = Vec::with_capacity(out);
            for o in 0..out {
                let src = if align_corners {
                    if out > 1 {
                        round(o as f64 * round((n as f64 - 1.0) / (out as f64 - 1.0)))
                    } else {
                        0.0
                    }
                } else {
                    round((round(ratio) * (o as f64 + 0.5) - 0.5).max(0.0))
                };
                let i0 = (src.floor() as usize).min(n - 1);
                let i1 = (i0 + 1).min(n - 1);
                lo.push(i0 as i64);
                hi.push(i1 as i64);
                w.push(round(src - i0 as f64));
            }
            let mut wshape = vec![1usize; x.dim()];
            wshape[dim] = out;
            let weight = Tensor::from_vec(w, &wshape)
                .to_dtype(x.dtype())
                .to_device(&x.device())
                .expect("the input's own device is usable");
            let a = x.index_select(dim as isize, &index(lo));
            let b = x.index_select(dim as isize, &index(hi));
            a.add(&b.sub(&a).mul(&weight))
        }
    }
}

/// Rearranges `[*, C·r², H, W]` into `[*, C, H·r, W·r]` (`F.pixel_shuffle`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 4.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 4, 1, 1]);
/// let y = F::pixel_shuffle(&x, 2);
/// assert_eq!((y.shape(), y.to_vec::<f32>()), (&[1, 1, 2, 2][..], vec![0.0, 1.0, 2.0, 3.0]));
/// ```
#[track_caller]
pub fn pixel_shuffle(input: &Tensor, upscale_factor: usize) -> Tensor {
    let _profiled = crate::dispatch::opaque("pixel_shuffle", &[input]);
    let r = upscale_factor;
    let s = input.shape();
    assert!(
        s.len() >= 3 && r > 0 && s[s.len() - 3].is_multiple_of(r * r),
        "pixel_shuffle: expected [*, C*r^2, H, W] with channels divisible by {}, got shape {s:?}",
        r * r
    );
    let k = s.len() - 3;
    let (c, h, w) = (s[k] / (r * r), s[k + 1], s[k + 2]);
    let mut split = s[..k].to_vec();
    split.extend([c, r, r, h, w]);
    let i = k as isize;
    let mut perm: Vec<isize> = (0..i).collect();
    perm.extend([i, i + 3, i + 1, i + 4, i + 2]);
    let mut out = s[..k].to_vec();
    out.extend([c, h * r, w * r]);
    input.reshape(&split).permute(&perm).reshape(&out)
}

/// Rearranges `[*, C, H·r, W·r]` into `[*, C·r², H, W]`, the inverse of [`pixel_shuffle`]
/// (`F.pixel_unshuffle`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 4, 4]);
/// assert_eq!(F::pixel_shuffle(&F::pixel_unshuffle(&x, 2), 2).to_vec::<f32>(), x.to_vec::<f32>());
/// ```
#[track_caller]
pub fn pixel_unshuffle(input: &Tensor, downscale_factor: usize) -> Tensor {
    let _profiled = crate::dispatch::opaque("pixel_unshuffle", &[input]);
    let r = downscale_factor;
    let s = input.shape();
    assert!(
        s.len() >= 3
            && r > 0
            && s[s.len() - 2].is_multiple_of(r)
            && s[s.len() - 1].is_multiple_of(r),
        "pixel_unshuffle: expected [*, C, H, W] with H and W divisible by {r}, got shape {s:?}"
    );
    let k = s.len() - 3;
    let (c, h, w) = (s[k], s[k + 1] / r, s[k + 2] / r);
    let mut split = s[..k].to_vec();
    split.extend([c, h, r, w, r]);
    let i = k as isize;
    let mut perm: Vec<isize> = (0..i).collect();
    perm.extend([i, i + 2, i + 4, i + 1, i + 3]);
    let mut out = s[..k].to_vec();
    out.extend([c * r * r, h, w]);
    input.reshape(&split).permute(&perm).reshape(&out)
}
