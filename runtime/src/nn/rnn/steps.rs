//! The time loop of one direction of a [`Recurrent`] layer and its hand-written
//! back-propagation through time.

use super::{Recurrent, RnnMode};
use crate::Tensor;
use crate::autograd::{is_grad_enabled, no_grad, record};
use crate::nn::functional as F;
use crate::nn::fused::{GraphBackward, LstmStep, lstm_sequence, lstm_step, lstm_step_backward};

impl Recurrent {
    /// One direction of one layer as one autograd node: the forward runs the time loop
    /// without recording it and keeps each step's gates; the backward runs
    /// back-propagation through time by hand (one pass, then one product each for the
    /// input, input-weight and hidden-weight gradients), or, when a graph of the backward
    /// is wanted (`create_graph`), differentiates [`Recurrent::run_direction`]'s
    /// recorded loop instead.
    pub(super) fn fused_direction(
        &self,
        x: &Tensor,
        sfx: &str,
        reverse: bool,
        h0: Tensor,
        c0: Option<Tensor>,
        masks: Option<&[Tensor]>,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let weights = self.direction_weights(sfx);
        let mut inputs: Vec<Tensor> = vec![x.clone(), h0.clone()];
        inputs.extend(c0.clone());
        inputs.extend(weights.iter().flatten().cloned());
        // An LSTM without projection or padding runs whole in the sequence kernels.
        if let (RnnMode::Lstm, None, Some(c0r)) = (self.mode, masks, c0.as_ref()) {
            let graph: GraphBackward = {
                let saved = inputs.clone();
                let present: Vec<bool> = weights.iter().map(Option::is_some).collect();
                let (mode, sfx, config) = (self.mode, sfx.to_string(), self.config);
                Box::new(move |dy: &Tensor, dh: &Tensor, dc: &Tensor| {
                    let layer = Recurrent {
                        mode,
                        config,
                        params: Vec::new(),
                        training: false,
                    };
                    layer.graph_backward(&saved, &present, &sfx, reverse, None, dy, dh, Some(dc))
                })
            };
            if let Some((y, h, c)) = lstm_sequence(x, (&h0, c0r), &weights, reverse, &inputs, graph)
            {
                return (y, h, Some(c));
            }
        }
        let records_grad = is_grad_enabled() && inputs.iter().any(Tensor::requires_grad_flag);
        if !records_grad {
            return self.run_direction(x, sfx, reverse, h0, c0, masks);
        }
        let (t_len, n) = (x.size(0), x.size(1));
        let steps =
            no_grad(|| self.loop_steps(x, &weights, reverse, &h0, c0.as_ref(), masks, true));
        let (y, h, c) = (steps.y.clone(), steps.h.clone(), steps.c.clone());
        let h_out = h.size(-1);
        let mut flat = vec![y.reshape(&[t_len * n * h_out]), h.reshape(&[n * h_out])];
        flat.extend(c.as_ref().map(|c| c.reshape(&[c.numel()])));
        let packed = Tensor::cat(&flat.iter().collect::<Vec<_>>(), 0);
        let input_refs: Vec<&Tensor> = inputs.iter().collect();
        let has_c = c0.is_some();
        let packed = record(packed, "recurrent layer", &input_refs, || {
            let saved: Vec<Tensor> = inputs.clone();
            let masks: Option<Vec<Tensor>> = masks.map(<[Tensor]>::to_vec);
            let (mode, sfx, config) = (self.mode, sfx.to_string(), self.config);
            let present: Vec<bool> = weights.iter().map(Option::is_some).collect();
            move |_ctx, g: &Tensor| {
                let (yn, hn) = (t_len * n * h_out, n * h_out);
                let dy = g.narrow(0, 0, yn).reshape(&[t_len, n, h_out]);
                let dh = g.narrow(0, yn, hn).reshape(&[n, h_out]);
                let dc = has_c.then(|| {
                    let hs = config.hidden_size;
                    g.narrow(0, yn + hn, n * hs).reshape(&[n, hs])
                });
                if is_grad_enabled() {
                    // A graph of the backward: differentiate the recorded loop.
                    let layer = Recurrent {
                        mode,
                        config,
                        params: Vec::new(),
                        training: false,
                    };
                    return layer.graph_backward(
                        &saved,
                        &present,
                        &sfx,
                        reverse,
                        masks.as_deref(),
                        &dy,
                        &dh,
                        dc.as_ref(),
                    );
                }
                steps.backward(
                    mode,
                    &saved,
                    &present,
                    masks.as_deref(),
                    &dy,
                    &dh,
                    dc.as_ref(),
                )
            }
        });
        let (yn, hn) = (t_len * n * h_out, n * h_out);
        let y = packed.narrow(0, 0, yn).reshape(&[t_len, n, h_out]);
        let h = packed.narrow(0, yn, hn).reshape(&[n, h_out]);
        let c = c.map(|c| packed.narrow(0, yn + hn, c.numel()).reshape(c.shape()));
        (y, h, c)
    }

