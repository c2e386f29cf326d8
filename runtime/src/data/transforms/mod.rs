//! Image transforms, as `torchvision.transforms`, on `[C, H, W]` float tensors (the
//! output of [`ToTensor`], which takes `[H, W, C]` u8 images as [`ImageFolder`] yields
//! them). Random transforms draw from [`with_sample_rng`], so
//! inside a [`DataLoader`](super::DataLoader) a run is reproducible from its seed.
//!
//! They follow torchvision's tensor path: resizing in every [`InterpolationMode`], with
//! or without antialias, equals torchvision's to f32 rounding on float images and to
//! within one step of 255 on u8 images; crops use its offsets (Python's rounding).
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::data::transforms::*;
//! let image = Tensor::full(&[40, 60, 3], 128.0, DType::U8, &Device::Cpu);
//! let pipeline = Compose::new()
//!     .then(ToTensor)
//!     .then(Resize::shorter_side(32))
//!     .then(CenterCrop::new([32, 32]))
//!     .then(RandomHorizontalFlip::new(0.5))
//!     .then(Normalize::new(&[0.5, 0.5, 0.5], &[0.25, 0.25, 0.25]));
//! let x = pipeline.apply(image);
//! assert_eq!(x.shape(), &[3, 32, 32]);
//! ```
//!
//! [`ImageFolder`]: super::datasets::ImageFolder

mod resample;

pub use resample::{InterpolationMode, resize_with};

use super::with_sample_rng;
use crate::{DType, Tensor};

/// A transform of one image (`[C, H, W]` float, or `[H, W, C]` u8 for [`ToTensor`]).
pub trait Transform: Send + Sync {
    /// Applies the transform.
    fn apply(&self, image: Tensor) -> Tensor;
}

impl<F: Fn(Tensor) -> Tensor + Send + Sync> Transform for F {
    fn apply(&self, image: Tensor) -> Tensor {
        self(image)
    }
}

/// Transforms applied in order (`transforms.Compose`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{Compose, Transform};
/// let double_then_add = Compose::new().then(|x: Tensor| x.mul_scalar(2.0)).then(|x: Tensor| x.add_scalar(1.0));
/// assert_eq!(double_then_add.apply(Tensor::ones(&[1], DType::F32, &Device::Cpu)).item::<f32>(), 3.0);
/// ```
#[derive(Default)]
pub struct Compose {
    steps: Vec<Box<dyn Transform>>,
}

impl Compose {
    /// No transforms yet.
    pub fn new() -> Self {
        Compose::default()
    }
    /// Appends `t`.
    pub fn then(mut self, t: impl Transform + 'static) -> Self {
        self.steps.push(Box::new(t));
        self
    }
}

impl Transform for Compose {
    fn apply(&self, image: Tensor) -> Tensor {
        self.steps.iter().fold(image, |x, t| t.apply(x))
    }
}

/// `[H, W, C]` u8 (or any dtype) to `[C, H, W]` f32 in [0, 1] (`transforms.ToTensor`;
/// a 2-D `[H, W]` image becomes `[1, H, W]`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{ToTensor, Transform};
/// let x = ToTensor.apply(Tensor::full(&[2, 3, 3], 255.0, DType::U8, &Device::Cpu));
/// assert_eq!((x.shape(), x.max_all().item::<f32>()), (&[3, 2, 3][..], 1.0));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ToTensor;

impl Transform for ToTensor {
    #[track_caller]
    fn apply(&self, image: Tensor) -> Tensor {
        let hwc = match image.dim() {
            2 => image.unsqueeze(2),
            3 => image,
            _ => panic!(
                "ToTensor: expected an [H, W, C] or [H, W] image, got shape {:?}",
                image.shape()
            ),
        };
        let x = hwc.permute(&[2, 0, 1]).contiguous().to_dtype(DType::F32);
        if image_is_bytes(&hwc) {
            x.div_scalar(255.0)
        } else {
            x
        }
    }
}

