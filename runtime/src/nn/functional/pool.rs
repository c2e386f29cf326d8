//! Pooling: max (with indices) and average over 1-D and 2-D windows (`ceil_mode`,
//! `count_include_pad`, `divisor_override`), adaptive average and adaptive max.

use super::conv::geometry;
use crate::Tensor;
use ferrograd_kernels::fused::pool::{AvgDivisor, PoolGeometry};

/// Window size, stride, padding and dilation of 2-D pooling, and PyTorch's `ceil_mode`,
/// `count_include_pad` and `divisor_override`. The stride defaults to the window size,
/// as in PyTorch.
///
/// ```
/// use ferrograd_runtime::nn::functional::Pool2dArgs;
/// let args = Pool2dArgs::new(3);
/// assert_eq!((args.stride, args.ceil_mode, args.count_include_pad), ([3, 3], false, true));
/// let args = Pool2dArgs::new(3).stride(2).ceil_mode(true).count_include_pad(false);
/// assert!(args.ceil_mode && !args.count_include_pad);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dArgs {
    /// Window size.
    pub kernel: [usize; 2],
    /// Step of the window.
    pub stride: [usize; 2],
    /// Implicit padding on both sides (at most half the window).
    pub padding: [usize; 2],
    /// Spacing of window elements (max pooling only).
    pub dilation: [usize; 2],
    /// Round the output size up: a last, partial window (`ceil_mode`).
    pub ceil_mode: bool,
    /// Average pooling counts padding in the divisor (`count_include_pad`).
    pub count_include_pad: bool,
    /// Average pooling divides by this instead (`divisor_override`).
    pub divisor_override: Option<usize>,
}

impl Pool2dArgs {
    /// A square window with stride equal to its size.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert_eq!(Pool2dArgs::new(2).kernel, [2, 2]);
    /// ```
    pub fn new(kernel: usize) -> Self {
        Pool2dArgs {
            kernel: [kernel; 2],
            stride: [kernel; 2],
            padding: [0; 2],
            dilation: [1; 2],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
    /// A `[kh, kw]` window with stride equal to it.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert_eq!(Pool2dArgs::rect([3, 1]).stride, [3, 1]);
    /// ```
    pub fn rect(kernel: [usize; 2]) -> Self {
        Pool2dArgs {
            kernel,
            stride: kernel,
            ..Pool2dArgs::new(1)
        }
    }
    /// The same stride on both dims.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert_eq!(Pool2dArgs::new(3).stride(1).stride, [1, 1]);
    /// ```
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; 2];
        self
    }
    /// The same padding on both dims.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert_eq!(Pool2dArgs::new(3).padding(1).padding, [1, 1]);
    /// ```
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = [padding; 2];
        self
    }
    /// The same dilation on both dims (max pooling).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert_eq!(Pool2dArgs::new(3).dilation(2).dilation, [2, 2]);
    /// ```
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = [dilation; 2];
        self
    }
    /// Round the output size up (`ceil_mode`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert!(Pool2dArgs::new(3).ceil_mode(true).ceil_mode);
    /// ```
    pub fn ceil_mode(mut self, ceil_mode: bool) -> Self {
        self.ceil_mode = ceil_mode;
        self
    }
    /// Count padding in average pooling's divisor (`count_include_pad`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert!(!Pool2dArgs::new(3).count_include_pad(false).count_include_pad);
    /// ```
    pub fn count_include_pad(mut self, count_include_pad: bool) -> Self {
        self.count_include_pad = count_include_pad;
        self
    }
    /// Divide average pooling's sums by `divisor` (`divisor_override`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool2dArgs;
    /// assert_eq!(Pool2dArgs::new(3).divisor_override(4).divisor_override, Some(4));
    /// ```
    pub fn divisor_override(mut self, divisor: usize) -> Self {
        self.divisor_override = Some(divisor);
        self
    }
}

/// Arguments of 1-D pooling (`F.max_pool1d`, `F.avg_pool1d`): a window over the last dim.
///
/// ```
/// use ferrograd_runtime::nn::functional::Pool1dArgs;
/// let args = Pool1dArgs::new(3).stride(2).padding(1).ceil_mode(true);
/// assert_eq!((args.kernel, args.stride, args.padding), (3, 2, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool1dArgs {
    /// Window size.
    pub kernel: usize,
    /// Step of the window.
    pub stride: usize,
    /// Implicit padding on both sides.
    pub padding: usize,
    /// Spacing of window elements (max pooling only).
    pub dilation: usize,
    /// Round the output size up (`ceil_mode`).
    pub ceil_mode: bool,
    /// Average pooling counts padding in the divisor (`count_include_pad`).
    pub count_include_pad: bool,
}

