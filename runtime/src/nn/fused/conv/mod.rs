//! `conv2d` on the CPU for f32/f64: direct depthwise loops (`groups == in_channels`: one
//! kernel forward, one per gradient, no im2col columns), and for every other convolution a
//! forward that gathers im2col columns one L2-sized tile at a time and GEMMs each tile
//! straight into the NCHW output; its backward walks the batch the same way, both
//! gradients per tile (narrow f32 layers, and wide unit-stride ones, take direct kernels
//! instead: see `ferrograd_kernels::fused::conv`). Under
//! `create_graph` the gradients are tensor ops (a transposed convolution and a per-group
//! GEMM with the columns), differentiable again. CPU kernels:
//! `ferrograd_kernels::fused::conv`. CUDA tensors and half-precision inputs take
//! `F::conv2d`'s batch-wide im2col + GEMM path instead (see [`applies`]).

use super::{range, with_optional};
use crate::autograd::{SavedTensor, is_grad_enabled, record};
use crate::nn::functional::{self as F, Conv2dArgs, ConvTranspose2dArgs, unfold_columns};
use crate::{DType, Device, Tensor};
use ferrograd_kernels::cpu::{Conv2dGeometry, CpuStorage};
use ferrograd_kernels::fused::conv::{
    backward_weight_applies, conv2d as gemm_forward, conv2d_backward as tiled_grads,
    conv2d_direct_backward_weight, depthwise_conv2d as dw_forward, depthwise_conv2d_backward_input,
    depthwise_conv2d_backward_weight,
};
use ferrograd_kernels::{Element, WideFloat, with_wide_float_dtype};

/// Whether [`conv2d`] serves a convolution of `input` with `weight` and `bias`: CPU
/// tensors of f32 or f64, all of one dtype (mixed dtypes take the composed path, which
/// promotes as PyTorch does).
pub(crate) fn applies(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> bool {
    let same = |t: &Tensor| t.device() == Device::Cpu && t.dtype() == input.dtype();
    matches!(input.dtype(), DType::F32 | DType::F64)
        && same(input)
        && same(weight)
        && bias.is_none_or(same)
}

/// The host elements of contiguous `t` (in `s`, its storage) as `T`.
fn host<'s, T: Element>(s: &'s CpuStorage, t: &Tensor) -> &'s [T] {
    &s.typed::<T>()[range(t)]
}

/// `f(a, b)` on the host storage of two CPU tensors.
fn with_two<R>(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    f: impl FnOnce(&CpuStorage, &CpuStorage) -> R,
) -> R {
    a.with_cpu(op, |sa, _| b.with_cpu(op, |sb, _| f(sa, sb)))
}

/// Direct loops for one input channel per group, else tiled im2col + GEMM.
fn forward<T: WideFloat>(
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    g: &Conv2dGeometry,
    o: usize,
    groups: usize,
) -> CpuStorage {
    if is_depthwise(g, groups) {
        T::into_storage(dw_forward(x, w, b, g, o))
    } else {
        T::into_storage(gemm_forward(x, w, b, g, o, groups))
    }
}

/// One input channel per group, and more than one group (a single-channel input with
/// one group, as LeNet's first layer, is a small dense GEMM, which the tiled path runs
/// faster than per-tap row loops).
fn is_depthwise(g: &Conv2dGeometry, groups: usize) -> bool {
    groups == g.c && groups > 1
}

