//! [`MultiheadAttention`] (`nn.MultiheadAttention`).

use super::functional as F;
use super::init::{filled_param, on, xavier_uniform_};
use super::{Linear, Module};
use crate::{DType, Device, Tensor};

/// The optional arguments of [`MultiheadAttention::forward_with`], PyTorch's keyword
/// arguments (`Default`: no masks, no weights returned, weights averaged over heads when
/// asked for, as PyTorch's `average_attn_weights=True`).
///
/// Masks follow `nn.MultiheadAttention`: in a boolean `key_padding_mask` (`[N, S]`) or
/// `attn_mask` (`[L, S]` or `[N * heads, L, S]`) **true excludes** the key (the opposite of
/// `F::scaled_dot_product_attention`'s masks); float masks are added to the scores.
#[derive(Clone, Copy, Debug)]
pub struct MhaArgs<'a> {
    /// Keys to ignore per batch element.
    pub key_padding_mask: Option<&'a Tensor>,
    /// Query-key pairs to exclude (or scores to add).
    pub attn_mask: Option<&'a Tensor>,
    /// Return the attention weights too.
    pub need_weights: bool,
    /// Average the returned weights over the heads (else per head).
    pub average_attn_weights: bool,
    /// A causal mask: query `i` sees keys `0..=i`, with or without the weights, joined
    /// with `attn_mask` and `key_padding_mask` when they are given (a pair is excluded
    /// where any mask excludes it). PyTorch requires `attn_mask` as well and takes the
    /// flag as a hint that it is the causal mask; given that mask, both agree.
    pub is_causal: bool,
}

impl Default for MhaArgs<'_> {
    fn default() -> Self {
        MhaArgs {
            key_padding_mask: None,
            attn_mask: None,
            need_weights: false,
            average_attn_weights: true,
            is_causal: false,
        }
    }
}

/// Multi-head attention (`nn.MultiheadAttention`): project queries, keys and values,
/// attend per head with [`F::scaled_dot_product_attention`], project back. Parameters and
/// state-dict keys as PyTorch's: `in_proj_weight` `[3E, E]` and `in_proj_bias` when keys
/// and values have the query's width (else `q_proj_weight`, `k_proj_weight`,
/// `v_proj_weight`), and `out_proj.weight` / `out_proj.bias`; the same initialisation
/// (Xavier-uniform projections, zero biases).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Module, MultiheadAttention};
/// let mha = MultiheadAttention::new(16, 4, &Device::Cpu).batch_first(true);
/// let x = Tensor::randn(&[2, 5, 16], DType::F32, &Device::Cpu); // [N, L, E]
/// assert_eq!(mha.forward(&x, &x, &x).shape(), &[2, 5, 16]);
/// let keys: Vec<String> = mha.state_dict().into_keys().collect();
/// assert_eq!(keys, ["in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct MultiheadAttention {
    /// Packed query/key/value projection `[3E, E]` (keys and values of width E).
    #[param]
    pub in_proj_weight: Option<Tensor>,
    /// Query projection `[E, E]` (keys or values of another width).
    #[param]
    pub q_proj_weight: Option<Tensor>,
    /// Key projection `[E, kdim]`.
    #[param]
    pub k_proj_weight: Option<Tensor>,
    /// Value projection `[E, vdim]`.
    #[param]
    pub v_proj_weight: Option<Tensor>,
    /// Packed projection bias `[3E]`.
    #[param]
    pub in_proj_bias: Option<Tensor>,
    /// The output projection.
    pub out_proj: Linear,
    /// Width `E`.
    #[module(skip)]
    pub embed_dim: usize,
    /// Heads (dividing `E`).
    #[module(skip)]
    pub num_heads: usize,
    /// Dropout on the attention weights while training.
    #[module(skip)]
    pub dropout: f64,
    /// Inputs are `[N, L, E]` (else `[L, N, E]`).
    #[module(skip)]
    pub batch_first: bool,
    /// Training mode.
    #[module(training)]
    pub training: bool,
}

