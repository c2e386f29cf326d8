//! Fused layer norm: one kernel forward (output and per-row statistics), one backward.
//! CPU kernel and `.cu`: `ferrograd_kernels::fused::layer_norm`.

mod cuda;

use super::{range, with_optional};
use crate::Tensor;
use crate::autograd::{SavedTensor, is_grad_enabled, record};
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::fused::layer_norm::{
    add_layer_norm_rows, layer_norm_backward_rows, layer_norm_rows,
};
use ferrograd_kernels::{Element, NumElement, with_float_dtype};

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
    if let Some(r) = cuda::layer_norm(x, w, b, rows, len, eps) {
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

/// Layer norm of `input + shift + residual` over the trailing `len` elements, in one pass
/// on the host, untracked (inference: `F::add_layer_norm` checked the operands: one float
/// dtype, host, same shapes, `[len]` vectors, nothing to differentiate).
pub(crate) fn add_layer_norm(
    input: &Tensor,
    residual: &Tensor,
    shift: Option<&Tensor>,
    len: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    let rows = input.numel() / len.max(1);
    let (x, r) = (input.contiguous(), residual.contiguous());
    let (shift, weight, bias) = (
        shift.map(Tensor::contiguous),
        weight.map(Tensor::contiguous),
        bias.map(Tensor::contiguous),
    );
    fn part<'a, T: Element>(s: &'a CpuStorage, t: &Tensor) -> &'a [T] {
        &s.typed::<T>()[range(t)]
    }
    let op = "add_layer_norm";
    let y = x.with_cpu(op, |xs, _| {
        r.with_cpu(op, |rs, _| {
            with_optional(op, shift.as_ref(), |ss| {
                with_optional(op, weight.as_ref(), |ws| {
                    with_optional(op, bias.as_ref(), |bs| {
                        with_float_dtype!(x.dtype(), T => {
                            T::into_storage(add_layer_norm_rows(
                                part::<T>(xs, &x),
                                part::<T>(rs, &r),
                                ss.zip(shift.as_ref()).map(|(s, t)| part::<T>(s, t)),
                                rows,
                                len,
                                ws.zip(weight.as_ref()).map(|(s, t)| part::<T>(s, t)),
                                bs.zip(bias.as_ref()).map(|(s, t)| part::<T>(s, t)),
                                eps,
                            ))
                        }, else unreachable!("add_layer_norm takes floats"))
                    })
                })
            })
        })
    });
    Tensor::from_cpu(y, input.shape())
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
        cuda::layer_norm_backward(&g, &x, mean, rstd, w.as_ref(), rows, len, params)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

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
