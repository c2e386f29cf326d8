//! Transformer layers (`nn.TransformerEncoderLayer`, `nn.TransformerDecoderLayer`,
//! `nn.TransformerEncoder`, `nn.TransformerDecoder`, `nn.Transformer`), with PyTorch's
//! arguments, defaults, sub-module names and state-dict keys.

use super::attention::{MhaArgs, MultiheadAttention};
use super::functional as F;
use super::{LayerNorm, Linear, Module, ModuleList};
use crate::{Device, Tensor};

/// An activation chosen by configuration: a transformer layer's feed-forward activation
/// (PyTorch's `activation="relu" | "gelu"`), a Hugging Face config's `hidden_act`, or a
/// `network!`'s activation parameter (`struct Mlp[d, act: Activation]`, applied as `->
/// act`).
///
/// ```
/// use ferrograd_runtime::nn::Activation;
/// use ferrograd_runtime::Tensor;
/// let act = Activation::from_name("gelu_new").unwrap();
/// assert_eq!((act, act.name()), (Activation::GeluTanh, "gelu_tanh"));
/// let y = act.apply(&Tensor::from_vec(vec![0.0f32, 1.0], &[2]));
/// assert!((y.to_vec::<f32>()[1] - 0.8412).abs() < 1e-4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activation {
    /// `relu` (PyTorch's default).
    #[default]
    Relu,
    /// Exact `gelu`.
    Gelu,
    /// `gelu` with the tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    /// `silu` (`swish`).
    Silu,
    /// `tanh`.
    Tanh,
    /// `sigmoid`.
    Sigmoid,
}

impl Activation {
    /// Applies it.
    pub fn apply(self, x: &Tensor) -> Tensor {
        match self {
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu(),
            Activation::GeluTanh => x.gelu_tanh(),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
        }
    }

    /// Its `network!` name (`"relu"`, `"gelu"`, `"gelu_tanh"`, `"silu"`, `"tanh"`,
    /// `"sigmoid"`), which `onnx::GraphWriter::activation` takes.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
        }
    }

    /// By its `network!` name or a Hugging Face `hidden_act` (`gelu_new`,
    /// `gelu_pytorch_tanh`, `gelu_fast`, `swish`); `None` for any other.
    pub fn from_name(name: &str) -> Option<Activation> {
        Some(match name {
            "relu" => Activation::Relu,
            "gelu" => Activation::Gelu,
            "gelu_tanh" | "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "silu" | "swish" => Activation::Silu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            _ => return None,
        })
    }
}

/// The construction options shared by the transformer layers (PyTorch's defaults:
/// feed-forward 2048, dropout 0.1, relu, eps 1e-5, `[L, N, E]` inputs, post-norm, biases).
///
/// ```
/// let c = ferrograd_runtime::nn::TransformerConfig::new(512, 8);
/// assert_eq!((c.dim_feedforward, c.dropout, c.layer_norm_eps, c.norm_first), (2048, 0.1, 1e-5, false));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerConfig {
    /// Width `E`.
    pub d_model: usize,
    /// Attention heads.
    pub nhead: usize,
    /// Hidden width of the feed-forward block.
    pub dim_feedforward: usize,
    /// Dropout after attention, in and after the feed-forward block, and on the
    /// attention weights.
    pub dropout: f64,
    /// The feed-forward activation.
    pub activation: Activation,
    /// Layer norm epsilon.
    pub layer_norm_eps: f64,
    /// Inputs are `[N, L, E]`.
    pub batch_first: bool,
    /// Pre-norm (norm before each block) instead of post-norm.
    pub norm_first: bool,
    /// Biases in the linear layers and layer norms.
    pub bias: bool,
}

impl TransformerConfig {
    /// `d_model` and `nhead` with PyTorch's defaults for the rest.
    pub fn new(d_model: usize, nhead: usize) -> Self {
        TransformerConfig {
            d_model,
            nhead,
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: Activation::Relu,
            layer_norm_eps: 1e-5,
            batch_first: false,
            norm_first: false,
            bias: true,
        }
    }
    setters! {
        /// Sets the feed-forward width.
        dim_feedforward: usize;
        /// Sets the dropout.
        dropout: f64;
        /// Sets the activation.
        activation: Activation;
        /// Sets the layer norm epsilon.
        layer_norm_eps: f64;
        /// Sets `batch_first`.
        batch_first: bool;
        /// Sets pre-norm.
        norm_first: bool;
        /// Sets the biases.
        bias: bool;
    }

    fn attention(&self, device: &Device) -> MultiheadAttention {
        MultiheadAttention::with_options(
            self.d_model,
            self.nhead,
            self.dropout,
            self.bias,
            None,
            None,
            device,
        )
        .batch_first(self.batch_first)
    }

