//! ONNX export: a model leaves ferrograd as a standard `.onnx` file that onnxruntime,
//! TensorRT, tract or a browser can run.
//!
//! [`export`] traces what a forward actually executes (`torch.onnx.export`): each traced
//! op becomes ONNX nodes, parameters and buffers become initializers under their
//! state-dict names, and the axes named in [`ExportOptions::dynamic_axis`] stay symbolic.
//! An op with no ONNX mapping is an [`OnnxError::UnsupportedOp`] naming it and its call
//! site, never a silently wrong file. The graph uses opset [`OPSET`].
//!
//! [`load`] goes the other way: an [`OnnxModel`] runs an ONNX graph (ours, or one written
//! by `torch.onnx.export`) on ferrograd tensors, for the operators in [`SUPPORTED_OPS`].
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::nn::{Conv2d, ConvOptions, Forward, Linear};
//! use ferrograd_runtime::onnx::{self, ExportOptions};
//! #[derive(Module)]
//! #[module(crate = ferrograd_runtime)]
//! struct Net { conv: Conv2d, fc: Linear }
//! impl<'a> Forward<&'a Tensor> for Net {
//!     type Output = Tensor;
//!     fn forward(&self, x: &'a Tensor) -> Tensor {
//!         let y = self.conv.forward(x).relu();
//!         self.fc.forward(&y.flatten(1, -1))
//!     }
//! }
//! let net = Net {
//!     conv: Conv2d::new(1, 4, [3, 3], ConvOptions::default(), &Device::Cpu),
//!     fc: Linear::new(4 * 6 * 6, 10, &Device::Cpu),
//! };
//! let x = Tensor::randn(&[2, 1, 8, 8], DType::F32, &Device::Cpu);
//! let opts = ExportOptions::new().dynamic_axis("input", 0, "batch").dynamic_axis("output", 0, "batch");
//! let exported = onnx::export_module(&net, &x, &opts).unwrap();
//! assert_eq!(exported.op_types(), ["Conv", "Relu", "Reshape", "Gemm"]);
//! ```

mod budget;
mod export;
mod graph;
mod import;
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto;
pub(crate) mod trace;

pub use budget::default_max_run_bytes;
pub use export::{ExportOptions, Exported, IR_VERSION, OPSET, export, export_module, export_with};
pub use graph::{
    Attr, ExportLayer, ExportNetwork, GraphWriter, Probe, SymDim, TraceProbe, Value,
    ViaExportLayer, ViaTrace, ViaUnsupported, export_onnx, network_graph,
};
pub use import::{InputSpec, OnnxModel, SUPPORTED_OPS, load};

use std::path::PathBuf;

/// Whether this thread is tracing a forward for export (`torch.onnx.is_in_onnx_export()`):
/// code that takes a shortcut from its input's values (a mask that turns out all ones)
/// must not take it then, or the exported graph keeps the shortcut for every input.
///
/// ```
/// assert!(!ferrograd_runtime::onnx::is_tracing());
/// ```
pub fn is_tracing() -> bool {
    trace::is_tracing()
}

/// What can go wrong exporting or loading an ONNX model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxError {
    /// The forward ran an op that has no ONNX mapping (or not with these arguments).
    #[error("onnx export: `{op}` at {location} cannot be exported{detail}")]
    UnsupportedOp {
        /// The op's name.
        op: String,
        /// The call site (`file:line:column`).
        location: String,
        /// Why, and what to do.
        detail: String,
    },
    /// The forward cannot become one graph (wrong options, shape-dependent control flow).
    #[error("onnx export: {0}")]
    Export(String),
    /// The forward panicked while being traced.
    #[error("onnx export: the forward panicked while tracing{context}: {message}")]
    ForwardPanicked {
        /// Which trace (the example, or one with a dynamic dim doubled).
        context: String,
        /// The panic message.
        message: String,
    },
    /// The file is not a well-formed ONNX model (bad protobuf, inconsistent tensors,
    /// names read before they are defined).
    #[error("onnx: malformed model: {0}")]
    Malformed(String),
    /// The model uses operators, types or an opset this runtime does not run.
    #[error("onnx: unsupported: {0}")]
    Unsupported(String),
    /// Running the model failed (wrong inputs, shapes that do not fit a node).
    #[error("onnx: run failed: {0}")]
    Run(String),
    /// Reading or writing a file failed.
    #[error("onnx: {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}
