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

/// Pretrained model families and tokenizers (the opt-in `models` feature): see
/// [`ferrograd_models`].
#[cfg(feature = "models")]
pub use ferrograd_models as models;

/// The book's chapters (`docs/src`), whose Rust snippets `cargo test` compiles and runs
/// as doctests of this crate.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../docs/src/introduction.md")]
    struct Introduction;
    #[doc = include_str!("../docs/src/tensors.md")]
    struct Tensors;
    #[doc = include_str!("../docs/src/dsl.md")]
    struct Dsl;
    #[doc = include_str!("../docs/src/data.md")]
    struct Data;
    #[doc = include_str!("../docs/src/training.md")]
    struct Training;
    #[cfg(feature = "models")]
    #[doc = include_str!("../docs/src/models.md")]
    struct Models;
    #[doc = include_str!("../docs/src/distributed.md")]
    struct Distributed;
    #[doc = include_str!("../docs/src/deployment.md")]
    struct Deployment;
    #[doc = include_str!("../docs/src/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/src/architecture.md")]
    struct Architecture;
    // The README's tour loads a pretrained model.
    #[cfg(feature = "models")]
    #[doc = include_str!("../README.md")]
    struct Readme;
}
