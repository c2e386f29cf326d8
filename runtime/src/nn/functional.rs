//! Stateless neural-network ops, as `torch.nn.functional`: convolution and pooling (built
//! on a differentiable im2col, so each has one exact backward), normalisation, dropout,
//! embedding and losses (fused with log-softmax for stability).
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! let x = Tensor::randn(&[8, 1, 28, 28], DType::F32, &Device::Cpu);
//! let w = Tensor::randn(&[6, 1, 5, 5], DType::F32, &Device::Cpu);
//! let y = F::conv2d(&x, &w, None, &F::Conv2dArgs::default().padding(2));
//! let y = F::max_pool2d(&y.relu(), 2);
//! assert_eq!(y.shape(), &[8, 6, 14, 14]);
//! ```

use crate::amp;
use crate::autograd::{no_grad, record};
use crate::ops::check_same_device;
use crate::{DType, Tensor};
use ferrograd_kernels::Dims;
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cpu::Conv2dGeometry;

/// Stride, padding, dilation and groups of a `D`-dimensional convolution.
///
/// ```
/// use ferrograd_runtime::nn::functional::Conv2dArgs;
/// let args = Conv2dArgs::default().stride(2).padding(1);
/// assert_eq!((args.stride, args.padding, args.groups), ([2, 2], [1, 1], 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvArgs<const D: usize> {
    /// Step of the window per spatial dim.
    pub stride: [usize; D],
    /// Zero padding on both sides per spatial dim.
    pub padding: [usize; D],
    /// Spacing of kernel elements per spatial dim.
    pub dilation: [usize; D],
    /// Number of channel groups (`in_channels` and `out_channels` must divide by it).
    pub groups: usize,
}

/// Arguments of [`conv1d`].
pub type Conv1dArgs = ConvArgs<1>;
/// Arguments of [`conv2d`].
pub type Conv2dArgs = ConvArgs<2>;

impl<const D: usize> Default for ConvArgs<D> {
    fn default() -> Self {
        ConvArgs {
            stride: [1; D],
            padding: [0; D],
            dilation: [1; D],
            groups: 1,
        }
    }
}

impl<const D: usize> ConvArgs<D> {
    /// The same stride on every spatial dim.
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; D];
        self
    }
    /// The same padding on every spatial dim.
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = [padding; D];
        self
    }
    /// The same dilation on every spatial dim.
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = [dilation; D];
        self
    }
    /// The number of groups.
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
}