impl Pool1dArgs {
    /// A window of `kernel` with stride equal to it.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool1dArgs;
    /// assert_eq!(Pool1dArgs::new(2).stride, 2);
    /// ```
    pub fn new(kernel: usize) -> Self {
        Pool1dArgs {
            kernel,
            stride: kernel,
            padding: 0,
            dilation: 1,
            ceil_mode: false,
            count_include_pad: true,
        }
    }
    /// The stride.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool1dArgs;
    /// assert_eq!(Pool1dArgs::new(2).stride(1).stride, 1);
    /// ```
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = stride;
        self
    }
    /// The padding.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool1dArgs;
    /// assert_eq!(Pool1dArgs::new(2).padding(1).padding, 1);
    /// ```
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = padding;
        self
    }
    /// The dilation (max pooling).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool1dArgs;
    /// assert_eq!(Pool1dArgs::new(2).dilation(2).dilation, 2);
    /// ```
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = dilation;
        self
    }
    /// Round the output size up (`ceil_mode`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool1dArgs;
    /// assert!(Pool1dArgs::new(2).ceil_mode(true).ceil_mode);
    /// ```
    pub fn ceil_mode(mut self, ceil_mode: bool) -> Self {
        self.ceil_mode = ceil_mode;
        self
    }
    /// Count padding in average pooling's divisor (`count_include_pad`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::functional::Pool1dArgs;
    /// assert!(!Pool1dArgs::new(2).count_include_pad(false).count_include_pad);
    /// ```
    pub fn count_include_pad(mut self, count_include_pad: bool) -> Self {
        self.count_include_pad = count_include_pad;
        self
    }

    /// The 2-D arguments of a `[1, kernel]` window over `[N, C, 1, L]`.
    fn as_2d(&self) -> Pool2dArgs {
        Pool2dArgs {
            kernel: [1, self.kernel],
            stride: [1, self.stride],
            padding: [0, self.padding],
            dilation: [1, self.dilation],
            ceil_mode: self.ceil_mode,
            count_include_pad: self.count_include_pad,
            divisor_override: None,
        }
    }
}

/// The window geometry of a pooling op over `input` `[N, C, H, W]`, checked as PyTorch
/// checks it (float input, positive window/stride/dilation, padding at most half the
/// window, a window that fits).
#[track_caller]
fn pool_geometry(op: &str, input: &Tensor, args: &Pool2dArgs) -> PoolGeometry {
    assert!(
        input.dim() == 4,
        "{op}: expected a 4D input [N, C, H, W], got shape {:?}",
        input.shape()
    );
    assert!(
        input.dtype().is_float(),
        "{op}: not implemented for {:?} (input shape {:?}); convert to a float dtype first",
        input.dtype(),
        input.shape()
    );
    assert!(
        args.kernel
            .iter()
            .chain(&args.stride)
            .chain(&args.dilation)
            .all(|&v| v > 0),
        "{op}: kernel size, stride and dilation must be positive, got kernel {:?}, stride {:?}, dilation {:?}",
        args.kernel,
        args.stride,
        args.dilation
    );
    for d in 0..2 {
        assert!(
            args.padding[d] * 2 <= args.kernel[d],
            "{op}: pad should be at most half of effective kernel size, but got pad={:?} and kernel_size={:?}",
            args.padding,
            args.kernel
        );
    }
    assert!(
        args.divisor_override != Some(0),
        "{op}: divisor must be not zero"
    );
    let g = geometry(input, args.kernel, args.stride, args.padding, args.dilation);
    let divisor = match (args.divisor_override, args.count_include_pad) {
        (Some(d), _) => AvgDivisor::Fixed(d),
        (None, true) => AvgDivisor::Padded,
        (None, false) => AvgDivisor::Valid,
    };
    match PoolGeometry::new(g, args.ceil_mode, divisor) {
        Some(pg) if pg.output.iter().all(|&o| o > 0) => pg,
        _ => panic!(
            "{op}: output size is too small: window {:?} does not fit input of shape {:?} (padding {:?})",
            args.kernel,
            input.shape(),
            args.padding
        ),
    }
}

