//! Fused scaled-dot-product attention: one op forward (tiled on the CPU, flash-style on
//! CUDA: no `[T, T]` matrix is kept) and one backward that recomputes the probabilities
//! from the saved row log-sum-exp. The same formula as tensor ops (`composite`) serves
//! `create_graph`, a mask that requires grad, CUDA's backward and the shapes the CUDA
//! kernel does not take. CPU kernel and `.cu`: `ferrograd_kernels::fused::attention`.

mod cuda;

use super::range;
use crate::autograd::{SavedTensor, is_grad_enabled, record};
use crate::{DType, Device, Tensor};
use ferrograd_kernels::fused::attention::{
    AttentionShape, AttnDropout, Mask, Operand, attention_backward, attention_forward_strided,
    batch_offsets, dropout_factors,
};
use ferrograd_kernels::{Element, Layout, broadcast_shapes};

/// The mask of an attention call, broadcast to `[batch..., tq, tk]` (no copy).
#[derive(Clone)]
pub(crate) enum AttnMask {
    None,
    Causal,
    /// Boolean (true takes part) or additive float mask of the computation's dtype.
    Tensor(Tensor),
}

/// Everything the backward needs besides the operands.
#[derive(Clone)]
struct Plan {
    shape: AttentionShape,
    mask: AttnMask,
    scale: f64,
    dropout: Option<AttnDropout>,
}

/// `F::scaled_dot_product_attention` after the checks and the half-precision widening:
/// `q [batch..., tq, d]`, `k [batch..., tk, d]`, `v [batch..., tk, dv]` of one float
/// dtype, batch dims broadcast together; `mask` broadcastable to `[batch..., tq, tk]`.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: AttnMask,
    dropout_p: f64,
    scale: f64,
) -> Tensor {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let n = qs.len();
    let batch = broadcast_shapes(
        &broadcast_shapes(&qs[..n - 2], &ks[..ks.len() - 2]).expect("checked"),
        &vs[..vs.len() - 2],
    )
    .expect("checked");
    let bh: usize = batch.iter().product();
    let (tq, d, tk, dv) = (qs[n - 2], qs[n - 1], ks[ks.len() - 2], vs[vs.len() - 1]);
    // The operands broadcast to `[batch..., rows, cols]`: views, in whatever layout they
    // come (the heads of a `[batch, len, heads, d]` projection are read in place on the
    // CPU); flattened to `[bh, rows, cols]` (a copy unless contiguous) only where a path
    // needs it.
    let with = |t: &Tensor, rows: usize, cols: usize| {
        let mut full = batch.clone();
        full.extend([rows, cols]);
        t.broadcast_to(&full)
    };
    let (qf, kf, vf) = (with(q, tq, d), with(k, tk, d), with(v, tk, dv));
    let flat = |t: &Tensor| flatten_batch(t, bh);
    let mask = match mask {
        AttnMask::Tensor(m) => {
            let mut full = batch.clone();
            full.extend([tq, tk]);
            AttnMask::Tensor(m.broadcast_to(&full))
        }
        other => other,
    };
    let dropout = (dropout_p > 0.0).then(|| AttnDropout {
        p: dropout_p,
        seed: crate::random::with_global(|g| g.next_u64()),
    });
    let plan = Plan {
        shape: AttentionShape { bh, tq, tk, d, dv },
        mask,
        scale,
        dropout,
    };
    let mask_grad = matches!(&plan.mask, AttnMask::Tensor(m) if m.requires_grad_flag());
    let mut out_shape = batch;
    out_shape.extend([tq, dv]);
    if mask_grad {
        return composite(&flat(&qf), &flat(&kf), &flat(&vf), &plan).reshape(&out_shape);
    }
    let forwarded = if q.device() == Device::Cpu {
        Some(forward_cpu(&qf.detach(), &kf.detach(), &vf.detach(), &plan))
    } else {
        let contiguous = |t: &Tensor| flat(&t.detach()).contiguous();
        cuda::attention_forward(
            &contiguous(&qf),
            &contiguous(&kf),
            &contiguous(&vf),
            &plan.mask,
            plan.shape,
            plan.scale,
            plan.dropout,
        )
    };
    let Some((out, lse)) = forwarded else {
        return composite(&flat(&qf), &flat(&kf), &flat(&vf), &plan).reshape(&out_shape);
    };
    let saved_out = out.clone();
    let y = record(
        out,
        "scaled_dot_product_attention",
        &[&qf, &kf, &vf],
        || {
            let (sq, sk, sv) = (
                SavedTensor::new(&qf),
                SavedTensor::new(&kf),
                SavedTensor::new(&vf),
            );
            let plan = plan.clone();
            move |_ctx, g: &Tensor| {
                let op = "scaled_dot_product_attention";
                let (qf, kf, vf) = (sq.get(op), sk.get(op), sv.get(op));
                let bh = plan.shape.bh;
                let (q, k, v) = (
                    flatten_batch(&qf, bh),
                    flatten_batch(&kf, bh),
                    flatten_batch(&vf, bh),
                );
                let (dq, dk, dv) = if is_grad_enabled() || q.device() != Device::Cpu {
                    backward_graph(&q, &k, &v, &saved_out, &lse, g, &plan)
                } else {
                    backward_fused(&q, &k, &v, &saved_out, &lse, g, &plan)
                };
                vec![
                    Some(dq.reshape(qf.shape())),
                    Some(dk.reshape(kf.shape())),
                    Some(dv.reshape(vf.shape())),
                ]
            }
        },
    );
    y.reshape(&out_shape)
}

