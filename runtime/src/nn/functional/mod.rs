//! Stateless neural-network ops, as `torch.nn.functional`: convolution and pooling (built
//! on a differentiable im2col, so each has one exact backward), normalisation, dropout,
//! embedding and losses (fused with log-softmax for stability).
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! let x = Tensor::randn(&[8, 1, 28, 28], DType::F32, &Device::Cpu);
//! let w = Tensor::randn(&[6, 1, 5, 5], DType::F32, &Device::Cpu);
//! let y = F::conv2d(&x, &w, None, &F::Conv2dArgs::default().padding(2));
//! let y = F::max_pool2d(&y.relu(), 2);
//! assert_eq!(y.shape(), &[8, 6, 14, 14]);
//! ```
use crate::Tensor;
use crate::autograd::record;
use ferrograd_kernels::Dims;

mod attention;
mod conv;
mod loss;
mod loss_more;
mod norm;
mod pool;
mod resize;

pub use attention::*;
pub use conv::*;
pub use loss::*;
pub use loss_more::*;
pub use norm::*;
pub use pool::*;
pub use resize::*;

/// Constant padding (`F.pad(x, pads, value=v)`): `pads` holds `(before, after)` pairs
/// starting from the last dim, as in PyTorch.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1, 2], DType::F32, &Device::Cpu);
/// assert_eq!(F::pad(&x, &[1, 0], 0.0).to_vec::<f32>(), vec![0.0, 1.0, 1.0]);
/// ```
#[track_caller]
pub fn pad(input: &Tensor, pads: &[usize], value: f64) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = pad_untraced(input, pads, value);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::Pad {
            pads: pads.to_vec(),
            value,
            mode: crate::dispatch::PadKind::Constant,
        },
        out,
    )
}

#[track_caller]
fn pad_untraced(input: &Tensor, pads: &[usize], value: f64) -> Tensor {
    assert!(
        pads.len().is_multiple_of(2) && pads.len() / 2 <= input.dim(),
        "pad: padding length must be even and at most twice the rank; got {} values for shape {:?}",
        pads.len(),
        input.shape()
    );
    let mut shape = Dims::from_slice(input.shape());
    let mut region = ferrograd_kernels::Layout::contiguous(&shape);
    let rank = input.dim();
    let mut starts = vec![0usize; rank];
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = rank - 1 - i;
        shape[d] += pair[0] + pair[1];
        starts[d] = pair[0];
    }
    let out = Tensor::full(&shape, value, input.dtype(), &input.device());
    region = {
        let mut l = out.layout().clone();
        for (d, (&start, &len)) in starts.iter().zip(input.shape()).enumerate() {
            l = l.slice(d, start, len, 1);
        }
        let _ = region;
        l
    };
    out.write_region(&region, input);
    let input_shape = Dims::from_slice(input.shape());
    record(out, "pad", &[input], || {
        move |_, g: &Tensor| {
            let mut x = g.clone();
            for d in 0..input_shape.len() {
                x = x.narrow(d as isize, starts[d], input_shape[d]);
            }
            vec![Some(x)]
        }
    })
}

/// How [`pad_with`] fills the border (`F.pad`'s `mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// A constant value (`mode='constant'`).
    Constant(f64),
    /// The mirror image without repeating the edge (`'reflect'`: `3 2 | 1 2 3 | 2 1`).
    Reflect,
    /// Copies of the edge element (`'replicate'`: `1 1 | 1 2 3 | 3 3`).
    Replicate,
    /// Wraps around (`'circular'`: `2 3 | 1 2 3 | 1 2`).
    Circular,
}

/// Padding with any [`PadMode`] (`F.pad(x, pads, mode)`); `pads` holds `(before, after)`
/// pairs from the last dim, as in PyTorch. Reflect needs padding below the dim's size,
/// circular at most the size. Differentiable: the border's gradient flows back to the
/// elements it copies.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3]);
/// assert_eq!(F::pad_with(&x, &[2, 2], F::PadMode::Reflect).to_vec::<f32>(), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
/// assert_eq!(F::pad_with(&x, &[2, 2], F::PadMode::Replicate).to_vec::<f32>(), vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]);
/// assert_eq!(F::pad_with(&x, &[2, 2], F::PadMode::Circular).to_vec::<f32>(), vec![2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]);
/// ```
#[track_caller]
pub fn pad_with(input: &Tensor, pads: &[usize], mode: PadMode) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = pad_with_untraced(input, pads, mode);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::pad_op(pads, mode),
        out,
    )
}

