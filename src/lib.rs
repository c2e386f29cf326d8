//! # ferrograd
//!
//! A deep-learning framework for Rust: tensors on CPU (and CUDA with the `cuda` feature),
//! define-by-run autograd, and neural-network functionals.
//!
//! ```
//! use ferrograd::prelude::*;
//! manual_seed(0);
//! let x = Tensor::randn(&[64, 784], DType::F32, &Device::Cpu);
//! let w = Tensor::randn(&[784, 10], DType::F32, &Device::Cpu).requires_grad(true);
//! let loss = x.matmul(&w).log_softmax(-1).mean_all();
//! loss.backward();
//! let g: Tensor = w.grad().unwrap();
//! assert_eq!(g.shape(), &[784, 10]);
//! ```
#![warn(missing_docs)]

pub use ferrograd_runtime::*;

/// Pretrained model families and tokenizers (the `models` feature, on by default): see
/// [`ferrograd_models`].
#[cfg(feature = "models")]
pub use ferrograd_models as models;
