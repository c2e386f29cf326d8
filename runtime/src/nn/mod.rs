//! Neural-network building blocks: the [`Module`] trait (and its derive), layers with
//! PyTorch's default initialisation, and [`functional`], the stateless ops.

mod activation;
mod attention;
mod container;
mod conv;
pub(crate) use conv::resolve as conv_padding;
mod declared;
#[doc(hidden)]
pub use declared::input_checks;
mod dropout;
mod embedding;
mod forward;
pub mod functional;
pub(crate) mod fused;
pub mod fusion;
pub mod init;
mod linear;
mod loss;
mod module;
mod norm;
pub(crate) use norm::{batch_norm_layer_forward, step_factor as norm_step_factor};
mod pooling;
mod rnn;
mod rotary;
mod shape;
mod stateless;
mod transformer;

pub use activation::{
    ELU, GELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSoftmax, Mish, ReLU, ReLU6, SiLU,
    Sigmoid, Softmax, Softplus, Tanh,
};
pub use attention::{MhaArgs, MultiheadAttention};
pub use container::{ModuleDict, ModuleList, Sequential};
pub use conv::{
    Conv1d, Conv2d, ConvOptions, ConvTranspose1d, ConvTranspose2d, ConvTransposeOptions,
    KernelSize, Padding, PaddingMode,
};
pub use declared::{DeclaredDim, DeclaredShapes, ShapeMessage, output_is, shapes_fit};
pub use dropout::{AlphaDropout, Dropout, Dropout2d};
pub use embedding::{Embedding, EmbeddingBag};
pub use ferrograd_macros::Module;
pub use forward::{Forward, Layer};
pub use linear::{Bilinear, Linear};
pub use loss::{
    BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss, HingeEmbeddingLoss,
    HuberLoss, KLDivLoss, L1Loss, MSELoss, MarginRankingLoss, NLLLoss, SmoothL1Loss,
    TripletMarginLoss,
};
pub use module::{
    LoadReport, Module, StateDict, StateDictError, TensorKind, join_path, set_training_children,
    visit_children, visit_children_mut,
};
pub use norm::{
    BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d, LayerNorm, RMSNorm,
};
pub use pooling::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d,
    AvgPool2d, MaxPool1d, MaxPool2d,
};
pub use rnn::{
    GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell, Recurrent, RnnConfig, RnnMode, RnnState,
};
pub use rotary::{KVCache, RotaryEmbedding};
pub use shape::{
    ConstantPad2d, Flatten, Identity, PixelShuffle, PixelUnshuffle, ReflectionPad2d,
    ReplicationPad2d, Unflatten, Upsample, ZeroPad2d,
};
pub use transformer::{
    Activation, AttnMasks, Transformer, TransformerConfig, TransformerDecoder,
    TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
};