#[track_caller]
fn pad_with_untraced(input: &Tensor, pads: &[usize], mode: PadMode) -> Tensor {
    if let PadMode::Constant(v) = mode {
        return pad(input, pads, v);
    }
    assert!(
        pads.len().is_multiple_of(2) && pads.len() / 2 <= input.dim(),
        "pad: padding length must be even and at most twice the rank; got {} values for shape {:?}",
        pads.len(),
        input.shape()
    );
    let mut out = input.clone();
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = input.dim() - 1 - i;
        let (before, after, n) = (pair[0] as i64, pair[1] as i64, input.shape()[d] as i64);
        if before == 0 && after == 0 {
            continue;
        }
        let fits = match mode {
            PadMode::Reflect => before < n && after < n,
            PadMode::Circular => before <= n && after <= n,
            _ => n > 0,
        };
        assert!(
            fits,
            "pad: {mode:?} padding ({before}, {after}) is too large for dimension {d} of size {n} (input shape {:?})",
            input.shape()
        );
        let idx = (-before..n + after)
            .map(|i| match mode {
                PadMode::Reflect if i < 0 => -i,
                PadMode::Reflect if i >= n => 2 * (n - 1) - i,
                PadMode::Replicate => i.clamp(0, n - 1),
                PadMode::Circular => i.rem_euclid(n),
                _ => i,
            })
            .collect();
        out = out.index_select(d as isize, &crate::ops::index_on(input, idx));
    }
    out
}

/// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)` while
/// `training`; the identity otherwise (`F.dropout`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[1000], DType::F32, &Device::Cpu);
/// assert_eq!(F::dropout(&x, 0.5, false).to_vec::<f32>(), x.to_vec::<f32>());
/// let kept = F::dropout(&x, 0.5, true).ne_scalar(0.0).to_dtype(DType::F32).mean_all().item::<f32>();
/// assert!((kept - 0.5).abs() < 0.1);
/// ```
#[track_caller]
pub fn dropout(input: &Tensor, p: f64, training: bool) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = dropout_untraced(input, p, training);
    crate::dispatch::finish(
        entered,
        &[input],
        || crate::dispatch::Op::Dropout {
            training: training && p > 0.0,
            p,
        },
        out,
    )
}

#[track_caller]
fn dropout_untraced(input: &Tensor, p: f64, training: bool) -> Tensor {
    assert!(
        (0.0..=1.0).contains(&p),
        "dropout: probability has to be between 0 and 1, but got {p}"
    );
    if !training || p == 0.0 {
        return input.clone();
    }
    if p == 1.0 {
        return input.mul_scalar(0.0);
    }
    crate::nn::fused::dropout(input, p)
}

/// Looks up rows of `weight` `[num_embeddings, dim]` for int64 `indices` of any shape
/// (`F.embedding`); the result has shape `[*indices.shape, dim]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let w = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[3, 2]);
/// let idx = Tensor::from_vec(vec![2i64, 0], &[1, 2]);
/// assert_eq!(F::embedding(&idx, &w).to_vec::<f32>(), vec![4.0, 5.0, 0.0, 1.0]);
/// ```
#[track_caller]
pub fn embedding(indices: &Tensor, weight: &Tensor) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = embedding_untraced(indices, weight);
    crate::dispatch::finish(
        entered,
        &[indices, weight],
        || crate::dispatch::Op::Embedding,
        out,
    )
}

#[track_caller]
fn embedding_untraced(indices: &Tensor, weight: &Tensor) -> Tensor {
    assert!(
        weight.dim() == 2,
        "embedding: weight must be 2D [num_embeddings, embedding_dim], got {:?}",
        weight.shape()
    );
    let mut shape = Dims::from_slice(indices.shape());
    shape.push(weight.shape()[1]);
    weight
        .index_select(0, &indices.reshape(&[indices.numel()]))
        .reshape(&shape)
}

