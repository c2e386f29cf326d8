//! The Llama family (`LlamaForCausalLM`, and the Mistral and Qwen2 variants): RMSNorm,
//! rotary positions (`rope_theta`, linear and Llama-3 frequency scaling), SwiGLU,
//! grouped-query attention; Qwen2's query/key/value biases, Mistral's sliding window.
//! Keys are Hugging Face's (`model.layers.0.self_attn.q_proj.weight`).

use crate::ModelError;
use crate::generation::{CausalLM, KvCache};
use crate::hub::{self, LoadDType, LoadOptions, Loaded};
use ferrograd::nn::{Embedding, Linear, Module, RMSNorm};
use ferrograd::{DType, Device, Tensor, network};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

/// How rotary frequencies are scaled for long contexts (`rope_scaling` /
/// `rope_parameters`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor` (`"linear"`).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3.1's per-frequency scaling (`"llama3"`).
    Llama3 {
        /// Low frequencies are divided by it.
        factor: f64,
        /// Wavelengths above `original / low_freq_factor` are scaled fully.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context the model was trained on.
        original_max_position_embeddings: f64,
    },
}

/// `config.json` of a Llama, Mistral or Qwen2 checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// `llama`, `mistral` or `qwen2`.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width.
    pub hidden_size: usize,
    /// SwiGLU width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than the query heads).
    pub num_key_value_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Positions the model was trained on.
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Biases on the query, key and value projections (Qwen2; Llama's
    /// `attention_bias`).
    pub qkv_bias: bool,
    /// A bias on the output projection (Llama's `attention_bias`).
    pub o_bias: bool,
    /// Biases on the MLP (`mlp_bias`).
    pub mlp_bias: bool,
    /// Keys further back than this are not attended to (Mistral, Qwen2 with
    /// `use_sliding_window`).
    pub sliding_window: Option<usize>,
    /// The head shares the token embeddings.
    pub tie_word_embeddings: bool,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default)]
    max_position_embeddings: Option<usize>,
    #[serde(default)]
    rms_norm_eps: Option<f64>,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    rope_scaling: Option<Value>,
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(default)]
    attention_bias: Option<bool>,
    #[serde(default)]
    mlp_bias: Option<bool>,
    #[serde(default)]
    sliding_window: Option<usize>,
    #[serde(default)]
    use_sliding_window: Option<bool>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    hidden_act: Option<String>,
}

