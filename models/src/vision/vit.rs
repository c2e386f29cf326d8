//! Vision Transformer (`torchvision.models.vit_b_16` and its siblings): patches by a
//! strided convolution, a class token, learned positions, pre-norm encoder blocks, and
//! torchvision's keys (`encoder.layers.encoder_layer_0.self_attention.in_proj_weight`).
//!
//! The encoder block is a `network!` (its widths and dropout probabilities constructor
//! parameters); the patch embedding, class token and positions around it are written by
//! hand.

use ferrograd::nn::{
    Conv2d, ConvOptions, Dropout, Forward, LayerNorm, Linear, Module, ModuleDict, init,
};
use ferrograd::{DType, Device, Tensor, network};

/// The shape of a [`VisionTransformer`] (torchvision's constructor arguments).
///
/// ```
/// use ferrograd_models::vision::vit::ViTConfig;
/// let c = ViTConfig::vit_b_16();
/// assert_eq!((c.image_size, c.patch_size, c.hidden_dim, c.num_layers), (224, 16, 768, 12));
/// assert_eq!(c.seq_length(), 197);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ViTConfig {
    /// Input side (square images).
    pub image_size: usize,
    /// Patch side (the stride of `conv_proj`).
    pub patch_size: usize,
    /// Encoder blocks.
    pub num_layers: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Width of every token.
    pub hidden_dim: usize,
    /// Width of the MLP.
    pub mlp_dim: usize,
    /// Dropout after the positions and in the MLP.
    pub dropout: f64,
    /// Dropout on the attention weights.
    pub attention_dropout: f64,
    /// Outputs of `heads.head`.
    pub num_classes: usize,
}

impl ViTConfig {
    /// `vit_b_16`: 224², patches of 16, 12 layers, 12 heads, width 768, MLP 3072.
    pub fn vit_b_16() -> Self {
        Self::of(16, 12, 12, 768, 3072)
    }
    /// `vit_b_32`: as `vit_b_16` with patches of 32.
    pub fn vit_b_32() -> Self {
        Self::of(32, 12, 12, 768, 3072)
    }
    /// `vit_l_16`: 24 layers, 16 heads, width 1024, MLP 4096.
    pub fn vit_l_16() -> Self {
        Self::of(16, 24, 16, 1024, 4096)
    }
    fn of(patch: usize, layers: usize, heads: usize, hidden: usize, mlp: usize) -> Self {
        ViTConfig {
            image_size: 224,
            patch_size: patch,
            num_layers: layers,
            num_heads: heads,
            hidden_dim: hidden,
            mlp_dim: mlp,
            dropout: 0.0,
            attention_dropout: 0.0,
            num_classes: 1000,
        }
    }
    /// With `n` outputs.
    pub fn num_classes(mut self, n: usize) -> Self {
        self.num_classes = n;
        self
    }
    /// Tokens per image: one per patch and the class token.
    pub fn seq_length(&self) -> usize {
        (self.image_size / self.patch_size).pow(2) + 1
    }
}

network! {
    /// `torchvision.models.vision_transformer.EncoderBlock`: pre-norm attention and MLP,
    /// each with a residual; `p` is the dropout after the positions and in the MLP,
    /// `attention_p` the attention weights' (both 0 in torchvision's models).
    pub struct EncoderBlock[hidden, heads, mlp_dim, p: f64, attention_p: f64](x: [N, T, hidden])
        -> [N, T, hidden]
    {
        let a = x
            -> ln_1: LayerNorm(hidden, eps = 1e-6)
            -> self_attention: MultiheadAttention(hidden, heads, batch_first = true, dropout = attention_p)
            -> dropout: Dropout(p);
        let h = a + x;
        let m = h
            -> ln_2: LayerNorm(hidden, eps = 1e-6)
            -> mlp: (Linear(hidden -> mlp_dim), gelu, Dropout(p), Linear(mlp_dim -> hidden), Dropout(p));
        h + m
    }
}

impl EncoderBlock {
    /// A block of `config`'s widths.
    pub fn of(config: &ViTConfig, device: &Device) -> Self {
        EncoderBlock::new(
            device,
            config.hidden_dim,
            config.num_heads,
            config.mlp_dim,
            config.dropout,
            config.attention_dropout,
        )
    }
}

/// `torchvision.models.vision_transformer.Encoder`: positions, the blocks (keys
/// `layers.encoder_layer_{i}`), a final LayerNorm.
#[derive(Module)]
pub struct Encoder {
    /// Learned positions `[1, seq_length, hidden_dim]`.
    #[param]
    pub pos_embedding: Tensor,
    /// After adding the positions.
    pub dropout: Dropout,
    /// The blocks, named as torchvision's `OrderedDict`.
    pub layers: ModuleDict<EncoderBlock>,
    /// After the last block (eps 1e-6).
    pub ln: LayerNorm,
}