/// 2-D max pooling with a square window and stride equal to it (`F.max_pool2d(x, k)`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 4, 4]);
/// assert_eq!(F::max_pool2d(&x, 2).to_vec::<f32>(), vec![5.0, 7.0, 13.0, 15.0]);
/// ```
#[track_caller]
pub fn max_pool2d(input: &Tensor, kernel: usize) -> Tensor {
    max_pool2d_with(input, &Pool2dArgs::new(kernel))
}

/// 2-D max pooling with explicit arguments; padding counts as -inf.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 1, 5, 5], DType::F32, &Device::Cpu);
/// let y = F::max_pool2d_with(&x, &F::Pool2dArgs::new(3).stride(2).padding(1));
/// assert_eq!(y.shape(), &[1, 1, 3, 3]);
/// ```
#[track_caller]
pub fn max_pool2d_with(input: &Tensor, args: &Pool2dArgs) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = max_pool2d_with_untraced(input, args);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::MaxPool {
            kernel: args.kernel.to_vec(),
            stride: args.stride.to_vec(),
            padding: args.padding.to_vec(),
            dilation: args.dilation.to_vec(),
            ceil_mode: args.ceil_mode,
        },
        out,
    )
}

#[track_caller]
fn max_pool2d_with_untraced(input: &Tensor, args: &Pool2dArgs) -> Tensor {
    max_pool2d_with_indices(input, args).0
}

/// [`max_pool2d_with`] that also returns, for each output, the flat index `y * W + x`
/// within its `[H, W]` plane of the element chosen (`F.max_pool2d(..., return_indices=True)`):
/// the first maximum of the window, or its last NaN, as PyTorch picks. The gradient flows
/// to those elements. One kernel forward, one backward.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 4.0, 3.0, 2.0], &[1, 1, 2, 2]);
/// let (y, idx) = F::max_pool2d_with_indices(&x, &F::Pool2dArgs::new(2));
/// assert_eq!((y.to_vec::<f32>(), idx.to_vec::<i64>()), (vec![4.0], vec![1]));
/// ```
#[track_caller]
pub fn max_pool2d_with_indices(input: &Tensor, args: &Pool2dArgs) -> (Tensor, Tensor) {
    let _profiled = crate::dispatch::opaque("max_pool2d_with_indices", &[input]);
    let g = pool_geometry("max_pool2d", input, args);
    let (out, indices) = crate::nn::fused::pool2d(input, true, g);
    (out, indices.expect("max pooling returns indices"))
}

/// 2-D average pooling with a square window and stride equal to it (`F.avg_pool2d(x, k)`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 4, 4]);
/// assert_eq!(F::avg_pool2d(&x, 2).to_vec::<f32>(), vec![2.5, 4.5, 10.5, 12.5]);
/// ```
#[track_caller]
pub fn avg_pool2d(input: &Tensor, kernel: usize) -> Tensor {
    avg_pool2d_with(input, &Pool2dArgs::new(kernel))
}

/// 2-D average pooling with explicit arguments; padding counts as zeros in the average
/// (PyTorch's `count_include_pad=True`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 1, 2, 2], DType::F32, &Device::Cpu);
/// let y = F::avg_pool2d_with(&x, &F::Pool2dArgs::new(2).stride(1).padding(1));
/// assert_eq!(y.to_vec::<f32>()[0], 0.25);
/// ```
#[track_caller]
pub fn avg_pool2d_with(input: &Tensor, args: &Pool2dArgs) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = avg_pool2d_with_untraced(input, args);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::AvgPool {
            kernel: args.kernel.to_vec(),
            stride: args.stride.to_vec(),
            padding: args.padding.to_vec(),
            ceil_mode: args.ceil_mode,
            count_include_pad: args.count_include_pad,
            divisor_override: args.divisor_override,
        },
        out,
    )
}

#[track_caller]
fn avg_pool2d_with_untraced(input: &Tensor, args: &Pool2dArgs) -> Tensor {
    let g = pool_geometry("avg_pool2d", input, args);
    crate::nn::fused::pool2d(input, false, g).0
}

/// Average pooling to a fixed output size (`F.adaptive_avg_pool2d`), with PyTorch's
/// bins: output cell `i` averages input rows `floor(i*H/oh)..ceil((i+1)*H/oh)`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 25.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 5, 5]);
/// assert_eq!(F::adaptive_avg_pool2d(&x, [1, 1]).item::<f32>(), 12.0);
/// assert_eq!(F::adaptive_avg_pool2d(&x, [3, 2]).shape(), &[1, 1, 3, 2]);
/// ```
#[track_caller]
pub fn adaptive_avg_pool2d(input: &Tensor, output_size: [usize; 2]) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = adaptive_avg_pool2d_untraced(input, output_size);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::AdaptiveAvgPool {
            output: output_size.to_vec(),
        },
        out,
    )
}

