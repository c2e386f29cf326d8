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
use ferrograd::nn::functional::{self as F, scaled_dot_product_attention};
use ferrograd::nn::{Dropout, Embedding, LayerNorm, Linear, Module};
use ferrograd::{DType, Device, Tensor};
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
        Activation::parse(&c.hidden_act).map_err(bad)?;
        Ok(c)
    }
}

/// A feed-forward activation named in a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Activation {
    Gelu,
    GeluTanh,
    Relu,
    Silu,
}

impl Activation {
    pub(crate) fn parse(name: &str) -> Result<Activation, String> {
        Ok(match name {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            other => return Err(format!("hidden_act {other:?} is not supported")),
        })
    }

    pub(crate) fn apply(self, x: &Tensor) -> Tensor {
        match self {
            Activation::Gelu => x.gelu(),
            Activation::GeluTanh => x.gelu_tanh(),
            Activation::Relu => x.relu(),
            Activation::Silu => x.silu(),
        }
    }
}

fn layer_norm(c: &BertConfig, device: &Device) -> LayerNorm {
    LayerNorm::with_options(&[c.hidden_size], c.layer_norm_eps, true, true, device)
}

/// Word, position and segment embeddings, summed and normalised.
#[derive(Module)]
pub struct BertEmbeddings {
    /// Token embeddings.
    pub word_embeddings: Embedding,
    /// Learned positions `0..max_position_embeddings`.
    pub position_embeddings: Embedding,
    /// Segment embeddings.
    pub token_type_embeddings: Embedding,
    /// The norm after the sum.
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Dropout (training).
    pub dropout: Dropout,
}

/// Multi-head self-attention with separate query, key and value projections.
#[derive(Module)]
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

/// The attention's output projection, residual and norm.
#[derive(Module)]
pub struct BertSelfOutput {
    /// Output projection.
    pub dense: Linear,
    /// Post-residual norm.
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Dropout (training).
    pub dropout: Dropout,
}

/// Self-attention and its output (`attention.self`, `attention.output`).
#[derive(Module)]
pub struct BertAttention {
    /// `attention.self`.
    #[module(rename = "self")]
    pub self_attention: BertSelfAttention,
    /// `attention.output`.
    pub output: BertSelfOutput,
}

/// The feed-forward's first projection.
#[derive(Module)]
pub struct BertIntermediate {
    /// `hidden -> intermediate`.
    pub dense: Linear,
}

/// The feed-forward's second projection, residual and norm.
#[derive(Module)]
pub struct BertOutput {
    /// `intermediate -> hidden`.
    pub dense: Linear,
    /// Post-residual norm.
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Dropout (training).
    pub dropout: Dropout,
}

/// One post-norm encoder layer.
#[derive(Module)]
pub struct BertLayer {
    /// Self-attention block.
    pub attention: BertAttention,
    /// Feed-forward, first half.
    pub intermediate: BertIntermediate,
    /// Feed-forward, second half.
    pub output: BertOutput,
    #[module(skip)]
    act: Activation,
}

/// The stack of layers (`encoder.layer.N`).
#[derive(Module)]
pub struct BertEncoder {
    /// The layers.
    pub layer: Vec<BertLayer>,
}

/// The `[CLS]` token's projection and tanh (`pooler_output`).
#[derive(Module)]
pub struct BertPooler {
    /// `hidden -> hidden`.
    pub dense: Linear,
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
        let act = Activation::parse(&c.hidden_act).unwrap_or(Activation::Gelu);
        let layer = |_| BertLayer {
            attention: BertAttention {
                self_attention: BertSelfAttention {
                    query: Linear::new(d, d, device),
                    key: Linear::new(d, d, device),
                    value: Linear::new(d, d, device),
                    heads: c.num_attention_heads,
                    dropout_p: c.attention_probs_dropout_prob,
                    training: true,
                },
                output: BertSelfOutput {
                    dense: Linear::new(d, d, device),
                    layer_norm: layer_norm(c, device),
                    dropout: Dropout::new(c.hidden_dropout_prob),
                },
            },
            intermediate: BertIntermediate {
                dense: Linear::new(d, c.intermediate_size, device),
            },
            output: BertOutput {
                dense: Linear::new(c.intermediate_size, d, device),
                layer_norm: layer_norm(c, device),
                dropout: Dropout::new(c.hidden_dropout_prob),
            },
            act,
        };
        BertModel {
            embeddings: BertEmbeddings {
                word_embeddings: Embedding::new(c.vocab_size, d, device),
                position_embeddings: Embedding::new(c.max_position_embeddings, d, device),
                token_type_embeddings: Embedding::new(c.type_vocab_size, d, device),
                layer_norm: layer_norm(c, device),
                dropout: Dropout::new(c.hidden_dropout_prob),
            },
            encoder: BertEncoder {
                layer: (0..c.num_hidden_layers).map(layer).collect(),
            },
            pooler: add_pooling_layer.then(|| BertPooler {
                dense: Linear::new(d, d, device),
            }),
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
        let device = input_ids.device();
        let e = &self.embeddings;
        let positions = Tensor::arange(0.0, t as f64, 1.0, DType::I64, &device);
        let types = match token_type_ids {
            Some(t) => t.clone(),
            None => Tensor::zeros(&[b, t], DType::I64, &device),
        };
        let h = e
            .word_embeddings
            .forward(input_ids)
            .add(&e.position_embeddings.forward(&positions))
            .add(&e.token_type_embeddings.forward(&types));
        let mut h = e.dropout.forward(&e.layer_norm.forward(&h));
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
        let pooler_output = self
            .pooler
            .as_ref()
            .map(|p| p.dense.forward(&h.select(1, 0)).tanh());
        BertModelOutput {
            last_hidden_state: h,
            pooler_output,
        }
    }
}

impl BertLayer {
    /// One layer over `[batch, len, hidden]`, `mask` `[batch, 1, 1, len]` (true: attend).
    pub fn forward(&self, h: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let a = self.attention.self_attention.forward(h, mask);
        let o = &self.attention.output;
        let h = dense_add_norm(&o.dense, &o.dropout, &a, h, &o.layer_norm);
        let dense = &self.intermediate.dense;
        let f = match (self.act, &dense.bias) {
            // Inference: the bias in the activation's pass (one pass fewer).
            (Activation::Gelu, Some(b)) if !ferrograd::autograd::is_grad_enabled() => {
                F::bias_gelu(&F::linear(&h, &dense.weight, None), b)
            }
            _ => self.act.apply(&dense.forward(&h)),
        };
        let out = &self.output;
        dense_add_norm(&out.dense, &out.dropout, &f, &h, &out.layer_norm)
    }
}

/// `norm(dropout(dense(x)) + residual)`, a sublayer's ending; with the dropout inactive
/// (eval mode) and nothing to differentiate, as `F::add_layer_norm` with the dense
/// layer's bias as its shift: one pass for the bias, the residual and the norm.
fn dense_add_norm(
    dense: &Linear,
    dropout: &Dropout,
    x: &Tensor,
    residual: &Tensor,
    norm: &LayerNorm,
) -> Tensor {
    if (dropout.training && dropout.p > 0.0) || ferrograd::autograd::is_grad_enabled() {
        return norm.forward(&dropout.forward(&dense.forward(x)).add(residual));
    }
    F::add_layer_norm(
        &F::linear(x, &dense.weight, None),
        residual,
        dense.bias.as_ref(),
        &norm.normalized_shape,
        norm.weight.as_ref(),
        norm.bias.as_ref(),
        norm.eps,
    )
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