fn image_is_bytes(t: &Tensor) -> bool {
    t.dtype() == DType::U8
}

/// `(x - mean[c]) / std[c]` per channel (`transforms.Normalize`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{Normalize, Transform};
/// let x = Normalize::new(&[0.5], &[0.5]).apply(Tensor::ones(&[1, 2, 2], DType::F32, &Device::Cpu));
/// assert_eq!(x.to_vec::<f32>(), vec![1.0; 4]);
/// ```
#[derive(Clone, Debug)]
pub struct Normalize {
    mean: Vec<f64>,
    std: Vec<f64>,
}

impl Normalize {
    /// Per-channel `mean` and `std` (no zero in `std`).
    #[track_caller]
    pub fn new(mean: &[f64], std: &[f64]) -> Self {
        assert!(
            mean.len() == std.len() && std.iter().all(|&s| s != 0.0),
            "Normalize: mean {mean:?} and std {std:?} must have one entry per channel, std not zero"
        );
        Normalize {
            mean: mean.to_vec(),
            std: std.to_vec(),
        }
    }
}

impl Transform for Normalize {
    #[track_caller]
    fn apply(&self, image: Tensor) -> Tensor {
        let c = image.shape()[0];
        assert!(
            self.mean.len() == c || self.mean.len() == 1,
            "Normalize: {} means for an image of {c} channels (shape {:?})",
            self.mean.len(),
            image.shape()
        );
        let per = |v: &[f64]| {
            let v: Vec<f64> = if v.len() == 1 {
                vec![v[0]; c]
            } else {
                v.to_vec()
            };
            Tensor::from_vec(v, &[c, 1, 1]).to_dtype(image.dtype())
        };
        image.sub(&per(&self.mean)).div(&per(&self.std))
    }
}

/// Antialiased bilinear resizing of a `[C, H, W]` image to `[C, h, w]` (torchvision's
/// default); [`resize_with`] takes the mode.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::resize;
/// let x = Tensor::ones(&[3, 8, 8], DType::F32, &Device::Cpu);
/// assert_eq!(resize(&x, [4, 2]).shape(), &[3, 4, 2]);
/// ```
#[track_caller]
pub fn resize(image: &Tensor, size: [usize; 2]) -> Tensor {
    resize_with(image, size, InterpolationMode::Bilinear, true)
}

/// Resizing (`transforms.Resize`): to `[h, w]`, or so that the shorter side is `size`
/// (the longer keeping the aspect ratio, truncated as torchvision); bilinear with
/// antialias unless [`interpolation`](Resize::interpolation) and
/// [`antialias`](Resize::antialias) say otherwise. Matches torchvision on tensors (see
/// [`resize_with`]).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{InterpolationMode, Resize, Transform};
/// let x = Tensor::ones(&[3, 40, 60], DType::F32, &Device::Cpu);
/// assert_eq!(Resize::shorter_side(20).apply(x.clone()).shape(), &[3, 20, 30]);
/// let y = Resize::new([10, 10]).interpolation(InterpolationMode::Bicubic).apply(x);
/// assert!((y.mean_all().item::<f32>() - 1.0).abs() < 1e-6);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Resize {
    size: ResizeTo,
    mode: InterpolationMode,
    antialias: bool,
}

#[derive(Clone, Copy, Debug)]
enum ResizeTo {
    Exact([usize; 2]),
    Shorter(usize),
}

