//! BERT (`transformers.BertModel`) and the sentence-transformers encoder built on it
//! (all-MiniLM, all-mpnet-style mean pooling and normalisation).
//!
//! The modules' keys are Hugging Face's (`encoder.layer.0.attention.self.query.weight`),
//! so a checkpoint loads without a renaming table; a task model's `bert.` prefix is
//! stripped.

mod sentence;

pub use sentence::{Pooling, SentenceEncoder};

use crate::ModelError;
use crate::hub::{self, LoadDType, LoadOptions, Loaded};
use ferrograd::nn::functional::scaled_dot_product_attention;
use ferrograd::nn::{Activation, Linear, Module};
use ferrograd::{DType, Device, Tensor, network};
use serde::Deserialize;
use std::path::Path;

fn default_act() -> String {
    "gelu".into()
}
fn default_eps() -> f64 {
    1e-12
}
fn default_types() -> usize {
    2
}
fn default_dropout() -> f64 {
    0.1
}
fn default_positions() -> String {
    "absolute".into()
}

/// `config.json` of a BERT checkpoint (`transformers.BertConfig`; unknown keys ignored).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// The feed-forward activation: `gelu` (erf), `gelu_new`/`gelu_pytorch_tanh`
    /// (tanh), `relu`, `silu`.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Learned positions.
    pub max_position_embeddings: usize,
    /// Segment types.
    #[serde(default = "default_types")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Dropout of hidden states (training).
    #[serde(default = "default_dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout of attention weights (training).
    #[serde(default = "default_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Only `absolute` is supported.
    #[serde(default = "default_positions")]
    pub position_embedding_type: String,
}

impl BertConfig {
    /// Reads `dir/config.json`, refusing what this port does not implement.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<BertConfig, ModelError> {
        let c: BertConfig = hub::read_config(&dir)?;
        let bad = |reason: String| ModelError::Config {
            path: dir.as_ref().join("config.json"),
            reason,
        };
        if c.position_embedding_type != "absolute" {
            return Err(bad(format!(
                "position_embedding_type {:?} is not supported (only \"absolute\")",
                c.position_embedding_type
            )));
        }
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                c.hidden_size, c.num_attention_heads
            )));
        }
        activation(&c.hidden_act).map_err(bad)?;
        Ok(c)
    }
}

/// The feed-forward activation a config names (`transformers`' `ACT2FN`: `gelu` is
/// erf's, `gelu_new`/`gelu_pytorch_tanh` the tanh form, `relu`, `silu`/`swish`, `tanh`,
/// `sigmoid`: `nn::Activation::from_name`).
pub(crate) fn activation(name: &str) -> Result<Activation, String> {
    Activation::from_name(name).ok_or_else(|| format!("hidden_act {name:?} is not supported"))
}

network! {
    /// Word, position and segment embeddings, summed, normalised (the key `LayerNorm`)
    /// and dropped out; positions `0..T` are made inside.
    pub struct BertEmbeddings[vocab, hidden, positions, types, eps: f64, p: f64](
        input_ids: [N, T]: i64,
        token_type_ids: [N, T]: i64,
    ) -> [N, T, hidden] {
        let words = word_embeddings: Embedding(vocab -> hidden)(input_ids);
        let at = position_embeddings: Embedding(positions -> hidden)(arange(T));
        let segments = token_type_embeddings: Embedding(types -> hidden)(token_type_ids);
        (words + at + segments) -> LayerNorm: LayerNorm(hidden, eps = eps) -> dropout: Dropout(p)
    }

    /// The attention's output projection, dropout, residual and post-norm: in eval mode
    /// one pass after the projection (`nn::fusion::linear_dropout_add_layer_norm`).
    pub struct BertSelfOutput[hidden, eps: f64, p: f64](
        hidden_states: [N, T, hidden],
        input_tensor: [N, T, hidden],
    ) -> [N, T, hidden] {
        let h = hidden_states -> dense: Linear(hidden -> hidden) -> dropout: Dropout(p);
        (h + input_tensor) -> LayerNorm: LayerNorm(hidden, eps = eps)
    }

    /// Self-attention and its output (`attention.self`, `attention.output`); `mask`
    /// `[batch, 1, 1, len]` (true: attend), or none for every token.
    pub struct BertAttention[hidden, heads, eps: f64, p: f64, attention_p: f64](
        x: [N, T, hidden],
        mask: Option<[N, 1, 1, T]: bool>,
    ) -> [N, T, hidden] {
        let a = self: BertSelfAttention(hidden, heads, p = attention_p)(x, mask);
        output: BertSelfOutput(hidden, eps = eps, p = p)(a, x)
    }

    /// The feed-forward's first projection and the configured activation (an exact GELU
    /// takes the bias in its pass at inference: `nn::fusion::linear_activation`).
    pub struct BertIntermediate[hidden, intermediate, act: Activation](x: [N, T, hidden])
        -> [N, T, intermediate]
    {
        dense: Linear(hidden -> intermediate),
        act,
    }

    /// The feed-forward's second projection, dropout, residual and post-norm.
    pub struct BertOutput[intermediate, hidden, eps: f64, p: f64](
        hidden_states: [N, T, intermediate],
        input_tensor: [N, T, hidden],
    ) -> [N, T, hidden] {
        let h = hidden_states -> dense: Linear(intermediate -> hidden) -> dropout: Dropout(p);
        (h + input_tensor) -> LayerNorm: LayerNorm(hidden, eps = eps)
    }

    /// One post-norm encoder layer (`encoder.layer.{i}`).
    pub struct BertLayer[hidden, heads, intermediate_size, eps: f64, p: f64, attention_p: f64, act: Activation](
        x: [N, T, hidden],
        mask: Option<[N, 1, 1, T]: bool>,
    ) -> [N, T, hidden] {
        let a = attention: BertAttention(hidden, heads, eps = eps, p = p, attention_p = attention_p)(x, mask);
        let f = a -> intermediate: BertIntermediate(hidden, intermediate_size, act = act);
        output: BertOutput(intermediate_size, hidden, eps = eps, p = p)(f, a)
    }

    /// The `[CLS]` token's projection and tanh (`pooler_output`).
    pub struct BertPooler[hidden](h: [N, T, hidden]) -> [N, hidden] {
        select(1, 0),
        dense: Linear(hidden -> hidden),
        tanh,
    }
}