/// `[batch..., rows, cols]` as `[bh, rows, cols]` (a copy unless the batch dims merge).
fn flatten_batch(t: &Tensor, bh: usize) -> Tensor {
    let s = t.shape();
    t.reshape(&[bh, s[s.len() - 2], s[s.len() - 1]])
}

/// The fused forward on the host over `[batch..., rows, cols]` operands in any layout:
/// output `[bh, tq, dv]` and row log-sum-exp `[bh, tq]`.
fn forward_cpu(q: &Tensor, k: &Tensor, v: &Tensor, plan: &Plan) -> (Tensor, Tensor) {
    let s = plan.shape;
    let op = "scaled_dot_product_attention";
    let view = |t: &Tensor| {
        let st = t.layout().strides();
        (
            batch_offsets(t.layout()),
            st[st.len() - 2],
            st[st.len() - 1],
        )
    };
    let ((qo, qr, qc), (ko, kr, kc), (vo, vr, vc)) = (view(q), view(k), view(v));
    let (out, lse) = q.with_cpu(op, |qs, _| {
        k.with_cpu(op, |kss, _| {
            v.with_cpu(op, |vss, _| {
                with_mask(&plan.mask, q.dtype(), |mask| {
                    macro_rules! run {
                        ($t:ty, $mask:expr) => {{
                            let (o, l) = attention_forward_strided::<$t>(
                                Operand::new(qs.typed::<$t>(), &qo, qr, qc),
                                Operand::new(kss.typed::<$t>(), &ko, kr, kc),
                                Operand::new(vss.typed::<$t>(), &vo, vr, vc),
                                s,
                                $mask,
                                <$t as Element>::from_f64(plan.scale),
                                plan.dropout,
                            );
                            (<$t>::into_storage(o), <$t>::into_storage(l))
                        }};
                    }
                    match (q.dtype(), mask) {
                        (DType::F32, MaskRef::F32(m)) => run!(f32, &m),
                        (DType::F64, MaskRef::F64(m)) => run!(f64, &m),
                        _ => unreachable!("attention computes in f32 or f64"),
                    }
                })
            })
        })
    });
    (
        Tensor::from_cpu(out, &[s.bh, s.tq, s.dv]),
        Tensor::from_cpu(lse, &[s.bh, s.tq]),
    )
}

