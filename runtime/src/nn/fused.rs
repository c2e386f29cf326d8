//! Fused layer norm, cross-entropy, dropout and pooling: one kernel per pass (CUDA, or the
//! CPU kernels), each a single autograd node. Backward runs the fused gradient kernel;
//! when a graph of the backward itself is wanted (`create_graph`), it runs the same
//! formula as tensor ops so that higher derivatives exist.

use crate::autograd::{SavedTensor, is_grad_enabled, record};
use crate::ops::gpu;
use crate::{DType, Tensor};
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::cpu::{
    Conv2dGeometry, CrossEntropyRows, avg_pool2d, avg_pool2d_backward, cross_entropy_backward_rows,
    cross_entropy_rows, dropout as dropout_kernel, layer_norm_backward_rows, layer_norm_rows,
    max_pool2d, max_pool2d_backward,
};
use ferrograd_kernels::{Element, NumElement, with_float_dtype};
use std::ops::Range;

fn range(t: &Tensor) -> Range<usize> {
    t.layout()
        .contiguous_range()
        .expect("fused kernels take contiguous operands")
}

/// Runs `f` on the host elements of the optional tensor (`None` when absent).
fn with_optional<R>(op: &str, t: Option<&Tensor>, f: impl FnOnce(Option<&CpuStorage>) -> R) -> R {
    match t {
        Some(t) => t.with_cpu(op, |s, _| f(Some(s))),
        None => f(None),
    }
}

/// Dropout with probability `0 < p < 1` (checked by the caller): one kernel draws the mask
/// from a Philox stream seeded by the global generator (the same mask on every device for
/// a seed) and applies it; backward multiplies by the saved scaled mask. Integer inputs
/// are refused, as in PyTorch.
pub(crate) fn dropout(input: &Tensor, p: f64) -> Tensor {
    assert!(
        input.dtype().is_float(),
        "dropout: expected a floating-point input, got {:?} (shape {:?})",
        input.dtype(),
        input.shape()
    );
    let seed = crate::random::with_global(|g| g.next_u64());
    let scale = 1.0 / (1.0 - p);
    let x = input.detach().contiguous();
    let (y, mask) = gpu::dropout(&x, seed, p, scale).unwrap_or_else(|| {
        let (y, mask) = x.with_cpu("dropout", |xs, _| {
            with_float_dtype!(xs.dtype(), T => {
                let (y, mask) = dropout_kernel(&xs.typed::<T>()[range(&x)], seed, p, scale);
                (T::into_storage(y), T::into_storage(mask))
            }, else unreachable!("checked above"))
        });
        let device = x.device();
        (
            Tensor::from_cpu_on(y, x.shape(), device),
            Tensor::from_cpu_on(mask, x.shape(), device),
        )
    });
    record(y, "dropout", &[input], move || {
        move |_, g: &Tensor| vec![Some(g.mul(&mask))]
    })
}

/// Layer norm over the last `len` elements of contiguous rows: the output, and each row's
/// mean and reciprocal std (the accumulator dtype: f32 for half inputs).
fn layer_norm_forward(
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    rows: usize,
    len: usize,
    eps: f64,
) -> (Tensor, Tensor, Tensor) {
    if let Some(r) = gpu::layer_norm(x, w, b, rows, len, eps) {
        return r;
    }
    let op = "layer_norm";
    let (y, mean, rstd) = x.with_cpu(op, |xs, _| {
        with_optional(op, w, |ws| {
            with_optional(op, b, |bs| {
                with_float_dtype!(xs.dtype(), T => {
                    let out = layer_norm_rows(
                        &xs.typed::<T>()[range(x)],
                        rows,
                        len,
                        ws.map(|s| &s.typed::<T>()[range(w.expect("present"))]),
                        bs.map(|s| &s.typed::<T>()[range(b.expect("present"))]),
                        eps,
                    );
                    (T::into_storage(out.y), <T as NumElement>::Acc::into_storage(out.mean), <T as NumElement>::Acc::into_storage(out.rstd))
                }, else unreachable!("layer_norm takes floats"))
            })
        })
    });
    let device = x.device();
    (
        Tensor::from_cpu_on(y, x.shape(), device),
        Tensor::from_cpu_on(mean, &[rows], device),
        Tensor::from_cpu_on(rstd, &[rows], device),
    )
}

