//! Pooling modules: max and average over 1-D and 2-D windows (with PyTorch's `ceil_mode`,
//! `count_include_pad`, `divisor_override`; max pooling's indices through
//! `forward_with_indices`, PyTorch's `return_indices=True`), adaptive average and max.

use super::functional::{self as F, Pool1dArgs, Pool2dArgs};
use super::stateless::stateless;
use crate::Tensor;

stateless! {
    /// 2-D max pooling (`nn.MaxPool2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, MaxPool2d};
    /// let pool = MaxPool2d::new(2);
    /// assert_eq!(pool.forward(&Tensor::zeros(&[1, 3, 8, 8], DType::F32, &Device::Cpu)).shape(), &[1, 3, 4, 4]);
    /// let stem = MaxPool2d { args: F::Pool2dArgs::new(3).stride(2).padding(1).ceil_mode(true) };
    /// assert_eq!(stem.forward(&Tensor::zeros(&[1, 3, 8, 8], DType::F32, &Device::Cpu)).shape(), &[1, 3, 5, 5]);
    /// ```
    MaxPool2d {
        /// Window, stride, padding, dilation, ceil mode.
        args: Pool2dArgs,
    } => |s, x| F::max_pool2d_with(x, &s.args);
    /// 1-D max pooling (`nn.MaxPool1d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, MaxPool1d};
    /// let y = MaxPool1d::new(2).forward(&Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 0.0], &[1, 1, 4]));
    /// assert_eq!(y.to_vec::<f32>(), vec![3.0, 2.0]);
    /// ```
    MaxPool1d {
        /// Window, stride, padding, dilation, ceil mode.
        args: Pool1dArgs,
    } => |s, x| F::max_pool1d(x, &s.args);
    /// 2-D average pooling (`nn.AvgPool2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool2d, Forward};
    /// let y = AvgPool2d::new(2).forward(&Tensor::ones(&[1, 1, 4, 4], DType::F32, &Device::Cpu));
    /// assert_eq!(y.to_vec::<f32>(), vec![1.0; 4]);
    /// let no_pad = AvgPool2d { args: F::Pool2dArgs::new(2).padding(1).count_include_pad(false) };
    /// assert_eq!(no_pad.forward(&Tensor::ones(&[1, 1, 2, 2], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![1.0; 4]);
    /// ```
    AvgPool2d {
        /// Window, stride, padding, ceil mode, divisor rule.
        args: Pool2dArgs,
    } => |s, x| F::avg_pool2d_with(x, &s.args);
    /// 1-D average pooling (`nn.AvgPool1d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool1d, Forward};
    /// let y = AvgPool1d::new(2).forward(&Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 0.0], &[1, 1, 4]));
    /// assert_eq!(y.to_vec::<f32>(), vec![2.0, 1.0]);
    /// ```
    AvgPool1d {
        /// Window, stride, padding, ceil mode, divisor rule.
        args: Pool1dArgs,
    } => |s, x| F::avg_pool1d(x, &s.args);
    /// Average pooling to a fixed output size (`nn.AdaptiveAvgPool2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AdaptiveAvgPool2d, Forward};
    /// let y = AdaptiveAvgPool2d { output_size: [1, 1] }.forward(&Tensor::ones(&[2, 8, 7, 7], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 8, 1, 1]);
    /// ```
    AdaptiveAvgPool2d {
        /// `[H, W]` of the output.
        output_size: [usize; 2],
    } => |s, x| F::adaptive_avg_pool2d(x, s.output_size);
    /// Average pooling of `[N, C, L]` to a fixed length (`nn.AdaptiveAvgPool1d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AdaptiveAvgPool1d, Forward};
    /// let y = AdaptiveAvgPool1d { output_size: 1 }.forward(&Tensor::ones(&[2, 8, 7], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 8, 1]);
    /// ```
    AdaptiveAvgPool1d {
        /// Length of the output.
        output_size: usize,
    } => |s, x| F::adaptive_avg_pool1d(x, s.output_size);
    /// Max pooling to a fixed output size (`nn.AdaptiveMaxPool2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AdaptiveMaxPool2d, Forward};
    /// let y = AdaptiveMaxPool2d { output_size: [2, 3] }.forward(&Tensor::ones(&[2, 8, 7, 7], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 8, 2, 3]);
    /// ```
    AdaptiveMaxPool2d {
        /// `[H, W]` of the output.
        output_size: [usize; 2],
    } => |s, x| F::adaptive_max_pool2d(x, s.output_size);
    /// Max pooling of `[N, C, L]` to a fixed length (`nn.AdaptiveMaxPool1d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AdaptiveMaxPool1d, Forward};
    /// let y = AdaptiveMaxPool1d { output_size: 2 }.forward(&Tensor::ones(&[2, 8, 7], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 8, 2]);
    /// ```
    AdaptiveMaxPool1d {
        /// Length of the output.
        output_size: usize,
    } => |s, x| F::adaptive_max_pool1d(x, s.output_size);
}

