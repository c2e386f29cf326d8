//! Direct depthwise convolution on the CPU (`groups == in_channels`): one kernel forward,
//! one per gradient, no im2col columns. CPU kernels:
//! `ferrograd_kernels::fused::conv`. CUDA tensors and half-precision inputs take
//! `F::conv2d`'s im2col + GEMM path instead (see [`depthwise_applies`]).

use super::{range, with_optional};
use crate::autograd::{SavedTensor, is_grad_enabled, record};
use crate::nn::functional::{Conv2dArgs, ConvTranspose2dArgs, conv_transpose2d, unfold_columns};
use crate::{DType, Device, Tensor};
use ferrograd_kernels::Element;
use ferrograd_kernels::cpu::{Conv2dGeometry, CpuStorage};
use ferrograd_kernels::fused::conv::{
    Float, depthwise_conv2d as dw_forward, depthwise_conv2d_backward_input,
    depthwise_conv2d_backward_weight,
};

/// Whether [`depthwise_conv2d`] serves a convolution of `input` with `weight`
/// (`[out, in/groups, kh, kw]`) in `groups` groups: one input channel per group, a CPU
/// tensor of f32 or f64.
pub(crate) fn depthwise_applies(input: &Tensor, weight: &Tensor, groups: usize) -> bool {
    weight.shape()[1] == 1
        && groups == input.shape()[1]
        && input.device() == Device::Cpu
        && weight.device() == Device::Cpu
        && matches!(input.dtype(), DType::F32 | DType::F64)
        && weight.dtype() == input.dtype()
}

/// Runs `f` with the host slices of contiguous `x`, `w` and the optional `b`, typed as
/// their (shared, f32 or f64) dtype, and wraps the returned storage.
fn typed<R>(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    f: impl FnOnce(Typed<'_>) -> R,
) -> R {
    x.with_cpu(op, |xs, _| {
        w.with_cpu(op, |ws, _| {
            with_optional(op, b, |bs| {
                f(Typed {
                    x: (xs, x),
                    w: (ws, w),
                    b: bs.map(|s| (s, b.expect("present"))),
                })
            })
        })
    })
}

/// Host operands of [`typed`].
struct Typed<'a> {
    x: (&'a CpuStorage, &'a Tensor),
    w: (&'a CpuStorage, &'a Tensor),
    b: Option<(&'a CpuStorage, &'a Tensor)>,
}

impl Typed<'_> {
    fn slice<'s, T: Element>((s, t): (&'s CpuStorage, &Tensor)) -> &'s [T] {
        &s.typed::<T>()[range(t)]
    }

    /// `f` on f32 or f64 slices (the dtype of `x`).
    fn run<F32, F64>(&self, f32: F32, f64: F64) -> CpuStorage
    where
        F32: FnOnce(&[f32], &[f32], Option<&[f32]>) -> CpuStorage,
        F64: FnOnce(&[f64], &[f64], Option<&[f64]>) -> CpuStorage,
    {
        match self.x.0.dtype() {
            DType::F32 => f32(
                Self::slice(self.x),
                Self::slice(self.w),
                self.b.map(Self::slice),
            ),
            DType::F64 => f64(
                Self::slice(self.x),
                Self::slice(self.w),
                self.b.map(Self::slice),
            ),
            other => unreachable!("depthwise conv2d takes f32 or f64, got {other:?}"),
        }
    }
}

fn forward<T: Float>(
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    g: &Conv2dGeometry,
    o: usize,
) -> CpuStorage {
    T::into_storage(dw_forward(x, w, b, g, o))
}