/// The classifier (`heads.head`; torchvision's `representation_size` head is not built).
#[derive(Module)]
pub struct Heads {
    /// The linear classifier.
    pub head: Linear,
}

/// `torchvision.models.VisionTransformer`; keys and parameter count are torchvision's
/// (`vit_b_16()`: 86,567,656). Inputs are `[N, 3, image_size, image_size]`.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::nn::{Forward, Module};
/// use ferrograd_models::vision::vit::{ViTConfig, VisionTransformer};
/// let config = ViTConfig { image_size: 32, patch_size: 8, num_layers: 2, num_heads: 2,
///     hidden_dim: 16, mlp_dim: 32, ..ViTConfig::vit_b_16() }.num_classes(3);
/// let mut model = VisionTransformer::new(&config, &Device::Cpu);
/// model.eval();
/// let logits = model.forward(&Tensor::randn(&[2, 3, 32, 32], DType::F32, &Device::Cpu));
/// assert_eq!(logits.shape(), &[2, 3]);
/// assert!(model.state_dict().contains_key("encoder.layers.encoder_layer_1.mlp.3.weight"));
/// ```
#[derive(Module)]
pub struct VisionTransformer {
    /// The patch embedding: a `patch_size` convolution of stride `patch_size`.
    pub conv_proj: Conv2d,
    /// The learned class token `[1, 1, hidden_dim]`.
    #[param]
    pub class_token: Tensor,
    /// The encoder.
    pub encoder: Encoder,
    /// The classifier.
    pub heads: Heads,
    #[module(skip)]
    config: ViTConfig,
}

impl VisionTransformer {
    /// A randomly initialised network of `config`.
    ///
    /// # Panics
    /// When `patch_size` does not divide `image_size`, or `num_heads` does not divide
    /// `hidden_dim`.
    #[track_caller]
    pub fn new(config: &ViTConfig, device: &Device) -> Self {
        assert!(
            config.patch_size > 0 && config.image_size.is_multiple_of(config.patch_size),
            "VisionTransformer: patch_size {} must divide image_size {}",
            config.patch_size,
            config.image_size
        );
        let d = config.hidden_dim;
        let positions = Tensor::zeros(&[1, config.seq_length(), d], DType::F32, device);
        if !init::init_skipped() {
            init::normal_(&positions, 0.0, 0.02);
        }
        let mut layers = ModuleDict::new();
        for i in 0..config.num_layers {
            layers.insert(
                format!("encoder_layer_{i}"),
                EncoderBlock::of(config, device),
            );
        }
        let p = config.patch_size;
        VisionTransformer {
            conv_proj: Conv2d::new(3, d, p, ConvOptions::default().stride(p), device),
            class_token: Tensor::zeros(&[1, 1, d], DType::F32, device).requires_grad(true),
            encoder: Encoder {
                pos_embedding: positions.requires_grad(true),
                dropout: Dropout::new(config.dropout),
                layers,
                ln: LayerNorm::with_options(&[d], 1e-6, true, true, device),
            },
            heads: Heads {
                head: Linear::new(d, config.num_classes, device),
            },
            config: config.clone(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ViTConfig {
        &self.config
    }

    /// The class token's final state `[N, hidden_dim]` (the input of `heads`).
    ///
    /// # Panics
    /// When `x` is not `[N, 3, image_size, image_size]`.
    #[track_caller]
    pub fn features(&self, x: &Tensor) -> Tensor {
        let s = self.config.image_size;
        assert!(
            x.dim() == 4 && x.shape()[1..] == [3, s, s],
            "VisionTransformer: expected an input [N, 3, {s}, {s}], got {:?}",
            x.shape()
        );
        let n = x.shape()[0];
        let d = self.config.hidden_dim;
        // [N, D, h, w] -> [N, h * w, D]
        let patches = self
            .conv_proj
            .forward(x)
            .reshape_infer(&[n as isize, d as isize, -1])
            .permute(&[0, 2, 1]);
        let cls = self.class_token.expand(&[n as isize, -1, -1]);
        let tokens = Tensor::cat(&[&cls, &patches], 1) + &self.encoder.pos_embedding;
        let mut h = self.encoder.dropout.forward(&tokens);
        for (_, block) in self.encoder.layers.iter() {
            h = block.forward(&h);
        }
        self.encoder.ln.forward(&h).select(1, 0)
    }
}

impl<'a> Forward<&'a Tensor> for VisionTransformer {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        self.heads.head.forward(&self.features(x))
    }
}

/// `torchvision.models.vit_b_16(num_classes=num_classes)`.
pub fn vit_b_16(num_classes: usize, device: &Device) -> VisionTransformer {
    VisionTransformer::new(&ViTConfig::vit_b_16().num_classes(num_classes), device)
}