#[track_caller]
fn adaptive_avg_pool2d_untraced(input: &Tensor, output_size: [usize; 2]) -> Tensor {
    assert!(
        input.dim() == 4,
        "adaptive_avg_pool2d: expected a 4D input [N, C, H, W], got shape {:?}",
        input.shape()
    );
    let [h, w] = [input.shape()[2], input.shape()[3]];
    let [oh, ow] = output_size;
    assert!(
        oh > 0 && ow > 0,
        "adaptive_avg_pool2d: output size must be positive, got {output_size:?}"
    );
    if [oh, ow] == [1, 1] {
        // Global pooling (ResNet's and MobileNet's heads) is a mean over each plane: the
        // reduction kernels take [8, 512, 7, 7] in 33 µs where the pooling window's loops
        // took 297 (Zen 5).
        return input.mean(&[2, 3], true);
    }
    if h % oh == 0 && w % ow == 0 {
        return avg_pool2d_with(input, &Pool2dArgs::rect([h / oh, w / ow]));
    }
    let mean = |t: &Tensor, d: isize| t.mean(&[d], true);
    adaptive_bins(&adaptive_bins(input, 2, oh, mean), 3, ow, mean)
}

/// 1-D max pooling over the last dim of `[N, C, L]` (`F.max_pool1d`), with the in-row
/// indices of the chosen elements (`return_indices=True`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 5.0, 4.0], &[1, 1, 5]);
/// let (y, idx) = F::max_pool1d_with_indices(&x, &F::Pool1dArgs::new(2).ceil_mode(true));
/// assert_eq!((y.to_vec::<f32>(), idx.to_vec::<i64>()), (vec![3.0, 5.0, 4.0], vec![1, 3, 4]));
/// ```
#[track_caller]
pub fn max_pool1d_with_indices(input: &Tensor, args: &Pool1dArgs) -> (Tensor, Tensor) {
    let _profiled = crate::dispatch::opaque("max_pool1d_with_indices", &[input]);
    assert!(
        input.dim() == 3,
        "max_pool1d: expected a 3D input [N, C, L], got shape {:?}",
        input.shape()
    );
    let (y, idx) = max_pool2d_with_indices(&input.unsqueeze(2), &args.as_2d());
    (y.squeeze(2), idx.squeeze(2))
}

/// 1-D max pooling over the last dim of `[N, C, L]` (`F.max_pool1d`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 5.0], &[1, 1, 4]);
/// assert_eq!(F::max_pool1d(&x, &F::Pool1dArgs::new(2)).to_vec::<f32>(), vec![3.0, 5.0]);
/// ```
#[track_caller]
pub fn max_pool1d(input: &Tensor, args: &Pool1dArgs) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = max_pool1d_untraced(input, args);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::MaxPool {
            kernel: vec![args.kernel],
            stride: vec![args.stride],
            padding: vec![args.padding],
            dilation: vec![args.dilation],
            ceil_mode: args.ceil_mode,
        },
        out,
    )
}

#[track_caller]
fn max_pool1d_untraced(input: &Tensor, args: &Pool1dArgs) -> Tensor {
    max_pool1d_with_indices(input, args).0
}

/// 1-D average pooling over the last dim of `[N, C, L]` (`F.avg_pool1d`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 6.0], &[1, 1, 4]);
/// let args = F::Pool1dArgs::new(2).padding(1).count_include_pad(false);
/// assert_eq!(F::avg_pool1d(&x, &args).to_vec::<f32>(), vec![1.0, 2.5, 6.0]);
/// ```
#[track_caller]
pub fn avg_pool1d(input: &Tensor, args: &Pool1dArgs) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = avg_pool1d_untraced(input, args);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::AvgPool {
            kernel: vec![args.kernel],
            stride: vec![args.stride],
            padding: vec![args.padding],
            ceil_mode: args.ceil_mode,
            count_include_pad: args.count_include_pad,
            divisor_override: None,
        },
        out,
    )
}