/// Fused layer norm of `input` over its trailing `len` elements (shapes checked by the
/// caller; weight and bias already of the input's dtype, shaped like the normalised dims).
pub(crate) fn layer_norm(
    input: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    len: usize,
    eps: f64,
) -> Tensor {
    let rows = input.numel() / len.max(1);
    let x = input.detach().contiguous();
    let w = weight.map(|w| w.detach().contiguous());
    let b = bias.map(|b| b.detach().contiguous());
    let (y, mean, rstd) = layer_norm_forward(&x, w.as_ref(), b.as_ref(), rows, len, eps);
    let mut inputs = vec![input];
    inputs.extend(weight);
    inputs.extend(bias);
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    record(y, "layer_norm", &inputs, || {
        let sx = SavedTensor::new(input);
        let sw = weight.map(SavedTensor::new);
        move |ctx, g: &Tensor| {
            let x = sx.get("layer_norm");
            let w = sw.as_ref().map(|s| s.get("layer_norm"));
            let (want_w, want_b) = (
                has_w && ctx.needs(1),
                has_b && ctx.needs(1 + has_w as usize),
            );
            let (dx, dw, db) = if is_grad_enabled() {
                layer_norm_backward_graph(g, &x, w.as_ref(), rows, len, eps)
            } else {
                layer_norm_backward_fused(
                    g,
                    &x,
                    w.as_ref(),
                    &mean,
                    &rstd,
                    rows,
                    len,
                    want_w || want_b,
                )
            };
            let mut grads = vec![Some(dx)];
            if has_w {
                grads.push(want_w.then_some(dw).flatten());
            }
            if has_b {
                grads.push(want_b.then_some(db).flatten());
            }
            grads
        }
    })
}

type LayerNormGrads = (Tensor, Option<Tensor>, Option<Tensor>);

/// The fused gradient kernels: dx, and dw/db when `params`.
#[allow(clippy::too_many_arguments)]
fn layer_norm_backward_fused(
    g: &Tensor,
    x: &Tensor,
    w: Option<&Tensor>,
    mean: &Tensor,
    rstd: &Tensor,
    rows: usize,
    len: usize,
    params: bool,
) -> LayerNormGrads {
    let (g, x, w) = (
        g.contiguous(),
        x.detach().contiguous(),
        w.map(|w| w.detach().contiguous()),
    );
    let shaped = |t: Tensor| t.reshape(w.as_ref().map_or(&[len][..], |w| w.shape()));
    if let Some((dx, p)) =
        gpu::layer_norm_backward(&g, &x, mean, rstd, w.as_ref(), rows, len, params)
    {
        let (dw, db) = p.map_or((None, None), |(dw, db)| {
            (Some(shaped(dw)), Some(shaped(db)))
        });
        return (dx.reshape(x.shape()), dw, db);
    }
    let op = "layer_norm backward";
    let (dx, dw, db) = g.with_cpu(op, |gs, _| {
        x.with_cpu(op, |xs, _| {
            mean.with_cpu(op, |ms, _| {
                rstd.with_cpu(op, |rs, _| {
                    with_optional(op, w.as_ref(), |ws| {
                        with_float_dtype!(xs.dtype(), T => {
                            let (dx, dw, db) = layer_norm_backward_rows(
                                &gs.typed::<T>()[range(&g)],
                                &xs.typed::<T>()[range(&x)],
                                &ms.typed::<<T as NumElement>::Acc>()[range(mean)],
                                &rs.typed::<<T as NumElement>::Acc>()[range(rstd)],
                                ws.map(|s| &s.typed::<T>()[range(w.as_ref().expect("present"))]),
                                rows,
                                len,
                                params,
                                params,
                            );
                            (T::into_storage(dx), dw.map(T::into_storage), db.map(T::into_storage))
                        }, else unreachable!("layer_norm takes floats"))
                    })
                })
            })
        })
    });
    let device = x.device();
    let param = |s: CpuStorage| shaped(Tensor::from_cpu_on(s, &[len], device));
    (
        Tensor::from_cpu_on(dx, x.shape(), device),
        dw.map(param),
        db.map(param),
    )
}