impl Resize {
    /// To exactly `[h, w]`.
    pub fn new(size: [usize; 2]) -> Self {
        Resize {
            size: ResizeTo::Exact(size),
            mode: InterpolationMode::Bilinear,
            antialias: true,
        }
    }
    /// Shorter side to `size`.
    pub fn shorter_side(size: usize) -> Self {
        Resize {
            size: ResizeTo::Shorter(size),
            ..Resize::new([size, size])
        }
    }
    /// With `mode` (torchvision's `interpolation`).
    pub fn interpolation(mut self, mode: InterpolationMode) -> Self {
        self.mode = mode;
        self
    }
    /// With or without antialiasing (bilinear and bicubic; default on, torchvision's).
    pub fn antialias(mut self, antialias: bool) -> Self {
        self.antialias = antialias;
        self
    }
    fn target(&self, h: usize, w: usize) -> [usize; 2] {
        match self.size {
            ResizeTo::Exact(s) => s,
            ResizeTo::Shorter(s) if h <= w => [s, (s as f64 * w as f64 / h as f64) as usize],
            ResizeTo::Shorter(s) => [(s as f64 * h as f64 / w as f64) as usize, s],
        }
    }
}

impl Transform for Resize {
    fn apply(&self, image: Tensor) -> Tensor {
        let target = self.target(image.shape()[1], image.shape()[2]);
        resize_with(&image, target, self.mode, self.antialias)
    }
}

/// The `[C, h, w]` window at `(top, left)`, zero padded where it leaves the image.
fn crop(image: &Tensor, top: isize, left: isize, [h, w]: [usize; 2]) -> Tensor {
    let (ih, iw) = (image.shape()[1] as isize, image.shape()[2] as isize);
    let pad = [
        (-left).max(0) as usize,
        (left + w as isize - iw).max(0) as usize,
        (-top).max(0) as usize,
        (top + h as isize - ih).max(0) as usize,
    ];
    let x = if pad.iter().any(|&p| p > 0) {
        crate::nn::functional::pad(image, &pad, 0.0)
    } else {
        image.clone()
    };
    x.narrow(1, top.max(0) as usize, h)
        .narrow(2, left.max(0) as usize, w)
}

/// The central `[h, w]` window (`transforms.CenterCrop`; zero padded when larger than
/// the image), with torchvision's rounding of the offset (Python's `round`, half to
/// even).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{CenterCrop, Transform};
/// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 4, 4]);
/// assert_eq!(CenterCrop::new([2, 2]).apply(x).to_vec::<f32>(), vec![5.0, 6.0, 9.0, 10.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CenterCrop {
    size: [usize; 2],
}

impl CenterCrop {
    /// A crop of `[h, w]`.
    pub fn new(size: [usize; 2]) -> Self {
        CenterCrop { size }
    }
}

impl Transform for CenterCrop {
    fn apply(&self, image: Tensor) -> Tensor {
        let top = center_offset(image.shape()[1], self.size[0]);
        let left = center_offset(image.shape()[2], self.size[1]);
        crop(&image, top, left, self.size)
    }
}

/// torchvision's `center_crop` offset of a crop of `crop` pixels along an image side of
/// `image`: `round((image - crop) / 2)` with Python's rounding (half to even: 385 → 224
/// starts at 80), or, for a crop larger than the image, minus the padding torchvision
/// puts before it (`(crop - image) // 2`).
fn center_offset(image: usize, crop: usize) -> isize {
    if crop > image {
        -(((crop - image) / 2) as isize)
    } else {
        ((image - crop) as f64 / 2.0).round_ties_even() as isize
    }
}

fn uniform_int(g: &mut crate::Generator, low: i64, high_inclusive: i64) -> i64 {
    if high_inclusive <= low {
        low
    } else {
        g.int_in(low, high_inclusive + 1)
    }
}

/// A random `[h, w]` window after zero padding by `padding` on every side
/// (`transforms.RandomCrop(size, padding)`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{RandomCrop, Transform};
/// let x = Tensor::ones(&[3, 32, 32], DType::F32, &Device::Cpu);
/// assert_eq!(RandomCrop::new([32, 32], 4).apply(x).shape(), &[3, 32, 32]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RandomCrop {
    size: [usize; 2],
    padding: usize,
}

