//! Fused cross-entropy over class-index targets: one kernel per row forward (loss, target
//! weight, log-sum-exp), one backward. CPU kernel and `.cu`:
//! `ferrograd_kernels::fused::cross_entropy`.

mod cuda;

use super::{range, with_optional};
use crate::autograd::{SavedTensor, is_grad_enabled, record};
use crate::{DType, Tensor};
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::fused::cross_entropy::{
    CrossEntropyRows, cross_entropy_backward_rows, cross_entropy_rows,
};
use ferrograd_kernels::{Element, NumElement, with_float_dtype};

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
    if let Some(r) = cuda::cross_entropy(x, t, bounds, w, o.ignore_index, o.smoothing) {
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
        Tensor::from_cpu_on(lse, &[rows, 2], device),
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
    if let Some(dx) = cuda::cross_entropy_backward(&x, t, w, o.ignore_index, o.smoothing, lse, &g) {
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
