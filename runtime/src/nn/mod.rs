//! Neural-network building blocks: the [`Module`] trait (and its derive), layers with
//! PyTorch's default initialisation, and [`functional`], the stateless ops.

mod activation;
mod container;
mod conv;
mod declared;
mod dropout;
mod embedding;
mod forward;
pub mod functional;
pub(crate) mod fused;
pub mod init;
mod linear;
mod module;
mod norm;

pub use activation::{
    AdaptiveAvgPool2d, AvgPool2d, ELU, Flatten, GELU, Hardsigmoid, Hardswish, Hardtanh, Identity,
    LeakyReLU, LogSoftmax, MaxPool2d, Mish, ReLU, ReLU6, SiLU, Sigmoid, Softmax, Softplus, Tanh,
};
pub use container::{ModuleDict, ModuleList, Sequential};
pub use conv::{
    Conv1d, Conv2d, ConvOptions, ConvTranspose1d, ConvTranspose2d, ConvTransposeOptions,
    KernelSize, Padding, PaddingMode,
};
pub use declared::{DeclaredDim, DeclaredShapes, output_is, shapes_fit};
pub use dropout::{AlphaDropout, Dropout, Dropout2d};
pub use embedding::{Embedding, EmbeddingBag};
pub use ferrograd_macros::Module;
pub use forward::{Forward, Layer};
pub use linear::{Bilinear, Linear};
pub use module::{LoadReport, Module, StateDict, StateDictError, TensorKind, join_path};
pub use norm::{
    BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d, LayerNorm, RMSNorm,
};