impl LlamaConfig {
    /// Reads `dir/config.json`: `rope_theta` at the top level or inside
    /// `rope_parameters`/`rope_scaling` (as `transformers` 4.x and 5.x write them),
    /// refusing a scaling or activation this port does not implement.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<LlamaConfig, ModelError> {
        let path = dir.as_ref().join("config.json");
        let raw: RawConfig = hub::read_json(&path)?;
        LlamaConfig::from_raw(raw).map_err(|reason| ModelError::Config { path, reason })
    }

    /// Parses a config from JSON text (see [`LlamaConfig::from_pretrained`]).
    ///
    /// ```
    /// use ferrograd_models::llama::{LlamaConfig, RopeScaling};
    /// let c = LlamaConfig::from_json(r#"{"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
    ///     "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    ///     "num_key_value_heads": 2, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3",
    ///     "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    ///     "original_max_position_embeddings": 8192}}"#).unwrap();
    /// assert_eq!((c.head_dim, c.rope_theta), (16, 500000.0));
    /// assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { .. }));
    /// ```
    pub fn from_json(text: &str) -> Result<LlamaConfig, String> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        LlamaConfig::from_raw(raw)
    }

    fn from_raw(r: RawConfig) -> Result<LlamaConfig, String> {
        let model_type = r.model_type.unwrap_or_else(|| "llama".into());
        if !["llama", "mistral", "qwen2"].contains(&model_type.as_str()) {
            return Err(format!(
                "model_type {model_type:?} is not of the Llama family (llama, mistral, qwen2)"
            ));
        }
        if let Some(act) = &r.hidden_act
            && act != "silu"
        {
            return Err(format!(
                "hidden_act {act:?} is not supported (only \"silu\")"
            ));
        }
        if r.num_attention_heads == 0 {
            return Err("num_attention_heads is 0".into());
        }
        let kv = r.num_key_value_heads.unwrap_or(r.num_attention_heads);
        if kv == 0 || !r.num_attention_heads.is_multiple_of(kv) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {kv}",
                r.num_attention_heads
            ));
        }
        let head_dim = r.head_dim.unwrap_or(r.hidden_size / r.num_attention_heads);
        // `rope_parameters` (transformers 5) or `rope_scaling` (4.x), theta anywhere.
        let params = r
            .rope_parameters
            .or(r.rope_scaling)
            .filter(|v| !v.is_null());
        let get = |k: &str| {
            params
                .as_ref()
                .and_then(|p| p.get(k))
                .and_then(Value::as_f64)
        };
        let rope_theta = r
            .rope_theta
            .or_else(|| get("rope_theta"))
            .unwrap_or(10_000.0);
        let kind = params
            .as_ref()
            .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let need = |k: &str| get(k).ok_or_else(|| format!("rope scaling {kind:?} needs {k}"));
        let rope_scaling = match kind.as_str() {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear {
                factor: need("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_max_position_embeddings: need("original_max_position_embeddings")?,
            },
            other => {
                return Err(format!(
                    "rope type {other:?} is not supported (default, linear, llama3)"
                ));
            }
        };
        let qwen = model_type == "qwen2";
        let attention_bias = r.attention_bias.unwrap_or(false);
        let sliding_window = match model_type.as_str() {
            "mistral" => r.sliding_window,
            "qwen2" if r.use_sliding_window == Some(true) => r.sliding_window,
            _ => None,
        };
        Ok(LlamaConfig {
            qkv_bias: qwen || attention_bias,
            o_bias: attention_bias && !qwen,
            mlp_bias: r.mlp_bias.unwrap_or(false),
            model_type,
            vocab_size: r.vocab_size,
            hidden_size: r.hidden_size,
            intermediate_size: r.intermediate_size,
            num_hidden_layers: r.num_hidden_layers,
            num_attention_heads: r.num_attention_heads,
            num_key_value_heads: kv,
            head_dim,
            max_position_embeddings: r.max_position_embeddings.unwrap_or(2048),
            rms_norm_eps: r.rms_norm_eps.unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            sliding_window,
            tie_word_embeddings: r.tie_word_embeddings.unwrap_or(false),
        })
    }

    /// The rotary inverse frequencies `[head_dim / 2]`, scaled.
    pub fn inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim;
        (0..d / 2)
            .map(|i| {
                // In f32, as transformers computes them.
                let base = (self.rope_theta as f32).powf((2 * i) as f32 / d as f32);
                let f = 1.0 / base;
                match &self.rope_scaling {
                    RopeScaling::None => f,
                    RopeScaling::Linear { factor } => f / *factor as f32,
                    RopeScaling::Llama3 {
                        factor,
                        low_freq_factor,
                        high_freq_factor,
                        original_max_position_embeddings: old,
                    } => {
                        let (factor, low, high, old) = (
                            *factor as f32,
                            *low_freq_factor as f32,
                            *high_freq_factor as f32,
                            *old as f32,
                        );
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let (low_wavelen, high_wavelen) = (old / low, old / high);
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    }
                }
            })
            .collect()
    }
}

/// Self-attention with rotary positions and grouped key/value heads.
#[derive(Module)]
pub struct LlamaAttention {
    /// Query projection.
    pub q_proj: Linear,
    /// Key projection (`kv_heads * head_dim`).
    pub k_proj: Linear,
    /// Value projection.
    pub v_proj: Linear,
    /// Output projection.
    pub o_proj: Linear,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    kv_heads: usize,
    #[module(skip)]
    head_dim: usize,
}

network! {
    /// SwiGLU (`LlamaMLP`): `down_proj(silu(gate_proj(x)) * up_proj(x))`, with biases
    /// when the config's `mlp_bias` says so.
    pub struct LlamaMlp[hidden, intermediate, bias: bool](x: [N, T, hidden]) -> [N, T, hidden] {
        let gate = x -> gate_proj: Linear(hidden -> intermediate, bias = bias) -> silu;
        let up = x -> up_proj: Linear(hidden -> intermediate, bias = bias);
        (gate * up) -> down_proj: Linear(intermediate -> hidden, bias = bias)
    }
}

/// A pre-norm decoder layer.
#[derive(Module)]
pub struct LlamaDecoderLayer {
    /// Norm before attention.
    pub input_layernorm: RMSNorm,
    /// Attention.
    pub self_attn: LlamaAttention,
    /// Norm before the MLP.
    pub post_attention_layernorm: RMSNorm,
    /// MLP.
    pub mlp: LlamaMlp,
}