/// `x @ weight.T + bias` (`F.linear`), weight `[out, in]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[4, 3], DType::F32, &Device::Cpu);
/// let w = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
/// assert_eq!(F::linear(&x, &w, None).shape(), &[4, 2]);
/// ```
#[track_caller]
pub fn linear(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let entered = crate::dispatch::enter();
    let out = linear_untraced(input, weight, bias);
    crate::dispatch::finish_opt(
        entered,
        &[Some(input), Some(weight), bias],
        || crate::dispatch::Op::Linear,
        out,
    )
}

#[track_caller]
fn linear_untraced(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    if let Some((x, w, b)) = crate::dispatch::cast_with_bias("linear", input, weight, bias) {
        return linear(&x, &w, b.as_ref());
    }
    if let Some(y) = crate::nn::fused::linear(input, weight, bias) {
        return y;
    }
    let y = input.matmul(&weight.t());
    match bias {
        Some(b) => y.add(b),
        None => y,
    }
}

/// `gelu(input + bias)` (`F.gelu(input + bias)`, the exact erf form): a feed-forward
/// layer's activation with the bias of the linear layer before it (`bias` `[n]`, broadcast
/// over `input`'s last dim), so the model runs that layer without its bias. For inference
/// on the host (f32 or f64, nothing to differentiate, not while tracing for export) it is
/// one pass over `input`, where the broadcast add and the GELU make two; everywhere else
/// it runs as those two ops, with the same results and gradients.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![0.5f64, -1.0], &[1, 2]);
/// let b = Tensor::from_vec(vec![0.5f64, 1.0], &[2]);
/// let y = no_grad(|| F::bias_gelu(&x, &b)).to_vec::<f64>();
/// assert!((y[0] - 0.8413447460685429).abs() < 1e-12 && y[1] == 0.0);
/// ```
#[track_caller]
pub fn bias_gelu(input: &Tensor, bias: &Tensor) -> Tensor {
    let _profiled = crate::dispatch::opaque("bias_gelu", &[input, bias]);
    let fused = crate::nn::fused::inference_fusable(&[Some(input), Some(bias)])
        && input.dim() >= 1
        && bias.shape() == [input.shape()[input.dim() - 1]];
    if fused {
        input.bias_gelu_pass(bias)
    } else {
        input.add(bias).gelu()
    }
}

/// `y[.., k] = x1[..] · weight[k] · x2[..] + bias[k]` (`F.bilinear`): `x1 [*, in1]`,
/// `x2 [*, in2]` with the same leading dims, weight `[out, in1, in2]`.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x1 = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2]);
/// let x2 = Tensor::from_vec(vec![3.0f32], &[1, 1]);
/// let w = Tensor::ones(&[1, 2, 1], DType::F32, &Device::Cpu);
/// assert_eq!(F::bilinear(&x1, &x2, &w, None).to_vec::<f32>(), vec![9.0]);
/// ```
#[track_caller]
pub fn bilinear(x1: &Tensor, x2: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let _profiled = crate::dispatch::opaque("bilinear", &[x1, x2, weight]);
    let (d1, d2) = (x1.dim(), x2.dim());
    assert!(
        weight.dim() == 3
            && d1 >= 1
            && d1 == d2
            && x1.shape()[..d1 - 1] == x2.shape()[..d2 - 1]
            && x1.shape()[d1 - 1] == weight.shape()[1]
            && x2.shape()[d2 - 1] == weight.shape()[2],
        "bilinear: expected inputs [*, in1] and [*, in2] with equal leading dims and weight [out, in1, in2]; got shapes {:?}, {:?} and weight {:?}",
        x1.shape(),
        x2.shape(),
        weight.shape()
    );
    let (o, i1, i2) = (weight.shape()[0], weight.shape()[1], weight.shape()[2]);
    let lead = &x1.shape()[..d1 - 1];
    let rows: usize = lead.iter().product();
    // (x1 @ W viewed [in1, out*in2]) -> [rows, out, in2], then contracted with x2.
    let t = x1
        .reshape(&[rows, i1])
        .matmul(&weight.permute(&[1, 0, 2]).reshape(&[i1, o * i2]))
        .reshape(&[rows, o, i2]);
    let y = t.matmul(&x2.reshape(&[rows, i2, 1])).reshape(&[rows, o]);
    let y = match bias {
        Some(b) => y.add(b),
        None => y,
    };
    let mut shape = lead.to_vec();
    shape.push(o);
    y.reshape(&shape)
}