/// `conv2d` of `input` `[N, C, H, W]` with `weight` `[O, C/groups, kh, kw]` and optional
/// `bias` `[O]`, shapes checked by `F::conv2d`; output `[N, O, oh, ow]`. One autograd node;
/// its backward runs the depthwise, direct or tiled gradient kernels (under
/// `create_graph`, differentiable tensor ops).
pub(crate) fn conv2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    g: Conv2dGeometry,
    args: &Conv2dArgs,
) -> Tensor {
    let op = "conv2d";
    let o = weight.shape()[0];
    let groups = args.groups.max(1);
    let [oh, ow] = g.output().expect("conv2d checked the geometry");
    let x = input.detach().contiguous();
    let w = weight.detach().contiguous();
    let b = bias.map(|b| b.detach().contiguous());
    let out = with_two(op, &x, &w, |xs, ws| {
        with_optional(op, b.as_ref(), |bs| {
            with_wide_float_dtype!(x.dtype(), T => forward::<T>(
                host(xs, &x),
                host(ws, &w),
                bs.map(|s| host(s, b.as_ref().expect("present"))),
                &g,
                o,
                groups,
            ), else unreachable!("conv2d kernels take f32 or f64 (see `applies`)"))
        })
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
            let want = [ctx.needs(0), ctx.needs(1)];
            let (dx, dw) = if is_grad_enabled() {
                // create_graph: the gradients must be differentiable.
                conv2d_backward_graph(gout, &x, &w, &g, &args, want)
            } else if is_depthwise(&g, groups) {
                depthwise_backward(gout, &x, &w, &g, want[0], want[1])
            } else if want[1] && direct_weight(&x, &g, o, groups) {
                // Narrow f32 layers: the weight's gradient without im2col columns.
                let (dx, _) = tiled_backward(gout, &x, &w, &g, groups, [want[0], false]);
                (dx, Some(direct_weight_grad(gout, &x, &g, o)))
            } else {
                tiled_backward(gout, &x, &w, &g, groups, want)
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

/// `conv_transpose2d` of `input` `[N, C_in, H, W]` with `weight` `[C_in, O/groups, kh,
/// kw]` and optional `bias` `[O]`, shapes checked by `F::conv_transpose2d`: the input
/// gradient of the convolution with geometry `g` (`g.c = O`, `g.input` the output size,
/// `g.output() == [H, W]`), run by the same kernels as [`conv2d`]'s backward (tiles of
/// columns scattered by tap, or the depthwise loops; no batch-wide column buffer). Its
/// backward is a `conv2d` of the output gradient (the input's) and that convolution's
/// weight gradient with the roles of input and output gradient swapped; under
/// `create_graph`, differentiable tensor ops.
pub(crate) fn conv_transpose2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    g: Conv2dGeometry,
    groups: usize,
) -> Tensor {
    let op = "conv_transpose2d";
    let cin = weight.shape()[0];
    let (o, [oh, ow]) = (g.c, g.input);
    let x = input.detach().contiguous();
    let w = weight.detach().contiguous();
    let b = bias.map(|b| b.detach().contiguous());
    let out = with_two(op, &x, &w, |xs, ws| {
        with_optional(op, b.as_ref(), |bs| {
            with_wide_float_dtype!(x.dtype(), T => {
                let (xs, ws) = (host::<T>(xs, &x), host::<T>(ws, &w));
                let mut out = if is_depthwise(&g, groups) {
                    depthwise_conv2d_backward_input::<T>(xs, ws, &g, cin)
                } else {
                    tiled_grads::<T>(xs, &[], ws, &g, cin, groups, [true, false])
                        .0
                        .expect("the input gradient was asked for")
                };
                if let Some(bs) = bs {
                    let bias = host::<T>(bs, b.as_ref().expect("present"));
                    for (i, plane) in out.chunks_mut(oh * ow).enumerate() {
                        let v = bias[i % o];
                        plane.iter_mut().for_each(|e| *e += v);
                    }
                }
                T::into_storage(out)
            }, else unreachable!("conv kernels take f32 or f64 (see `applies`)"))
        })
    });
    let out = Tensor::from_cpu(out, &[g.n, o, oh, ow]);
    let mut inputs = vec![input, weight];
    inputs.extend(bias);
    let has_bias = bias.is_some();
    let args = Conv2dArgs {
        stride: g.stride,
        padding: g.padding,
        dilation: g.dilation,
        groups,
    };
    record(out, op, &inputs, || {
        let (sx, sw) = (SavedTensor::new(input), SavedTensor::new(weight));
        move |ctx, gout: &Tensor| {
            let (x, w) = (sx.get(op), sw.get(op));
            let want = [ctx.needs(0), ctx.needs(1)];
            // Copied once for both gradients where it is a view (a `sum`'s gradient is an
            // expanded scalar).
            let gout = &gout.contiguous();
            // The convolution this is the input gradient of: its input is `gout`, its
            // output gradient `x`.
            let dx = want[0].then(|| F::conv2d(gout, &w, None, &args));
            let dw = if !want[1] {
                None
            } else if is_grad_enabled() {
                conv2d_backward_graph(&x, gout, &w, &g, &args, [false, true]).1
            } else if is_depthwise(&g, groups) {
                depthwise_backward(&x, gout, &w, &g, false, true).1
            } else if direct_weight(gout, &g, cin, groups) {
                Some(direct_weight_grad(&x, gout, &g, cin))
            } else {
                tiled_backward(&x, gout, &w, &g, groups, [false, true]).1
            };
            let mut grads = vec![dx, dw];
            if has_bias {
                grads.push(ctx.needs(2).then(|| gout.sum(&[0, 2, 3], false)));
            }
            grads
        }
    })
}

/// Whether the direct weight-gradient kernel serves this convolution (see
/// `ferrograd_kernels::fused::conv::backward_weight_applies`).
fn direct_weight(x: &Tensor, g: &Conv2dGeometry, o: usize, groups: usize) -> bool {
    match x.dtype() {
        DType::F32 => backward_weight_applies::<f32>(g, o, groups),
        _ => false,
    }
}

/// The weight's gradient `[O, C, kh, kw]` from the direct kernel.
fn direct_weight_grad(gout: &Tensor, x: &Tensor, g: &Conv2dGeometry, o: usize) -> Tensor {
    let op = "conv2d backward";
    let (gout, x) = (gout.contiguous(), x.detach().contiguous());
    let s = with_two(op, &gout, &x, |gs, xs| {
        <f32 as Element>::into_storage(conv2d_direct_backward_weight::<f32>(
            host(gs, &gout),
            host(xs, &x),
            g,
            o,
        ))
    });
    Tensor::from_cpu(s, &[o, g.c, g.kernel[0], g.kernel[1]])
}

/// The input's and the weight's gradient (each when wanted) from the tiled kernel: one
/// pass over the batch, a tile of im2col columns at a time (see
/// `ferrograd_kernels::fused::conv::conv2d_backward`).
fn tiled_backward(
    gout: &Tensor,
    x: &Tensor,
    w: &Tensor,
    g: &Conv2dGeometry,
    groups: usize,
    want: [bool; 2],
) -> (Option<Tensor>, Option<Tensor>) {
    let op = "conv2d backward";
    let (gout, x, w) = (
        gout.contiguous(),
        x.detach().contiguous(),
        w.detach().contiguous(),
    );
    let o = w.shape()[0];
    let (dx, dw) = with_two(op, &gout, &x, |gs, xs| {
        w.with_cpu(op, |ws, _| {
            with_wide_float_dtype!(x.dtype(), T => {
                let (dx, dw) = tiled_grads::<T>(
                    host(gs, &gout),
                    host(xs, &x),
                    host(ws, &w),
                    g,
                    o,
                    groups,
                    want,
                );
                (dx.map(T::into_storage), dw.map(T::into_storage))
            }, else unreachable!("conv2d kernels take f32 or f64"))
        })
    });
    (
        dx.map(|s| Tensor::from_cpu(s, x.shape())),
        dw.map(|s| Tensor::from_cpu(s, w.shape())),
    )
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
    let dx = want_x.then(|| {
        let s = with_two(op, &gout, &w, |gs, ws| {
            with_wide_float_dtype!(x.dtype(), T => T::into_storage(
                depthwise_conv2d_backward_input::<T>(host(gs, &gout), host(ws, &w), g, o)
            ), else unreachable!("conv2d kernels take f32 or f64"))
        });
        Tensor::from_cpu(s, x.shape())
    });
    let dw = want_w.then(|| {
        let s = with_two(op, &gout, &x, |gs, xs| {
            with_wide_float_dtype!(x.dtype(), T => T::into_storage(
                depthwise_conv2d_backward_weight::<T>(host(gs, &gout), host(xs, &x), g, o)
            ), else unreachable!("conv2d kernels take f32 or f64"))
        });
        Tensor::from_cpu(s, w.shape())
    });
    (dx, dw)
}

/// The input's and the weight's gradient of any `conv2d` as differentiable tensor ops
/// (each when wanted): a transposed convolution of the output gradient, and per group
/// `gout @ columnsᵀ` over the input's im2col columns.
fn conv2d_backward_graph(
    gout: &Tensor,
    x: &Tensor,
    w: &Tensor,
    g: &Conv2dGeometry,
    args: &Conv2dArgs,
    [want_x, want_w]: [bool; 2],
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
    let dx = want_x.then(|| F::conv_transpose2d(gout, w, None, &t_args));
    if !want_w {
        return (dx, None);
    }
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
    (dx, Some(dw))
}
