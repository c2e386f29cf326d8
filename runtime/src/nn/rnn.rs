//! Recurrent layers (`nn.RNN`, `nn.LSTM`, `nn.GRU`) and their cells (`nn.RNNCell`,
//! `nn.LSTMCell`, `nn.GRUCell`), with PyTorch's arguments, initialisation, gate order
//! (LSTM: input, forget, cell, output; GRU: reset, update, new) and state-dict keys
//! (`weight_ih_l0`, `weight_hh_l0_reverse`, `bias_ih_l1`, `weight_hr_l0` …).
//!
//! A layer projects the whole input sequence with one matrix product (`x @ W_ih^T` for
//! every step at once); the time loop then does one `h @ W_hh^T` per step. Backward
//! through time is one pass of autograd over the recorded steps. Variable-length batches
//! take `lengths` (what `pack_padded_sequence` gives PyTorch): each sequence stops at its
//! length, the reverse direction starts at its last valid step, outputs past a length
//! are zero and `h_n`/`c_n` are each sequence's state at its last step.

use super::functional as F;
use super::init::default_uniform;
use super::{Module, TensorKind, join_path};
use crate::autograd::{is_grad_enabled, no_grad, record};
use crate::{Device, Tensor};

/// Which recurrence a [`Recurrent`] layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnMode {
    /// Elman RNN with `tanh` (`nn.RNN(nonlinearity='tanh')`).
    Tanh,
    /// Elman RNN with `relu`.
    Relu,
    /// Long short-term memory.
    Lstm,
    /// Gated recurrent unit.
    Gru,
}

impl RnnMode {
    fn gates(self) -> usize {
        match self {
            RnnMode::Tanh | RnnMode::Relu => 1,
            RnnMode::Lstm => 4,
            RnnMode::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            RnnMode::Tanh | RnnMode::Relu => "RNN",
            RnnMode::Lstm => "LSTM",
            RnnMode::Gru => "GRU",
        }
    }
}

/// Options of the recurrent layers (PyTorch's defaults: one layer, biases, `[T, N, *]`
/// inputs, no dropout, one direction, no projection).
///
/// ```
/// let c = ferrograd_runtime::nn::RnnConfig::new(10, 20).num_layers(2).bidirectional(true);
/// assert_eq!((c.input_size, c.hidden_size, c.num_layers, c.bidirectional, c.proj_size), (10, 20, 2, true, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RnnConfig {
    /// Features of the input.
    pub input_size: usize,
    /// Features of the hidden state.
    pub hidden_size: usize,
    /// Stacked layers.
    pub num_layers: usize,
    /// Biases `b_ih` and `b_hh`.
    pub bias: bool,
    /// Inputs and outputs are `[N, T, *]`.
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, while training.
    pub dropout: f64,
    /// Run each layer forwards and backwards, concatenating the two.
    pub bidirectional: bool,
    /// LSTM only: project the hidden state to this width (0: no projection).
    pub proj_size: usize,
}

impl RnnConfig {
    /// `input_size` and `hidden_size`, PyTorch's defaults for the rest.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        RnnConfig {
            input_size,
            hidden_size,
            num_layers: 1,
            bias: true,
            batch_first: false,
            dropout: 0.0,
            bidirectional: false,
            proj_size: 0,
        }
    }
    setters! {
        /// Sets the number of layers.
        num_layers: usize;
        /// Sets the biases.
        bias: bool;
        /// Sets `batch_first`.
        batch_first: bool;
        /// Sets the dropout between layers.
        dropout: f64;
        /// Sets bidirectionality.
        bidirectional: bool;
        /// Sets the LSTM projection width.
        proj_size: usize;
    }
}

/// The recurrent state of a layer: `h` `[layers * directions, N, H_out]` and, for LSTM,
/// `c` `[layers * directions, N, H]` (`(h_n, c_n)` in PyTorch).
#[derive(Clone, Debug)]
pub struct RnnState {
    /// Hidden state.
    pub h: Tensor,
    /// LSTM cell state.
    pub c: Option<Tensor>,
}

/// A multi-layer, optionally bidirectional recurrent layer: [`RNN`], [`LSTM`] and [`GRU`]
/// are this with a fixed [`RnnMode`].
pub struct Recurrent {
    mode: RnnMode,
    config: RnnConfig,
    /// (name, tensor) in PyTorch's order.
    params: Vec<(String, Tensor)>,
    training: bool,
}

