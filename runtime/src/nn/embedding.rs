//! Lookup tables: [`Embedding`] and [`EmbeddingBag`].

use super::Module;
use super::functional::{self as F, EmbeddingBagMode, EmbeddingOptions};
use super::init::on;
use crate::autograd::no_grad;
use crate::{DType, Device, Tensor};

/// A lookup table of `num_embeddings` vectors of size `dim` (`nn.Embedding`), `N(0, 1)`,
/// with PyTorch's `padding_idx` (that row starts at zero and gets no gradient) and
/// `max_norm` (looked-up rows are renormalised in place).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::Embedding;
/// let emb = Embedding::new(10, 3, &Device::Cpu);
/// let ids = Tensor::from_vec(vec![1i64, 7], &[2]);
/// assert_eq!(emb.forward(&ids).shape(), &[2, 3]);
/// let padded = Embedding::new(10, 3, &Device::Cpu).padding_idx(0);
/// assert_eq!(padded.weight.select(0, 0).to_vec::<f32>(), vec![0.0; 3]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Embedding {
    /// `[num_embeddings, dim]`.
    #[param]
    pub weight: Tensor,
    /// `padding_idx`, `max_norm`, `norm_type`.
    #[module(skip)]
    pub options: EmbeddingOptions,
}

impl Embedding {
    /// A table initialised from the standard normal distribution.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Embedding;
    /// assert_eq!(Embedding::new(10, 3, &Device::Cpu).weight.shape(), &[10, 3]);
    /// ```
    pub fn new(num_embeddings: usize, dim: usize, device: &Device) -> Self {
        Embedding {
            weight: on(
                if super::init::init_skipped() {
                    Tensor::zeros(&[num_embeddings, dim], DType::F32, &Device::Cpu)
                } else {
                    Tensor::randn(&[num_embeddings, dim], DType::F32, &Device::Cpu)
                },
                device,
            )
            .requires_grad(true),
            options: EmbeddingOptions::default(),
        }
    }

    /// Sets `padding_idx` (negative counts from the end) and zeroes that row, as PyTorch's
    /// constructor does.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Embedding;
    /// let emb = Embedding::new(10, 3, &Device::Cpu).padding_idx(-1);
    /// assert_eq!(emb.options.padding_idx, Some(9));
    /// ```
    #[track_caller]
    pub fn padding_idx(mut self, padding_idx: i64) -> Self {
        let n = self.weight.shape()[0] as i64;
        let idx = if padding_idx < 0 {
            padding_idx + n
        } else {
            padding_idx
        };
        assert!(
            (0..n).contains(&idx),
            "Embedding: padding_idx {padding_idx} must be within num_embeddings ({n})"
        );
        no_grad(|| {
            self.weight.select(0, idx as usize).zero_();
        });
        self.options.padding_idx = Some(idx);
        self
    }

    /// Sets `max_norm` (and the `norm_type` p, 2 in PyTorch by default).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Embedding;
    /// let emb = Embedding::new(10, 3, &Device::Cpu).max_norm(1.0, 2.0);
    /// emb.forward(&Tensor::from_vec(vec![4i64], &[1]));
    /// assert!(emb.weight.select(0, 4).norm(2.0, &[0], false).item::<f32>() <= 1.0 + 1e-6);
    /// ```
    pub fn max_norm(mut self, max_norm: f64, norm_type: f64) -> Self {
        self.options.max_norm = Some(max_norm);
        self.options.norm_type = norm_type;
        self
    }

    /// A table holding `embeddings` `[num, dim]` (`nn.Embedding.from_pretrained`); with
    /// `freeze` it is not trained (no grad).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Embedding, Module};
    /// let table = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// let emb = Embedding::from_pretrained(&table, true);
    /// assert_eq!(emb.forward(&Tensor::from_vec(vec![1i64], &[1])).to_vec::<f32>(), vec![3.0, 4.0]);
    /// assert!(!emb.weight.requires_grad_flag());
    /// ```
    #[track_caller]
    pub fn from_pretrained(embeddings: &Tensor, freeze: bool) -> Self {
        assert!(
            embeddings.dim() == 2,
            "Embedding::from_pretrained: embeddings parameter is expected to be 2-dimensional, got shape {:?}",
            embeddings.shape()
        );
        Embedding {
            weight: embeddings.detach().deep_copy().requires_grad(!freeze),
            options: EmbeddingOptions::default(),
        }
    }

    /// Looks up int64 indices of any shape.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Embedding;
    /// let emb = Embedding::new(10, 3, &Device::Cpu);
    /// assert_eq!(emb.forward(&Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])).shape(), &[2, 2, 3]);
    /// ```
    #[track_caller]
    pub fn forward(&self, indices: &Tensor) -> Tensor {
        F::embedding_with(indices, &self.weight, &self.options)
    }
}

/// Sums, averages or takes the maximum of bags of embeddings without materialising the
/// looked-up rows per bag (`nn.EmbeddingBag`, mode `mean` by default), `N(0, 1)` init.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::EmbeddingBag;
/// use ferrograd_runtime::nn::functional::EmbeddingBagMode;
/// let bag = EmbeddingBag::new(10, 3, EmbeddingBagMode::Sum, &Device::Cpu);
/// let ids = Tensor::from_vec(vec![1i64, 2, 4, 5, 4], &[5]);
/// let offsets = Tensor::from_vec(vec![0i64, 2], &[2]);
/// assert_eq!(bag.forward(&ids, Some(&offsets), None).shape(), &[2, 3]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct EmbeddingBag {
    /// `[num_embeddings, dim]`.
    #[param]
    pub weight: Tensor,
    /// How each bag is reduced.
    #[module(skip)]
    pub mode: EmbeddingBagMode,
    /// Indices equal to this are left out of their bag.
    #[module(skip)]
    pub padding_idx: Option<i64>,
}

impl EmbeddingBag {
    /// A table of `num_embeddings` rows of size `dim`, reduced by `mode`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::EmbeddingBag;
    /// use ferrograd_runtime::nn::functional::EmbeddingBagMode;
    /// let bag = EmbeddingBag::new(10, 3, EmbeddingBagMode::Max, &Device::Cpu);
    /// assert_eq!(bag.weight.shape(), &[10, 3]);
    /// ```
    pub fn new(num_embeddings: usize, dim: usize, mode: EmbeddingBagMode, device: &Device) -> Self {
        EmbeddingBag {
            weight: on(
                Tensor::randn(&[num_embeddings, dim], DType::F32, &Device::Cpu),
                device,
            )
            .requires_grad(true),
            mode,
            padding_idx: None,
        }
    }

    /// Bags of `input`: `[B, L]` (each row a bag), or 1-D with `offsets` (bag starts).
    /// `per_sample_weights` (same shape as `input`) scale rows in `Sum` mode.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::EmbeddingBag;
    /// use ferrograd_runtime::nn::functional::EmbeddingBagMode;
    /// let bag = EmbeddingBag::new(10, 3, EmbeddingBagMode::Mean, &Device::Cpu);
    /// let ids = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]);
    /// assert_eq!(bag.forward(&ids, None, None).shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn forward(
        &self,
        input: &Tensor,
        offsets: Option<&Tensor>,
        per_sample_weights: Option<&Tensor>,
    ) -> Tensor {
        F::embedding_bag(
            input,
            &self.weight,
            offsets,
            self.mode,
            per_sample_weights,
            false,
            self.padding_idx,
        )
    }
}
