//! Fused LSTM cell: the elementwise half of one time step (gate activations, the cell
//! and hidden updates) and its gradient, each one pass, for the recurrent layers' time
//! loop when nothing records it. CPU kernel: `ferrograd_kernels::fused::lstm_cell`. Other
//! devices and the half types return `None`, and the caller runs the composite ops.

use super::range;
use crate::autograd::{is_grad_enabled, record};
use crate::{DType, Device, Tensor};
use ferrograd_kernels::cpu::HostBuffer;
use ferrograd_kernels::fused::lstm_cell::{
    LstmDims, lstm_cell_backward, lstm_cell_forward, lstm_sequence_backward, lstm_sequence_forward,
};
use ferrograd_kernels::{Element, Layout, with_wide_float_dtype};

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

/// The gradients of an LSTM direction as a graph (`create_graph`), from the gradients
/// reaching `y` `[T, N, H]`, `h_n` and `c_n`, in the node's input order.
pub(crate) type GraphBackward =
    Box<dyn Fn(&Tensor, &Tensor, &Tensor) -> Vec<Option<Tensor>> + Send + Sync>;

/// Runs `f` on the host elements of a contiguous host tensor of dtype `T`.
fn host<T: Element, R>(t: &Tensor, f: impl FnOnce(&[T]) -> R) -> R {
    t.with_cpu("lstm", |s, _| {
        f(&T::slice(s).expect("checked: one float dtype")[range(t)])
    })
}

/// `[T N, in + H]`: each row of `x` (`[T N, in]`, by time) beside the hidden state its
/// step started from: `y` (`[T N, H]`, by time) at the step run before it, `h0` for the
/// first step run (time 0 forwards, `T - 1` in reverse).
fn inputs_beside_states<T: Element>(
    x: &[T],
    y: &[T],
    h0: &[T],
    (t_len, n, in_size, hs): (usize, usize, usize, usize),
    reverse: bool,
) -> HostBuffer<T> {
    let width = in_size + hs;
    let mut out = HostBuffer::<T>::new_uninit(t_len * n * width);
    // Blocks of rows on the team: the copy is as large as the product's operand.
    const ROWS: usize = 64;
    ferrograd_kernels::cpu::for_each_chunk_mut(&mut out, ROWS * width, |b, block| {
        for (j, row) in block.chunks_exact_mut(width).enumerate() {
            let i = b * ROWS + j;
            let (t, r) = (i / n, i % n);
            let prev = if reverse { t + 1 } else { t.wrapping_sub(1) };
            let h = if prev < t_len {
                &y[(prev * n + r) * hs..][..hs]
            } else {
                &h0[r * hs..][..hs]
            };
            let (left, right) = row.split_at_mut(in_size);
            for (d, s) in left.iter_mut().zip(&x[i * in_size..][..in_size]) {
                d.write(*s);
            }
            for (d, s) in right.iter_mut().zip(h) {
                d.write(*s);
            }
        }
    });
    // SAFETY: every row's `in + H` slots were written above, and the rows cover the
    // buffer.
    unsafe { out.assume_init() }
}