fn geometry(
    input: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Conv2dGeometry {
    let s = input.shape();
    Conv2dGeometry {
        n: s[0],
        c: s[1],
        input: [s[2], s[3]],
        kernel,
        stride,
        padding,
        dilation,
    }
}

/// Sliding local blocks of a `[N, C, H, W]` batch as columns `[N, C*kh*kw, L]`
/// (`F.unfold`, im2col). Differentiable; its backward is the matching fold.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 2, 4, 4], DType::F32, &Device::Cpu);
/// assert_eq!(F::unfold(&x, [2, 2], [1, 1], [0, 0], [2, 2]).shape(), &[1, 8, 4]);
/// ```
#[track_caller]
pub fn unfold(
    input: &Tensor,
    kernel: [usize; 2],
    dilation: [usize; 2],
    padding: [usize; 2],
    stride: [usize; 2],
) -> Tensor {
    let (cols, [oh, ow]) = unfold_columns("unfold", input, kernel, dilation, padding, stride);
    let (n, k) = (input.shape()[0], cols.shape()[0]);
    cols.reshape(&[k, n, oh * ow]).permute(&[1, 0, 2])
}

/// im2col in kernel-major order: `[C*kh*kw, N*oh*ow]`, and the output size.
#[track_caller]
fn unfold_columns(
    op: &str,
    input: &Tensor,
    kernel: [usize; 2],
    dilation: [usize; 2],
    padding: [usize; 2],
    stride: [usize; 2],
) -> (Tensor, [usize; 2]) {
    assert!(
        input.dim() == 4,
        "{op}: expected a 4D input [N, C, H, W], got shape {:?}",
        input.shape()
    );
    let g = geometry(input, kernel, stride, padding, dilation);
    let [oh, ow] = g.output().unwrap_or_else(|| {
        panic!(
            "{op}: kernel {kernel:?} with dilation {dilation:?} does not fit the padded input of spatial size {:?} (padding {padding:?}, stride {stride:?}); shape {:?}",
            g.input,
            input.shape()
        )
    });
    let x = input.detach().contiguous();
    let shape = [g.c * kernel[0] * kernel[1], g.n * oh * ow];
    assert!(
        x.dtype() != DType::Bool,
        "{op}: not supported for bool tensors (shape {:?})",
        x.shape()
    );
    let out = x.read_storage().conv_columns(x.layout(), false, &g);
    let out = Tensor::from_backend(op, &shape, out);
    (
        record(out, "unfold", &[input], || {
            move |_, grad: &Tensor| vec![Some(fold_columns(grad, &g))]
        }),
        [oh, ow],
    )
}

/// The adjoint of [`unfold_columns`]: sums kernel-major columns back into `[N, C, H, W]`.
fn fold_columns(cols: &Tensor, g: &Conv2dGeometry) -> Tensor {
    let g = *g;
    let x = cols.detach().contiguous();
    let shape = [g.n, g.c, g.input[0], g.input[1]];
    let out = x.read_storage().conv_columns(x.layout(), true, &g);
    let out = Tensor::from_backend("fold", &shape, out);
    record(out, "fold", &[cols], || {
        move |_, grad: &Tensor| {
            vec![Some(
                unfold_columns("unfold", grad, g.kernel, g.dilation, g.padding, g.stride).0,
            )]
        }
    })
}

/// 2-D convolution (`F.conv2d`): input `[N, C, H, W]`, weight `[O, C/groups, kh, kw]`,
/// optional bias `[O]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 1, 3, 3], DType::F32, &Device::Cpu);
/// let w = Tensor::ones(&[1, 1, 2, 2], DType::F32, &Device::Cpu);
/// let y = F::conv2d(&x, &w, None, &F::Conv2dArgs::default());
/// assert_eq!(y.to_vec::<f32>(), vec![4.0; 4]);
/// ```
#[track_caller]
pub fn conv2d(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>, args: &Conv2dArgs) -> Tensor {
    if let Some((x, w, b)) = amp::low_precision_with_bias(input, weight, bias) {
        return conv2d(&x, &w, b.as_ref(), args);
    }
    assert!(
        input.dim() == 4,
        "conv2d: expected 4D input (batch, channels, height, width), but got input of shape {:?}",
        input.shape()
    );
    assert!(
        weight.dim() == 4,
        "conv2d: expected a 4D weight [out, in/groups, kh, kw], got shape {:?}",
        weight.shape()
    );
    let (n, c) = (input.shape()[0], input.shape()[1]);
    let (o, cg, kh, kw) = (
        weight.shape()[0],
        weight.shape()[1],
        weight.shape()[2],
        weight.shape()[3],
    );
    let groups = args.groups.max(1);
    assert!(
        cg * groups == c,
        "conv2d: given groups={groups}, weight of size {:?}, expected input {:?} to have {} channels, but got {c} channels instead (dim 1)",
        weight.shape(),
        input.shape(),
        cg * groups
    );
    assert!(
        o % groups == 0,
        "conv2d: out channels ({o}) must be divisible by groups ({groups}); weight shape {:?}",
        weight.shape()
    );
    let g = geometry(input, [kh, kw], args.stride, args.padding, args.dilation);
    let [oh, ow] = g.output().unwrap_or_else(|| {
        panic!(
            "conv2d: calculated output size is non-positive: input spatial size {:?} with padding {:?}, kernel {:?}, dilation {:?} (input shape {:?}, weight shape {:?})",
            g.input,
            args.padding,
            [kh, kw],
            args.dilation,
            input.shape(),
            weight.shape()
        )
    });
    // One GEMM over the whole batch: [O, K] @ [K, N*L] (per group), then [O, N, ..] -> [N, O, ..].
    let (cols, _) = unfold_columns(
        "conv2d",
        input,
        [kh, kw],
        args.dilation,
        args.padding,
        args.stride,
    );
    let k = cg * kh * kw;
    let out = if groups == 1 {
        weight.reshape(&[o, k]).matmul(&cols)
    } else {
        weight
            .reshape(&[groups, o / groups, k])
            .matmul(&cols.reshape(&[groups, k, n * oh * ow]))
    };
    let out = out.reshape(&[o, n, oh, ow]).permute(&[1, 0, 2, 3]);
    match bias {
        Some(b) => {
            assert!(
                b.shape() == [o],
                "conv2d: expected bias of shape [{o}], got {:?}",
                b.shape()
            );
            out.add(&b.reshape(&[1, o, 1, 1]))
        }
        None => out.contiguous(),
    }
}

/// 1-D convolution (`F.conv1d`): input `[N, C, L]`, weight `[O, C/groups, k]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[2, 3, 10], DType::F32, &Device::Cpu);
/// let w = Tensor::ones(&[4, 3, 3], DType::F32, &Device::Cpu);
/// assert_eq!(F::conv1d(&x, &w, None, &F::Conv1dArgs::default().padding(1)).shape(), &[2, 4, 10]);
/// ```
#[track_caller]
pub fn conv1d(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>, args: &Conv1dArgs) -> Tensor {
    assert!(
        input.dim() == 3,
        "conv1d: expected 3D input (batch, channels, length), but got input of shape {:?}",
        input.shape()
    );
    assert!(
        weight.dim() == 3,
        "conv1d: expected a 3D weight [out, in/groups, k], got shape {:?}",
        weight.shape()
    );
    let args2 = Conv2dArgs {
        stride: [1, args.stride[0]],
        padding: [0, args.padding[0]],
        dilation: [1, args.dilation[0]],
        groups: args.groups,
    };
    conv2d(&input.unsqueeze(2), &weight.unsqueeze(2), bias, &args2).squeeze(2)
}

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
    let (out, indices) = super::fused::pool2d(input, true, g);
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
    super::fused::pool2d(input, false, g).0
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

/// Constant padding (`F.pad(x, pads, value=v)`): `pads` holds `(before, after)` pairs
/// starting from the last dim, as in PyTorch.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 2], DType::F32, &Device::Cpu);
/// assert_eq!(F::pad(&x, &[1, 0], 0.0).to_vec::<f32>(), vec![0.0, 1.0, 1.0]);
/// ```
#[track_caller]
pub fn pad(input: &Tensor, pads: &[usize], value: f64) -> Tensor {
    assert!(
        pads.len().is_multiple_of(2) && pads.len() / 2 <= input.dim(),
        "pad: padding length must be even and at most twice the rank; got {} values for shape {:?}",
        pads.len(),
        input.shape()
    );
    let mut shape = Dims::from_slice(input.shape());
    let mut region = ferrograd_kernels::Layout::contiguous(&shape);
    let rank = input.dim();
    let mut starts = vec![0usize; rank];
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = rank - 1 - i;
        shape[d] += pair[0] + pair[1];
        starts[d] = pair[0];
    }
    let out = Tensor::full(&shape, value, input.dtype(), &input.device());
    region = {
        let mut l = out.layout().clone();
        for (d, (&start, &len)) in starts.iter().zip(input.shape()).enumerate() {
            l = l.slice(d, start, len, 1);
        }
        let _ = region;
        l
    };
    out.write_region(&region, input);
    let input_shape = Dims::from_slice(input.shape());
    record(out, "pad", &[input], || {
        move |_, g: &Tensor| {
            let mut x = g.clone();
            for d in 0..input_shape.len() {
                x = x.narrow(d as isize, starts[d], input_shape[d]);
            }
            vec![Some(x)]
        }
    })
}

/// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)` while
/// `training`; the identity otherwise (`F.dropout`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1000], DType::F32, &Device::Cpu);
/// assert_eq!(F::dropout(&x, 0.5, false).to_vec::<f32>(), x.to_vec::<f32>());
/// let kept = F::dropout(&x, 0.5, true).ne_scalar(0.0).to_dtype(DType::F32).mean_all().item::<f32>();
/// assert!((kept - 0.5).abs() < 0.1);
/// ```
#[track_caller]
pub fn dropout(input: &Tensor, p: f64, training: bool) -> Tensor {
    assert!(
        (0.0..=1.0).contains(&p),
        "dropout: probability has to be between 0 and 1, but got {p}"
    );
    if !training || p == 0.0 {
        return input.clone();
    }
    if p == 1.0 {
        return input.mul_scalar(0.0);
    }
    super::fused::dropout(input, p)
}

/// Layer normalisation over the trailing `normalized_shape` dims (`F.layer_norm`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[1, 2]);
/// let y = F::layer_norm(&x, &[2], None, None, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0]);
/// ```
#[track_caller]
pub fn layer_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    if let Some(x) = amp::full_precision(input) {
        return layer_norm(&x, normalized_shape, weight, bias, eps);
    }
    let k = normalized_shape.len();
    assert!(
        k <= input.dim() && input.shape()[input.dim() - k..] == *normalized_shape,
        "layer_norm: given normalized_shape={normalized_shape:?}, expected input with shape [*, {}], but got input of size {:?}",
        normalized_shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        input.shape()
    );
    assert!(
        input.dtype().is_float(),
        "layer_norm: expected a floating-point input, got {:?} (shape {:?})",
        input.dtype(),
        input.shape()
    );
    for (name, t) in [("weight", weight), ("bias", bias)] {
        if let Some(t) = t {
            assert!(
                t.shape() == normalized_shape,
                "layer_norm: {name} of shape {:?} must have shape {normalized_shape:?}",
                t.shape()
            );
        }
    }
    // Fused: one pass per row forward, one backward; weight and bias follow the input's
    // dtype (as under autocast).
    let len = normalized_shape.iter().product();
    let weight = weight.map(|w| w.to_dtype(input.dtype()));
    let bias = bias.map(|b| b.to_dtype(input.dtype()));
    super::fused::layer_norm(input, weight.as_ref(), bias.as_ref(), len, eps)
}