/// Zeroes whole channels of `[N, C, ...]` with probability `p` and scales the rest by
/// `1 / (1 - p)` while `training` (`F.dropout2d`; a 3-D `[C, H, W]` input is one sample).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[2, 16, 2, 2], DType::F32, &Device::Cpu);
/// let y = F::dropout2d(&x, 0.5, true);
/// let sums = y.sum(&[2, 3], false).to_vec::<f32>();
/// assert!(sums.iter().all(|&s| s == 0.0 || s == 8.0));
/// ```
#[track_caller]
pub fn dropout2d(input: &Tensor, p: f64, training: bool) -> Tensor {
    let _profiled = crate::dispatch::opaque("dropout2d", &[input]);
    assert!(
        (0.0..=1.0).contains(&p),
        "dropout2d: probability has to be between 0 and 1, but got {p}"
    );
    assert!(
        input.dim() == 3 || input.dim() == 4,
        "dropout2d: expected a 3D or 4D input, got shape {:?}",
        input.shape()
    );
    if !training || p == 0.0 {
        return input.clone();
    }
    let mut mask_shape = vec![1usize; input.dim()];
    let channel_dims = input.dim() - 2;
    mask_shape[..channel_dims].copy_from_slice(&input.shape()[..channel_dims]);
    let keep = Tensor::rand(&mask_shape, input.dtype(), &input.device())
        .ge_scalar(p)
        .to_dtype(input.dtype());
    if p == 1.0 {
        return input.mul(&keep);
    }
    input.mul(&keep.mul_scalar(1.0 / (1.0 - p)))
}

/// Alpha dropout (`F.alpha_dropout`): while `training`, each element is kept with
/// probability `1 - p` and otherwise set to SELU's saturation value `-α·λ`, then an
/// affine map `a·x + b` restores zero mean and unit variance, as PyTorch.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let x = Tensor::zeros(&[4], DType::F32, &Device::Cpu);
/// assert_eq!(F::alpha_dropout(&x, 0.5, false).to_vec::<f32>(), vec![0.0; 4]);
/// ```
#[track_caller]
pub fn alpha_dropout(input: &Tensor, p: f64, training: bool) -> Tensor {
    let _profiled = crate::dispatch::opaque("alpha_dropout", &[input]);
    assert!(
        (0.0..=1.0).contains(&p),
        "alpha_dropout: probability has to be between 0 and 1, but got {p}"
    );
    if !training || p == 0.0 {
        return input.clone();
    }
    if p == 1.0 {
        return input.mul_scalar(0.0);
    }
    const ALPHA: f64 = 1.758_099_340_847_376_6;
    let a = 1.0 / ((ALPHA * ALPHA * p + 1.0) * (1.0 - p)).sqrt();
    let keep = Tensor::rand(input.shape(), input.dtype(), &input.device())
        .ge_scalar(p)
        .to_dtype(input.dtype());
    // x * keep * a + (keep - 1) * alpha * a + alpha * a * p
    let b = keep
        .sub_scalar(1.0)
        .mul_scalar(ALPHA * a)
        .add_scalar(ALPHA * a * p);
    input.mul(&keep.mul_scalar(a)).add(&b)
}

/// The options of [`embedding_with`] (`F.embedding`'s keyword arguments).
///
/// ```
/// use ferrograd_runtime::nn::functional::EmbeddingOptions;
/// let o = EmbeddingOptions { padding_idx: Some(0), ..Default::default() };
/// assert_eq!(o.norm_type, 2.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbeddingOptions {
    /// Lookups of this row get no gradient.
    pub padding_idx: Option<i64>,
    /// Rows looked up with a larger `norm_type`-norm are rescaled to this norm, in place.
    pub max_norm: Option<f64>,
    /// The p of the norm for `max_norm`.
    pub norm_type: f64,
}

