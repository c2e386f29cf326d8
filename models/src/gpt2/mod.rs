//! GPT-2 (`transformers.GPT2LMHeadModel`): learned positions, pre-norm blocks of causal
//! self-attention and a tanh-GELU MLP, `Conv1D` projections stored `[in, out]` as the
//! checkpoints store them, and the output head tied to the token embeddings.

use crate::ModelError;
use crate::generation::{CausalLM, KvCache};
use crate::hub::{self, LoadDType, LoadOptions, Loaded};
use ferrograd::nn::functional::scaled_dot_product_attention;
use ferrograd::nn::{Activation, Dropout, Embedding, LayerNorm, Module};
use ferrograd::{DType, Device, Tensor, network};
use serde::Deserialize;
use std::path::Path;

fn default_act() -> String {
    "gelu_new".into()
}
fn default_eps() -> f64 {
    1e-5
}
fn default_drop() -> f64 {
    0.1
}
fn default_true() -> bool {
    true
}

/// `config.json` of a GPT-2 checkpoint (`transformers.GPT2Config`; unknown keys ignored).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Gpt2Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Learned positions (the longest sequence).
    pub n_positions: usize,
    /// Width.
    pub n_embd: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// The MLP's width (`4 * n_embd` if absent).
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// The MLP activation (`gelu_new`: tanh GELU).
    #[serde(default = "default_act")]
    pub activation_function: String,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// Dropout of residual branches (training).
    #[serde(default = "default_drop")]
    pub resid_pdrop: f64,
    /// Dropout of the embeddings (training).
    #[serde(default = "default_drop")]
    pub embd_pdrop: f64,
    /// Dropout of attention weights (training).
    #[serde(default = "default_drop")]
    pub attn_pdrop: f64,
    /// The head shares the token embeddings.
    #[serde(default = "default_true")]
    pub tie_word_embeddings: bool,
    /// The end-of-text id.
    #[serde(default)]
    pub eos_token_id: Option<u32>,
}

impl Default for Gpt2Config {
    /// GPT-2 small (124M parameters).
    fn default() -> Self {
        Gpt2Config {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            n_inner: None,
            activation_function: default_act(),
            layer_norm_epsilon: 1e-5,
            resid_pdrop: 0.1,
            embd_pdrop: 0.1,
            attn_pdrop: 0.1,
            tie_word_embeddings: true,
            eos_token_id: Some(50256),
        }
    }
}

impl Gpt2Config {
    /// Reads `dir/config.json`, refusing what this port does not implement.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Gpt2Config, ModelError> {
        let c: Gpt2Config = hub::read_config(&dir)?;
        let bad = |reason: String| ModelError::Config {
            path: dir.as_ref().join("config.json"),
            reason,
        };
        if c.n_head == 0 || !c.n_embd.is_multiple_of(c.n_head) {
            return Err(bad(format!(
                "n_embd {} is not a multiple of n_head {}",
                c.n_embd, c.n_head
            )));
        }
        if Activation::from_name(&c.activation_function).is_none() {
            return Err(bad(format!(
                "activation_function {:?} is not supported",
                c.activation_function
            )));
        }
        Ok(c)
    }
}

/// GPT-2's `Conv1D`: a linear layer whose weight is stored `[in, out]`.
///
/// A `network!` layer like a built-in one: its shapes are declared in its constructor's
/// sizes (`c_fc: self::Conv1D(n_embd -> inner)` is checked to take `[N, T, n_embd]`; the
/// path tells it from the built-in `Conv1d`).
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd_models::gpt2::Conv1D;
/// let layer = Conv1D::new(4, 6, &Device::Cpu);
/// assert_eq!(Conv1D::num_parameters_for(4, 6), layer.num_parameters());
/// let y = layer.forward(&Tensor::ones(&[2, 3, 4], DType::F32, &Device::Cpu));
/// assert_eq!(y.shape(), &[2, 3, 6]);
/// ```
#[derive(Module)]
#[module(new = [nx -> nf], input = [N, T, nx], output = [N, T, nf], parameters = nx * nf + nf)]
pub struct Conv1D {
    /// `[in, out]`.
    #[param]
    pub weight: Tensor,
    /// `[out]`.
    #[param]
    pub bias: Tensor,
}

impl Conv1D {
    /// Weights from N(0, 0.02), as GPT-2 initialises them; zero bias.
    pub fn new(input: usize, output: usize, device: &Device) -> Conv1D {
        let w = normal_weight(&[input, output], device);
        Conv1D {
            weight: w.requires_grad(true),
            bias: Tensor::zeros(&[output], DType::F32, device).requires_grad(true),
        }
    }

    /// `x @ weight + bias`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.weight).add(&self.bias)
    }
}