/// Multi-head self-attention with separate query, key and value projections
/// (`attention.self`): the heads split and joined by hand around one fused
/// scaled-dot-product attention, a layer of `network!` through its declared shapes.
#[derive(Module)]
#[module(
    new = [hidden, heads, p: f64],
    input = (x: [N, T, hidden], mask: Option<[N, 1, 1, T]: bool>),
    output = [N, T, hidden],
    parameters = 3 * (hidden * hidden + hidden)
)]
pub struct BertSelfAttention {
    /// Query projection.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    dropout_p: f64,
    #[module(training)]
    training: bool,
}

impl BertSelfAttention {
    /// `heads` heads over `hidden` features, attention dropout `p` (in training).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// use ferrograd_models::bert::BertSelfAttention;
    /// let attn = BertSelfAttention::new(16, 4, 0.0, &Device::Cpu);
    /// assert_eq!(attn.num_parameters(), BertSelfAttention::num_parameters_for(16, 4));
    /// let y = attn.forward(&Tensor::randn(&[2, 5, 16], DType::F32, &Device::Cpu), None);
    /// assert_eq!(y.shape(), &[2, 5, 16]);
    /// ```
    pub fn new(hidden: usize, heads: usize, p: f64, device: &Device) -> BertSelfAttention {
        BertSelfAttention {
            query: Linear::new(hidden, hidden, device),
            key: Linear::new(hidden, hidden, device),
            value: Linear::new(hidden, hidden, device),
            heads,
            dropout_p: p,
            training: true,
        }
    }
}

/// The stack of layers (`encoder.layer.{i}`), as many as the config says.
#[derive(Module)]
pub struct BertEncoder {
    /// The layers.
    pub layer: Vec<BertLayer>,
}

/// `BertModel`: embeddings, encoder and (optionally) pooler.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd_models::bert::{BertConfig, BertModel};
/// let config = BertConfig {
///     vocab_size: 50, hidden_size: 16, num_hidden_layers: 2, num_attention_heads: 4,
///     intermediate_size: 32, hidden_act: "gelu".into(), max_position_embeddings: 32,
///     type_vocab_size: 2, layer_norm_eps: 1e-12, hidden_dropout_prob: 0.1,
///     attention_probs_dropout_prob: 0.1, position_embedding_type: "absolute".into(),
/// };
/// let mut model = BertModel::new(&config, true, &Device::Cpu);
/// model.eval();
/// let ids = Tensor::from_vec(vec![1i64, 5, 7, 2, 1, 9, 2, 0], &[2, 4]);
/// let mask = Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 1, 1, 0], &[2, 4]);
/// let out = model.forward(&ids, Some(&mask), None);
/// assert_eq!(out.last_hidden_state.shape(), &[2, 4, 16]);
/// assert_eq!(out.pooler_output.unwrap().shape(), &[2, 16]);
/// ```
#[derive(Module)]
pub struct BertModel {
    /// Embeddings.
    pub embeddings: BertEmbeddings,
    /// Encoder layers.
    pub encoder: BertEncoder,
    /// The pooler (`add_pooling_layer`).
    pub pooler: Option<BertPooler>,
    #[module(skip)]
    config: BertConfig,
}

/// `BertModel`'s outputs.
#[derive(Clone, Debug)]
pub struct BertModelOutput {
    /// `[batch, len, hidden]`.
    pub last_hidden_state: Tensor,
    /// `[batch, hidden]`: tanh of the projected `[CLS]` state, with a pooler.
    pub pooler_output: Option<Tensor>,
}

