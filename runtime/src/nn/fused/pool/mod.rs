//! Fused 2-D max and average pooling: one kernel forward, one backward, one autograd
//! node. CPU kernel and `.cu`: `ferrograd_kernels::fused::pool`.

mod cuda;

use super::range;
use crate::Tensor;
use crate::autograd::{is_grad_enabled, record};
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::fused::pool::{
    PoolGeometry, avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward,
};
use ferrograd_kernels::{Element, with_float_dtype};

/// Max (`max`: also the i64 in-plane indices) or average pooling of `input` `[N, C, H, W]`
/// over the checked window geometry `g`: one kernel and one autograd node.
#[track_caller]
pub(crate) fn pool2d(input: &Tensor, max: bool, g: PoolGeometry) -> (Tensor, Option<Tensor>) {
    let op = if max { "max_pool2d" } else { "avg_pool2d" };
    let x = input.detach().contiguous();
    let [oh, ow] = g.output;
    let shape = [g.window.n, g.window.c, oh, ow];
    let (out, indices) = cuda::pool2d(&x, max, &g).unwrap_or_else(|| {
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
fn pool2d_backward(grad: &Tensor, indices: Option<&Tensor>, g: &PoolGeometry) -> Tensor {
    let w = &g.window;
    let input_shape = [w.n, w.c, w.input[0], w.input[1]];
    if is_grad_enabled() {
        if let Some(idx) = indices {
            let [oh, ow] = g.output;
            let (planes, out_len) = (w.n * w.c, oh * ow);
            return Tensor::zeros(
                &[planes, w.input[0] * w.input[1]],
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
fn pool2d_backward_kernel(grad: &Tensor, indices: Option<&Tensor>, g: &PoolGeometry) -> Tensor {
    let grad = grad.contiguous();
    let indices = indices.map(Tensor::contiguous);
    let w = &g.window;
    let input_shape = [w.n, w.c, w.input[0], w.input[1]];
    if let Some(dx) = cuda::pool2d_backward(&grad, indices.as_ref(), g) {
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