/// Causal self-attention (`attn.c_attn` projects to q, k, v at once).
#[derive(Module)]
pub struct Gpt2Attention {
    /// `[D, 3D]` projection.
    pub c_attn: Conv1D,
    /// Output projection.
    pub c_proj: Conv1D,
    /// Dropout of the output (training).
    pub resid_dropout: Dropout,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    attn_p: f64,
    #[module(training)]
    training: bool,
}

network! {
    /// The MLP (`GPT2MLP`): `c_fc`, the configured activation, `c_proj` and the residual
    /// dropout `p`, over `[batch, len, n_embd]`.
    pub struct Gpt2Mlp[n_embd, inner, p: f64, act: Activation](x: [N, T, n_embd]) -> [N, T, n_embd] {
        c_fc: self::Conv1D(n_embd -> inner),
        act,
        c_proj: self::Conv1D(inner -> n_embd),
        dropout: Dropout(p),
    }
}

/// A pre-norm block.
#[derive(Module)]
pub struct Gpt2Block {
    /// Norm before attention.
    pub ln_1: LayerNorm,
    /// Attention.
    pub attn: Gpt2Attention,
    /// Norm before the MLP.
    pub ln_2: LayerNorm,
    /// MLP.
    pub mlp: Gpt2Mlp,
}

/// `GPT2Model`: embeddings, blocks, final norm.
#[derive(Module)]
pub struct Gpt2Model {
    /// Token embeddings (also the tied head).
    pub wte: Embedding,
    /// Learned positions.
    pub wpe: Embedding,
    /// Embedding dropout (training).
    pub drop: Dropout,
    /// The blocks.
    pub h: Vec<Gpt2Block>,
    /// Final norm.
    pub ln_f: LayerNorm,
}

/// `GPT2LMHeadModel`: next-token logits. The head is the token embedding matrix when
/// tied (no `lm_head.weight` of its own, as in the checkpoints), else its own weight.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
/// let config = Gpt2Config { vocab_size: 64, n_positions: 32, n_embd: 16, n_layer: 2, n_head: 2, ..Default::default() };
/// let model = Gpt2LMHeadModel::new(&config, &Device::Cpu);
/// let logits = model.forward(&Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]), None);
/// assert_eq!(logits.shape(), &[2, 2, 64]);
/// ```
#[derive(Module)]
pub struct Gpt2LMHeadModel {
    /// The transformer.
    pub transformer: Gpt2Model,
    /// The untied head's weight `[vocab, D]`.
    pub lm_head: Option<ferrograd::nn::Linear>,
    #[module(skip)]
    config: Gpt2Config,
}

/// N(0, 0.02), GPT-2's initialisation (zeros under `nn::init::skip_init`).
fn normal_weight(shape: &[usize], device: &Device) -> Tensor {
    if ferrograd::nn::init::init_skipped() {
        Tensor::zeros(shape, DType::F32, device)
    } else {
        Tensor::randn(shape, DType::F32, device).mul_scalar(0.02)
    }
}

fn ln(c: &Gpt2Config, device: &Device) -> LayerNorm {
    LayerNorm::with_options(&[c.n_embd], c.layer_norm_epsilon, true, true, device)
}

impl Gpt2LMHeadModel {
    /// A randomly initialised model (GPT-2's N(0, 0.02) weights).
    pub fn new(config: &Gpt2Config, device: &Device) -> Gpt2LMHeadModel {
        let c = config;
        let d = c.n_embd;
        let inner = c.n_inner.unwrap_or(4 * d);
        let act = Activation::from_name(&c.activation_function).unwrap_or(Activation::GeluTanh);
        let emb = |n: usize| {
            let mut e = Embedding::new(n, d, device);
            e.weight = normal_weight(&[n, d], device).requires_grad(true);
            e
        };
        let block = |_| Gpt2Block {
            ln_1: ln(c, device),
            attn: Gpt2Attention {
                c_attn: Conv1D::new(d, 3 * d, device),
                c_proj: Conv1D::new(d, d, device),
                resid_dropout: Dropout::new(c.resid_pdrop),
                heads: c.n_head,
                attn_p: c.attn_pdrop,
                training: true,
            },
            ln_2: ln(c, device),
            mlp: Gpt2Mlp::new(device, d, inner, c.resid_pdrop, act),
        };
        Gpt2LMHeadModel {
            transformer: Gpt2Model {
                wte: emb(c.vocab_size),
                wpe: emb(c.n_positions),
                drop: Dropout::new(c.embd_pdrop),
                h: (0..c.n_layer).map(block).collect(),
                ln_f: ln(c, device),
            },
            lm_head: (!c.tie_word_embeddings)
                .then(|| ferrograd::nn::Linear::with_bias(d, c.vocab_size, false, device)),
            config: c.clone(),
        }
    }