impl MultiheadAttention {
    /// `embed_dim` split over `num_heads`, with biases, no dropout, `[L, N, E]` inputs.
    ///
    /// # Panics
    /// When `num_heads` does not divide `embed_dim`.
    #[track_caller]
    pub fn new(embed_dim: usize, num_heads: usize, device: &Device) -> Self {
        Self::with_options(embed_dim, num_heads, 0.0, true, None, None, device)
    }

    /// All of PyTorch's construction options (`add_bias_kv` and `add_zero_attn` are not
    /// supported): `kdim`/`vdim` default to `embed_dim`.
    ///
    /// # Panics
    /// When `num_heads` does not divide `embed_dim` or `dropout` is outside `[0, 1)`.
    #[track_caller]
    pub fn with_options(
        embed_dim: usize,
        num_heads: usize,
        dropout: f64,
        bias: bool,
        kdim: Option<usize>,
        vdim: Option<usize>,
        device: &Device,
    ) -> Self {
        assert!(
            num_heads > 0 && embed_dim.is_multiple_of(num_heads),
            "MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}"
        );
        assert!(
            (0.0..1.0).contains(&dropout),
            "MultiheadAttention: dropout must be in [0, 1), got {dropout}"
        );
        let (kdim, vdim) = (kdim.unwrap_or(embed_dim), vdim.unwrap_or(embed_dim));
        let xavier = |shape: &[usize]| {
            let t = Tensor::zeros(shape, DType::F32, &Device::Cpu);
            xavier_uniform_(&t, 1.0);
            on(t, device).requires_grad(true)
        };
        let packed = kdim == embed_dim && vdim == embed_dim;
        let mut out_proj = Linear::with_bias(embed_dim, embed_dim, bias, device);
        if let Some(b) = &out_proj.bias {
            out_proj.bias = Some(filled_param(b.shape(), 0.0, device));
        }
        MultiheadAttention {
            in_proj_weight: packed.then(|| xavier(&[3 * embed_dim, embed_dim])),
            q_proj_weight: (!packed).then(|| xavier(&[embed_dim, embed_dim])),
            k_proj_weight: (!packed).then(|| xavier(&[embed_dim, kdim])),
            v_proj_weight: (!packed).then(|| xavier(&[embed_dim, vdim])),
            in_proj_bias: bias.then(|| filled_param(&[3 * embed_dim], 0.0, device)),
            out_proj,
            embed_dim,
            num_heads,
            dropout,
            batch_first: false,
            training: true,
        }
    }

    /// Sets `batch_first`.
    pub fn batch_first(mut self, batch_first: bool) -> Self {
        self.batch_first = batch_first;
        self
    }