impl Default for EmbeddingOptions {
    fn default() -> Self {
        EmbeddingOptions {
            padding_idx: None,
            max_norm: None,
            norm_type: 2.0,
        }
    }
}

/// [`embedding`] with PyTorch's `padding_idx` (lookups of that row pass no gradient to it)
/// and `max_norm` (each looked-up row whose norm exceeds it is scaled in place, under
/// `no_grad`, to `max_norm / (norm + 1e-7)` of itself, before the lookup).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let w = Tensor::from_vec(vec![3.0f32, 4.0, 0.3, 0.4], &[2, 2]).requires_grad(true);
/// let opts = F::EmbeddingOptions { padding_idx: Some(1), max_norm: Some(1.0), ..Default::default() };
/// let y = F::embedding_with(&Tensor::from_vec(vec![0i64, 1], &[2]), &w, &opts);
/// y.sum_all().backward();
/// assert!((w.select(0, 0).norm(2.0, &[0], false).item::<f32>() - 1.0).abs() < 1e-5);
/// assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![1.0, 1.0, 0.0, 0.0]);
/// ```
#[track_caller]
pub fn embedding_with(indices: &Tensor, weight: &Tensor, options: &EmbeddingOptions) -> Tensor {
    let _profiled = crate::dispatch::opaque("embedding", &[indices, weight]);
    if let Some(max_norm) = options.max_norm {
        embedding_renorm(weight, indices, max_norm, options.norm_type);
    }
    let out = embedding(indices, weight);
    match options.padding_idx {
        Some(pad) if weight.requires_grad_flag() => {
            let keep = indices
                .ne_scalar(pad as f64)
                .to_dtype(out.dtype())
                .unsqueeze(-1);
            // Same values; the padding rows' contribution is detached.
            out.mul(&keep)
                .add(&out.detach().mul(&keep.rsub_scalar(1.0)))
        }
        _ => out,
    }
}

/// Rescales, in place, each distinct row of `weight` named in `indices` whose p-norm
/// exceeds `max_norm` (`torch.embedding_renorm_`).
fn embedding_renorm(weight: &Tensor, indices: &Tensor, max_norm: f64, p: f64) {
    let mut rows = indices.to_dtype(crate::DType::I64).to_vec::<i64>();
    rows.sort_unstable();
    rows.dedup();
    if rows.is_empty() {
        return;
    }
    let idx = crate::ops::index_on(weight, rows);
    crate::autograd::no_grad(|| {
        let selected = weight.index_select(0, &idx);
        let norms = selected.norm(p, &[1], true);
        let scale = Tensor::where_cond(
            &norms.gt_scalar(max_norm),
            &norms.add_scalar(1e-7).rdiv_scalar(max_norm),
            &Tensor::ones_like(&norms),
        );
        let delta = selected.mul(&scale.sub_scalar(1.0));
        weight.copy_(&weight.index_add(0, &idx, &delta));
    });
}

/// How [`embedding_bag`] reduces a bag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EmbeddingBagMode {
    /// The sum of the bag's rows (optionally weighted per sample).
    Sum,
    /// Their mean (PyTorch's default).
    #[default]
    Mean,
    /// Their elementwise maximum.
    Max,
}