    /// The gradients of the recorded loop ([`Recurrent::run_direction`]) as a graph.
    #[allow(clippy::too_many_arguments)]
    fn graph_backward(
        &self,
        saved: &[Tensor],
        present: &[bool],
        sfx: &str,
        reverse: bool,
        masks: Option<&[Tensor]>,
        dy: &Tensor,
        dh: &Tensor,
        dc: Option<&Tensor>,
    ) -> Vec<Option<Tensor>> {
        let has_c = dc.is_some();
        let (x, h0) = (&saved[0], &saved[1]);
        let c0 = has_c.then(|| saved[2].clone());
        let mut params = Vec::new();
        let mut k = 2 + has_c as usize;
        for (name, p) in ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"]
            .iter()
            .zip(present)
        {
            if *p {
                params.push((format!("{name}_{sfx}"), saved[k].clone()));
                k += 1;
            }
        }
        let layer = Recurrent {
            mode: self.mode,
            config: self.config,
            params,
            training: false,
        };
        let (y, h, c) = layer.run_direction(x, sfx, reverse, h0.clone(), c0, masks);
        let mut outs = vec![&y, &h];
        let mut grads = vec![dy.clone(), dh.clone()];
        if let (Some(c), Some(dc)) = (&c, dc) {
            outs.push(c);
            grads.push(dc.clone());
        }
        let wanted: Vec<&Tensor> = saved.iter().filter(|t| t.requires_grad_flag()).collect();
        let mut found = crate::autograd::grad(&outs, &wanted, Some(&grads), true).into_iter();
        saved
            .iter()
            .map(|t| {
                if t.requires_grad_flag() {
                    found.next().flatten()
                } else {
                    None
                }
            })
            .collect()
    }

