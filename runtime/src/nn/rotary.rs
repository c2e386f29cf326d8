//! What every decoder needs beyond PyTorch core: rotary position embeddings and a causal
//! key/value cache for generation.

use crate::autograd::no_grad;
use crate::{DType, Device, Tensor};

/// Rotary position embeddings (RoPE, Su et al. 2021) in the "rotate half" layout of
/// GPT-NeoX and LLaMA: feature `i < d/2` pairs with `i + d/2`, rotated by angle
/// `pos * base^(-2i/d)`. The cos/sin tables are computed once for `max_len` positions.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::RotaryEmbedding;
/// let rope = RotaryEmbedding::new(8, 10_000.0, 32, &Device::Cpu);
/// let q = Tensor::randn(&[1, 2, 5, 8], DType::F32, &Device::Cpu); // [batch, heads, T, d]
/// let r = rope.apply(&q, 0);
/// assert_eq!(r.shape(), q.shape());
/// // Position 0 is not rotated; norms are kept everywhere.
/// assert!(r.narrow(2, 0, 1).sub(&q.narrow(2, 0, 1)).abs().max_all().item::<f32>() < 1e-6);
/// assert!((r.norm(2.0, &[], false).item::<f32>() - q.norm(2.0, &[], false).item::<f32>()).abs() < 1e-3);
/// ```
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    /// Rotated features (even).
    pub dim: usize,
    /// Positions the tables cover.
    pub max_len: usize,
    cos: Tensor,
    sin: Tensor,
}

impl RotaryEmbedding {
    /// Tables for `dim` features (even) and positions `0..max_len` with frequency base
    /// `base` (10 000 in the paper), in f32 on `device`.
    ///
    /// # Panics
    /// On an odd or zero `dim`.
    #[track_caller]
    pub fn new(dim: usize, base: f64, max_len: usize, device: &Device) -> Self {
        assert!(
            dim > 0 && dim.is_multiple_of(2),
            "RotaryEmbedding: dim must be even and positive, got {dim}"
        );
        let half = dim / 2;
        let mut cos = Vec::with_capacity(max_len * dim);
        let mut sin = Vec::with_capacity(max_len * dim);
        for pos in 0..max_len {
            for j in 0..dim {
                let i = j % half;
                let angle = pos as f64 * base.powf(-2.0 * i as f64 / dim as f64);
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        let table = |v: Vec<f64>| {
            Tensor::from_vec(v, &[max_len, dim])
                .to_dtype(DType::F32)
                .to_device(device)
                .expect("the device holds the tables")
        };
        RotaryEmbedding {
            dim,
            max_len,
            cos: table(cos),
            sin: table(sin),
        }
    }

    /// Rotates `x` (`[..., T, dim]`) whose first row is at position `offset` (a cache's
    /// length when decoding); differentiable.
    ///
    /// # Panics
    /// When the last dim is not `dim` or `offset + T` exceeds `max_len`.
    #[track_caller]
    pub fn apply(&self, x: &Tensor, offset: usize) -> Tensor {
        let n = x.dim();
        assert!(
            n >= 2 && x.size(-1) == self.dim,
            "RotaryEmbedding: input {:?} must end in [T, {}] (axis -1)",
            x.shape(),
            self.dim
        );
        let t = x.size(-2);
        assert!(
            offset + t <= self.max_len,
            "RotaryEmbedding: positions {offset}..{} exceed max_len {}",
            offset + t,
            self.max_len
        );
        let cos = self.cos.narrow(0, offset, t).to_dtype(x.dtype());
        let sin = self.sin.narrow(0, offset, t).to_dtype(x.dtype());
        let half = self.dim / 2;
        let (x1, x2) = (x.narrow(-1, 0, half), x.narrow(-1, half, half));
        let rotated = Tensor::cat(&[&x2.neg(), &x1], -1);
        x.mul(&cos).add(&rotated.mul(&sin))
    }
}

/// A key/value cache for autoregressive decoding: keys and values `[batch, heads, len,
/// head_dim]` grow by each step's new ones, written into buffers allocated once for
/// `max_len` positions (no re-copy of the past per step).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::KVCache;
/// let mut cache = KVCache::new(1, 2, 16, 4, DType::F32, &Device::Cpu);
/// let step = Tensor::randn(&[1, 2, 1, 4], DType::F32, &Device::Cpu);
/// let (k, v) = cache.append(&step, &step);
/// assert_eq!((k.shape(), cache.len()), (&[1, 2, 1, 4][..], 1));
/// let (k, _) = cache.append(&step, &step);
/// assert_eq!(k.shape(), &[1, 2, 2, 4]);
/// ```
#[derive(Clone, Debug)]
pub struct KVCache {
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl KVCache {
    /// An empty cache for `batch` × `heads` × up to `max_len` positions of `head_dim`.
    pub fn new(
        batch: usize,
        heads: usize,
        max_len: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Self {
        KVCache {
            k: Tensor::zeros(&[batch, heads, max_len, head_dim], dtype, device),
            v: Tensor::zeros(&[batch, heads, max_len, head_dim], dtype, device),
            len: 0,
        }
    }

    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets everything (a new sequence).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends this step's keys and values (`[batch, heads, t, head_dim]`) and returns all
    /// of them so far (views of the buffers, no copy).
    ///
    /// # Panics
    /// On shapes that do not match the cache, or when `max_len` would be exceeded.
    #[track_caller]
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        let (ks, cap) = (self.k.shape(), self.k.size(2));
        let t = k.size(2);
        assert!(
            k.shape() == v.shape()
                && k.dim() == 4
                && k.size(0) == ks[0]
                && k.size(1) == ks[1]
                && k.size(3) == ks[3],
            "KVCache.append: keys {:?} and values {:?} must be [{}, {}, t, {}]",
            k.shape(),
            v.shape(),
            ks[0],
            ks[1],
            ks[3]
        );
        assert!(
            self.len + t <= cap,
            "KVCache.append: {} + {t} positions exceed max_len {cap}",
            self.len
        );
        no_grad(|| {
            self.k.narrow(2, self.len, t).copy_(k);
            self.v.narrow(2, self.len, t).copy_(v);
        });
        self.len += t;
        (self.k.narrow(2, 0, self.len), self.v.narrow(2, 0, self.len))
    }

    /// The boolean mask (true takes part, for `F::scaled_dot_product_attention`) of `t`
    /// new queries over the cache after their append: query `i` (position
    /// `len - t + i`) sees keys up to its own position.
    pub fn causal_mask(&self, t: usize) -> Tensor {
        let total = self.len;
        let start = total - t;
        let v: Vec<bool> = (0..t)
            .flat_map(|i| (0..total).map(move |j| j <= start + i))
            .collect();
        Tensor::from_vec(v, &[t, total])
            .to_device(&self.k.device())
            .expect("the cache's device")
    }
}
