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

use crate::nn::functional as F;
use crate::nn::init::default_uniform;
use crate::nn::{Module, TensorKind, join_path};
use crate::{Device, Tensor};

mod cell;
mod steps;

pub use cell::{GRUCell, LSTMCell, RNNCell};

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

impl Recurrent {
    /// Its cell, configuration, parameters (state-dict name, tensor) in PyTorch's order,
    /// and training flag: what an export writes.
    pub(crate) fn export_parts(&self) -> (RnnMode, &RnnConfig, &[(String, Tensor)], bool) {
        (self.mode, &self.config, &self.params, self.training)
    }
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
        let entered = crate::dispatch::enter();
        let out = self.forward_with_lengths_untraced(input, state, lengths);
        if entered.is_none() {
            return out;
        }
        // Traced as one recurrent op: inputs [x, h0?, c0?, every parameter in order].
        let mut inputs: Vec<&Tensor> = vec![input];
        if let Some(s) = state {
            inputs.push(&s.h);
            inputs.extend(s.c.as_ref());
        }
        inputs.extend(self.params.iter().map(|(_, t)| t));
        let c = &self.config;
        let op = || crate::dispatch::Op::Rnn {
            mode: match self.mode {
                RnnMode::Tanh => crate::dispatch::RnnKind::Tanh,
                RnnMode::Relu => crate::dispatch::RnnKind::Relu,
                RnnMode::Lstm => crate::dispatch::RnnKind::Lstm,
                RnnMode::Gru => crate::dispatch::RnnKind::Gru,
            },
            layers: c.num_layers,
            hidden: c.hidden_size,
            bidirectional: c.bidirectional,
            batch_first: c.batch_first,
            bias: c.bias,
            has_state: state.is_some(),
            unbatched: input.dim() == 2,
            unsupported: if lengths.is_some() {
                Some("forward_with_lengths (packed sequences)")
            } else if c.proj_size > 0 {
                Some("an LSTM with proj_size")
            } else if self.training && c.dropout > 0.0 && c.num_layers > 1 {
                Some("dropout between layers in training mode; call `eval()` first")
            } else {
                None
            },
        };
        crate::dispatch::finish(entered, &inputs, op, out)
    }

    #[track_caller]
    fn forward_with_lengths_untraced(
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