    /// The time loop of one direction over `x` `[T, N, in]` with weights `w` (weight_ih,
    /// weight_hh, bias_ih, bias_hh, weight_hr): outputs, final state and, with
    /// `keep_steps`, what each step's backward needs. Recorded by autograd when grad mode
    /// is on ([`Recurrent::run_direction`]); the fused node runs it under `no_grad`.
    #[allow(clippy::too_many_arguments)]
    fn loop_steps(
        &self,
        x: &Tensor,
        w: &[Option<Tensor>],
        reverse: bool,
        h0: &Tensor,
        c0: Option<&Tensor>,
        masks: Option<&[Tensor]>,
        keep_steps: bool,
    ) -> Steps {
        let (w_ih, w_hh, b_ih, b_hh, w_hr) = (
            w[0].clone().expect("weights"),
            w[1].clone().expect("weights"),
            w[2].clone(),
            w[3].clone(),
            w[4].clone(),
        );
        let fold_hh = self.mode != RnnMode::Gru;
        let bias = match (&b_ih, &b_hh, fold_hh) {
            (Some(a), Some(b), true) => Some(a.add(b)),
            (Some(a), _, _) => Some(a.clone()),
            _ => None,
        };
        let t_len = x.size(0);
        // `W_hh^T` laid out once for the whole sequence: every step's `h @ W_hh^T` is then
        // a product with a row-major right operand, which the GEMM runs without repacking
        // a transposed weight per step (twice as fast at a batch of 32).
        let w_hh_t = w_hh.t().contiguous();
        // Every step's input projection in one product; the recurrent bias joins it, except
        // for the GRU's new gate, where it sits inside r * (h W_hn + b_hn).
        let xi = F::linear(x, &w_ih, bias.as_ref());
        let (mut h, mut c) = (h0.clone(), c0.cloned());
        let order: Vec<usize> = if reverse {
            (0..t_len).rev().collect()
        } else {
            (0..t_len).collect()
        };
        // The fused cell kernel serves every step that autograd does not record.
        let fused_cell = !is_grad_enabled()
            || !std::iter::once(x)
                .chain([h0])
                .chain(c0)
                .chain(w.iter().flatten())
                .any(Tensor::requires_grad_flag);
        let mut recs = Vec::with_capacity(t_len);
        let mut outs: Vec<Option<Tensor>> = vec![None; t_len];
        for &t in &order {
            let xt = xi.select(0, t);
            let mut rec = StepRec {
                t,
                h_prev: h.clone(),
                c_prev: c.clone(),
                gates: Vec::new(),
                tanh_c: None,
                m: None,
                hn: None,
                lstm: None,
            };
            let (h_new, c_new) = match self.mode {
                RnnMode::Tanh | RnnMode::Relu => {
                    let pre = xt.add(&h.matmul(&w_hh_t));
                    let hn = if self.mode == RnnMode::Tanh {
                        pre.tanh()
                    } else {
                        pre.relu()
                    };
                    rec.gates = vec![hn.clone()];
                    (hn, None)
                }
                RnnMode::Lstm if fused_cell => {
                    let cp = c.as_ref().expect("an LSTM keeps c");
                    let hw = h.matmul(&w_hh_t);
                    match lstm_step(&xt, &hw, cp) {
                        Some(step) => {
                            let hn = match &w_hr {
                                Some(w) => step.h.matmul(&w.t()),
                                None => step.h.clone(),
                            };
                            rec.m = Some(step.h.clone());
                            let cn = step.c.clone();
                            rec.lstm = Some(step);
                            (hn, Some(cn))
                        }
                        None => self.lstm_composite(&xt.add(&hw), cp, w_hr.as_ref(), &mut rec),
                    }
                }
                RnnMode::Lstm => {
                    let cp = c.as_ref().expect("an LSTM keeps c");
                    self.lstm_composite(&xt.add(&h.matmul(&w_hh_t)), cp, w_hr.as_ref(), &mut rec)
                }
                RnnMode::Gru => {
                    let hh = match &b_hh {
                        Some(b) => h.matmul(&w_hh_t).add(b),
                        None => h.matmul(&w_hh_t),
                    };
                    let (xg, hg) = (xt.chunk(3, 1), hh.chunk(3, 1));
                    let r = xg[0].add(&hg[0]).sigmoid();
                    let z = xg[1].add(&hg[1]).sigmoid();
                    let nn = xg[2].add(&r.mul(&hg[2])).tanh();
                    let hn = nn.add(&z.mul(&h.sub(&nn)));
                    rec.gates = vec![r, z, nn];
                    rec.hn = Some(hg[2].clone());
                    (hn, None)
                }
            };
            match masks {
                Some(mk) => {
                    let v = &mk[t];
                    outs[t] = Some(h_new.mul(v));
                    h = h.add(&v.mul(&h_new.sub(&h)));
                    if let (Some(cn), Some(co)) = (&c_new, &c) {
                        c = Some(co.add(&v.mul(&cn.sub(co))));
                    }
                }
                None => {
                    outs[t] = Some(h_new.clone());
                    h = h_new;
                    if c_new.is_some() {
                        c = c_new;
                    }
                }
            }
            if keep_steps {
                recs.push(rec);
            }
        }
        let outs: Vec<Tensor> = outs
            .into_iter()
            .map(|o| o.expect("every step ran"))
            .collect();
        Steps {
            y: Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0),
            h,
            c,
            recs,
        }
    }

    /// The LSTM step's elementwise part as tensor ops (recorded when grad mode is on):
    /// from the pre-activations `pre` `[N, 4H]` and `c`, the new `(h, c)`; keeps the
    /// activated gates, `tanh(c')` and `o tanh(c')` in `rec`.
    fn lstm_composite(
        &self,
        pre: &Tensor,
        c_prev: &Tensor,
        w_hr: Option<&Tensor>,
        rec: &mut StepRec,
    ) -> (Tensor, Option<Tensor>) {
        let g = pre.chunk(4, 1);
        let (i, f, gg, o) = (g[0].sigmoid(), g[1].sigmoid(), g[2].tanh(), g[3].sigmoid());
        let cn = f.mul(c_prev).add(&i.mul(&gg));
        let tc = cn.tanh();
        let m = o.mul(&tc);
        let hn = match w_hr {
            Some(w) => m.matmul(&w.t()),
            None => m.clone(),
        };
        rec.gates = vec![i, f, gg, o];
        rec.tanh_c = Some(tc);
        rec.m = Some(m);
        (hn, Some(cn))
    }

    /// One direction of one layer over `x` `[T, N, in]`, recorded step by step: outputs
    /// `[T, N, H_out]` and the final `h` (and `c`).
    fn run_direction(
        &self,
        x: &Tensor,
        sfx: &str,
        reverse: bool,
        h: Tensor,
        c: Option<Tensor>,
        masks: Option<&[Tensor]>,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let w = self.direction_weights(sfx);
        let s = self.loop_steps(x, &w, reverse, &h, c.as_ref(), masks, false);
        (s.y, s.h, s.c)
    }
}