/// A kernel mask of the computation's dtype.
enum MaskRef<'a> {
    F32(Mask<'a, f32>),
    F64(Mask<'a, f64>),
}

/// Runs `f` with the kernel's view of `mask` (batch offsets computed from its broadcast
/// layout; the host elements borrowed, never expanded).
fn with_mask<R>(mask: &AttnMask, dtype: DType, f: impl FnOnce(MaskRef<'_>) -> R) -> R {
    let plain = |m: Mask<'static, f64>| match (dtype, m) {
        (DType::F32, Mask::None) => MaskRef::F32(Mask::None),
        (DType::F32, Mask::Causal) => MaskRef::F32(Mask::Causal),
        (_, m) => MaskRef::F64(m),
    };
    match mask {
        AttnMask::None => f(plain(Mask::None)),
        AttnMask::Causal => f(plain(Mask::Causal)),
        AttnMask::Tensor(m) => {
            let layout: &Layout = m.layout();
            let offsets = batch_offsets(layout);
            let st = layout.strides();
            let strides = [st[st.len() - 2], st[st.len() - 1]];
            m.with_cpu("scaled_dot_product_attention", |ms, _| match m.dtype() {
                DType::Bool => {
                    let view = ferrograd_kernels::fused::attention::MaskView {
                        data: ms.typed::<bool>(),
                        batch_offsets: &offsets,
                        strides,
                    };
                    match dtype {
                        DType::F32 => f(MaskRef::F32(Mask::Bool(view))),
                        _ => f(MaskRef::F64(Mask::Bool(view))),
                    }
                }
                DType::F32 => f(MaskRef::F32(Mask::Float(
                    ferrograd_kernels::fused::attention::MaskView {
                        data: ms.typed::<f32>(),
                        batch_offsets: &offsets,
                        strides,
                    },
                ))),
                DType::F64 => f(MaskRef::F64(Mask::Float(
                    ferrograd_kernels::fused::attention::MaskView {
                        data: ms.typed::<f64>(),
                        batch_offsets: &offsets,
                        strides,
                    },
                ))),
                other => {
                    unreachable!("attention masks are bool or the query's dtype, not {other:?}")
                }
            })
        }
    }
}

/// The fused backward on the host.
#[allow(clippy::too_many_arguments)]
fn backward_fused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    g: &Tensor,
    plan: &Plan,
) -> (Tensor, Tensor, Tensor) {
    let s = plan.shape;
    let (q, k, v, g) = (
        q.detach().contiguous(),
        k.detach().contiguous(),
        v.detach().contiguous(),
        g.detach().contiguous(),
    );
    let op = "scaled_dot_product_attention backward";
    let (dq, dk, dv) = q.with_cpu(op, |qs, _| {
        k.with_cpu(op, |kss, _| {
            v.with_cpu(op, |vss, _| {
                out.with_cpu(op, |os, _| {
                    lse.with_cpu(op, |ls, _| {
                        g.with_cpu(op, |gs, _| {
                            with_mask(&plan.mask, q.dtype(), |mask| {
                                macro_rules! run {
                                    ($t:ty, $mask:expr) => {{
                                        let (a, b, c) = attention_backward::<$t>(
                                            &qs.typed::<$t>()[range(&q)],
                                            &kss.typed::<$t>()[range(&k)],
                                            &vss.typed::<$t>()[range(&v)],
                                            &os.typed::<$t>()[range(out)],
                                            &ls.typed::<$t>()[range(lse)],
                                            &gs.typed::<$t>()[range(&g)],
                                            s,
                                            $mask,
                                            <$t as Element>::from_f64(plan.scale),
                                            plan.dropout,
                                        );
                                        (
                                            <$t>::into_storage(a),
                                            <$t>::into_storage(b),
                                            <$t>::into_storage(c),
                                        )
                                    }};
                                }
                                match (q.dtype(), mask) {
                                    (DType::F32, MaskRef::F32(m)) => run!(f32, &m),
                                    (DType::F64, MaskRef::F64(m)) => run!(f64, &m),
                                    _ => unreachable!("attention computes in f32 or f64"),
                                }
                            })
                        })
                    })
                })
            })
        })
    });
    (
        Tensor::from_cpu(dq, &[s.bh, s.tq, s.d]),
        Tensor::from_cpu(dk, &[s.bh, s.tk, s.d]),
        Tensor::from_cpu(dv, &[s.bh, s.tk, s.dv]),
    )
}