impl RandomCrop {
    /// A crop of `[h, w]` from the image padded by `padding`.
    pub fn new(size: [usize; 2], padding: usize) -> Self {
        RandomCrop { size, padding }
    }
}

impl Transform for RandomCrop {
    fn apply(&self, image: Tensor) -> Tensor {
        let p = self.padding as i64;
        let (ih, iw) = (
            image.shape()[1] as i64 + 2 * p,
            image.shape()[2] as i64 + 2 * p,
        );
        let (top, left) = with_sample_rng(|g| {
            (
                uniform_int(g, 0, ih - self.size[0] as i64),
                uniform_int(g, 0, iw - self.size[1] as i64),
            )
        });
        crop(&image, (top - p) as isize, (left - p) as isize, self.size)
    }
}

/// Mirrors the image left-right with probability `p` (`transforms.RandomHorizontalFlip`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{RandomHorizontalFlip, Transform};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 1, 2]);
/// assert_eq!(RandomHorizontalFlip::new(1.0).apply(x).to_vec::<f32>(), vec![2.0, 1.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RandomHorizontalFlip {
    p: f64,
}

impl RandomHorizontalFlip {
    /// Flips with probability `p`.
    pub fn new(p: f64) -> Self {
        RandomHorizontalFlip { p }
    }
}

impl Transform for RandomHorizontalFlip {
    fn apply(&self, image: Tensor) -> Tensor {
        if with_sample_rng(|g| g.uniform()) < self.p {
            image.flip(&[-1])
        } else {
            image
        }
    }
}

/// A random crop of random area and aspect ratio, resized to `size`
/// (`transforms.RandomResizedCrop`: area in `scale` of the image's, aspect ratio
/// log-uniform in `ratio`, ten tries before falling back to a central crop, as
/// torchvision).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{RandomResizedCrop, Transform};
/// let x = Tensor::ones(&[3, 50, 80], DType::F32, &Device::Cpu);
/// assert_eq!(RandomResizedCrop::new([24, 24]).apply(x).shape(), &[3, 24, 24]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RandomResizedCrop {
    size: [usize; 2],
    scale: (f64, f64),
    ratio: (f64, f64),
    mode: InterpolationMode,
    antialias: bool,
}

impl RandomResizedCrop {
    /// torchvision's defaults: scale (0.08, 1), ratio (3/4, 4/3), bilinear with
    /// antialias.
    pub fn new(size: [usize; 2]) -> Self {
        Self::with_ranges(size, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0))
    }
    /// With `mode` (torchvision's `interpolation`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::transforms::{InterpolationMode, RandomResizedCrop, Transform};
    /// let crop = RandomResizedCrop::new([8, 8]).interpolation(InterpolationMode::NearestExact);
    /// let x = Tensor::ones(&[1, 30, 30], DType::F32, &Device::Cpu);
    /// assert_eq!(crop.antialias(false).apply(x).to_vec::<f32>(), vec![1.0; 64]);
    /// ```
    pub fn interpolation(mut self, mode: InterpolationMode) -> Self {
        self.mode = mode;
        self
    }
    /// With or without antialiasing (bilinear and bicubic; default on).
    pub fn antialias(mut self, antialias: bool) -> Self {
        self.antialias = antialias;
        self
    }
    /// With explicit area and aspect-ratio ranges.
    ///
    /// ```
    /// use ferrograd_runtime::data::transforms::RandomResizedCrop;
    /// let _ = RandomResizedCrop::with_ranges([8, 8], (0.5, 1.0), (1.0, 1.0));
    /// ```
    pub fn with_ranges(size: [usize; 2], scale: (f64, f64), ratio: (f64, f64)) -> Self {
        RandomResizedCrop {
            size,
            scale,
            ratio,
            mode: InterpolationMode::Bilinear,
            antialias: true,
        }
    }

    /// torchvision's `get_params`: `(top, left, h, w)` of the crop.
    fn params(&self, h: usize, w: usize) -> (usize, usize, usize, usize) {
        let area = (h * w) as f64;
        with_sample_rng(|g| {
            for _ in 0..10 {
                let target = area * (self.scale.0 + (self.scale.1 - self.scale.0) * g.uniform());
                let (lo, hi) = (self.ratio.0.ln(), self.ratio.1.ln());
                let aspect = (lo + (hi - lo) * g.uniform()).exp();
                let cw = (target * aspect).sqrt().round_ties_even() as usize;
                let ch = (target / aspect).sqrt().round_ties_even() as usize;
                if 0 < cw && cw <= w && 0 < ch && ch <= h {
                    let top = uniform_int(g, 0, (h - ch) as i64) as usize;
                    let left = uniform_int(g, 0, (w - cw) as i64) as usize;
                    return (top, left, ch, cw);
                }
            }
            let in_ratio = w as f64 / h as f64;
            let (ch, cw) = if in_ratio < self.ratio.0 {
                ((w as f64 / self.ratio.0).round_ties_even() as usize, w)
            } else if in_ratio > self.ratio.1 {
                (h, (h as f64 * self.ratio.1).round_ties_even() as usize)
            } else {
                (h, w)
            };
            ((h - ch) / 2, (w - cw) / 2, ch, cw)
        })
    }
}

