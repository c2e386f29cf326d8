//! Compute kernels for ferrograd.
//!
//! This crate holds the pure number-crunching layer: element types ([`Element`],
//! [`FloatElement`]), strided [`Layout`]s, and the CPU kernels (`gemm` and a fork-join thread team) that the
//! runtime dispatches to. It knows nothing of autograd. With the `cuda` feature it also
//! carries the CUDA kernel sources ([`cuda`]), compiled at run time by NVRTC through
//! `cudarc` (loaded dynamically, so a build never needs a CUDA install).
//!
//! ```
//! use ferrograd_kernels::{DType, Layout};
//! let layout = Layout::contiguous(&[2, 3]);
//! assert_eq!(layout.strides(), &[3, 1]);
//! assert_eq!(DType::F32.size_in_bytes(), 4);
//! ```
#![warn(missing_docs)]

pub mod cpu;
pub mod cuda;
mod dtype;
pub mod fused;
mod index_bounds;
mod layout;

pub use dtype::{DType, Element, FloatElement, NumElement, Real, WideFloat};
pub use index_bounds::IndexBounds;
pub use layout::{Dims, Layout, broadcast_shapes, coalesce};

#[doc(hidden)]
pub use half;