impl MaxPool2d {
    /// A square window of `kernel` with stride `kernel` (`nn.MaxPool2d(kernel)`); set the
    /// other arguments on `args`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d};
    /// assert_eq!(MaxPool2d::new(3).args.stride, [3, 3]);
    /// ```
    pub fn new(kernel: usize) -> Self {
        MaxPool2d {
            args: Pool2dArgs::new(kernel),
        }
    }

    /// The pooled values and the flat in-plane index `y * W + x` of each chosen element
    /// (`nn.MaxPool2d(..., return_indices=True)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::MaxPool2d;
    /// let x = Tensor::from_vec(vec![1.0f32, 4.0, 3.0, 2.0], &[1, 1, 2, 2]);
    /// let (y, idx) = MaxPool2d::new(2).forward_with_indices(&x);
    /// assert_eq!((y.to_vec::<f32>(), idx.to_vec::<i64>()), (vec![4.0], vec![1]));
    /// ```
    #[track_caller]
    pub fn forward_with_indices(&self, x: &Tensor) -> (Tensor, Tensor) {
        F::max_pool2d_with_indices(x, &self.args)
    }
}

impl MaxPool1d {
    /// A window of `kernel` with stride `kernel` (`nn.MaxPool1d(kernel)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d};
    /// assert_eq!(MaxPool1d::new(3).args.stride, 3);
    /// ```
    pub fn new(kernel: usize) -> Self {
        MaxPool1d {
            args: Pool1dArgs::new(kernel),
        }
    }

    /// The pooled values and the index of each chosen element within its row
    /// (`return_indices=True`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::MaxPool1d;
    /// let (_, idx) = MaxPool1d::new(2).forward_with_indices(&Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 0.0], &[1, 1, 4]));
    /// assert_eq!(idx.to_vec::<i64>(), vec![1, 2]);
    /// ```
    #[track_caller]
    pub fn forward_with_indices(&self, x: &Tensor) -> (Tensor, Tensor) {
        F::max_pool1d_with_indices(x, &self.args)
    }
}

impl AvgPool2d {
    /// A square window of `kernel` with stride `kernel` (`nn.AvgPool2d(kernel)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d};
    /// assert_eq!(AvgPool2d::new(2).args.kernel, [2, 2]);
    /// ```
    pub fn new(kernel: usize) -> Self {
        AvgPool2d {
            args: Pool2dArgs::new(kernel),
        }
    }
}

impl AvgPool1d {
    /// A window of `kernel` with stride `kernel` (`nn.AvgPool1d(kernel)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d};
    /// assert_eq!(AvgPool1d::new(2).args.kernel, 2);
    /// ```
    pub fn new(kernel: usize) -> Self {
        AvgPool1d {
            args: Pool1dArgs::new(kernel),
        }
    }
}