    fn norm(&self, device: &Device) -> LayerNorm {
        LayerNorm::with_options(
            &[self.d_model],
            self.layer_norm_eps,
            true,
            self.bias,
            device,
        )
    }
}

/// Masks of a self-attention block (`src_mask`/`tgt_mask`, the key padding mask, the
/// causal hint), in `nn.MultiheadAttention`'s convention (true excludes).
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnMasks<'a> {
    /// Query-key pairs to exclude (or scores to add), `[L, S]` or `[N * heads, L, S]`.
    pub mask: Option<&'a Tensor>,
    /// Keys to ignore per batch element, `[N, S]`.
    pub key_padding_mask: Option<&'a Tensor>,
    /// A causal mask (made when `mask` is absent).
    pub is_causal: bool,
}

impl<'a> AttnMasks<'a> {
    /// A causal self-attention mask.
    pub fn causal() -> Self {
        AttnMasks {
            is_causal: true,
            ..Self::default()
        }
    }

    fn args(&self) -> MhaArgs<'a> {
        MhaArgs {
            key_padding_mask: self.key_padding_mask,
            attn_mask: self.mask,
            need_weights: false,
            average_attn_weights: true,
            is_causal: self.is_causal,
        }
    }
}

/// The feed-forward block: `linear2(dropout(activation(linear1(x))))`.
fn feed_forward(
    l1: &Linear,
    l2: &Linear,
    x: &Tensor,
    act: Activation,
    p: f64,
    training: bool,
) -> Tensor {
    l2.forward(&F::dropout(&act.apply(&l1.forward(x)), p, training))
}

/// One encoder layer (`nn.TransformerEncoderLayer`): self-attention and a feed-forward
/// block, each with dropout, a residual connection and a layer norm (after, or before
/// with `norm_first`). Keys: `self_attn.*`, `linear1.*`, `linear2.*`, `norm1.*`,
/// `norm2.*`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{TransformerConfig, TransformerEncoderLayer};
/// let layer = TransformerEncoderLayer::new(TransformerConfig::new(16, 4).dim_feedforward(32).batch_first(true), &Device::Cpu);
/// let x = Tensor::randn(&[2, 7, 16], DType::F32, &Device::Cpu);
/// assert_eq!(layer.forward(&x).shape(), &[2, 7, 16]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct TransformerEncoderLayer {
    /// Self-attention.
    pub self_attn: MultiheadAttention,
    /// Feed-forward input layer.
    pub linear1: Linear,
    /// Feed-forward output layer.
    pub linear2: Linear,
    /// Norm of the attention block.
    pub norm1: LayerNorm,
    /// Norm of the feed-forward block.
    pub norm2: LayerNorm,
    /// The options.
    #[module(skip)]
    pub config: TransformerConfig,
    /// Training mode.
    #[module(training)]
    pub training: bool,
}

impl TransformerEncoderLayer {
    /// A layer with `config`.
    #[track_caller]
    pub fn new(config: TransformerConfig, device: &Device) -> Self {
        TransformerEncoderLayer {
            self_attn: config.attention(device),
            linear1: Linear::with_bias(config.d_model, config.dim_feedforward, config.bias, device),
            linear2: Linear::with_bias(config.dim_feedforward, config.d_model, config.bias, device),
            norm1: config.norm(device),
            norm2: config.norm(device),
            config,
            training: true,
        }
    }

    /// The layer without masks.
    #[track_caller]
    pub fn forward(&self, src: &Tensor) -> Tensor {
        self.forward_with(src, &AttnMasks::default())
    }

    /// The layer with self-attention masks.
    #[track_caller]
    pub fn forward_with(&self, src: &Tensor, masks: &AttnMasks<'_>) -> Tensor {
        let c = &self.config;
        let p = c.dropout;
        let t = self.training;
        let sa =
            |x: &Tensor| F::dropout(&self.self_attn.forward_with(x, x, x, &masks.args()).0, p, t);
        let ff = |x: &Tensor| {
            F::dropout(
                &feed_forward(&self.linear1, &self.linear2, x, c.activation, p, t),
                p,
                t,
            )
        };
        if c.norm_first {
            let x = src + &sa(&self.norm1.forward(src));
            &x + &ff(&self.norm2.forward(&x))
        } else {
            let x = self.norm1.forward(&(src + &sa(src)));
            self.norm2.forward(&(&x + &ff(&x)))
        }
    }
}

impl super::Forward<&Tensor> for TransformerEncoderLayer {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        TransformerEncoderLayer::forward(self, x)
    }
}