/// What one step of the forward keeps for the backward.
struct StepRec {
    t: usize,
    h_prev: Tensor,
    c_prev: Option<Tensor>,
    /// RNN: [h']; LSTM: [i, f, g, o] (activated); GRU: [r, z, n].
    gates: Vec<Tensor>,
    /// LSTM: tanh(c').
    tanh_c: Option<Tensor>,
    /// LSTM: o * tanh(c') (before the projection).
    m: Option<Tensor>,
    /// GRU: the new gate's hidden part `h W_hn^T + b_hn`.
    hn: Option<Tensor>,
    /// LSTM through the fused cell: the activated gates `[N, 4H]` and `tanh(c')` (then
    /// `gates` and `tanh_c` are empty).
    lstm: Option<LstmStep>,
}

/// The forward of one direction, kept for its backward.
struct Steps {
    y: Tensor,
    h: Tensor,
    c: Option<Tensor>,
    /// In the order the steps ran.
    recs: Vec<StepRec>,
}

impl Steps {
    /// Back-propagation through time by hand: gradients of (x, h0, [c0], weight_ih,
    /// weight_hh, [bias_ih, bias_hh], [weight_hr]) in the node's input order.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        mode: RnnMode,
        saved: &[Tensor],
        present: &[bool],
        masks: Option<&[Tensor]>,
        dy: &Tensor,
        dh_n: &Tensor,
        dc_n: Option<&Tensor>,
    ) -> Vec<Option<Tensor>> {
        let has_c = dc_n.is_some();
        let x = saved[0].detach();
        let mut k = 2 + has_c as usize;
        let mut w: Vec<Option<Tensor>> = Vec::new();
        for p in present {
            if *p {
                w.push(Some(saved[k].detach()));
                k += 1;
            } else {
                w.push(None);
            }
        }
        let (w_ih, w_hh, w_hr) = (
            w[0].clone().expect("weights"),
            w[1].clone().expect("weights"),
            w[4].clone(),
        );
        let (t_len, n) = (x.size(0), x.size(1));
        let mut dh = dh_n.clone();
        let mut dc = dc_n.cloned();
        let mut dxi: Vec<Option<Tensor>> = vec![None; t_len];
        let mut dhh_all: Vec<Tensor> = Vec::with_capacity(t_len);
        let mut hprev_all: Vec<Tensor> = Vec::with_capacity(t_len);
        let mut dproj: Vec<(Tensor, Tensor)> = Vec::new();
        for rec in self.recs.iter().rev() {
            let dyt = dy.select(0, rec.t);
            let (dh_new, dh_keep, dc_new, dc_keep) = match masks {
                Some(mk) => {
                    let v = &mk[rec.t];
                    let keep = v.neg().add_scalar(1.0);
                    (
                        v.mul(&dh.add(&dyt)),
                        Some(keep.mul(&dh)),
                        dc.as_ref().map(|d| v.mul(d)),
                        dc.as_ref().map(|d| keep.mul(d)),
                    )
                }
                None => (dh.add(&dyt), None, dc.clone(), None),
            };
            let (da, dhh, dh_direct) = match mode {
                RnnMode::Tanh | RnnMode::Relu => {
                    let hn = &rec.gates[0];
                    let deriv = if mode == RnnMode::Tanh {
                        hn.mul(hn).neg().add_scalar(1.0)
                    } else {
                        hn.gt_scalar(0.0).to_dtype(hn.dtype())
                    };
                    let da = dh_new.mul(&deriv);
                    (da.clone(), da, None)
                }
                RnnMode::Lstm => {
                    let dm = match &w_hr {
                        Some(wr) => {
                            dproj.push((dh_new.clone(), rec.m.clone().expect("kept")));
                            dh_new.matmul(wr)
                        }
                        None => dh_new,
                    };
                    let c_prev = rec.c_prev.as_ref().expect("kept");
                    let dc_new = dc_new.expect("an LSTM has dc");
                    let fused = rec
                        .lstm
                        .as_ref()
                        .and_then(|step| lstm_step_backward(&dm, &dc_new, step, c_prev));
                    if let Some((da, dc_prev)) = fused {
                        dc = Some(match &dc_keep {
                            Some(kp) => dc_prev.add(kp),
                            None => dc_prev,
                        });
                        (da.clone(), da, None)
                    } else {
                        let (i, f, g, o) =
                            (&rec.gates[0], &rec.gates[1], &rec.gates[2], &rec.gates[3]);
                        let tc = rec.tanh_c.as_ref().expect("kept");
                        let d_o = dm.mul(tc);
                        let dct = dc_new.add(&dm.mul(o).mul(&tc.mul(tc).neg().add_scalar(1.0)));
                        let sig = |a: &Tensor| a.mul(&a.neg().add_scalar(1.0));
                        let da = Tensor::cat(
                            &[
                                &dct.mul(g).mul(&sig(i)),
                                &dct.mul(c_prev).mul(&sig(f)),
                                &dct.mul(i).mul(&g.mul(g).neg().add_scalar(1.0)),
                                &d_o.mul(&sig(o)),
                            ],
                            1,
                        );
                        let dc_prev = dct.mul(f);
                        dc = Some(match &dc_keep {
                            Some(kp) => dc_prev.add(kp),
                            None => dc_prev,
                        });
                        (da.clone(), da, None)
                    }
                }
                RnnMode::Gru => {
                    let (r, z, nn) = (&rec.gates[0], &rec.gates[1], &rec.gates[2]);
                    let hn = rec.hn.as_ref().expect("kept");
                    let dn = dh_new.mul(&z.neg().add_scalar(1.0));
                    let dz = dh_new.mul(&rec.h_prev.sub(nn));
                    let dan = dn.mul(&nn.mul(nn).neg().add_scalar(1.0));
                    let dar = dan.mul(hn).mul(&r.mul(&r.neg().add_scalar(1.0)));
                    let daz = dz.mul(&z.mul(&z.neg().add_scalar(1.0)));
                    let da = Tensor::cat(&[&dar, &daz, &dan], 1);
                    let dhh = Tensor::cat(&[&dar, &daz, &dan.mul(r)], 1);
                    (da, dhh, Some(dh_new.mul(z)))
                }
            };
            let mut dh_prev = dhh.matmul(&w_hh);
            if let Some(d) = dh_direct {
                dh_prev = dh_prev.add(&d);
            }
            if let Some(kp) = dh_keep {
                dh_prev = dh_prev.add(&kp);
            }
            dh = dh_prev;
            dxi[rec.t] = Some(da);
            dhh_all.push(dhh);
            hprev_all.push(rec.h_prev.clone());
        }
        let g = w_ih.size(0);
        let dxi: Vec<Tensor> = dxi.into_iter().map(|d| d.expect("every step")).collect();
        let dxi = Tensor::stack(&dxi.iter().collect::<Vec<_>>(), 0).reshape(&[t_len * n, g]);
        let xf = x.reshape(&[t_len * n, x.size(2)]);
        let dx = dxi.matmul(&w_ih).reshape(x.shape());
        let d_w_ih = dxi.t().matmul(&xf);
        let dhh = Tensor::cat(&dhh_all.iter().collect::<Vec<_>>(), 0);
        let hp = Tensor::cat(&hprev_all.iter().collect::<Vec<_>>(), 0);
        let d_w_hh = dhh.t().matmul(&hp);
        let db_ih = dxi.sum(&[0], false);
        let db_hh = if mode == RnnMode::Gru {
            dhh.sum(&[0], false)
        } else {
            db_ih.clone()
        };
        let mut grads = vec![Some(dx), Some(dh)];
        if has_c {
            grads.push(dc);
        }
        grads.push(Some(d_w_ih));
        grads.push(Some(d_w_hh));
        if present[2] {
            grads.push(Some(db_ih));
        }
        if present[3] {
            grads.push(Some(db_hh));
        }
        if present[4] {
            let (dhs, ms): (Vec<Tensor>, Vec<Tensor>) = dproj.into_iter().unzip();
            let dhs = Tensor::cat(&dhs.iter().collect::<Vec<_>>(), 0);
            let ms = Tensor::cat(&ms.iter().collect::<Vec<_>>(), 0);
            grads.push(Some(dhs.t().matmul(&ms)));
        }
        grads
    }
}