    /// Self- or cross-attention output (no masks, no weights).
    #[track_caller]
    pub fn forward(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> Tensor {
        self.forward_with(query, key, value, &MhaArgs::default()).0
    }

    /// The output and, with `need_weights`, the attention weights (`[N, L, S]` averaged
    /// over heads, or `[N, heads, L, S]`). Inputs are `[L, N, E]` (`[N, L, E]` with
    /// `batch_first`) or unbatched `[L, E]`.
    ///
    /// # Panics
    /// On inputs of the wrong width or rank, or masks of the wrong shape.
    #[track_caller]
    pub fn forward_with(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        args: &MhaArgs<'_>,
    ) -> (Tensor, Option<Tensor>) {
        let op = "MultiheadAttention";
        let unbatched = query.dim() == 2;
        assert!(
            query.dim() == 3 || unbatched,
            "{op}: query must be [L, N, E], [N, L, E] or [L, E], got {:?}",
            query.shape()
        );
        let to_nle = |t: &Tensor| {
            if unbatched {
                t.unsqueeze(0)
            } else if self.batch_first {
                t.clone()
            } else {
                t.transpose(0, 1)
            }
        };
        let (q_in, k_in, v_in) = (to_nle(query), to_nle(key), to_nle(value));
        let (n, l, e) = (q_in.size(0), q_in.size(1), q_in.size(2));
        let s = k_in.size(1);
        assert!(
            e == self.embed_dim,
            "{op}: query has {e} features (axis -1), the module embed_dim {}",
            self.embed_dim
        );
        let (h, hd) = (self.num_heads, self.embed_dim / self.num_heads);
        let (wq, wk, wv) = match &self.in_proj_weight {
            Some(w) => (w.narrow(0, 0, e), w.narrow(0, e, e), w.narrow(0, 2 * e, e)),
            None => (
                self.q_proj_weight.clone().expect("separate projections"),
                self.k_proj_weight.clone().expect("separate projections"),
                self.v_proj_weight.clone().expect("separate projections"),
            ),
        };
        let bias = |i: usize| self.in_proj_bias.as_ref().map(|b| b.narrow(0, i * e, e));
        let heads = |t: Tensor, len: usize| t.reshape(&[n, len, h, hd]).transpose(1, 2);
        let q = heads(F::linear(&q_in, &wq, bias(0).as_ref()), l);
        let k = heads(F::linear(&k_in, &wk, bias(1).as_ref()), s);
        let v = heads(F::linear(&v_in, &wv, bias(2).as_ref()), s);
        let mask = self.merged_mask(args, n, l, s, q.dtype(), &q.device());
        let p = if self.training { self.dropout } else { 0.0 };
        let (out, weights) = if args.need_weights {
            let mut scores = q
                .matmul(&k.transpose(2, 3))
                .mul_scalar(1.0 / (hd as f64).sqrt());
            if let Some(m) = &mask {
                scores = scores.add(m);
            }
            let mut w = scores.softmax(-1);
            if p > 0.0 {
                w = F::dropout(&w, p, true);
            }
            (w.matmul(&v), Some(w))
        } else {
            let causal_only = args.is_causal && mask.is_none();
            let y =
                F::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), p, causal_only, None);
            (y, None)
        };
        let out = self
            .out_proj
            .forward(&out.transpose(1, 2).reshape(&[n, l, e]));
        let out = if unbatched {
            out.squeeze(0)
        } else if self.batch_first {
            out
        } else {
            out.transpose(0, 1)
        };
        let weights = weights.map(|w| {
            let w = if args.average_attn_weights {
                w.mean(&[1], false)
            } else {
                w
            };
            if unbatched { w.squeeze(0) } else { w }
        });
        (out, weights)
    }

    /// PyTorch's `attn_mask` and `key_padding_mask` (true excludes) as one additive mask
    /// broadcastable to `[N, heads, L, S]` (`-inf` where excluded), or `None`.
    #[track_caller]
    fn merged_mask(
        &self,
        args: &MhaArgs<'_>,
        n: usize,
        l: usize,
        s: usize,
        dtype: DType,
        device: &Device,
    ) -> Option<Tensor> {
        let op = "MultiheadAttention";
        let additive = |m: &Tensor| {
            if m.dtype() == DType::Bool {
                Tensor::zeros(m.shape(), dtype, device).masked_fill(m, f64::NEG_INFINITY)
            } else {
                m.to_dtype(dtype)
            }
        };
        // The no-weights path without other masks hands causality to the attention
        // kernel (`is_causal`); everywhere else the causal mask is built here and joins
        // the others (excluded where any of them excludes).
        let causal = (args.is_causal
            && (args.need_weights || args.attn_mask.is_some() || args.key_padding_mask.is_some()))
        .then(|| {
            let allowed = Tensor::ones(&[l, s], DType::Bool, device).tril(0);
            additive(&allowed.logical_not().reshape(&[1, 1, l, s]))
        });
        let attn = args.attn_mask.map(|m| {
            let m4 = match m.shape() {
                [a, b] if *a == l && *b == s => m.reshape(&[1, 1, l, s]),
                [a, b, c] if *a == n * self.num_heads && *b == l && *c == s => {
                    m.reshape(&[n, self.num_heads, l, s])
                }
                other => panic!(
                    "{op}: attn_mask must be [{l}, {s}] or [{}, {l}, {s}], got {other:?}",
                    n * self.num_heads
                ),
            };
            additive(&m4)
        });
        let padding = args.key_padding_mask.map(|m| {
            assert!(
                m.shape() == [n, s],
                "{op}: key_padding_mask must be [{n}, {s}] (batch, keys), got {:?}",
                m.shape()
            );
            additive(&m.reshape(&[n, 1, 1, s]))
        });
        [attn, causal, padding]
            .into_iter()
            .flatten()
            .reduce(|a, b| a.add(&b))
    }
}