/// The same gradients as tensor ops (differentiable again, for `create_graph`).
fn layer_norm_backward_graph(
    g: &Tensor,
    x: &Tensor,
    w: Option<&Tensor>,
    rows: usize,
    len: usize,
    eps: f64,
) -> LayerNormGrads {
    let x2 = x.reshape(&[rows, len]);
    let g2 = g.reshape(&[rows, len]);
    let mean = x2.mean(&[1], true);
    let centered = x2.sub(&mean);
    let rstd = centered
        .mul(&centered)
        .mean(&[1], true)
        .add_scalar(eps)
        .rsqrt();
    let xhat = centered.mul(&rstd);
    let gw = match w {
        Some(w) => g2.mul(&w.reshape(&[1, len])),
        None => g2.clone(),
    };
    let dx = rstd.mul(
        &gw.sub(&gw.mean(&[1], true))
            .sub(&xhat.mul(&gw.mul(&xhat).mean(&[1], true))),
    );
    let shape = w.map_or(vec![len], |w| w.shape().to_vec());
    let dw = g2.mul(&xhat).sum(&[0], false).reshape(&shape);
    let db = g2.sum(&[0], false).reshape(&shape);
    (dx.reshape(x.shape()), Some(dw), Some(db))
}

/// Options of [`cross_entropy`], shared by forward and backward.
#[derive(Clone)]
pub(crate) struct CrossEntropyOpts {
    /// Class weights of the logits' dtype, contiguous `[C]`.
    pub(crate) weight: Option<Tensor>,
    pub(crate) ignore_index: i64,
    pub(crate) smoothing: f64,
}

impl CrossEntropyOpts {
    /// The CPU kernel's options for logits `x`, with the weights' host elements `ws`.
    fn rows<'a, T: Element>(
        &self,
        x: &Tensor,
        ws: Option<&'a CpuStorage>,
    ) -> CrossEntropyRows<'a, T> {
        CrossEntropyRows {
            classes: x.shape()[1],
            weight: ws.map(|s| &s.typed::<T>()[range(self.weight.as_ref().expect("present"))]),
            ignore_index: self.ignore_index,
            smoothing: self.smoothing,
        }
    }
}

/// Per-row cross-entropy of logits `[M, C]` at int64 targets `[M]` (host targets checked
/// by the caller, device ones by the kernel against `bounds`): the losses (one autograd
/// node) and each row's target weight (a constant).
pub(crate) fn cross_entropy(
    logits: &Tensor,
    target: &Tensor,
    opts: &CrossEntropyOpts,
    bounds: &IndexBounds,
) -> (Tensor, Tensor) {
    let x = logits.detach().contiguous();
    let t = target.contiguous();
    let (loss, row_weight, lse) = cross_entropy_forward(&x, &t, opts, bounds);
    let loss = record(loss, "cross_entropy", &[logits], || {
        let sx = SavedTensor::new(logits);
        let opts = opts.clone();
        move |_, g: &Tensor| {
            let x = sx.get("cross_entropy");
            vec![Some(if is_grad_enabled() {
                cross_entropy_backward_graph(g, &x, &t, &opts)
            } else {
                cross_entropy_backward_fused(g, &x, &t, &opts, &lse)
            })]
        }
    });
    (loss, row_weight)
}

fn cross_entropy_forward(
    x: &Tensor,
    t: &Tensor,
    o: &CrossEntropyOpts,
    bounds: &IndexBounds,
) -> (Tensor, Tensor, Tensor) {
    let w = o.weight.as_ref();
    if let Some(r) = gpu::cross_entropy(x, t, bounds, w, o.ignore_index, o.smoothing) {
        return r;
    }
    let op = "cross_entropy";
    let rows = x.shape()[0];
    let (loss, row_weight, lse) = x.with_cpu(op, |xs, _| {
        t.with_cpu(op, |ts, _| {
            with_optional(op, w, |ws| {
                with_float_dtype!(xs.dtype(), T => {
                    let opts = o.rows::<T>(x, ws);
                    let out = cross_entropy_rows(&xs.typed::<T>()[range(x)], &ts.typed::<i64>()[range(t)], &opts);
                    (T::into_storage(out.loss), T::into_storage(out.row_weight), <T as NumElement>::Acc::into_storage(out.lse))
                }, else unreachable!("cross_entropy takes float logits"))
            })
        })
    });
    let device = x.device();
    (
        Tensor::from_cpu_on(loss, &[rows], device),
        Tensor::from_cpu_on(row_weight, &[rows], device),
        Tensor::from_cpu_on(lse, &[rows], device),
    )
}

