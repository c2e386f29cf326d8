//! Neural-network building blocks: the [`Module`] trait (and its derive), layers with
//! PyTorch's default initialisation, and [`functional`], the stateless ops.

mod activation;
mod container;
mod declared;
mod forward;
pub mod functional;
pub(crate) mod fused;
mod layers;
mod module;

pub use activation::{
    AdaptiveAvgPool2d, AvgPool2d, ELU, Flatten, GELU, Hardsigmoid, Hardswish, Hardtanh, Identity,
    LeakyReLU, LogSoftmax, MaxPool2d, Mish, ReLU, ReLU6, SiLU, Sigmoid, Softmax, Softplus, Tanh,
};
pub use container::{ModuleDict, ModuleList, Sequential};
pub use declared::{DeclaredDim, DeclaredShapes, output_is, shapes_fit};
pub use ferrograd_macros::Module;
pub use forward::{Forward, Layer};
pub use layers::{BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Dropout, Embedding, LayerNorm, Linear};
pub use module::{LoadReport, Module, StateDict, StateDictError, TensorKind, join_path};
