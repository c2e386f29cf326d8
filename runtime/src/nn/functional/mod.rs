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
use crate::amp;
use crate::autograd::record;
use ferrograd_kernels::Dims;

mod conv;
mod loss;
mod norm;
mod pool;

pub use conv::*;
pub use loss::*;
pub use norm::*;
pub use pool::*;

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
    if let Some((x, w, b)) = amp::low_precision_with_bias(input, weight, bias) {
        return linear(&x, &w, b.as_ref());
    }
    let y = input.matmul(&weight.t());
    match bias {
        Some(b) => y.add(b),
        None => y,
    }
}