/// Crops `[top, left, h, w]` and resizes to `size` (`transforms.functional.resized_crop`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::resized_crop;
/// let x = Tensor::ones(&[3, 20, 20], DType::F32, &Device::Cpu);
/// assert_eq!(resized_crop(&x, 2, 3, 10, 12, [6, 6]).shape(), &[3, 6, 6]);
/// ```
#[track_caller]
pub fn resized_crop(
    image: &Tensor,
    top: usize,
    left: usize,
    h: usize,
    w: usize,
    size: [usize; 2],
) -> Tensor {
    resize(&crop(image, top as isize, left as isize, [h, w]), size)
}

/// [`resized_crop`] of the window `[top, left, h, w]` with `mode` and `antialias` (see
/// [`resize_with`]).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{InterpolationMode, resized_crop_with};
/// let x = Tensor::ones(&[3, 20, 20], DType::F32, &Device::Cpu);
/// let y = resized_crop_with(&x, [2, 3, 10, 12], [6, 6], InterpolationMode::Bicubic, true);
/// assert_eq!(y.shape(), &[3, 6, 6]);
/// ```
#[track_caller]
pub fn resized_crop_with(
    image: &Tensor,
    [top, left, h, w]: [usize; 4],
    size: [usize; 2],
    mode: InterpolationMode,
    antialias: bool,
) -> Tensor {
    let window = crop(image, top as isize, left as isize, [h, w]);
    resize_with(&window, size, mode, antialias)
}

impl Transform for RandomResizedCrop {
    fn apply(&self, image: Tensor) -> Tensor {
        let (top, left, h, w) = self.params(image.shape()[1], image.shape()[2]);
        resized_crop_with(
            &image,
            [top, left, h, w],
            self.size,
            self.mode,
            self.antialias,
        )
    }
}

/// Random brightness and contrast changes (`transforms.ColorJitter(brightness,
/// contrast)`): factors uniform in `[max(0, 1 - b), 1 + b]`, applied in random order;
/// contrast blends with the mean of the grayscale image, as torchvision; results clamp
/// to [0, 1].
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{ColorJitter, Transform};
/// let x = Tensor::full(&[3, 4, 4], 0.5, DType::F32, &Device::Cpu);
/// let y = ColorJitter::new(0.4, 0.4).apply(x);
/// assert!(y.max_all().item::<f32>() <= 1.0 && y.min_all().item::<f32>() >= 0.0);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ColorJitter {
    brightness: f64,
    contrast: f64,
}

impl ColorJitter {
    /// Brightness and contrast strengths (0 leaves that property alone).
    pub fn new(brightness: f64, contrast: f64) -> Self {
        ColorJitter {
            brightness,
            contrast,
        }
    }
}

