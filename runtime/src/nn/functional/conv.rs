//! Convolutions: `conv1d`, `conv2d` (on the CPU: `nn::fused::conv`; elsewhere im2col +
//! GEMM) and `unfold`.

use crate::autograd::record;
use crate::{DType, Tensor};
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

/// Builder methods setting one value on every spatial dim (`stride(2)` is PyTorch's
/// `stride=2`), and `groups`.
macro_rules! per_dim_setters {
    ($ty:ident: $($field:ident),*) => {
        impl<const D: usize> $ty<D> {
            $(
                #[doc = concat!("The same ", stringify!($field), " on every spatial dim.")]
                ///
                /// ```
                /// use ferrograd_runtime::nn::functional::*;
                #[doc = concat!("let args = ", stringify!($ty), "::<2>::default().", stringify!($field), "(3);")]
                #[doc = concat!("assert_eq!(args.", stringify!($field), ", [3, 3]);")]
                /// ```
                pub fn $field(mut self, value: usize) -> Self {
                    self.$field = [value; D];
                    self
                }
            )*

            /// The number of channel groups.
            ///
            /// ```
            /// use ferrograd_runtime::nn::functional::*;
            #[doc = concat!("assert_eq!(", stringify!($ty), "::<1>::default().groups(4).groups, 4);")]
            /// ```
            pub fn groups(mut self, groups: usize) -> Self {
                self.groups = groups;
                self
            }
        }
    };
}

per_dim_setters!(ConvArgs: stride, padding, dilation);
per_dim_setters!(ConvTransposeArgs: stride, padding, output_padding, dilation);

pub(super) fn geometry(
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
    let _profiled = crate::dispatch::opaque("unfold", &[input]);
    let (cols, [oh, ow]) = unfold_columns("unfold", input, kernel, dilation, padding, stride);
    let (n, k) = (input.shape()[0], cols.shape()[0]);
    cols.reshape(&[k, n, oh * ow]).permute(&[1, 0, 2])
}

/// im2col in kernel-major order: `[C*kh*kw, N*oh*ow]`, and the output size.
#[track_caller]
pub(crate) fn unfold_columns(
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
    let entered = crate::dispatch::enter();
    let out = conv2d_untraced(input, weight, bias, args);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), Some(weight), bias],
        || crate::dispatch::Op::Conv {
            stride: args.stride.to_vec(),
            padding: args.padding.to_vec(),
            dilation: args.dilation.to_vec(),
            groups: args.groups,
            transposed: false,
            output_padding: vec![],
        },
        out,
    )
}

#[track_caller]
fn conv2d_untraced(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    args: &Conv2dArgs,
) -> Tensor {
    if let Some((x, w, b)) = crate::dispatch::cast_with_bias("conv2d", input, weight, bias) {
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
    if let Some(b) = bias {
        assert!(
            b.shape() == [o],
            "conv2d: expected bias of shape [{o}], got {:?}",
            b.shape()
        );
    }
    // CPU f32/f64: direct depthwise loops, or im2col tiles GEMMed into the output.
    if crate::nn::fused::conv2d_applies(input, weight, bias) {
        return crate::nn::fused::conv2d(input, weight, bias, g, args);
    }
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
        Some(b) => out.add(&b.reshape(&[1, o, 1, 1])),
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
    let entered = crate::dispatch::enter();
    let out = conv1d_untraced(input, weight, bias, args);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), Some(weight), bias],
        || crate::dispatch::Op::Conv {
            stride: args.stride.to_vec(),
            padding: args.padding.to_vec(),
            dilation: args.dilation.to_vec(),
            groups: args.groups,
            transposed: false,
            output_padding: vec![],
        },
        out,
    )
}