/// `LlamaModel`: embeddings, layers, final norm.
#[derive(Module)]
pub struct LlamaModel {
    /// Token embeddings.
    pub embed_tokens: Embedding,
    /// The layers.
    pub layers: Vec<LlamaDecoderLayer>,
    /// Final norm.
    pub norm: RMSNorm,
}

/// `LlamaForCausalLM` (also Mistral's and Qwen2's): next-token logits.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd_models::llama::{LlamaConfig, LlamaForCausalLM};
/// let c = LlamaConfig::from_json(r#"{"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
///     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}"#).unwrap();
/// let model = LlamaForCausalLM::new(&c, &Device::Cpu);
/// let logits = model.forward(&Tensor::from_vec(vec![1i64, 2, 3], &[1, 3]), None);
/// assert_eq!(logits.shape(), &[1, 3, 64]);
/// ```
#[derive(Module)]
pub struct LlamaForCausalLM {
    /// The decoder.
    pub model: LlamaModel,
    /// The untied head.
    pub lm_head: Option<Linear>,
    #[module(skip)]
    config: LlamaConfig,
    #[module(skip)]
    inv_freq: Tensor,
}

fn linear(i: usize, o: usize, bias: bool, device: &Device) -> Linear {
    Linear::with_bias(i, o, bias, device)
}

impl LlamaForCausalLM {
    /// A randomly initialised model.
    pub fn new(config: &LlamaConfig, device: &Device) -> LlamaForCausalLM {
        let c = config;
        let (d, hd) = (c.hidden_size, c.head_dim);
        let norm = || RMSNorm::new(&[d], Some(c.rms_norm_eps), device);
        let layer = |_| LlamaDecoderLayer {
            input_layernorm: norm(),
            self_attn: LlamaAttention {
                q_proj: linear(d, c.num_attention_heads * hd, c.qkv_bias, device),
                k_proj: linear(d, c.num_key_value_heads * hd, c.qkv_bias, device),
                v_proj: linear(d, c.num_key_value_heads * hd, c.qkv_bias, device),
                o_proj: linear(c.num_attention_heads * hd, d, c.o_bias, device),
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: hd,
            },
            post_attention_layernorm: norm(),
            mlp: LlamaMlp::new(device, d, c.intermediate_size, c.mlp_bias),
        };
        let inv = c.inv_freq();
        let n = inv.len();
        let inv_freq = Tensor::from_vec(inv, &[n]);
        let inv_freq = if *device == Device::Cpu {
            inv_freq
        } else {
            inv_freq
                .to_device(device)
                .unwrap_or_else(|e| panic!("LlamaForCausalLM::new: {e}"))
        };
        LlamaForCausalLM {
            model: LlamaModel {
                embed_tokens: Embedding::new(c.vocab_size, d, device),
                layers: (0..c.num_hidden_layers).map(layer).collect(),
                norm: norm(),
            },
            lm_head: (!c.tie_word_embeddings).then(|| linear(d, c.vocab_size, false, device)),
            config: c.clone(),
            inv_freq,
        }
    }

    /// Loads a folder (`AutoModelForCausalLM.from_pretrained(dir)` for llama, mistral
    /// and qwen2), in eval mode.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<LlamaForCausalLM, ModelError> {
        LlamaForCausalLM::from_pretrained_with(dir, &Device::Cpu, None).map(|(m, _)| m)
    }

    /// [`LlamaForCausalLM::from_pretrained`] on `device`, in `dtype` ([`LoadDType`]: the module's f32, the checkpoint's own, or a given one).
    pub fn from_pretrained_with(
        dir: impl AsRef<Path>,
        device: &Device,
        dtype: impl Into<LoadDType>,
    ) -> Result<(LlamaForCausalLM, Loaded), ModelError> {
        let dir = dir.as_ref();
        let config = LlamaConfig::from_pretrained(dir)?;
        let options = LoadOptions {
            dtype: dtype.into(),
            prefixes: vec!["model.".into()],
        };
        hub::build_and_load(dir, &options, || LlamaForCausalLM::new(&config, device))
    }

    /// The config.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Logits `[batch, len, vocab]`; `attention_mask` (1 token, 0 pad) for
    /// right-padded batches.
    pub fn forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Tensor {
        crate::generation::forward_all(self, input_ids, attention_mask)
    }

    fn head(&self, h: &Tensor) -> Tensor {
        match &self.lm_head {
            Some(l) => l.forward(h),
            None => h.matmul(&self.model.embed_tokens.weight.t()),
        }
    }
}