/// Batch normalisation over dim 1 of `[N, C, ...]` (`F.batch_norm`). In training it
/// normalises with the batch statistics and updates the running ones in place
/// (`running = (1 - momentum) * running + momentum * batch`, unbiased variance); in eval
/// it uses the running statistics.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1]);
/// let (rm, rv) = (Tensor::zeros(&[1], DType::F64, &Device::Cpu), Tensor::ones(&[1], DType::F64, &Device::Cpu));
/// let y = F::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 0.0);
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0]);
/// assert!((rm.item::<f64>() - 0.2).abs() < 1e-12 && (rv.item::<f64>() - 1.1).abs() < 1e-12);
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn batch_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Tensor {
    assert!(
        input.dim() >= 2,
        "batch_norm: expected input of shape [N, C, ...], got {:?}",
        input.shape()
    );
    let c = input.shape()[1];
    let mut stat_shape = vec![1usize; input.dim()];
    stat_shape[1] = c;
    let dims: Vec<isize> = (0..input.dim() as isize).filter(|&d| d != 1).collect();
    let per_channel = input.numel() / c.max(1);
    for (name, t) in [
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ] {
        if let Some(t) = t {
            assert!(
                t.shape() == [c],
                "batch_norm: {name} should have shape [{c}] for input of shape {:?}, got {:?}",
                input.shape(),
                t.shape()
            );
        }
    }
    let (mean, var) = if training {
        assert!(
            per_channel > 1,
            "batch_norm: expected more than 1 value per channel when training, got input size {:?}",
            input.shape()
        );
        let mean = input.mean(&dims, true);
        let centered = input.sub(&mean);
        let var = centered.mul(&centered).mean(&dims, true);
        no_grad(|| {
            let unbiased = var.mul_scalar(per_channel as f64 / (per_channel - 1) as f64);
            if let Some(rm) = running_mean {
                rm.mul_scalar_(1.0 - momentum)
                    .add_scaled_(&mean.reshape(&[c]), momentum);
            }
            if let Some(rv) = running_var {
                rv.mul_scalar_(1.0 - momentum)
                    .add_scaled_(&unbiased.reshape(&[c]), momentum);
            }
        });
        (mean, var)
    } else {
        let rm = running_mean.expect("batch_norm: running_mean is required in eval mode");
        let rv = running_var.expect("batch_norm: running_var is required in eval mode");
        (rm.reshape(&stat_shape), rv.reshape(&stat_shape))
    };
    let mut y = input.sub(&mean).mul(&var.add_scalar(eps).rsqrt());
    if let Some(w) = weight {
        y = y.mul(&w.reshape(&stat_shape));
    }
    if let Some(b) = bias {
        y = y.add(&b.reshape(&stat_shape));
    }
    y
}