#[track_caller]
fn conv1d_untraced(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    args: &Conv1dArgs,
) -> Tensor {
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

/// Stride, padding, output padding, dilation and groups of a `D`-dimensional transposed
/// convolution.
///
/// ```
/// use ferrograd_runtime::nn::functional::ConvTranspose2dArgs;
/// let args = ConvTranspose2dArgs::default().stride(2).padding(1).output_padding(1);
/// assert_eq!((args.stride, args.output_padding), ([2, 2], [1, 1]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeArgs<const D: usize> {
    /// Step of the window per spatial dim.
    pub stride: [usize; D],
    /// `dilation * (k - 1) - padding` zeros are added to each side of the input.
    pub padding: [usize; D],
    /// Extra size added to one side of the output (less than the stride).
    pub output_padding: [usize; D],
    /// Spacing of kernel elements per spatial dim.
    pub dilation: [usize; D],
    /// Number of channel groups.
    pub groups: usize,
}

/// Arguments of [`conv_transpose1d`].
pub type ConvTranspose1dArgs = ConvTransposeArgs<1>;
/// Arguments of [`conv_transpose2d`].
pub type ConvTranspose2dArgs = ConvTransposeArgs<2>;

impl<const D: usize> Default for ConvTransposeArgs<D> {
    fn default() -> Self {
        ConvTransposeArgs {
            stride: [1; D],
            padding: [0; D],
            output_padding: [0; D],
            dilation: [1; D],
            groups: 1,
        }
    }
}

/// 2-D transposed convolution (`F.conv_transpose2d`, the gradient of `conv2d` with
/// respect to its input): input `[N, C_in, H, W]`, weight `[C_in, C_out/groups, kh, kw]`,
/// optional bias `[C_out]`; output size `(H - 1)·stride - 2·padding + dilation·(k - 1) +
/// output_padding + 1`. On the CPU in f32/f64 it runs `conv2d`'s input-gradient kernels
/// (tiles of columns scattered by tap; depthwise loops), and its backward is a `conv2d`
/// and `conv2d`'s weight-gradient kernel; elsewhere one GEMM per group scatters each input
/// pixel into the columns that `conv2d` would gather, and a fold sums them. Neither
/// zero-stuffs the input.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 1, 2, 2], DType::F32, &Device::Cpu);
/// let w = Tensor::ones(&[1, 1, 2, 2], DType::F32, &Device::Cpu);
/// let y = F::conv_transpose2d(&x, &w, None, &F::ConvTranspose2dArgs::default());
/// assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0]);
/// ```
#[track_caller]
pub fn conv_transpose2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    args: &ConvTranspose2dArgs,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = conv_transpose2d_untraced(input, weight, bias, args);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), Some(weight), bias],
        || crate::dispatch::Op::Conv {
            stride: args.stride.to_vec(),
            padding: args.padding.to_vec(),
            dilation: args.dilation.to_vec(),
            groups: args.groups,
            transposed: true,
            output_padding: args.output_padding.to_vec(),
        },
        out,
    )
}

