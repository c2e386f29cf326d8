//! Fused LSTM cell: the elementwise half of one time step (gate activations, the cell
//! and hidden updates) and its gradient, each one pass, for the recurrent layers' time
//! loop when nothing records it. CPU kernel: `ferrograd_kernels::fused::lstm_cell`. Other
//! devices and the half types return `None`, and the caller runs the composite ops.

use super::range;
use crate::{DType, Device, Tensor};
use ferrograd_kernels::fused::lstm_cell::{lstm_cell_backward, lstm_cell_forward};
use ferrograd_kernels::{Element, with_wide_float_dtype};

/// One step's results: activated gates `[N, 4H]`, `c'`, `tanh(c')` and `h'` (`[N, H]`).
pub(crate) struct LstmStep {
    pub(crate) gates: Tensor,
    pub(crate) c: Tensor,
    pub(crate) tanh_c: Tensor,
    pub(crate) h: Tensor,
}

/// Whether the fused kernels serve these operands: host f32/f64 tensors of one dtype.
fn applies(ts: &[&Tensor]) -> bool {
    let dtype = ts[0].dtype();
    matches!(dtype, DType::F32 | DType::F64)
        && ts
            .iter()
            .all(|t| t.device() == Device::Cpu && t.dtype() == dtype)
}

/// The forward of one step from `xt` (`[N, 4H]`, the input projection with biases),
/// `hw` (`[N, 4H]`, `h W_hh^T`) and `c_prev` (`[N, H]`); `None` where not applicable.
pub(crate) fn lstm_step(xt: &Tensor, hw: &Tensor, c_prev: &Tensor) -> Option<LstmStep> {
    if !applies(&[xt, hw, c_prev]) {
        return None;
    }
    let (n, hidden) = (c_prev.size(0), c_prev.size(1));
    let (xt, hw, c_prev) = (xt.contiguous(), hw.contiguous(), c_prev.contiguous());
    let op = "lstm cell";
    let out = xt.with_cpu(op, |xs, _| {
        hw.with_cpu(op, |ws, _| {
            c_prev.with_cpu(op, |cs, _| {
                with_wide_float_dtype!(xs.dtype(), T => {
                    let o = lstm_cell_forward(
                        &xs.typed::<T>()[range(&xt)],
                        &ws.typed::<T>()[range(&hw)],
                        &cs.typed::<T>()[range(&c_prev)],
                        hidden,
                    );
                    [T::into_storage(o.gates), T::into_storage(o.c), T::into_storage(o.tanh_c), T::into_storage(o.h)]
                }, else unreachable!("checked: f32 or f64"))
            })
        })
    });
    let [gates, c, tanh_c, h] = out;
    Some(LstmStep {
        gates: Tensor::from_cpu_on(gates, &[n, 4 * hidden], Device::Cpu),
        c: Tensor::from_cpu_on(c, &[n, hidden], Device::Cpu),
        tanh_c: Tensor::from_cpu_on(tanh_c, &[n, hidden], Device::Cpu),
        h: Tensor::from_cpu_on(h, &[n, hidden], Device::Cpu),
    })
}

/// The gradient of one [`lstm_step`]: pre-activation gradient `[N, 4H]` and `dc_prev`
/// from `dh`, `dc` (reaching `h'` and `c'`) and what the forward kept; `None` where not
/// applicable.
pub(crate) fn lstm_step_backward(
    dh: &Tensor,
    dc: &Tensor,
    step: &LstmStep,
    c_prev: &Tensor,
) -> Option<(Tensor, Tensor)> {
    if !applies(&[dh, dc, &step.gates, &step.tanh_c, c_prev]) {
        return None;
    }
    let (n, hidden) = (c_prev.size(0), c_prev.size(1));
    let (dh, dc, gates, tanh_c, c_prev) = (
        dh.contiguous(),
        dc.contiguous(),
        step.gates.contiguous(),
        step.tanh_c.contiguous(),
        c_prev.contiguous(),
    );
    let op = "lstm cell backward";
    let [da, dcp] = dh.with_cpu(op, |hs, _| {
        dc.with_cpu(op, |cs, _| {
            gates.with_cpu(op, |gs, _| {
                tanh_c.with_cpu(op, |ts, _| {
                    c_prev.with_cpu(op, |ps, _| {
                        with_wide_float_dtype!(hs.dtype(), T => {
                            let (da, dcp) = lstm_cell_backward(
                                &hs.typed::<T>()[range(&dh)],
                                &cs.typed::<T>()[range(&dc)],
                                &gs.typed::<T>()[range(&gates)],
                                &ts.typed::<T>()[range(&tanh_c)],
                                &ps.typed::<T>()[range(&c_prev)],
                                hidden,
                            );
                            [T::into_storage(da), T::into_storage(dcp)]
                        }, else unreachable!("checked: f32 or f64"))
                    })
                })
            })
        })
    });
    Some((
        Tensor::from_cpu_on(da, &[n, 4 * hidden], Device::Cpu),
        Tensor::from_cpu_on(dcp, &[n, hidden], Device::Cpu),
    ))
}