/// Looks up rows of `weight` `[num_embeddings, dim]` for int64 `indices` of any shape
/// (`F.embedding`); the result has shape `[*indices.shape, dim]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let w = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[3, 2]);
/// let idx = Tensor::from_vec(vec![2i64, 0], &[1, 2]);
/// assert_eq!(F::embedding(&idx, &w).to_vec::<f32>(), vec![4.0, 5.0, 0.0, 1.0]);
/// ```
#[track_caller]
pub fn embedding(indices: &Tensor, weight: &Tensor) -> Tensor {
    assert!(
        weight.dim() == 2,
        "embedding: weight must be 2D [num_embeddings, embedding_dim], got {:?}",
        weight.shape()
    );
    let mut shape = Dims::from_slice(indices.shape());
    shape.push(weight.shape()[1]);
    weight
        .index_select(0, &indices.reshape(&[indices.numel()]))
        .reshape(&shape)
}

/// How a loss reduces over the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// One loss per element.
    None,
    /// The (weighted) mean.
    #[default]
    Mean,
    /// The sum.
    Sum,
}

/// Options of [`cross_entropy_with`] and [`nll_loss_with`], with PyTorch's defaults.
///
/// ```
/// use ferrograd_runtime::nn::functional::{CrossEntropyArgs, Reduction};
/// let args = CrossEntropyArgs::default();
/// assert_eq!((args.ignore_index, args.reduction, args.label_smoothing), (-100, Reduction::Mean, 0.0));
/// ```
#[derive(Clone, Debug)]
pub struct CrossEntropyArgs {
    /// Per-class weights `[C]`.
    pub weight: Option<Tensor>,
    /// Targets equal to this are skipped.
    pub ignore_index: i64,
    /// How to reduce.
    pub reduction: Reduction,
    /// Mixes the target with the uniform distribution (cross-entropy only).
    pub label_smoothing: f64,
}

impl Default for CrossEntropyArgs {
    fn default() -> Self {
        CrossEntropyArgs {
            weight: None,
            ignore_index: -100,
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
        }
    }
}

/// Moves the class dim (1) of `[N, C, d...]` last and flattens: `[M, C]`.
fn classes_last(input: &Tensor) -> Tensor {
    if input.dim() == 2 {
        return input.clone();
    }
    let c = input.shape()[1];
    input
        .movedim_to_last(1)
        .reshape(&[input.numel() / c.max(1), c])
}

impl Tensor {
    fn movedim_to_last(&self, d: usize) -> Tensor {
        let mut perm: Vec<isize> = (0..self.dim() as isize)
            .filter(|&i| i != d as isize)
            .collect();
        perm.push(d as isize);
        self.permute(&perm)
    }
}

/// Negative log-likelihood of log-probabilities `[N, C]` (or `[N, C, d...]`) at int64
/// class targets `[N]` (or `[N, d...]`) (`F.nll_loss`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logp = Tensor::from_vec(vec![-0.5f32, -1.0, -2.0, -0.1], &[2, 2]);
/// let target = Tensor::from_vec(vec![0i64, 1], &[2]);
/// assert!((F::nll_loss(&logp, &target).item::<f32>() - 0.3).abs() < 1e-6);
/// ```
#[track_caller]
pub fn nll_loss(input: &Tensor, target: &Tensor) -> Tensor {
    nll_loss_with(input, target, &CrossEntropyArgs::default())
}

/// [`nll_loss`] with class weights, `ignore_index` and reduction.
#[track_caller]
pub fn nll_loss_with(input: &Tensor, target: &Tensor, args: &CrossEntropyArgs) -> Tensor {
    if let Some(x) = amp::full_precision(input) {
        return nll_loss_with(&x, target, args);
    }
    let (picked, weights, target_shape) = pick_targets("nll_loss", input, target, args);
    let losses = picked.neg().mul(&weights);
    reduce_loss(losses, &weights, args.reduction, &target_shape)
}