fn cross_entropy_backward_fused(
    g: &Tensor,
    x: &Tensor,
    t: &Tensor,
    o: &CrossEntropyOpts,
    lse: &Tensor,
) -> Tensor {
    let (g, x) = (g.contiguous(), x.detach().contiguous());
    let w = o.weight.as_ref();
    if let Some(dx) = gpu::cross_entropy_backward(&x, t, w, o.ignore_index, o.smoothing, lse, &g) {
        return dx;
    }
    let op = "cross_entropy backward";
    let stride = if g.numel() == 1 { 0 } else { 1 };
    let dx = g.with_cpu(op, |gs, _| {
        x.with_cpu(op, |xs, _| {
            t.with_cpu(op, |ts, _| {
                lse.with_cpu(op, |ls, _| {
                    with_optional(op, w, |ws| {
                        with_float_dtype!(xs.dtype(), T => {
                            let opts = o.rows::<T>(&x, ws);
                            T::into_storage(cross_entropy_backward_rows(
                                &xs.typed::<T>()[range(&x)],
                                &ts.typed::<i64>()[range(t)],
                                &opts,
                                &ls.typed::<<T as NumElement>::Acc>()[range(lse)],
                                &gs.typed::<T>()[range(&g)],
                                stride,
                            ))
                        }, else unreachable!("cross_entropy takes float logits"))
                    })
                })
            })
        })
    });
    Tensor::from_cpu_on(dx, x.shape(), x.device())
}

/// The fused gradient as tensor ops (differentiable again, for `create_graph`).
fn cross_entropy_backward_graph(
    g: &Tensor,
    x: &Tensor,
    t: &Tensor,
    o: &CrossEntropyOpts,
) -> Tensor {
    let (rows, c) = (x.shape()[0], x.shape()[1]);
    let dtype = x.dtype();
    let device = x.device();
    let valid = t.ne_scalar(o.ignore_index as f64);
    let safe = Tensor::where_cond(&valid, t, &Tensor::zeros(&[], DType::I64, &device));
    let classes = Tensor::arange(0.0, c as f64, 1.0, DType::I64, &device).reshape(&[1, c]);
    let one_hot = safe.reshape(&[rows, 1]).eq(&classes).to_dtype(dtype);
    let p = x.softmax(1);
    let (w_t, total_w, w_row) = match &o.weight {
        Some(w) => (
            w.index_select(0, &safe).reshape(&[rows, 1]),
            w.sum_all(),
            w.reshape(&[1, c]),
        ),
        None => (
            Tensor::ones(&[rows, 1], dtype, &device),
            Tensor::full(&[], c as f64, dtype, &device),
            Tensor::ones(&[1, c], dtype, &device),
        ),
    };
    let eps = o.smoothing;
    let mut d = p.sub(&one_hot).mul(&w_t).mul_scalar(1.0 - eps);
    if eps != 0.0 {
        d = d.add(&p.mul(&total_w).sub(&w_row).mul_scalar(eps / c as f64));
    }
    let g_rows = g.reshape(&[rows, 1]);
    d.mul(&g_rows.mul(&valid.to_dtype(dtype).reshape(&[rows, 1])))
}