/// One direction of an LSTM layer without projection or padding masks, whole: `x`
/// `[T, N, in]`, `h0`, `c0` `[N, H]`, weights `w` as `Recurrent::direction_weights`
/// (weight_ih, weight_hh, bias_ih, bias_hh, weight_hr), `inputs` the node's inputs
/// (`x`, `h0`, `c0` and the present weights). The forward and the back-propagation
/// through time each run in one kernel call
/// ([`lstm_sequence_forward`](ferrograd_kernels::fused::lstm_cell::lstm_sequence_forward)),
/// with the input gradient and both weight gradients as two products (one for both
/// weights) and the biases' as a sum over the pre-activation gradient; `graph` serves a
/// backward that is itself recorded. Returns `(y, h_n, c_n)`, or `None` where the
/// kernels do not apply (devices, dtypes, shapes).
pub(crate) fn lstm_sequence(
    x: &Tensor,
    (h0, c0): (&Tensor, &Tensor),
    w: &[Option<Tensor>],
    reverse: bool,
    inputs: &[Tensor],
    graph: GraphBackward,
) -> Option<(Tensor, Tensor, Tensor)> {
    let (w_ih, w_hh) = (w[0].as_ref()?, w[1].as_ref()?);
    let mut all = vec![x, h0, c0, w_ih, w_hh];
    all.extend(w[2..4].iter().flatten());
    if w[4].is_some() || !applies(&all) || x.dim() != 3 || w_hh.dim() != 2 {
        return None;
    }
    let (t_len, n, hs) = (x.size(0), x.size(1), w_hh.size(1));
    if t_len == 0
        || n == 0
        || hs == 0
        || w_hh.shape() != [4 * hs, hs]
        || w_ih.shape() != [4 * hs, x.size(2)]
        || h0.shape() != [n, hs]
        || c0.shape() != [n, hs]
        || w[2..4].iter().flatten().any(|b| b.shape() != [4 * hs])
    {
        return None;
    }
    let dims = LstmDims {
        steps: t_len,
        batch: n,
        hidden: hs,
        reverse,
    };
    let d = |t: &Tensor| t.detach().contiguous();
    let xf = d(&x.reshape(&[t_len * n, x.size(2)]));
    let (h0d, c0d, w_ihd, w_hhd) = (d(h0), d(c0), d(w_ih), d(w_hh));
    let bias = crate::autograd::no_grad(|| match (&w[2], &w[3]) {
        (Some(a), Some(b)) => Some(a.detach().add(&b.detach()).contiguous()),
        (a, b) => a.as_ref().or(b.as_ref()).map(d),
    });
    let (yn, hn) = (t_len * n * hs, n * hs);
    let in_size = x.size(2);
    let present = (w[2].is_some(), w[3].is_some());
    with_wide_float_dtype!(x.dtype(), T => {
        // Every step's input projection in one product, the biases left to the cell.
        let pre = host::<T, _>(&xf, |xs| host::<T, _>(&w_ihd, |wi| {
            let (rows, cols) = (t_len * n, x.size(2));
            ferrograd_kernels::cpu::matmul(
                xs,
                &Layout::contiguous(&[1, rows, cols]),
                wi,
                &Layout::contiguous(&[1, 4 * hs, cols]).transpose(1, 2),
            )
        }));
        // y, h_n and c_n side by side: the node's one output.
        let mut packed = HostBuffer::<T>::zeroed(yn + 2 * hn);
        let seq = host::<T, _>(&w_hhd, |wh| host::<T, _>(&h0d, |h0s| host::<T, _>(&c0d, |c0s| {
            let run = |b: Option<&[T]>| {
                let (y, tail) = packed.split_at_mut(yn);
                let seq = lstm_sequence_forward(pre, b, wh, h0s, c0s, y, dims);
                let last = dims.time(t_len - 1);
                tail[..hn].copy_from_slice(&y[last * hn..(last + 1) * hn]);
                tail[hn..].copy_from_slice(&seq.c[last * hn..(last + 1) * hn]);
                seq
            };
            match &bias {
                Some(b) => host::<T, _>(b, |bs| run(Some(bs))),
                None => run(None),
            }
        })));
        let out = Tensor::from_cpu_on(T::into_storage(packed), &[yn + 2 * hn], Device::Cpu);
        let y_kept = out.narrow(0, 0, yn).reshape(&[t_len * n, hs]);
        let input_refs: Vec<&Tensor> = inputs.iter().collect();
        let x_shape = x.shape().to_vec();
        let out = record(out, "recurrent layer", &input_refs, move || {
            move |ctx, g: &Tensor| {
                let dy = g.narrow(0, 0, yn);
                let dh = g.narrow(0, yn, hn).reshape(&[n, hs]);
                let dc = g.narrow(0, yn + hn, hn).reshape(&[n, hs]);
                if is_grad_enabled() {
                    return graph(&dy.reshape(&[t_len, n, hs]), &dh, &dc);
                }
                // The final state's gradients, copied once: they become h0's and c0's.
                let own = |t: &Tensor| host::<T, _>(&t.contiguous(), HostBuffer::<T>::from_slice);
                let (dy, mut dh0, mut dc0) = (dy.contiguous(), own(&dh), own(&dc));
                let (da, db) = host::<T, _>(&dy, |dys| host::<T, _>(&w_hhd, |wh| host::<T, _>(&c0d, |c0s| {
                    lstm_sequence_backward(&seq, wh, c0s, dys, &mut dh0, &mut dc0, dims)
                })));
                let da = Tensor::from_cpu_on(T::into_storage(da), &[t_len * n, 4 * hs], Device::Cpu);
                let state = |b: HostBuffer<T>| Tensor::from_cpu_on(T::into_storage(b), &[n, hs], Device::Cpu);
                let dx = ctx.needs(0).then(|| da.matmul(&w_ihd).reshape(&x_shape));
                let (d_w_ih, d_w_hh) = match (ctx.needs(3), ctx.needs(4)) {
                    // Both weights' gradients from one product, [x | h_prev]^T da
                    // ([in + H, 4H]; each row of [x | h_prev] a step's input beside its
                    // h_prev), whose two row blocks, transposed, are the gradients. One
                    // product over the long contraction instead of three, and this
                    // orientation the faster (4.6-5.4 against 5.2-6.3 ms for da^T
                    // [x | h_prev] at T N = 2048, in 128, H 256; Xeon, 2 threads).
                    (true, true) => {
                        let xh = host::<T, _>(&xf, |xs| host::<T, _>(&y_kept, |ys| host::<T, _>(&h0d, |h0s| {
                            inputs_beside_states::<T>(xs, ys, h0s, (t_len, n, in_size, hs), reverse)
                        })));
                        let xh = Tensor::from_cpu_on(T::into_storage(xh), &[t_len * n, in_size + hs], Device::Cpu);
                        let g = xh.t().matmul(&da);
                        (
                            Some(g.narrow(0, 0, in_size).t().contiguous()),
                            Some(g.narrow(0, in_size, hs).t().contiguous()),
                        )
                    }
                    (ih, hh) => (ih.then(|| da.t().matmul(&xf)), hh.then(|| {
                        // Step s's h_prev is y at the step before it (h0 for the first
                        // step run).
                        let rest = (t_len - 1) * n;
                        let (da_rest, y_prev, da_first) = if reverse {
                            (da.narrow(0, 0, rest), y_kept.narrow(0, n, rest), da.narrow(0, rest, n))
                        } else {
                            (da.narrow(0, n, rest), y_kept.narrow(0, 0, rest), da.narrow(0, 0, n))
                        };
                        let first = da_first.t().matmul(&h0d);
                        if rest == 0 {
                            first
                        } else {
                            da_rest.t().matmul(&y_prev).add(&first)
                        }
                    })),
                };
                let db = (present.0 || present.1)
                    .then(|| Tensor::from_cpu_on(T::into_storage(db), &[4 * hs], Device::Cpu));
                let mut grads = vec![dx, Some(state(dh0)), Some(state(dc0)), d_w_ih, d_w_hh];
                if present.0 {
                    grads.push(db.clone());
                }
                if present.1 {
                    grads.push(db);
                }
                grads
            }
        });
        let y = out.narrow(0, 0, yn).reshape(&[t_len, n, hs]);
        let h = out.narrow(0, yn, hn).reshape(&[n, hs]);
        let c = out.narrow(0, yn + hn, hn).reshape(&[n, hs]);
        Some((y, h, c))
    }, else None)
}