/// Checks int64 class targets against `input` `[N, C, d...]`: returns the target shape
/// `[N, d...]` and the bound every target must meet (in `0..C` or the ignore index),
/// checked here for host targets; kernels check targets on a device as they read them.
#[track_caller]
fn check_targets(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    ignore_index: i64,
) -> (Dims, IndexBounds) {
    assert!(
        input.dim() >= 2,
        "{op}: expected input of shape [N, C] or [N, C, d...], got {:?}",
        input.shape()
    );
    assert!(
        target.dtype() == DType::I64,
        "{op}: expected int64 class targets, got {:?} (shape {:?})",
        target.dtype(),
        target.shape()
    );
    check_same_device(op, &[input, target]);
    let mut expected = Dims::from_slice(input.shape());
    expected.remove(1);
    assert!(
        target.shape() == expected.as_slice(),
        "{op}: expected target of shape {:?} for input of shape {:?}, got target shape {:?}",
        expected.as_slice(),
        input.shape(),
        target.shape()
    );
    let bounds = IndexBounds::Classes {
        op,
        input: Dims::from_slice(input.shape()),
    };
    if !target.device().is_cuda() {
        crate::ops::host_index_values(&bounds, target, Some(ignore_index));
    }
    (expected, bounds)
}

/// The class weights `[C]` in the input's dtype, contiguous and detached (constants).
#[track_caller]
fn class_weights(op: &str, input: &Tensor, args: &CrossEntropyArgs) -> Option<Tensor> {
    let c = input.shape()[1];
    args.weight.as_ref().map(|w| {
        assert!(
            w.shape() == [c],
            "{op}: weight should have shape [{c}], got {:?}",
            w.shape()
        );
        w.detach().to_dtype(input.dtype()).contiguous()
    })
}

/// Gathers `input[i, target[i]]` over `[M, C]`, with the per-row weight (0 where ignored).
#[track_caller]
fn pick_targets(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    args: &CrossEntropyArgs,
) -> (Tensor, Tensor, Dims) {
    let (expected, bounds) = check_targets(op, input, target, args.ignore_index);
    let flat = classes_last(input);
    let t = target.reshape(&[target.numel()]);
    let valid = t.ne_scalar(args.ignore_index as f64);
    let safe = Tensor::where_cond(&valid, &t, &Tensor::zeros(&[], DType::I64, &t.device()));
    let picked = flat
        .gather_checked(1, &safe.unsqueeze(1), bounds)
        .squeeze(1);
    let mut weights = valid.to_dtype(input.dtype());
    if let Some(w) = class_weights(op, input, args) {
        weights = weights.mul(&w.index_select(0, &safe));
    }
    (picked, weights, expected)
}

fn reduce_loss(losses: Tensor, weights: &Tensor, reduction: Reduction, shape: &[usize]) -> Tensor {
    match reduction {
        Reduction::None => losses.reshape(shape),
        Reduction::Sum => losses.sum_all(),
        Reduction::Mean => losses.sum_all().div(&weights.sum_all()),
    }
}

/// Cross-entropy of logits `[N, C]` (or `[N, C, d...]`) against int64 class targets,
/// fused with log-softmax for stability (`F.cross_entropy`). Float targets of the input's
/// shape are treated as class probabilities.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2]);
/// let target = Tensor::from_vec(vec![1i64], &[1]);
/// assert!((F::cross_entropy(&logits, &target).item::<f64>() - 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn cross_entropy(input: &Tensor, target: &Tensor) -> Tensor {
    cross_entropy_with(input, target, &CrossEntropyArgs::default())
}