/// The scaled, masked scores `[bh, tq, tk]` (`-inf` where excluded) and the dropout
/// factors, as tensor ops.
fn scores(q: &Tensor, k: &Tensor, plan: &Plan) -> Tensor {
    let s = q.bmm(&k.transpose(1, 2)).mul_scalar(plan.scale);
    let (tq, tk) = (plan.shape.tq, plan.shape.tk);
    match &plan.mask {
        AttnMask::None => s,
        AttnMask::Causal => {
            let keep = Tensor::ones(&[tq, tk], DType::Bool, &q.device()).tril(0);
            s.masked_fill(&keep.logical_not(), f64::NEG_INFINITY)
        }
        AttnMask::Tensor(m) => {
            let m = m.reshape(&[plan.shape.bh, tq, tk]);
            if m.dtype() == DType::Bool {
                s.masked_fill(&m.logical_not(), f64::NEG_INFINITY)
            } else {
                s.add(&m)
            }
        }
    }
}

/// The dropout factors (0 or `1 / (1 - p)`) as a tensor `[bh, tq, tk]`.
fn dropout_tensor(plan: &Plan, dtype: DType, device: &Device) -> Option<Tensor> {
    let drop = plan.dropout?;
    let s = plan.shape;
    let f = Tensor::from_vec(
        dropout_factors::<f64>(drop, s.bh, s.tq, s.tk),
        &[s.bh, s.tq, s.tk],
    );
    Some(
        f.to_dtype(dtype)
            .to_device(device)
            .expect("the operands' device holds the dropout factors"),
    )
}

/// The probabilities with rows of no visible key set to zero (PyTorch's behaviour).
fn safe_softmax(s: &Tensor) -> Tensor {
    let any = s
        .isfinite()
        .to_dtype(s.dtype())
        .max_dim(-1, true)
        .0
        .gt_scalar(0.0);
    s.masked_fill(&any.logical_not().broadcast_to(s.shape()), 0.0)
        .softmax(-1)
        .where_scalar(&any.broadcast_to(s.shape()), 0.0)
}

/// Attention as tensor ops (differentiable to any order; gradients reach a float mask).
fn composite(q: &Tensor, k: &Tensor, v: &Tensor, plan: &Plan) -> Tensor {
    let p = safe_softmax(&scores(q, k, plan));
    let p = match dropout_tensor(plan, q.dtype(), &q.device()) {
        Some(f) => p.mul(&f),
        None => p,
    };
    p.bmm(v)
}

/// The backward as tensor ops (a graph of its own under `create_graph`).
#[allow(clippy::too_many_arguments)]
fn backward_graph(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    g: &Tensor,
    plan: &Plan,
) -> (Tensor, Tensor, Tensor) {
    let s = scores(q, k, plan);
    let lse = lse.to_dtype(q.dtype()).unsqueeze(-1);
    let valid = lse.isfinite();
    let p = s
        .sub(&lse.masked_fill(&valid.logical_not(), 0.0))
        .exp()
        .where_scalar(&valid.broadcast_to(s.shape()), 0.0);
    let factors = dropout_tensor(plan, q.dtype(), &q.device());
    let pd = match &factors {
        Some(f) => p.mul(f),
        None => p.clone(),
    };
    let dv = pd.transpose(1, 2).bmm(g);
    let mut dp = g.bmm(&v.transpose(1, 2));
    if let Some(f) = &factors {
        dp = dp.mul(f);
    }
    let di = g.mul(&out.detach()).sum(&[-1], true);
    let ds = p.mul(&dp.sub(&di)).mul_scalar(plan.scale);
    (ds.bmm(k), ds.transpose(1, 2).bmm(q), dv)
}