#[track_caller]
fn avg_pool1d_untraced(input: &Tensor, args: &Pool1dArgs) -> Tensor {
    assert!(
        input.dim() == 3,
        "avg_pool1d: expected a 3D input [N, C, L], got shape {:?}",
        input.shape()
    );
    avg_pool2d_with(&input.unsqueeze(2), &args.as_2d()).squeeze(2)
}

/// `f` over each of PyTorch's adaptive bins along `dim`: bin `i` of `out` covers
/// `floor(i*size/out)..ceil((i+1)*size/out)`; the results are concatenated.
fn adaptive_bins(
    x: &Tensor,
    dim: usize,
    out: usize,
    f: impl Fn(&Tensor, isize) -> Tensor,
) -> Tensor {
    let size = x.shape()[dim];
    let bins: Vec<Tensor> = (0..out)
        .map(|i| {
            let start = i * size / out;
            let end = ((i + 1) * size).div_ceil(out);
            f(&x.narrow(dim as isize, start, end - start), dim as isize)
        })
        .collect();
    let refs: Vec<&Tensor> = bins.iter().collect();
    Tensor::cat(&refs, dim as isize)
}

/// Average pooling of `[N, C, L]` to `output_size` (`F.adaptive_avg_pool1d`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 5.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 5]);
/// assert_eq!(F::adaptive_avg_pool1d(&x, 2).to_vec::<f32>(), vec![1.0, 3.0]);
/// ```
#[track_caller]
pub fn adaptive_avg_pool1d(input: &Tensor, output_size: usize) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = adaptive_avg_pool1d_untraced(input, output_size);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::AdaptiveAvgPool {
            output: vec![output_size],
        },
        out,
    )
}

#[track_caller]
fn adaptive_avg_pool1d_untraced(input: &Tensor, output_size: usize) -> Tensor {
    assert!(
        input.dim() == 3,
        "adaptive_avg_pool1d: expected a 3D input [N, C, L], got shape {:?}",
        input.shape()
    );
    adaptive_avg_pool2d(&input.unsqueeze(2), [1, output_size]).squeeze(2)
}

/// Max pooling of `[N, C, H, W]` to a fixed output size (`F.adaptive_max_pool2d`), with
/// PyTorch's bins (as [`adaptive_avg_pool2d`]); the gradient flows to each bin's maximum.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::arange(0.0, 25.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 1, 5, 5]);
/// assert_eq!(F::adaptive_max_pool2d(&x, [2, 2]).to_vec::<f32>(), vec![12.0, 14.0, 22.0, 24.0]);
/// ```
#[track_caller]
pub fn adaptive_max_pool2d(input: &Tensor, output_size: [usize; 2]) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = adaptive_max_pool2d_untraced(input, output_size);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::AdaptiveMaxPool {
            output: output_size.to_vec(),
        },
        out,
    )
}

#[track_caller]
fn adaptive_max_pool2d_untraced(input: &Tensor, output_size: [usize; 2]) -> Tensor {
    assert!(
        input.dim() == 4 && input.dtype().is_float(),
        "adaptive_max_pool2d: expected a 4D float input [N, C, H, W], got shape {:?} ({:?})",
        input.shape(),
        input.dtype()
    );
    let [oh, ow] = output_size;
    assert!(
        oh > 0 && ow > 0,
        "adaptive_max_pool2d: output size must be positive, got {output_size:?}"
    );
    let (h, w) = (input.shape()[2], input.shape()[3]);
    if h % oh == 0 && w % ow == 0 {
        return max_pool2d_with(input, &Pool2dArgs::rect([h / oh, w / ow]));
    }
    let max = |t: &Tensor, d: isize| t.max_dim(d, true).0;
    adaptive_bins(&adaptive_bins(input, 2, oh, max), 3, ow, max)
}

/// Max pooling of `[N, C, L]` to `output_size` (`F.adaptive_max_pool1d`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 5.0, 2.0, 3.0, 4.0], &[1, 1, 5]);
/// assert_eq!(F::adaptive_max_pool1d(&x, 2).to_vec::<f32>(), vec![5.0, 4.0]);
/// ```
#[track_caller]
pub fn adaptive_max_pool1d(input: &Tensor, output_size: usize) -> Tensor {
    let _profiled = crate::dispatch::opaque("adaptive_max_pool1d", &[input]);
    assert!(
        input.dim() == 3,
        "adaptive_max_pool1d: expected a 3D input [N, C, L], got shape {:?}",
        input.shape()
    );
    adaptive_max_pool2d(&input.unsqueeze(2), [1, output_size]).squeeze(2)
}