/// [`cross_entropy`] with class weights, `ignore_index`, reduction and label smoothing.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let logits = Tensor::from_vec(vec![2.0f64, 0.0], &[1, 2]);
/// let target = Tensor::from_vec(vec![0i64], &[1]);
/// let args = F::CrossEntropyArgs { label_smoothing: 0.2, ..Default::default() };
/// let l = F::cross_entropy_with(&logits, &target, &args).item::<f64>();
/// let logp = logits.log_softmax(1).to_vec::<f64>();
/// assert!((l - (-(0.9 * logp[0] + 0.1 * logp[1]))).abs() < 1e-12);
/// ```
#[track_caller]
pub fn cross_entropy_with(input: &Tensor, target: &Tensor, args: &CrossEntropyArgs) -> Tensor {
    if let Some([x, t]) = amp::full_precision_all([input, target]) {
        return cross_entropy_with(&x, &t, args);
    }
    if target.dtype().is_float() {
        assert!(
            target.shape() == input.shape(),
            "cross_entropy: probability targets must have the input's shape {:?}, got {:?}",
            input.shape(),
            target.shape()
        );
        let logp = input.log_softmax(1);
        let c = input.shape()[1] as f64;
        let t = target
            .mul_scalar(1.0 - args.label_smoothing)
            .add_scalar(args.label_smoothing / c);
        let mut per_class = logp.mul(&t);
        if let Some(w) = &args.weight {
            let mut shape = vec![1usize; input.dim()];
            shape[1] = input.shape()[1];
            per_class = per_class.mul(&w.reshape(&shape));
        }
        let losses = per_class.sum(&[1], false).neg();
        return match args.reduction {
            Reduction::None => losses,
            Reduction::Sum => losses.sum_all(),
            Reduction::Mean => losses.sum_all().div_scalar(input.shape()[0] as f64),
        };
    }
    // Class-index targets: one fused kernel per pass over the logits.
    let (target_shape, bounds) = check_targets("cross_entropy", input, target, args.ignore_index);
    let flat = classes_last(input);
    let opts = super::fused::CrossEntropyOpts {
        weight: class_weights("cross_entropy", input, args),
        ignore_index: args.ignore_index,
        smoothing: args.label_smoothing,
    };
    let (losses, weights) =
        super::fused::cross_entropy(&flat, &target.reshape(&[target.numel()]), &opts, &bounds);
    reduce_loss(losses, &weights, args.reduction, &target_shape)
}

/// Mean squared error (`F.mse_loss`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
/// let b = Tensor::from_vec(vec![1.0f32, 4.0], &[2]);
/// assert_eq!(F::mse_loss(&a, &b, F::Reduction::Mean).item::<f32>(), 2.0);
/// ```
#[track_caller]
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
    if let Some([x, t]) = amp::full_precision_all([input, target]) {
        return mse_loss(&x, &t, reduction);
    }
    assert!(
        input.shape() == target.shape(),
        "mse_loss: input shape {:?} and target shape {:?} must match",
        input.shape(),
        target.shape()
    );
    let d = input.sub(target);
    let sq = d.mul(&d);
    match reduction {
        Reduction::None => sq,
        Reduction::Sum => sq.sum_all(),
        Reduction::Mean => sq.mean_all(),
    }
}

/// Binary cross-entropy on logits, computed stably (`F.binary_cross_entropy_with_logits`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![0.0f64], &[1]);
/// let t = Tensor::from_vec(vec![1.0f64], &[1]);
/// assert!((F::binary_cross_entropy_with_logits(&x, &t, F::Reduction::Mean).item::<f64>() - 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn binary_cross_entropy_with_logits(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
) -> Tensor {
    if let Some([x, t]) = amp::full_precision_all([input, target]) {
        return binary_cross_entropy_with_logits(&x, &t, reduction);
    }
    assert!(
        input.shape() == target.shape(),
        "binary_cross_entropy_with_logits: input shape {:?} and target shape {:?} must match",
        input.shape(),
        target.shape()
    );
    // max(x, 0) - x * t + log(1 + exp(-|x|))
    let losses = input
        .relu()
        .sub(&input.mul(target))
        .add(&input.abs().neg().exp().add_scalar(1.0).log());
    match reduction {
        Reduction::None => losses,
        Reduction::Sum => losses.sum_all(),
        Reduction::Mean => losses.mean_all(),
    }
}

/// `x @ weight.T + bias` (`F.linear`), weight `[out, in]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[4, 3], DType::F32, &Device::Cpu);
/// let w = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
/// assert_eq!(F::linear(&x, &w, None).shape(), &[4, 2]);
/// ```
#[track_caller]
pub fn linear(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    if let Some((x, w, b)) = amp::low_precision_with_bias(input, weight, bias) {
        return linear(&x, &w, b.as_ref());
    }
    let y = input.matmul(&weight.t());
    match bias {
        Some(b) => y.add(b),
        None => y,
    }
}
