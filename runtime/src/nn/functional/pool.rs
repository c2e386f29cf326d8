//! 2-D pooling: max (with indices), average and adaptive average.

use super::conv::geometry;
use crate::Tensor;
use ferrograd_kernels::cpu::Conv2dGeometry;

/// Window size, stride, padding and dilation of 2-D pooling. The stride defaults to the
/// window size, as in PyTorch.
///
/// ```
/// use ferrograd_runtime::nn::functional::Pool2dArgs;
/// assert_eq!(Pool2dArgs::new(3).stride, [3, 3]);
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
}

impl Pool2dArgs {
    /// A square window with stride equal to its size.
    pub fn new(kernel: usize) -> Self {
        Pool2dArgs {
            kernel: [kernel; 2],
            stride: [kernel; 2],
            padding: [0; 2],
            dilation: [1; 2],
        }
    }
    /// The same stride on both dims.
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; 2];
        self
    }
    /// The same padding on both dims.
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = [padding; 2];
        self
    }
}

/// The window geometry of a pooling op over `input` `[N, C, H, W]`, checked as PyTorch
/// checks it (float input, positive window/stride/dilation, padding at most half the
/// window, a window that fits).
#[track_caller]
fn pool_geometry(op: &str, input: &Tensor, args: &Pool2dArgs) -> Conv2dGeometry {
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
    let g = geometry(input, args.kernel, args.stride, args.padding, args.dilation);
    if g.output().is_none_or(|[oh, ow]| oh == 0 || ow == 0) {
        panic!(
            "{op}: output size is too small: window {:?} does not fit input of shape {:?} (padding {:?})",
            args.kernel,
            input.shape(),
            args.padding
        )
    }
    g
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
    if h % oh == 0 && w % ow == 0 {
        return avg_pool2d_with(
            input,
            &Pool2dArgs {
                kernel: [h / oh, w / ow],
                stride: [h / oh, w / ow],
                padding: [0, 0],
                dilation: [1, 1],
            },
        );
    }
    let along = |x: &Tensor, dim: usize, size: usize, out: usize| -> Tensor {
        let bins: Vec<Tensor> = (0..out)
            .map(|i| {
                let start = i * size / out;
                let end = ((i + 1) * size).div_ceil(out);
                x.narrow(dim as isize, start, end - start)
                    .mean(&[dim as isize], true)
            })
            .collect();
        let refs: Vec<&Tensor> = bins.iter().collect();
        Tensor::cat(&refs, dim as isize)
    };
    along(&along(input, 2, h, oh), 3, w, ow)
}
