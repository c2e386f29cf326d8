//! Fused ops, one folder each: the CPU kernel (`mod.rs`) and the CUDA kernel source
//! (`NAME.cu`, compiled by NVRTC as the folder's [`CUDA_MODULE`](layer_norm::CUDA_MODULE))
//! side by side. The runtime's mirror, `ferrograd_runtime`'s `nn/fused/NAME/` (or
//! `optim/` for the optimizer steps), holds the public op, its autograd node and the
//! CUDA launch.
//!
//! ```
//! use ferrograd_kernels::fused::layer_norm::{layer_norm_rows, CUDA_MODULE};
//! let out = layer_norm_rows(&[1.0f32, 3.0], 1, 2, None, None, 0.0);
//! assert_eq!(out.y, vec![-1.0, 1.0]);
//! assert_eq!(CUDA_MODULE.name, "layer_norm");
//! ```

pub mod attention;
pub mod batch_norm;
pub mod conv;
pub mod cross_entropy;
pub mod dropout;
pub mod layer_norm;
pub mod lstm_cell;
pub mod optim;
pub mod pool;