    /// Loads a folder (`GPT2LMHeadModel.from_pretrained(dir)`), in eval mode.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Gpt2LMHeadModel, ModelError> {
        Gpt2LMHeadModel::from_pretrained_with(dir, &Device::Cpu, None).map(|(m, _)| m)
    }

    /// [`Gpt2LMHeadModel::from_pretrained`] on `device`, in `dtype` ([`LoadDType`]: the module's f32, the checkpoint's own, or a given one).
    pub fn from_pretrained_with(
        dir: impl AsRef<Path>,
        device: &Device,
        dtype: impl Into<LoadDType>,
    ) -> Result<(Gpt2LMHeadModel, Loaded), ModelError> {
        let dir = dir.as_ref();
        let config = Gpt2Config::from_pretrained(dir)?;
        let options = LoadOptions {
            dtype: dtype.into(),
            prefixes: vec!["transformer.".into()],
        };
        hub::build_and_load(dir, &options, || Gpt2LMHeadModel::new(&config, device))
    }

    /// The config the model was built from.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }

    /// Logits `[batch, len, vocab]` of `input_ids` `[batch, len]`; `attention_mask`
    /// (1 token, 0 pad) for right-padded batches.
    #[track_caller]
    pub fn forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Tensor {
        crate::generation::forward_all(self, input_ids, attention_mask)
    }

    fn head(&self, h: &Tensor) -> Tensor {
        match &self.lm_head {
            Some(l) => l.forward(h),
            None => h.matmul(&self.transformer.wte.weight.t()),
        }
    }
}

impl CausalLM for Gpt2LMHeadModel {
    fn new_cache(&self) -> KvCache {
        KvCache::new(self.transformer.h.len())
    }

    #[track_caller]
    fn forward_cached(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: &mut KvCache,
        last_only: bool,
    ) -> Tensor {
        assert!(
            ids.dim() == 2,
            "Gpt2LMHeadModel: input_ids must be [batch, len], got {:?}",
            ids.shape()
        );
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let past = cache.len();
        assert!(
            past + t <= self.config.n_positions,
            "Gpt2LMHeadModel: {} positions exceed n_positions ({})",
            past + t,
            self.config.n_positions
        );
        assert_eq!(
            mask.shape(),
            &[b, past + t],
            "Gpt2LMHeadModel: the attention mask must be [batch, cached + len] = [{b}, {}]",
            past + t
        );
        let m = &self.transformer;
        let x = m.wte.forward(ids).add(&m.wpe.forward(positions));
        let mut h = m.drop.forward(&x);
        let allowed = attention_allowed(mask, past, t, None);
        for (block, slot) in m.h.iter().zip(cache.layer_slots()) {
            let a = block.attn.forward(&block.ln_1.forward(&h), &allowed, slot);
            h = h.add(&a);
            let f = block.mlp.forward(&block.ln_2.forward(&h));
            h = h.add(&f);
        }
        if last_only {
            let last = h.select(1, t - 1);
            self.head(&m.ln_f.forward(&last))
        } else {
            self.head(&m.ln_f.forward(&h))
        }
    }

    fn device(&self) -> Device {
        self.transformer.wte.weight.device()
    }
}

/// Which keys each query attends to, as [`scaled_dot_product_attention`] takes it: a
/// `[batch, 1, len, cached + len]` bool `mask` (query `i`, at `cached + i`, sees key `j`
/// when `j <= cached + i`, key `j` is no pad and, with a sliding `window`, `cached + i - j <
/// window`; a query that sees nothing, a left pad, sees every key instead, as
/// `transformers` does, so its unused output stays finite), or, when no key is a pad and
/// no window cuts in, none at all: plain causal attention (`causal`) for a prompt with
/// nothing cached, every key for one new token. `transformers` skips the mask in the same
/// cases (and, as it does, not while tracing for export), and attention without a mask
/// skips the masked half of the scores.
pub(crate) struct AttentionAllowed {
    /// The bool mask, when the attention needs one.
    pub(crate) mask: Option<Tensor>,
    /// Whether query `i` sees keys `0..=i` (the mask is `None` then).
    pub(crate) causal: bool,
}

impl AttentionAllowed {
    /// Scaled dot-product attention of `q` over `k`, `v` (`[batch, heads, len, dim]`)
    /// with these keys, attention dropout `p`.
    pub(crate) fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, p: f64) -> Tensor {
        scaled_dot_product_attention(q, k, v, self.mask.as_ref(), p, self.causal, None)
    }
}