/// `factor * image` clamped to [0, 1] (`adjust_brightness`).
pub fn adjust_brightness(image: &Tensor, factor: f64) -> Tensor {
    image.mul_scalar(factor).clamp(0.0, 1.0)
}

/// Blends a `[3, H, W]` (or `[1, H, W]`) image with the mean of its grayscale
/// (`adjust_contrast`).
pub fn adjust_contrast(image: &Tensor, factor: f64) -> Tensor {
    let gray = if image.shape()[0] == 3 {
        let w = Tensor::from_vec(vec![0.2989, 0.587, 0.114], &[3, 1, 1]).to_dtype(image.dtype());
        image.mul(&w).sum(&[0], false)
    } else {
        image.select(0, 0)
    };
    let mean = gray.mean_all();
    image
        .mul_scalar(factor)
        .add(&mean.mul_scalar(1.0 - factor))
        .clamp(0.0, 1.0)
}

impl Transform for ColorJitter {
    fn apply(&self, image: Tensor) -> Tensor {
        let (order, b, c) = with_sample_rng(|g| {
            let first_brightness = g.uniform() < 0.5;
            let factor = |g: &mut crate::Generator, s: f64| {
                (1.0 - s).max(0.0) + g.uniform() * ((1.0 + s) - (1.0 - s).max(0.0))
            };
            (
                first_brightness,
                factor(g, self.brightness),
                factor(g, self.contrast),
            )
        });
        let bright = |x: Tensor| {
            if self.brightness > 0.0 {
                adjust_brightness(&x, b)
            } else {
                x
            }
        };
        let contrast = |x: Tensor| {
            if self.contrast > 0.0 {
                adjust_contrast(&x, c)
            } else {
                x
            }
        };
        if order {
            contrast(bright(image))
        } else {
            bright(contrast(image))
        }
    }
}

/// Erases a random rectangle with probability `p` (`transforms.RandomErasing`: area in
/// (0.02, 0.33) of the image, aspect ratio log-uniform in (0.3, 3.3), filled with
/// `value`; ten tries, else the image is unchanged).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::transforms::{RandomErasing, Transform};
/// let y = RandomErasing::new(1.0, 0.0).apply(Tensor::ones(&[3, 32, 32], DType::F32, &Device::Cpu));
/// assert!(y.min_all().item::<f32>() == 0.0);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RandomErasing {
    p: f64,
    value: f64,
}

impl RandomErasing {
    /// Erases with probability `p`, filling with `value`.
    pub fn new(p: f64, value: f64) -> Self {
        RandomErasing { p, value }
    }
}

impl Transform for RandomErasing {
    fn apply(&self, image: Tensor) -> Tensor {
        let (h, w) = (image.shape()[1], image.shape()[2]);
        let region = with_sample_rng(|g| {
            if g.uniform() >= self.p {
                return None;
            }
            let area = (h * w) as f64;
            for _ in 0..10 {
                let target = area * (0.02 + (0.33 - 0.02) * g.uniform());
                let (lo, hi) = (0.3f64.ln(), 3.3f64.ln());
                let aspect = (lo + (hi - lo) * g.uniform()).exp();
                let eh = (target * aspect).sqrt().round() as usize;
                let ew = (target / aspect).sqrt().round() as usize;
                if eh < h && ew < w && eh > 0 && ew > 0 {
                    let top = uniform_int(g, 0, (h - eh) as i64) as usize;
                    let left = uniform_int(g, 0, (w - ew) as i64) as usize;
                    return Some((top, left, eh, ew));
                }
            }
            None
        });
        match region {
            None => image,
            Some((top, left, eh, ew)) => {
                let out = image.contiguous().deep_copy();
                crate::autograd::no_grad(|| {
                    out.narrow(1, top, eh).narrow(2, left, ew).fill_(self.value);
                });
                out
            }
        }
    }
}