/// One decoder layer (`nn.TransformerDecoderLayer`): masked self-attention, attention
/// over the encoder's output (`memory`), and a feed-forward block. Keys: `self_attn.*`,
/// `multihead_attn.*`, `linear1.*`, `linear2.*`, `norm1.*` … `norm3.*`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{AttnMasks, TransformerConfig, TransformerDecoderLayer};
/// let layer = TransformerDecoderLayer::new(TransformerConfig::new(16, 2).dim_feedforward(32), &Device::Cpu);
/// let (tgt, memory) = (Tensor::randn(&[5, 2, 16], DType::F32, &Device::Cpu), Tensor::randn(&[9, 2, 16], DType::F32, &Device::Cpu));
/// let y = layer.forward_with(&tgt, &memory, &AttnMasks::causal(), &AttnMasks::default());
/// assert_eq!(y.shape(), &[5, 2, 16]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct TransformerDecoderLayer {
    /// Self-attention over the target.
    pub self_attn: MultiheadAttention,
    /// Attention over the memory.
    pub multihead_attn: MultiheadAttention,
    /// Feed-forward input layer.
    pub linear1: Linear,
    /// Feed-forward output layer.
    pub linear2: Linear,
    /// Norm of the self-attention block.
    pub norm1: LayerNorm,
    /// Norm of the memory-attention block.
    pub norm2: LayerNorm,
    /// Norm of the feed-forward block.
    pub norm3: LayerNorm,
    /// The options.
    #[module(skip)]
    pub config: TransformerConfig,
    /// Training mode.
    #[module(training)]
    pub training: bool,
}

impl TransformerDecoderLayer {
    /// A layer with `config`.
    #[track_caller]
    pub fn new(config: TransformerConfig, device: &Device) -> Self {
        TransformerDecoderLayer {
            self_attn: config.attention(device),
            multihead_attn: config.attention(device),
            linear1: Linear::with_bias(config.d_model, config.dim_feedforward, config.bias, device),
            linear2: Linear::with_bias(config.dim_feedforward, config.d_model, config.bias, device),
            norm1: config.norm(device),
            norm2: config.norm(device),
            norm3: config.norm(device),
            config,
            training: true,
        }
    }

    /// The layer over `tgt` and `memory` with the target's (`tgt_masks`) and the memory's
    /// (`memory_masks`) masks.
    #[track_caller]
    pub fn forward_with(
        &self,
        tgt: &Tensor,
        memory: &Tensor,
        tgt_masks: &AttnMasks<'_>,
        memory_masks: &AttnMasks<'_>,
    ) -> Tensor {
        let c = &self.config;
        let (p, t) = (c.dropout, self.training);
        let sa = |x: &Tensor| {
            F::dropout(
                &self.self_attn.forward_with(x, x, x, &tgt_masks.args()).0,
                p,
                t,
            )
        };
        let mha = |x: &Tensor| {
            F::dropout(
                &self
                    .multihead_attn
                    .forward_with(x, memory, memory, &memory_masks.args())
                    .0,
                p,
                t,
            )
        };
        let ff = |x: &Tensor| {
            F::dropout(
                &feed_forward(&self.linear1, &self.linear2, x, c.activation, p, t),
                p,
                t,
            )
        };
        if c.norm_first {
            let x = tgt + &sa(&self.norm1.forward(tgt));
            let x = &x + &mha(&self.norm2.forward(&x));
            &x + &ff(&self.norm3.forward(&x))
        } else {
            let x = self.norm1.forward(&(tgt + &sa(tgt)));
            let x = self.norm2.forward(&(&x + &mha(&x)));
            self.norm3.forward(&(&x + &ff(&x)))
        }
    }
}

/// A stack of encoder layers with an optional final norm (`nn.TransformerEncoder`; keys
/// `layers.0.*`, …, `norm.*`). Each layer is initialised afresh (PyTorch deep-copies one
/// layer, so its layers start equal).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Module, TransformerConfig, TransformerEncoder};
/// let enc = TransformerEncoder::new(TransformerConfig::new(8, 2).dim_feedforward(16), 3, true, &Device::Cpu);
/// assert!(enc.state_dict().contains_key("layers.2.self_attn.in_proj_weight"));
/// assert_eq!(enc.forward(&Tensor::randn(&[4, 1, 8], DType::F32, &Device::Cpu)).shape(), &[4, 1, 8]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct TransformerEncoder {
    /// The layers.
    pub layers: ModuleList<TransformerEncoderLayer>,
    /// The final norm.
    pub norm: Option<LayerNorm>,
}

impl TransformerEncoder {
    /// `num_layers` layers of `config`, and a final layer norm when `final_norm`.
    #[track_caller]
    pub fn new(
        config: TransformerConfig,
        num_layers: usize,
        final_norm: bool,
        device: &Device,
    ) -> Self {
        TransformerEncoder {
            layers: (0..num_layers)
                .map(|_| TransformerEncoderLayer::new(config, device))
                .collect(),
            norm: final_norm.then(|| config.norm(device)),
        }
    }