/// [`AttentionAllowed`] for `mask` `[batch, cached + len]` (1 token, 0 pad) over `t` new
/// tokens after `past` cached ones, with an optional sliding `window`.
pub(crate) fn attention_allowed(
    mask: &Tensor,
    past: usize,
    t: usize,
    window: Option<usize>,
) -> AttentionAllowed {
    let total = past + t;
    let no_pad = || {
        mask.ne_scalar(0.0)
            .to_dtype(DType::I64)
            .to_vec::<i64>()
            .iter()
            .all(|&v| v != 0)
    };
    // Not while tracing for export: the graph would drop the mask for every input.
    if (t == 1 || past == 0)
        && window.is_none_or(|w| w >= total)
        && !ferrograd::onnx::is_tracing()
        && no_pad()
    {
        return AttentionAllowed {
            mask: None,
            causal: t > 1,
        };
    }
    AttentionAllowed {
        mask: Some(bool_mask(mask, past, t, window)),
        causal: false,
    }
}

/// The `[batch, 1, len, cached + len]` bool mask of [`AttentionAllowed`], built whatever
/// the padding.
fn bool_mask(mask: &Tensor, past: usize, t: usize, window: Option<usize>) -> Tensor {
    let b = mask.shape()[0];
    let total = past + t;
    let device = mask.device();
    let keys = mask.ne_scalar(0.0).reshape(&[b, 1, 1, total]);
    let q = Tensor::arange(past as f64, total as f64, 1.0, DType::I64, &device).reshape(&[t, 1]);
    let k = Tensor::arange(0.0, total as f64, 1.0, DType::I64, &device).reshape(&[1, total]);
    let mut causal = k.le(&q);
    if let Some(w) = window {
        causal = causal.logical_and(&k.gt(&q.sub_scalar(w as f64)));
    }
    let causal = causal.reshape(&[1, 1, t, total]);
    let allowed = keys.logical_and(&causal);
    let none = allowed.to_dtype(DType::I64).sum(&[-1], true).eq_scalar(0.0);
    // allowed | none
    allowed
        .logical_not()
        .logical_and(&none.logical_not())
        .logical_not()
}

impl Gpt2Attention {
    fn forward(
        &self,
        x: &Tensor,
        allowed: &AttentionAllowed,
        slot: crate::generation::LayerSlot<'_>,
    ) -> Tensor {
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let heads = self.heads;
        let qkv = self.c_attn.forward(x);
        let split = |i: usize| {
            qkv.narrow(-1, i * d, d)
                .reshape(&[b, t, heads, d / heads])
                .transpose(1, 2)
        };
        let q = split(0);
        let (k, v) = slot.append(split(1), split(2));
        let p = if self.training { self.attn_p } else { 0.0 };
        let y = allowed
            .attend(&q, &k, &v, p)
            .transpose(1, 2)
            .reshape(&[b, t, d]);
        self.resid_dropout.forward(&self.c_proj.forward(&y))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without pads, a prompt runs plain causal attention and one new token attends to
    /// every key, with no mask; both equal attention under the full bool mask. With a pad,
    /// cached keys before a longer prompt, or a sliding window that cuts in, the mask is
    /// built.
    #[test]
    fn attention_without_a_mask_where_none_is_needed_equals_the_masked_one() {
        ferrograd::manual_seed(3);
        let (b, heads, hd) = (2, 3, 8);
        let ones = |n: usize| Tensor::ones(&[b, n], DType::I64, &Device::Cpu);
        let mut padded = vec![1i64; b * 6];
        padded[6] = 0;
        let padded = Tensor::from_vec(padded, &[b, 6]);
        let cases: [(&Tensor, usize, usize, Option<usize>, bool); 6] = [
            (&ones(5), 0, 5, None, true),
            (&ones(4), 3, 1, None, true),
            (&ones(5), 0, 5, Some(5), true),
            (&ones(7), 3, 4, None, false),
            (&padded, 0, 6, None, false),
            (&ones(5), 0, 5, Some(3), false),
        ];
        for (mask, past, t, window, unmasked) in cases {
            let allowed = attention_allowed(mask, past, t, window);
            assert_eq!(allowed.mask.is_none(), unmasked, "{past} + {t}, {window:?}");
            let total = past + t;
            let q = Tensor::randn(&[b, heads, t, hd], DType::F32, &Device::Cpu);
            let k = Tensor::randn(&[b, heads, total, hd], DType::F32, &Device::Cpu);
            let v = Tensor::randn(&[b, heads, total, hd], DType::F32, &Device::Cpu);
            let got = allowed.attend(&q, &k, &v, 0.0);
            let full = bool_mask(mask, past, t, window);
            let want = scaled_dot_product_attention(&q, &k, &v, Some(&full), 0.0, false, None);
            let diff = got.sub(&want).abs().max_all().item::<f32>();
            assert!(diff < 1e-6, "{past} + {t}, {window:?}: differs by {diff}");
        }
    }
}