/// Depthwise `conv2d` of `input` `[N, C, H, W]` with `weight` `[O, 1, kh, kw]` (`O` a
/// multiple of `C`) and optional `bias` `[O]`, shapes checked by `F::conv2d`; output
/// `[N, O, oh, ow]`. One autograd node; its backward runs the direct gradient kernels, or
/// under `create_graph` the same gradients as differentiable ops.
pub(crate) fn depthwise_conv2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    g: Conv2dGeometry,
    args: &Conv2dArgs,
) -> Tensor {
    let op = "conv2d";
    let o = weight.shape()[0];
    let [oh, ow] = g.output().expect("conv2d checked the geometry");
    let x = input.detach().contiguous();
    let w = weight.detach().contiguous();
    let b = bias.map(|b| b.detach().contiguous());
    let out = typed(op, &x, &w, b.as_ref(), |t| {
        t.run(
            |x, w, b| forward(x, w, b, &g, o),
            |x, w, b| forward(x, w, b, &g, o),
        )
    });
    let out = Tensor::from_cpu(out, &[g.n, o, oh, ow]);
    let mut inputs = vec![input, weight];
    inputs.extend(bias);
    let has_bias = bias.is_some();
    let args = *args;
    record(out, "conv2d", &inputs, || {
        let (sx, sw) = (SavedTensor::new(input), SavedTensor::new(weight));
        move |ctx, gout: &Tensor| {
            let (x, w) = (sx.get("conv2d"), sw.get("conv2d"));
            let (dx, dw) = if is_grad_enabled() {
                conv2d_backward_graph(gout, &x, &w, &g, &args)
            } else {
                depthwise_backward(gout, &x, &w, &g, ctx.needs(0), ctx.needs(1))
            };
            let mut grads = vec![
                ctx.needs(0).then_some(dx).flatten(),
                ctx.needs(1).then_some(dw).flatten(),
            ];
            if has_bias {
                grads.push(ctx.needs(2).then(|| gout.sum(&[0, 2, 3], false)));
            }
            grads
        }
    })
}

/// The direct gradient kernels: the input's and the weight's gradient, each when wanted.
fn depthwise_backward(
    gout: &Tensor,
    x: &Tensor,
    w: &Tensor,
    g: &Conv2dGeometry,
    want_x: bool,
    want_w: bool,
) -> (Option<Tensor>, Option<Tensor>) {
    let op = "conv2d backward";
    let (gout, x, w) = (
        gout.contiguous(),
        x.detach().contiguous(),
        w.detach().contiguous(),
    );
    let o = w.shape()[0];
    // `typed` hands out (x, w, b) slices; here they are (gout, w, x).
    let dx = want_x.then(|| {
        let s = typed(op, &gout, &w, None, |t| {
            t.run(
                |gs, ws, _| f32::into_storage(depthwise_conv2d_backward_input(gs, ws, g, o)),
                |gs, ws, _| f64::into_storage(depthwise_conv2d_backward_input(gs, ws, g, o)),
            )
        });
        Tensor::from_cpu(s, x.shape())
    });
    let dw = want_w.then(|| {
        let s = typed(op, &gout, &x, None, |t| {
            t.run(
                |gs, xs, _| f32::into_storage(depthwise_conv2d_backward_weight(gs, xs, g, o)),
                |gs, xs, _| f64::into_storage(depthwise_conv2d_backward_weight(gs, xs, g, o)),
            )
        });
        Tensor::from_cpu(s, w.shape())
    });
    (dx, dw)
}

/// The input's and the weight's gradient of any `conv2d` as differentiable tensor ops
/// (for `create_graph`): a transposed convolution of the output gradient, and per group
/// `gout @ columnsᵀ` over the input's im2col columns.
pub(crate) fn conv2d_backward_graph(
    gout: &Tensor,
    x: &Tensor,
    w: &Tensor,
    g: &Conv2dGeometry,
    args: &Conv2dArgs,
) -> (Option<Tensor>, Option<Tensor>) {
    let [oh, ow] = g.output().expect("conv2d checked the geometry");
    let ws = w.shape();
    let (o, cg) = (ws[0], ws[1]);
    let groups = args.groups.max(1);
    // The transposed convolution's output size rounds down the input's; the remainder is
    // its output padding.
    let output_padding: [usize; 2] = std::array::from_fn(|d| {
        let span = ([oh, ow][d] - 1) * g.stride[d] + g.dilation[d] * (g.kernel[d] - 1) + 1;
        g.input[d] + 2 * g.padding[d] - span
    });
    let t_args = ConvTranspose2dArgs {
        stride: g.stride,
        padding: g.padding,
        output_padding,
        dilation: g.dilation,
        groups,
    };
    let dx = conv_transpose2d(gout, w, None, &t_args);
    let (cols, _) = unfold_columns(
        "conv2d backward",
        x,
        g.kernel,
        g.dilation,
        g.padding,
        g.stride,
    );
    let k = cg * g.kernel[0] * g.kernel[1];
    let nl = g.n * oh * ow;
    let go = gout
        .permute(&[1, 0, 2, 3])
        .reshape(&[groups, o / groups, nl]);
    let dw = go
        .matmul(&cols.reshape(&[groups, k, nl]).transpose(1, 2))
        .reshape(ws);
    (Some(dx), Some(dw))
}