/// `nn.RNN` (tanh or relu).
pub type RNN = Recurrent;
/// `nn.LSTM`.
pub type LSTM = Recurrent;
/// `nn.GRU`.
pub type GRU = Recurrent;

impl Recurrent {
    /// An Elman RNN (`nn.RNN`) with `tanh`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{RnnConfig, RNN};
    /// let rnn = RNN::rnn(RnnConfig::new(3, 5), &Device::Cpu);
    /// let (y, h) = rnn.forward(&Tensor::randn(&[7, 2, 3], DType::F32, &Device::Cpu), None);
    /// assert_eq!((y.shape(), h.h.shape()), (&[7, 2, 5][..], &[1, 2, 5][..]));
    /// ```
    #[track_caller]
    pub fn rnn(config: RnnConfig, device: &Device) -> Self {
        Self::new(RnnMode::Tanh, config, device)
    }

    /// An LSTM (`nn.LSTM`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{LSTM, Module, RnnConfig};
    /// let lstm = LSTM::lstm(RnnConfig::new(3, 5).num_layers(2).bidirectional(true).batch_first(true), &Device::Cpu);
    /// let (y, s) = lstm.forward(&Tensor::randn(&[2, 7, 3], DType::F32, &Device::Cpu), None);
    /// assert_eq!((y.shape(), s.c.unwrap().shape()), (&[2, 7, 10][..], &[4, 2, 5][..]));
    /// assert!(lstm.state_dict().contains_key("weight_hh_l1_reverse"));
    /// ```
    #[track_caller]
    pub fn lstm(config: RnnConfig, device: &Device) -> Self {
        Self::new(RnnMode::Lstm, config, device)
    }

    /// A GRU (`nn.GRU`).
    #[track_caller]
    pub fn gru(config: RnnConfig, device: &Device) -> Self {
        Self::new(RnnMode::Gru, config, device)
    }

    /// A layer of `mode` with `config`, initialised as PyTorch's (every weight and bias
    /// `U(-1/sqrt(hidden), 1/sqrt(hidden))`).
    ///
    /// # Panics
    /// On zero sizes or layers, dropout outside `[0, 1]`, or a projection on a non-LSTM or
    /// not smaller than the hidden size.
    #[track_caller]
    pub fn new(mode: RnnMode, config: RnnConfig, device: &Device) -> Self {
        let op = mode.name();
        let c = &config;
        assert!(
            c.input_size > 0 && c.hidden_size > 0 && c.num_layers > 0,
            "{op}: input_size, hidden_size and num_layers must be positive, got {}, {}, {}",
            c.input_size,
            c.hidden_size,
            c.num_layers
        );
        assert!(
            (0.0..=1.0).contains(&c.dropout),
            "{op}: dropout must be in [0, 1], got {}",
            c.dropout
        );
        assert!(
            c.proj_size == 0 || (mode == RnnMode::Lstm && c.proj_size < c.hidden_size),
            "{op}: proj_size {} needs an LSTM and must be smaller than hidden_size {}",
            c.proj_size,
            c.hidden_size
        );
        let h = c.hidden_size;
        let h_out = if c.proj_size > 0 { c.proj_size } else { h };
        let dirs = if c.bidirectional { 2 } else { 1 };
        let g = mode.gates() * h;
        let mut params = Vec::new();
        for layer in 0..c.num_layers {
            let input = if layer == 0 {
                c.input_size
            } else {
                h_out * dirs
            };
            for dir in 0..dirs {
                let sfx = format!("l{layer}{}", if dir == 1 { "_reverse" } else { "" });
                let p = |shape: &[usize]| default_uniform(shape, h, device);
                params.push((format!("weight_ih_{sfx}"), p(&[g, input])));
                params.push((format!("weight_hh_{sfx}"), p(&[g, h_out])));
                if c.bias {
                    params.push((format!("bias_ih_{sfx}"), p(&[g])));
                    params.push((format!("bias_hh_{sfx}"), p(&[g])));
                }
                if c.proj_size > 0 {
                    params.push((format!("weight_hr_{sfx}"), p(&[c.proj_size, h])));
                }
            }
        }
        Recurrent {
            mode,
            config,
            params,
            training: true,
        }
    }

    /// The options.
    pub fn config(&self) -> &RnnConfig {
        &self.config
    }

    /// weight_ih, weight_hh, bias_ih, bias_hh and weight_hr of one direction of one layer
    /// (`sfx` = `l0`, `l1_reverse`, …), `None` where the options keep none.
    fn direction_weights(&self, sfx: &str) -> Vec<Option<Tensor>> {
        ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"]
            .iter()
            .map(|n| self.param(&format!("{n}_{sfx}")).cloned())
            .collect()
    }