/// `(cos, sin)` `[batch, 1, len, head_dim]` of `positions` `[batch, len]`.
fn rotary(inv_freq: &Tensor, positions: &Tensor, dtype: DType) -> (Tensor, Tensor) {
    let (b, t) = (positions.shape()[0], positions.shape()[1]);
    let n = inv_freq.shape()[0];
    let angles = positions
        .to_dtype(DType::F32)
        .reshape(&[b, t, 1])
        .mul(&inv_freq.reshape(&[1, 1, n]));
    let emb = Tensor::cat(&[&angles, &angles], -1).unsqueeze(1);
    (emb.cos().to_dtype(dtype), emb.sin().to_dtype(dtype))
}

/// `x * cos + rotate_half(x) * sin`.
fn apply_rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let d = x.shape()[x.dim() - 1];
    let (x1, x2) = (x.narrow(-1, 0, d / 2), x.narrow(-1, d / 2, d / 2));
    let rotated = Tensor::cat(&[&x2.neg(), &x1], -1);
    x.mul(cos).add(&rotated.mul(sin))
}

impl CausalLM for LlamaForCausalLM {
    fn new_cache(&self) -> KvCache {
        KvCache::new(self.model.layers.len())
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
            "LlamaForCausalLM: input_ids must be [batch, len], got {:?}",
            ids.shape()
        );
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let past = cache.len();
        assert_eq!(
            mask.shape(),
            &[b, past + t],
            "LlamaForCausalLM: the attention mask must be [batch, cached + len] = [{b}, {}]",
            past + t
        );
        let mut h = self.model.embed_tokens.forward(ids);
        let (cos, sin) = rotary(&self.inv_freq, positions, h.dtype());
        let allowed = crate::gpt2::attention_allowed(mask, past, t, self.config.sliding_window);
        for (layer, slot) in self.model.layers.iter().zip(cache.layer_slots()) {
            let a = layer.self_attn.forward(
                &layer.input_layernorm.forward(&h),
                &cos,
                &sin,
                &allowed,
                slot,
            );
            h = h.add(&a);
            let f = layer
                .mlp
                .forward(&layer.post_attention_layernorm.forward(&h));
            h = h.add(&f);
        }
        if last_only {
            self.head(&self.model.norm.forward(&h.select(1, t - 1)))
        } else {
            self.head(&self.model.norm.forward(&h))
        }
    }

    fn device(&self) -> Device {
        self.model.embed_tokens.weight.device()
    }
}

impl LlamaAttention {
    fn forward(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        allowed: &crate::gpt2::AttentionAllowed,
        slot: crate::generation::LayerSlot<'_>,
    ) -> Tensor {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (h, kvh, hd) = (self.heads, self.kv_heads, self.head_dim);
        let q = self
            .q_proj
            .forward(x)
            .reshape(&[b, t, h, hd])
            .transpose(1, 2);
        let k = self
            .k_proj
            .forward(x)
            .reshape(&[b, t, kvh, hd])
            .transpose(1, 2);
        let v = self
            .v_proj
            .forward(x)
            .reshape(&[b, t, kvh, hd])
            .transpose(1, 2);
        let q = apply_rotary(&q, cos, sin);
        let (k, v) = slot.append(apply_rotary(&k, cos, sin), v);
        // Grouped-query attention: every key/value head serves `h / kvh` query heads.
        let rep = h / kvh;
        let (k, v) = if rep == 1 {
            (k, v)
        } else {
            let s = k.shape()[2];
            let grow = |x: &Tensor| {
                x.unsqueeze(2)
                    .expand(&[
                        b as isize,
                        kvh as isize,
                        rep as isize,
                        s as isize,
                        hd as isize,
                    ])
                    .reshape(&[b, h, s, hd])
            };
            (grow(&k), grow(&v))
        };
        let y = allowed
            .attend(&q, &k, &v, 0.0)
            .transpose(1, 2)
            .reshape(&[b, t, h * hd]);
        self.o_proj.forward(&y)
    }
}