impl BertModel {
    /// A randomly initialised model (PyTorch's default initialisation of each layer).
    pub fn new(config: &BertConfig, add_pooling_layer: bool, device: &Device) -> BertModel {
        let c = config;
        let d = c.hidden_size;
        let act = activation(&c.hidden_act).unwrap_or(Activation::Gelu);
        let (eps, p) = (c.layer_norm_eps, c.hidden_dropout_prob);
        BertModel {
            embeddings: BertEmbeddings::new(
                device,
                c.vocab_size,
                d,
                c.max_position_embeddings,
                c.type_vocab_size,
                eps,
                p,
            ),
            encoder: BertEncoder {
                layer: (0..c.num_hidden_layers)
                    .map(|_| {
                        BertLayer::new(
                            device,
                            d,
                            c.num_attention_heads,
                            c.intermediate_size,
                            eps,
                            p,
                            c.attention_probs_dropout_prob,
                            act,
                        )
                    })
                    .collect(),
            },
            pooler: add_pooling_layer.then(|| BertPooler::new(device, d)),
            config: c.clone(),
        }
    }

    /// Loads a folder (`BertModel.from_pretrained(dir)`), in eval mode: `config.json`
    /// and the safetensors weights, a `bert.` prefix stripped; the pooler is kept when
    /// the checkpoint has one.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<BertModel, ModelError> {
        BertModel::from_pretrained_with(dir, &Device::Cpu, None).map(|(m, _)| m)
    }

    /// [`BertModel::from_pretrained`] on `device`, in `dtype` ([`LoadDType`]: the module's, the checkpoint's or a given one); also
    /// returns what was loaded.
    pub fn from_pretrained_with(
        dir: impl AsRef<Path>,
        device: &Device,
        dtype: impl Into<LoadDType>,
    ) -> Result<(BertModel, Loaded), ModelError> {
        let dir = dir.as_ref();
        let config = BertConfig::from_pretrained(dir)?;
        let options = LoadOptions {
            dtype: dtype.into(),
            prefixes: vec!["bert.".into()],
        };
        // The pooler is optional in checkpoints: try with it, then without.
        // No random weights: the checkpoint's replace them (memory: one copy of the model).
        let mut model = ferrograd::nn::init::skip_init(|| BertModel::new(&config, true, device));
        let loaded = match hub::load_weights(&mut model, dir, &options) {
            Ok(l) => l,
            Err(ModelError::Missing { keys, .. })
                if keys.iter().all(|k| k.starts_with("pooler.")) =>
            {
                model.pooler = None;
                hub::load_weights(&mut model, dir, &options)?
            }
            Err(e) => return Err(e),
        };
        model.eval();
        Ok((model, loaded))
    }

    /// The config the model was built from.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The forward pass: `input_ids` `[batch, len]` (int64), `attention_mask` (1 for a
    /// token, 0 for padding; all ones if `None`), `token_type_ids` (zeros if `None`).
    ///
    /// Panics (naming both) when the sequence is longer than the model's positions.
    #[track_caller]
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        token_type_ids: Option<&Tensor>,
    ) -> BertModelOutput {
        assert!(
            input_ids.dim() == 2,
            "BertModel::forward: input_ids must be [batch, len], got {:?}",
            input_ids.shape()
        );
        let (b, t) = (input_ids.shape()[0], input_ids.shape()[1]);
        assert!(
            t <= self.config.max_position_embeddings,
            "BertModel::forward: a sequence of {t} tokens is longer than max_position_embeddings ({})",
            self.config.max_position_embeddings
        );
        let types = match token_type_ids {
            Some(t) => t.clone(),
            None => Tensor::zeros(&[b, t], DType::I64, &input_ids.device()),
        };
        let mut h = self.embeddings.forward(input_ids, &types);
        // Keys that take part: [batch, 1, 1, len] of bool, broadcast over heads and queries;
        // none when every token takes part (as `transformers` skips an all-ones mask), so
        // that attention runs unmasked, except while tracing for export (the graph would
        // drop the mask for every input).
        let mask = attention_mask
            .map(|m| m.ne_scalar(0.0))
            .filter(|keep| {
                ferrograd::onnx::is_tracing()
                    || !keep
                        .to_dtype(DType::I64)
                        .to_vec::<i64>()
                        .iter()
                        .all(|&v| v != 0)
            })
            .map(|keep| keep.reshape(&[b, 1, 1, t]));
        for layer in &self.encoder.layer {
            h = layer.forward(&h, mask.as_ref());
        }
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(&h));
        BertModelOutput {
            last_hidden_state: h,
            pooler_output,
        }
    }
}

impl BertSelfAttention {
    /// Scaled dot-product attention of every head, `[batch, len, hidden]` in and out.
    pub fn forward(&self, h: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let (b, t, d) = (h.shape()[0], h.shape()[1], h.shape()[2]);
        let heads = self.heads;
        let split = |x: Tensor| x.reshape(&[b, t, heads, d / heads]).transpose(1, 2);
        let q = split(self.query.forward(h));
        let k = split(self.key.forward(h));
        let v = split(self.value.forward(h));
        let p = if self.training { self.dropout_p } else { 0.0 };
        scaled_dot_product_attention(&q, &k, &v, mask, p, false, None)
            .transpose(1, 2)
            .reshape(&[b, t, d])
    }
}