    /// Every layer, then the norm.
    #[track_caller]
    pub fn forward(&self, src: &Tensor) -> Tensor {
        self.forward_with(src, &AttnMasks::default())
    }

    /// Every layer with the same masks, then the norm.
    #[track_caller]
    pub fn forward_with(&self, src: &Tensor, masks: &AttnMasks<'_>) -> Tensor {
        let x = self
            .layers
            .iter()
            .fold(src.clone(), |x, layer| layer.forward_with(&x, masks));
        match &self.norm {
            Some(n) => n.forward(&x),
            None => x,
        }
    }
}

/// A stack of decoder layers with an optional final norm (`nn.TransformerDecoder`).
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct TransformerDecoder {
    /// The layers.
    pub layers: ModuleList<TransformerDecoderLayer>,
    /// The final norm.
    pub norm: Option<LayerNorm>,
}

impl TransformerDecoder {
    /// `num_layers` layers of `config`, and a final layer norm when `final_norm`.
    #[track_caller]
    pub fn new(
        config: TransformerConfig,
        num_layers: usize,
        final_norm: bool,
        device: &Device,
    ) -> Self {
        TransformerDecoder {
            layers: (0..num_layers)
                .map(|_| TransformerDecoderLayer::new(config, device))
                .collect(),
            norm: final_norm.then(|| config.norm(device)),
        }
    }

    /// Every layer with the same masks, then the norm.
    #[track_caller]
    pub fn forward_with(
        &self,
        tgt: &Tensor,
        memory: &Tensor,
        tgt_masks: &AttnMasks<'_>,
        memory_masks: &AttnMasks<'_>,
    ) -> Tensor {
        let x = self.layers.iter().fold(tgt.clone(), |x, layer| {
            layer.forward_with(&x, memory, tgt_masks, memory_masks)
        });
        match &self.norm {
            Some(n) => n.forward(&x),
            None => x,
        }
    }
}

/// An encoder-decoder transformer (`nn.Transformer`; keys `encoder.*`, `decoder.*`, with
/// final norms `encoder.norm` and `decoder.norm`); matrices Xavier-initialised as
/// PyTorch's `_reset_parameters`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{AttnMasks, Transformer, TransformerConfig};
/// let t = Transformer::new(TransformerConfig::new(8, 2).dim_feedforward(16).batch_first(true), 2, 2, &Device::Cpu);
/// let (src, tgt) = (Tensor::randn(&[3, 10, 8], DType::F32, &Device::Cpu), Tensor::randn(&[3, 6, 8], DType::F32, &Device::Cpu));
/// let y = t.forward_with(&src, &tgt, &AttnMasks::default(), &AttnMasks::causal(), &AttnMasks::default());
/// assert_eq!(y.shape(), &[3, 6, 8]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Transformer {
    /// The encoder.
    pub encoder: TransformerEncoder,
    /// The decoder.
    pub decoder: TransformerDecoder,
}

impl Transformer {
    /// `num_encoder_layers` and `num_decoder_layers` layers of `config`.
    #[track_caller]
    pub fn new(
        config: TransformerConfig,
        num_encoder_layers: usize,
        num_decoder_layers: usize,
        device: &Device,
    ) -> Self {
        let t = Transformer {
            encoder: TransformerEncoder::new(config, num_encoder_layers, true, device),
            decoder: TransformerDecoder::new(config, num_decoder_layers, true, device),
        };
        for (_, p) in t.named_parameters() {
            if p.dim() > 1 {
                let fresh = Tensor::zeros(p.shape(), p.dtype(), &Device::Cpu);
                super::init::xavier_uniform_(&fresh, 1.0);
                let fresh = fresh
                    .to_device(&p.device())
                    .expect("the parameter's device");
                crate::autograd::no_grad(|| {
                    p.detach().copy_(&fresh);
                });
            }
        }
        t
    }

    /// Encodes `src` (with `src_masks`), decodes `tgt` over it (with `tgt_masks`; the
    /// memory masks apply to attention over the encoding).
    #[track_caller]
    pub fn forward_with(
        &self,
        src: &Tensor,
        tgt: &Tensor,
        src_masks: &AttnMasks<'_>,
        tgt_masks: &AttnMasks<'_>,
        memory_masks: &AttnMasks<'_>,
    ) -> Tensor {
        let memory = self.encoder.forward_with(src, src_masks);
        self.decoder
            .forward_with(tgt, &memory, tgt_masks, memory_masks)
    }
}