#[track_caller]
fn conv_transpose2d_untraced(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    args: &ConvTranspose2dArgs,
) -> Tensor {
    if let Some((x, w, b)) =
        crate::dispatch::cast_with_bias("conv_transpose2d", input, weight, bias)
    {
        return conv_transpose2d(&x, &w, b.as_ref(), args);
    }
    assert!(
        input.dim() == 4,
        "conv_transpose2d: expected 4D input (batch, channels, height, width), but got input of shape {:?}",
        input.shape()
    );
    assert!(
        weight.dim() == 4,
        "conv_transpose2d: expected a 4D weight [in, out/groups, kh, kw], got shape {:?}",
        weight.shape()
    );
    let s = input.shape();
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let ws = weight.shape();
    let (cin, og, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let groups = args.groups.max(1);
    assert!(
        cin == c && c % groups == 0,
        "conv_transpose2d: given groups={groups}, weight of size {ws:?}, expected input {s:?} to have {cin} channels (divisible by groups), but got {c} channels instead (dim 1)"
    );
    assert!(
        args.stride.iter().chain(&args.dilation).all(|&v| v > 0),
        "conv_transpose2d: stride and dilation must be positive, got stride {:?}, dilation {:?}",
        args.stride,
        args.dilation
    );
    let out_size = |d: usize, len: usize, k: usize| -> usize {
        assert!(
            args.output_padding[d] < args.stride[d],
            "conv_transpose2d: output padding must be smaller than stride, but got output_padding={:?} and stride={:?}",
            args.output_padding,
            args.stride
        );
        let full =
            (len - 1) * args.stride[d] + args.dilation[d] * (k - 1) + args.output_padding[d] + 1;
        full.checked_sub(2 * args.padding[d])
            .filter(|&o| o > 0)
            .unwrap_or_else(|| {
                panic!(
                    "conv_transpose2d: calculated output size is non-positive: input spatial size {:?}, padding {:?}, kernel {:?}, stride {:?}, dilation {:?} (input shape {s:?})",
                    [h, w],
                    args.padding,
                    [kh, kw],
                    args.stride,
                    args.dilation
                )
            })
    };
    let (oh, ow) = (out_size(0, h, kh), out_size(1, w, kw));
    let o = og * groups;
    let g = Conv2dGeometry {
        n,
        c: o,
        input: [oh, ow],
        kernel: [kh, kw],
        stride: args.stride,
        padding: args.padding,
        dilation: args.dilation,
    };
    debug_assert_eq!(g.output(), Some([h, w]));
    if let Some(b) = bias {
        assert!(
            b.shape() == [o],
            "conv_transpose2d: expected bias of shape [{o}], got {:?}",
            b.shape()
        );
    }
    if crate::nn::fused::conv2d_applies(input, weight, bias) {
        return crate::nn::fused::conv_transpose2d(input, weight, bias, g, groups);
    }
    let kk = kh * kw;
    // Columns [O*kh*kw, N*H*W] = W_g^T @ x_g per group, in conv2d's kernel-major order.
    let x = input
        .reshape(&[n, groups, c / groups, h * w])
        .permute(&[1, 2, 0, 3])
        .reshape(&[groups, c / groups, n * h * w]);
    let cols = weight
        .reshape(&[groups, c / groups, og * kk])
        .transpose(1, 2)
        .matmul(&x)
        .reshape(&[o * kk, n * h * w]);
    let out = fold_columns(&cols, &g);
    match bias {
        Some(b) => out.add(&b.reshape(&[1, o, 1, 1])),
        None => out,
    }
}

/// 1-D transposed convolution (`F.conv_transpose1d`): input `[N, C_in, L]`, weight
/// `[C_in, C_out/groups, k]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[2, 3, 5], DType::F32, &Device::Cpu);
/// let w = Tensor::ones(&[3, 4, 3], DType::F32, &Device::Cpu);
/// let y = F::conv_transpose1d(&x, &w, None, &F::ConvTranspose1dArgs::default().stride(2));
/// assert_eq!(y.shape(), &[2, 4, 11]);
/// ```
#[track_caller]
pub fn conv_transpose1d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    args: &ConvTranspose1dArgs,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = conv_transpose1d_untraced(input, weight, bias, args);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), Some(weight), bias],
        || crate::dispatch::Op::Conv {
            stride: args.stride.to_vec(),
            padding: args.padding.to_vec(),
            dilation: args.dilation.to_vec(),
            groups: args.groups,
            transposed: true,
            output_padding: args.output_padding.to_vec(),
        },
        out,
    )
}

#[track_caller]
fn conv_transpose1d_untraced(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    args: &ConvTranspose1dArgs,
) -> Tensor {
    assert!(
        input.dim() == 3 && weight.dim() == 3,
        "conv_transpose1d: expected a 3D input [N, C, L] and a 3D weight [in, out/groups, k], got shapes {:?} and {:?}",
        input.shape(),
        weight.shape()
    );
    let args2 = ConvTranspose2dArgs {
        stride: [1, args.stride[0]],
        padding: [0, args.padding[0]],
        output_padding: [0, args.output_padding[0]],
        dilation: [1, args.dilation[0]],
        groups: args.groups,
    };
    conv_transpose2d(&input.unsqueeze(2), &weight.unsqueeze(2), bias, &args2).squeeze(2)
}
