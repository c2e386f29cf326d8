//! Parameter-free modules that reshape, pad or resample: [`Flatten`], [`Unflatten`],
//! [`Identity`], [`PixelShuffle`], [`PixelUnshuffle`], [`ZeroPad2d`] and its padding-mode
//! siblings, [`Upsample`].

use super::functional::{self as F, InterpolateMode, InterpolateSize, PadMode};
use super::stateless::stateless;

stateless! {
    /// Flattens dims `start_dim..=end_dim` into one (`nn.Flatten`; `Flatten::default()`
    /// keeps the batch dim: 1 to -1).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Flatten, Forward};
    /// let y = Flatten::default().forward(&Tensor::zeros(&[2, 3, 4, 5], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 60]);
    /// ```
    Flatten {
        /// First dim flattened.
        start_dim: isize,
        /// Last dim flattened.
        end_dim: isize,
    } => |s, x| x.flatten(s.start_dim, s.end_dim);
    /// Returns its input (`nn.Identity`): a placeholder that keeps indices aligned.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Identity};
    /// let x = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// assert_eq!(Identity.forward(&x).to_vec::<f32>(), x.to_vec::<f32>());
    /// ```
    Identity => |_s, x| x.clone();
    /// Splits dim `dim` into `sizes` (`nn.Unflatten`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Unflatten};
    /// let y = Unflatten { dim: 1, sizes: vec![2, 5] }.forward(&Tensor::zeros(&[3, 10], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[3, 2, 5]);
    /// ```
    Unflatten {
        /// The dim split.
        dim: isize,
        /// Its new sizes (their product is its size).
        sizes: Vec<usize>,
    } => |s, x| {
        let d = crate::ops::wrap_dim("unflatten", s.dim, x.shape());
        assert!(
            s.sizes.iter().product::<usize>() == x.shape()[d],
            "unflatten: provided sizes {:?} don't multiply up to the size of dim {d} ({}) in the input tensor of shape {:?}",
            s.sizes,
            x.shape()[d],
            x.shape()
        );
        let mut shape = x.shape()[..d].to_vec();
        shape.extend(&s.sizes);
        shape.extend(&x.shape()[d + 1..]);
        x.reshape(&shape)
    };
    /// `[*, C·r², H, W]` to `[*, C, H·r, W·r]` (`nn.PixelShuffle(r)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, PixelShuffle};
    /// let y = PixelShuffle { upscale_factor: 3 }.forward(&Tensor::zeros(&[1, 18, 4, 4], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[1, 2, 12, 12]);
    /// ```
    PixelShuffle {
        /// `r`.
        upscale_factor: usize,
    } => |s, x| F::pixel_shuffle(x, s.upscale_factor);
    /// `[*, C, H·r, W·r]` to `[*, C·r², H, W]` (`nn.PixelUnshuffle(r)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, PixelUnshuffle};
    /// let y = PixelUnshuffle { downscale_factor: 2 }.forward(&Tensor::zeros(&[1, 2, 4, 4], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[1, 8, 2, 2]);
    /// ```
    PixelUnshuffle {
        /// `r`.
        downscale_factor: usize,
    } => |s, x| F::pixel_unshuffle(x, s.downscale_factor);
    /// Zero padding of the last two dims (`nn.ZeroPad2d((left, right, top, bottom))`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, ZeroPad2d};
    /// let y = ZeroPad2d { padding: [1, 0, 2, 1] }.forward(&Tensor::ones(&[1, 1, 2, 2], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[1, 1, 5, 3]);
    /// ```
    ZeroPad2d {
        /// `[left, right, top, bottom]`.
        padding: [usize; 4],
    } => |s, x| F::pad(x, &s.padding, 0.0);
    /// Constant padding of the last two dims (`nn.ConstantPad2d(padding, value)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConstantPad2d, Forward};
    /// let y = ConstantPad2d { padding: [1, 1, 0, 0], value: 7.0 }.forward(&Tensor::ones(&[1, 1, 1, 1], DType::F32, &Device::Cpu));
    /// assert_eq!(y.to_vec::<f32>(), vec![7.0, 1.0, 7.0]);
    /// ```
    ConstantPad2d {
        /// `[left, right, top, bottom]`.
        padding: [usize; 4],
        /// The fill value.
        value: f64,
    } => |s, x| F::pad(x, &s.padding, s.value);
    /// Reflection padding of the last two dims (`nn.ReflectionPad2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, ReflectionPad2d};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 1, 1, 3]);
    /// let y = ReflectionPad2d { padding: [1, 1, 0, 0] }.forward(&x);
    /// assert_eq!(y.to_vec::<f32>(), vec![2.0, 1.0, 2.0, 3.0, 2.0]);
    /// ```
    ReflectionPad2d {
        /// `[left, right, top, bottom]`.
        padding: [usize; 4],
    } => |s, x| F::pad_with(x, &s.padding, PadMode::Reflect);
    /// Edge-replicating padding of the last two dims (`nn.ReplicationPad2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, ReplicationPad2d};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 1, 1, 2]);
    /// let y = ReplicationPad2d { padding: [2, 0, 0, 0] }.forward(&x);
    /// assert_eq!(y.to_vec::<f32>(), vec![1.0, 1.0, 1.0, 2.0]);
    /// ```
    ReplicationPad2d {
        /// `[left, right, top, bottom]`.
        padding: [usize; 4],
    } => |s, x| F::pad_with(x, &s.padding, PadMode::Replicate);
    /// Resampling of `[N, C, L]` or `[N, C, H, W]` (`nn.Upsample`): nearest, or (bi)linear
    /// with `align_corners`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Upsample};
    /// use ferrograd_runtime::nn::functional::{InterpolateMode, InterpolateSize};
    /// let up = Upsample { size: InterpolateSize::Scale(vec![2.0, 2.0]), mode: InterpolateMode::Linear { align_corners: false } };
    /// assert_eq!(up.forward(&Tensor::zeros(&[1, 3, 4, 5], DType::F32, &Device::Cpu)).shape(), &[1, 3, 8, 10]);
    /// ```
    Upsample {
        /// Output size or scale factor.
        size: InterpolateSize,
        /// Nearest or linear.
        mode: InterpolateMode,
    } => |s, x| F::interpolate(x, &s.size, s.mode);
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}