    fn param(&self, name: &str) -> Option<&Tensor> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Runs the layer over `input` (`[T, N, input_size]`, `[N, T, input_size]` with
    /// `batch_first`, or unbatched `[T, input_size]`) from `state` (zeros when `None`):
    /// the last layer's outputs `[T, N, directions * H_out]` and the final state.
    #[track_caller]
    pub fn forward(&self, input: &Tensor, state: Option<&RnnState>) -> (Tensor, RnnState) {
        self.forward_with_lengths(input, state, None)
    }

    /// [`Recurrent::forward`] over a padded batch whose sequence `i` is `lengths[i]` long
    /// (PyTorch's `pack_padded_sequence` → layer → `pad_packed_sequence`): outputs past a
    /// length are zero, and the state is each sequence's at its last step.
    ///
    /// # Panics
    /// On inputs or states of the wrong shape, and on lengths that are zero, longer than
    /// the input, or not one per batch element.
    #[track_caller]
    pub fn forward_with_lengths(
        &self,
        input: &Tensor,
        state: Option<&RnnState>,
        lengths: Option<&[usize]>,
    ) -> (Tensor, RnnState) {
        let op = self.mode.name();
        let c = &self.config;
        let unbatched = input.dim() == 2;
        assert!(
            input.dim() == 3 || unbatched,
            "{op}: input must be [T, N, {}] (or [N, T, {}] with batch_first, or [T, {}]), got {:?}",
            c.input_size,
            c.input_size,
            c.input_size,
            input.shape()
        );
        let x = if unbatched {
            input.unsqueeze(1)
        } else if c.batch_first {
            input.transpose(0, 1)
        } else {
            input.clone()
        };
        let (t_len, n, features) = (x.size(0), x.size(1), x.size(2));
        assert!(
            features == c.input_size,
            "{op}: input has {features} features (axis -1), expected input_size {}",
            c.input_size
        );
        let (h, dirs) = (c.hidden_size, if c.bidirectional { 2 } else { 1 });
        let h_out = if c.proj_size > 0 { c.proj_size } else { h };
        let masks = lengths.map(|lens| {
            assert!(
                lens.len() == n && lens.iter().all(|&l| l >= 1 && l <= t_len),
                "{op}: lengths must give each of the {n} sequences a length in 1..={t_len}, got {lens:?}"
            );
            // valid[t]: [N, 1], 1 where step t is inside the sequence.
            (0..t_len)
                .map(|t| {
                    let v: Vec<f64> = lens.iter().map(|&l| if t < l { 1.0 } else { 0.0 }).collect();
                    Tensor::from_vec(v, &[n, 1])
                        .to_dtype(x.dtype())
                        .to_device(&x.device())
                        .expect("the input's device")
                })
                .collect::<Vec<_>>()
        });
        let states = |s: Option<&Tensor>, width: usize, what: &str| -> Vec<Tensor> {
            let rows = c.num_layers * dirs;
            match s {
                Some(s) => {
                    let s = if unbatched { s.unsqueeze(1) } else { s.clone() };
                    assert!(
                        s.shape() == [rows, n, width],
                        "{op}: {what} must be [{rows}, {n}, {width}], got {:?}",
                        s.shape()
                    );
                    (0..rows).map(|i| s.select(0, i)).collect()
                }
                None => (0..rows)
                    .map(|_| Tensor::zeros(&[n, width], x.dtype(), &x.device()))
                    .collect(),
            }
        };
        let h0 = states(state.map(|s| &s.h), h_out, "h0");
        let c0 =
            (self.mode == RnnMode::Lstm).then(|| states(state.and_then(|s| s.c.as_ref()), h, "c0"));
        let mut layer_input = x;
        let (mut h_n, mut c_n) = (Vec::new(), Vec::new());
        for layer in 0..c.num_layers {
            let mut outputs = Vec::new();
            for dir in 0..dirs {
                let idx = layer * dirs + dir;
                let sfx = format!("l{layer}{}", if dir == 1 { "_reverse" } else { "" });
                let (out, hl, cl) = self.fused_direction(
                    &layer_input,
                    &sfx,
                    dir == 1,
                    h0[idx].clone(),
                    c0.as_ref().map(|c| c[idx].clone()),
                    masks.as_deref(),
                );
                outputs.push(out);
                h_n.push(hl);
                c_n.extend(cl);
            }
            layer_input = if dirs == 2 {
                Tensor::cat(&[&outputs[0], &outputs[1]], 2)
            } else {
                outputs.pop().expect("one direction")
            };
            if layer + 1 < c.num_layers && c.dropout > 0.0 {
                layer_input = F::dropout(&layer_input, c.dropout, self.training);
            }
        }
        let stack = |v: &[Tensor]| {
            let s = Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
            if unbatched { s.squeeze(1) } else { s }
        };
        let y = if unbatched {
            layer_input.squeeze(1)
        } else if c.batch_first {
            layer_input.transpose(0, 1)
        } else {
            layer_input
        };
        let state = RnnState {
            h: stack(&h_n),
            c: (!c_n.is_empty()).then(|| stack(&c_n)),
        };
        (y, state)
    }

    /// One direction of one layer as one autograd node: the forward runs the time loop
    /// without recording it and keeps each step's gates; the backward runs
    /// back-propagation through time by hand (one pass, then one product each for the
    /// input, input-weight and hidden-weight gradients), or, when a graph of the backward
    /// is wanted (`create_graph`), differentiates [`Recurrent::run_direction`]'s
    /// recorded loop instead.
    fn fused_direction(
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
        // Every step's input projection in one product; the recurrent bias joins it, except
        // for the GRU's new gate, where it sits inside r * (h W_hn + b_hn).
        let xi = F::linear(x, &w_ih, bias.as_ref());
        let (mut h, mut c) = (h0.clone(), c0.cloned());
        let order: Vec<usize> = if reverse {
            (0..t_len).rev().collect()
        } else {
            (0..t_len).collect()
        };
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
            };
            let (h_new, c_new) = match self.mode {
                RnnMode::Tanh | RnnMode::Relu => {
                    let pre = xt.add(&h.matmul(&w_hh.t()));
                    let hn = if self.mode == RnnMode::Tanh {
                        pre.tanh()
                    } else {
                        pre.relu()
                    };
                    rec.gates = vec![hn.clone()];
                    (hn, None)
                }
                RnnMode::Lstm => {
                    let g = xt.add(&h.matmul(&w_hh.t())).chunk(4, 1);
                    let (i, f, gg, o) =
                        (g[0].sigmoid(), g[1].sigmoid(), g[2].tanh(), g[3].sigmoid());
                    let cn = f.mul(c.as_ref().expect("an LSTM keeps c")).add(&i.mul(&gg));
                    let tc = cn.tanh();
                    let m = o.mul(&tc);
                    let hn = match &w_hr {
                        Some(w) => m.matmul(&w.t()),
                        None => m.clone(),
                    };
                    rec.gates = vec![i, f, gg, o];
                    rec.tanh_c = Some(tc);
                    rec.m = Some(m);
                    (hn, Some(cn))
                }
                RnnMode::Gru => {
                    let hh = F::linear(&h, &w_hh, b_hh.as_ref());
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
                    let (i, f, g, o) = (&rec.gates[0], &rec.gates[1], &rec.gates[2], &rec.gates[3]);
                    let tc = rec.tanh_c.as_ref().expect("kept");
                    let dm = match &w_hr {
                        Some(wr) => {
                            dproj.push((dh_new.clone(), rec.m.clone().expect("kept")));
                            dh_new.matmul(wr)
                        }
                        None => dh_new,
                    };
                    let d_o = dm.mul(tc);
                    let dct = dc_new
                        .expect("an LSTM has dc")
                        .add(&dm.mul(o).mul(&tc.mul(tc).neg().add_scalar(1.0)));
                    let c_prev = rec.c_prev.as_ref().expect("kept");
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

impl Module for Recurrent {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        for (name, t) in &self.params {
            f(&join_path(prefix, name), t, TensorKind::Parameter);
        }
    }

    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        for (name, t) in &mut self.params {
            f(&join_path(prefix, name), t, TensorKind::Parameter);
        }
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

impl std::fmt::Debug for Recurrent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.mode.name())
            .field("mode", &self.mode)
            .field("config", &self.config)
            .finish()
    }
}

macro_rules! cell {
    ($(#[$m:meta])* $name:ident, $gates:literal, $ctor_doc:literal) => {
        $(#[$m])*
        #[derive(Module, Debug)]
        #[module(crate = crate)]
        pub struct $name {
            /// Input weights `[gates * hidden, input]`.
            #[param]
            pub weight_ih: Tensor,
            /// Hidden weights `[gates * hidden, hidden]`.
            #[param]
            pub weight_hh: Tensor,
            /// Input bias.
            #[param]
            pub bias_ih: Option<Tensor>,
            /// Hidden bias.
            #[param]
            pub bias_hh: Option<Tensor>,
        }

        impl $name {
            #[doc = $ctor_doc]
            pub fn new(input_size: usize, hidden_size: usize, bias: bool, device: &Device) -> Self {
                let g = $gates * hidden_size;
                let p = |shape: &[usize]| default_uniform(shape, hidden_size, device);
                $name {
                    weight_ih: p(&[g, input_size]),
                    weight_hh: p(&[g, hidden_size]),
                    bias_ih: bias.then(|| p(&[g])),
                    bias_hh: bias.then(|| p(&[g])),
                }
            }

            fn zeros(&self, x: &Tensor) -> Tensor {
                let n = if x.dim() == 2 { vec![x.size(0)] } else { vec![] };
                let mut shape = n;
                shape.push(self.weight_hh.size(1));
                Tensor::zeros(&shape, x.dtype(), &x.device())
            }
        }
    };
}

cell! {
    /// One step of an Elman RNN (`nn.RNNCell`, tanh): `h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::RNNCell;
    /// let cell = RNNCell::new(3, 4, true, &Device::Cpu);
    /// assert_eq!(cell.forward(&Tensor::randn(&[2, 3], DType::F32, &Device::Cpu), None).shape(), &[2, 4]);
    /// ```
    RNNCell, 1, "A cell from `input_size` to `hidden_size` features."
}

cell! {
    /// One LSTM step (`nn.LSTMCell`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::LSTMCell;
    /// let cell = LSTMCell::new(3, 4, true, &Device::Cpu);
    /// let (h, c) = cell.forward(&Tensor::randn(&[2, 3], DType::F32, &Device::Cpu), None);
    /// assert_eq!((h.shape(), c.shape()), (&[2, 4][..], &[2, 4][..]));
    /// ```
    LSTMCell, 4, "A cell from `input_size` to `hidden_size` features."
}

cell! {
    /// One GRU step (`nn.GRUCell`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::GRUCell;
    /// let cell = GRUCell::new(3, 4, true, &Device::Cpu);
    /// assert_eq!(cell.forward(&Tensor::randn(&[2, 3], DType::F32, &Device::Cpu), None).shape(), &[2, 4]);
    /// ```
    GRUCell, 3, "A cell from `input_size` to `hidden_size` features."
}

impl RNNCell {
    /// `h'` from input `x` (`[N, in]` or `[in]`) and `h` (zeros when `None`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor, h: Option<&Tensor>) -> Tensor {
        let h = h.cloned().unwrap_or_else(|| self.zeros(x));
        F::linear(x, &self.weight_ih, self.bias_ih.as_ref())
            .add(&F::linear(&h, &self.weight_hh, self.bias_hh.as_ref()))
            .tanh()
    }
}

impl LSTMCell {
    /// `(h', c')` from input `x` and the state `(h, c)` (zeros when `None`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor, state: Option<(&Tensor, &Tensor)>) -> (Tensor, Tensor) {
        let (h, c) = match state {
            Some((h, c)) => (h.clone(), c.clone()),
            None => (self.zeros(x), self.zeros(x)),
        };
        let gates = F::linear(x, &self.weight_ih, self.bias_ih.as_ref()).add(&F::linear(
            &h,
            &self.weight_hh,
            self.bias_hh.as_ref(),
        ));
        let g = gates.chunk(4, -1);
        let (i, f, gg, o) = (g[0].sigmoid(), g[1].sigmoid(), g[2].tanh(), g[3].sigmoid());
        let c_new = f.mul(&c).add(&i.mul(&gg));
        (o.mul(&c_new.tanh()), c_new)
    }
}

impl GRUCell {
    /// `h'` from input `x` and `h` (zeros when `None`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor, h: Option<&Tensor>) -> Tensor {
        let h = h.cloned().unwrap_or_else(|| self.zeros(x));
        let xg = F::linear(x, &self.weight_ih, self.bias_ih.as_ref()).chunk(3, -1);
        let hg = F::linear(&h, &self.weight_hh, self.bias_hh.as_ref()).chunk(3, -1);
        let r = xg[0].add(&hg[0]).sigmoid();
        let z = xg[1].add(&hg[1]).sigmoid();
        let n = xg[2].add(&r.mul(&hg[2])).tanh();
        n.add(&z.mul(&h.sub(&n)))
    }
}