/// Max (`max`: also the i64 in-plane indices) or average pooling of `input` `[N, C, H, W]`
/// over the checked window geometry `g`: one kernel and one autograd node.
#[track_caller]
pub(crate) fn pool2d(input: &Tensor, max: bool, g: Conv2dGeometry) -> (Tensor, Option<Tensor>) {
    let op = if max { "max_pool2d" } else { "avg_pool2d" };
    let x = input.detach().contiguous();
    let [oh, ow] = g.output().expect("checked by the caller");
    let shape = [g.n, g.c, oh, ow];
    let (out, indices) = gpu::pool2d(&x, max, &g).unwrap_or_else(|| {
        let device = x.device();
        let (out, indices) = x.with_cpu(op, |s, _| {
            with_float_dtype!(s.dtype(), T => {
                let xs = &s.typed::<T>()[range(&x)];
                if max {
                    let (out, idx) = max_pool2d(xs, &g);
                    (T::into_storage(out), Some(CpuStorage::I64(idx)))
                } else {
                    (T::into_storage(avg_pool2d(xs, &g)), None)
                }
            }, else unreachable!("pooling takes float inputs"))
        });
        (
            Tensor::from_cpu_on(out, &shape, device),
            indices.map(|i| Tensor::from_cpu_on(i, &shape, device)),
        )
    });
    let saved = indices.clone();
    let out = record(out, op, &[input], || {
        move |_, grad: &Tensor| vec![Some(pool2d_backward(grad, saved.as_ref(), &g))]
    });
    (out, indices)
}

/// The input gradient of [`pool2d`] for output gradient `grad`: the fused kernel, or,
/// under `create_graph`, differentiable ops (a scatter of `grad` at the indices for max
/// pooling; for average pooling a node whose own gradient is average pooling, its
/// adjoint).
fn pool2d_backward(grad: &Tensor, indices: Option<&Tensor>, g: &Conv2dGeometry) -> Tensor {
    let input_shape = [g.n, g.c, g.input[0], g.input[1]];
    if is_grad_enabled() {
        if let Some(idx) = indices {
            let [oh, ow] = g.output().expect("checked by the forward");
            let (planes, out_len) = (g.n * g.c, oh * ow);
            return Tensor::zeros(
                &[planes, g.input[0] * g.input[1]],
                grad.dtype(),
                &grad.device(),
            )
            .scatter_add(
                1,
                &idx.reshape(&[planes, out_len]),
                &grad.reshape(&[planes, out_len]),
            )
            .reshape(&input_shape);
        }
        let g2 = *g;
        let dx = pool2d_backward_kernel(&grad.detach(), None, g);
        return record(dx, "avg_pool2d backward", &[grad], || {
            move |_, gg: &Tensor| vec![Some(pool2d(gg, false, g2).0)]
        });
    }
    pool2d_backward_kernel(grad, indices, g)
}

/// The fused pooling backward on `grad`'s device.
fn pool2d_backward_kernel(grad: &Tensor, indices: Option<&Tensor>, g: &Conv2dGeometry) -> Tensor {
    let grad = grad.contiguous();
    let indices = indices.map(Tensor::contiguous);
    let input_shape = [g.n, g.c, g.input[0], g.input[1]];
    if let Some(dx) = gpu::pool2d_backward(&grad, indices.as_ref(), g) {
        return dx;
    }
    let op = "pooling backward";
    let dx = grad.with_cpu(op, |gs, _| {
        with_float_dtype!(gs.dtype(), T => {
            let gv = &gs.typed::<T>()[range(&grad)];
            T::into_storage(match &indices {
                Some(idx) => idx.with_cpu(op, |is, _| max_pool2d_backward(gv, &is.typed::<i64>()[range(idx)], g)),
                None => avg_pool2d_backward(gv, g),
            })
        }, else unreachable!("pooling takes float inputs"))
    });
    Tensor::from_cpu_on(dx, &input_shape, grad.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    #[test]
    fn layer_norm_statistics_use_the_accumulator_dtype() {
        let x = Tensor::ones(&[2, 3], DType::BF16, &Device::Cpu);
        let (y, mean, rstd) = layer_norm_forward(&x, None, None, 2, 3, 1e-5);
        assert_eq!(
            (y.dtype(), mean.dtype(), rstd.dtype()),
            (DType::BF16, DType::F32, DType::F32)
        );
        assert_eq!(mean.to_vec::<f32>(), vec![1.0, 1.0]);
    }
}