/// Reduces bags of embedding rows (`F.embedding_bag`): `input` `[B, L]` (each row a bag)
/// or 1-D with `offsets` (the start of each bag; with `include_last_offset` the last
/// offset is the end). Empty bags give zeros; indices equal to `padding_idx` are left out.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// let w = Tensor::arange(0.0, 8.0, 1.0, DType::F32, &Device::Cpu).reshape(&[4, 2]);
/// let ids = Tensor::from_vec(vec![0i64, 1, 3], &[3]);
/// let offsets = Tensor::from_vec(vec![0i64, 2], &[2]);
/// let y = F::embedding_bag(&ids, &w, Some(&offsets), F::EmbeddingBagMode::Mean, None, false, None);
/// assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0, 6.0, 7.0]);
/// ```
#[track_caller]
pub fn embedding_bag(
    input: &Tensor,
    weight: &Tensor,
    offsets: Option<&Tensor>,
    mode: EmbeddingBagMode,
    per_sample_weights: Option<&Tensor>,
    include_last_offset: bool,
    padding_idx: Option<i64>,
) -> Tensor {
    let _profiled = crate::dispatch::opaque("embedding_bag", &[input, weight]);
    let ids = input.to_dtype(crate::DType::I64).to_vec::<i64>();
    let starts: Vec<usize> = match (input.dim(), offsets) {
        (2, None) => (0..input.shape()[0])
            .map(|b| b * input.shape()[1])
            .collect(),
        (1, Some(o)) => {
            let mut o: Vec<usize> = o
                .to_dtype(crate::DType::I64)
                .to_vec::<i64>()
                .into_iter()
                .map(|v| v as usize)
                .collect();
            if include_last_offset {
                o.pop();
            }
            assert!(
                o.first().is_none_or(|&f| f == 0)
                    && o.windows(2).all(|w| w[0] <= w[1])
                    && o.last().is_none_or(|&l| l <= ids.len()),
                "embedding_bag: offsets must start at 0, be non-decreasing and lie within the input (length {}), got {o:?}",
                ids.len()
            );
            o
        }
        _ => panic!(
            "embedding_bag: expected a 2D input [B, L] without offsets or a 1D input with offsets, got shape {:?} with{} offsets",
            input.shape(),
            if offsets.is_some() { "" } else { "out" }
        ),
    };
    if let Some(w) = per_sample_weights {
        assert!(
            mode == EmbeddingBagMode::Sum && w.shape() == input.shape(),
            "embedding_bag: per_sample_weights need mode Sum and the input's shape {:?}, got {:?} with {mode:?}",
            input.shape(),
            w.shape()
        );
    }
    let bags = starts.len();
    let dim = weight.shape()[1];
    // Each kept position and the bag it belongs to.
    let mut positions = Vec::with_capacity(ids.len());
    let mut bag_of = Vec::with_capacity(ids.len());
    let mut counts = vec![0usize; bags];
    for b in 0..bags {
        let end = starts.get(b + 1).copied().unwrap_or(ids.len());
        for (i, &id) in ids.iter().enumerate().take(end).skip(starts[b]) {
            if Some(id) != padding_idx {
                positions.push(i as i64);
                bag_of.push(b as i64);
                counts[b] += 1;
            }
        }
    }
    let flat = input.reshape(&[input.numel()]);
    let pos = crate::ops::index_on(weight, positions);
    let rows = embedding(&flat.index_select(0, &pos), weight);
    let rows = match per_sample_weights {
        Some(w) => rows.mul(&w.reshape(&[w.numel()]).index_select(0, &pos).unsqueeze(1)),
        None => rows,
    };
    let zeros = Tensor::zeros(&[bags, dim], weight.dtype(), &weight.device());
    match mode {
        EmbeddingBagMode::Sum | EmbeddingBagMode::Mean => {
            let summed = zeros.index_add(0, &crate::ops::index_on(weight, bag_of), &rows);
            if mode == EmbeddingBagMode::Sum {
                return summed;
            }
            let counts: Vec<f64> = counts.iter().map(|&c| c.max(1) as f64).collect();
            let counts = Tensor::from_vec(counts, &[bags, 1])
                .to_dtype(weight.dtype())
                .to_device(&weight.device())
                .expect("the weight's own device is usable");
            summed.div(&counts)
        }
        EmbeddingBagMode::Max => {
            let mut start = 0;
            let per_bag: Vec<Tensor> = counts
                .iter()
                .map(|&c| {
                    let t = if c == 0 {
                        zeros.narrow(0, 0, 1)
                    } else {
                        rows.narrow(0, start, c).max_dim(0, true).0
                    };
                    start += c;
                    t
                })
                .collect();
            let refs: Vec<&Tensor> = per_bag.iter().collect();
            Tensor::cat(&refs, 0)
        }
    }
}
